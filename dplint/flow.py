"""How values flow: all reaching definitions with their branch conditions, across the
functions and classes of a file and, through ``model.project``, across files.

One ``Flow`` per ``SemanticModel`` (``model.flow``), built lazily: nothing here runs until
a rule asks, and the walks behind the answers are memoised. It is small and in our domain (wrappers,
samplers, loaders, state dicts), not a type checker.

API (rule-facing; ``at`` is the node where the question is asked, default the expression):

* ``Condition(test, holds, scope)`` - one branch test on a path: ``if distributed:`` gives
  ``Condition("distributed", True, <scope>)`` in the body and ``holds=False`` in the
  ``else``; ``not x`` is ``("x", not holds)``. Two conditions are the same test when their
  text (whitespace-free) and the scope owning its root name are equal. ``self.x`` is one test in
  all methods of the class, and so is a method's parameter it stores as ``self.x`` (itself, or
  through a base class's method it hands the parameter to: ``super().setup(x)``,
  ``Base.setup(self, x=x)`` whose body does ``self.x = x``).
* ``Path = tuple[Condition, ...]``; ``consistent(a, b)`` - no test holds in one and fails in
  the other, with what each condition implies (``Condition.implied``: the parts of ``a and b``
  where it holds, of ``a or b`` where it fails; ``n_gpu == 1`` against ``n_gpu > 1`` for a
  count); ``self_consistent(path)``. ``flow.value_implied(test, holds)``: the branches a
  comparison with a number picks through the name's literal values (``world_size = 1`` in an
  ``else``); ``flow.handler_conditions(try, handler)``: ``hasattr(x, "module")`` failed in an
  ``except AttributeError`` after ``x.module``.
* ``Value(model, expr, conditions, binding)`` - one thing an expression may hold: ``expr``
  is the expression *in ``model``* (another file's model after a cross-file step), or None
  when unknown (a parameter with several callers, an unresolvable call...). ``value.known``.
* ``model.flow.reaching(key, at) -> list[(Binding, Path)]`` - every binding of "x" /
  "self.x" that can reach ``at``, each with the conditions it is live under. Branches
  whose test is statically known are closed; code after ``return``/``raise`` (and
  ``assert False``, ``sys.exit()``, ``exit()``, ``os._exit()``: ``ends_path``) is not
  reached, so a branch that ends so is no path; ``self.x`` read in a method sees the bindings of the other methods (constructor
  first) unless the method rebinds it first, and what a project base class's methods left in
  it (same file or imported, up to three levels: ``self.net = DDP(net)`` in
  ``BaseTrainer.__init__``, read in ``class Trainer(BaseTrainer)``): taken up where the
  method calls the base's constructor or a base method that binds it
  (``super().__init__(net, cfg)``, ``Base.__init__(self, net)``), live in every other
  method unless the class's own constructor replaces it. ``values_at`` maps the base
  constructor's parameters to what that one ``super().__init__(...)`` call passes, and reads
  the base's tests on ``self.x`` as the subclass's (the same instance). A method's call
  ``self.m(...)`` of a method that binds ``self.x`` takes up what ``m`` leaves there (its
  state where it ends or returns, what it did not rebind passing through), ``m`` looked up
  as Python does on the instance being analysed: the most-derived class first, then its
  project bases (a base ``__init__`` calling ``self.cuda()`` runs the subclass's override,
  and a base method that the subclass overrides never runs on it). Not followed: a
  base-class method reading an attribute that only some subclasses set (the base's own
  bindings answer there); ``super().m()`` inside an override.
* ``model.flow.values_at(expr, at) -> list[Value]`` - everything ``expr`` may hold, through
  names (all reaching bindings), ``a if c else b`` (both, with ``c`` as a condition),
  self-returning calls (``.cuda()``), calls of same-file functions (their return values,
  parameters mapped to this call's arguments), parameters (the argument of the only call
  site; unknown when callers differ or the function escapes), ``self.x`` set from
  constructor arguments (``Runner(net, loader)``), tuple unpacking of a call's returned tuple,
  and imported names resolved through ``model.project``. A ``Value`` with ``expr is None``
  means "cannot tell": rules stay silent on it.
* ``model.flow.truth(expr, at, path=()) -> Optional[bool]`` - truthiness of ``expr`` on a
  path: a test named on the path, literals, ``not``, ``x is (not) None``, names whose
  every value on the path agrees. None when unknown.
* ``model.flow.wrappings_at(expr, at) -> list[(Optional[Wrapping], Path)]`` - per reaching
  value, the wrapping it is (None: not a wrapper, or unknown), as ``dplint.wrapper_classes``
  recognises wrappers (torch's, apex's, mmcv's, project subclasses of them).
  ``wrapped_on_some_path(expr, at) -> Optional[Wrapping]`` and
  ``wrapped_on_every_path(expr, at) -> bool`` read it.
* ``model.flow.callee(call, local=False) -> Optional[Callee]`` - the same-file (or, unless
  ``local``, another project file's) function or class a call runs: ``f()``, ``Cls()``,
  ``self.m()``, ``obj.m()`` where ``obj = Cls(...)`` of this file. ``Callee(model, node,
  bound)``; ``bound`` when the first parameter is the instance; ``.function`` is the def
  that runs (a class's ``__init__``).
* ``model.flow.all_call_sites(function)`` - the calls of a function in the whole project
  (``Project.callers``); for a base class's ``__init__`` that other files subclass, the
  subclasses' ``super().__init__(...)`` / ``Base.__init__(self, ...)`` calls (when every
  subclass defines ``__init__`` and calls it once). ``super(Trainer, self)`` does not make
  ``Trainer``'s constructor escape.
* ``model.flow.call_sites(function) -> Optional[list[(cst.Call, bound)]]`` - the calls of a same-file
  function (or of a class's constructor); None when it escapes (passed as a value,
  decorated).
* ``model.flow.values_per_caller(param_binding) -> Optional[list[list[Value]]]`` - per call
  site of the parameter's function, the values it passes (for "every caller agrees").
* ``model.flow.parameter_argument(call, function, name, bound) -> Optional[expr]`` - the
  argument (or default) a call gives a parameter; None when star-args make it unclear.
* ``model.flow.returned_values(callee, call) -> list[Value]``, ``own_returns(function)``,
  ``is_generator(function)``; ``condition(test) -> Condition``.
* ``dplint.data``: ``sampler_with_true_shuffle(model, loader)``, ``loader_argument(model,
  loader, "shuffle"|"sampler"|"batch_sampler")``, ``returns_shuffling_sampler(model, call)``,
  ``trace_sampler(model, sampler) -> SamplerFlow`` (``iterations: list[Iteration]``).

Cost: nothing is computed until asked; reaching definitions are one walk of the owning
scope per (scope, name), memoised; call sites are collected once per file; a values_at
question stops after 400 steps (answering "unknown").

Cross-file hook: ``model.project`` (None by default) may provide
``resolve(qualified_name, importer) -> Optional[(SemanticModel, node)]``; imports are
recorded as ``model.imports["pick_sampler"] == "samplers.pick_sampler"``, relative ones with
their leading dots (``".data.build_loader"``).

Where the parts live (``Flow`` is assembled from one mixin per concern; each module says what
it answers): ``dplint.flow_paths`` (``Condition``, ``consistent``, ``with_implied``: paths as
data), ``dplint.flow_common`` (``Value``, ``Callee``, shared syntax questions),
``dplint.flow_reaching`` (reaching definitions and the scope walks), ``dplint.flow_attributes``
(``self.x`` across base classes), ``dplint.flow_conditions`` (a test read into a Condition),
``dplint.flow_aliases`` (what a test stands for: aliases, flags, predicates),
``dplint.flow_values`` (``values_at``, ``truth``, ``wrappings_at``) and ``dplint.flow_calls``
(callees and call sites). The mixin modules never import this one; the names above are
re-exported here, so ``from dplint.flow import Condition`` keeps working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from dplint.flow_aliases import MAX_FLAG_DEPTH, AliasesMixin
from dplint.flow_attributes import AttributesMixin
from dplint.flow_calls import CallsMixin
from dplint.flow_common import PROCESS_EXITS, Callee, Value, class_method, ends_path
from dplint.flow_conditions import ConditionsMixin, catches_attribute_error
from dplint.flow_paths import (
    Condition,
    Path,
    _portable,
    consistent,
    self_consistent,
    with_implied,
)
from dplint.flow_reaching import ReachingMixin
from dplint.flow_values import ValuesMixin
from dplint.semantic import SemanticModel

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, Scope

# The names rules and helpers import from here (`_portable`: tests read it directly).
__all__ = [
    "_portable", "Callee", "catches_attribute_error", "class_method", "Condition", "consistent",
    "ends_path", "Flow", "MAX_FLAG_DEPTH", "Path", "PROCESS_EXITS", "self_consistent", "Value",
    "with_implied",
]


class Flow(ReachingMixin, AttributesMixin, ConditionsMixin, AliasesMixin, ValuesMixin, CallsMixin):
    """The value-flow model of one file (``model.flow``): the API above, one mixin per concern."""

    def __init__(self, model: "SemanticModel") -> None:
        self.model = model
        self._records: dict[tuple, dict] = {}  # (owner scope, key, method) -> statement -> state
        self._statement_bindings: dict[tuple, dict] = {}
        self._call_sites: Optional[dict] = None
        self._escaping: set = set()  # same-file functions whose callers we cannot all see
        self._methods: Optional[set] = None
        self._active = 0  # values_at calls in progress (0: the next one is a new question)
        self._steps = 0
        self._callees: dict[tuple, Optional[Callee]] = {}
        self._instance_aliases: Optional[dict] = None
        self._base_stores: dict = {}  # (id(method), name) -> (class, attribute) or None
        self._outside_stores: dict = {}  # (id(class), key) -> stand-in bindings of stores from outside
        self._attribute_stores: Optional[dict] = None  # (scope, name, attribute) -> `name.attribute = v`
        self._attribute_reads: Optional[dict] = None  # (scope, name, attribute) -> reads `name.attribute`
        self._conditions: dict[tuple, tuple] = {}
        self._inlining: set = set()  # calls whose predicate body is being looked up
        # `self.x` left by a project base class's methods, one stand-in Binding per (class, key)
        self._inherited: dict[tuple, Optional["Binding"]] = {}
        self._inherited_of: dict[int, "Scope"] = {}  # id(stand-in) -> the subclass's scope
        self._bases_binding: dict[tuple, list] = {}
        self._base_call_cache: dict[tuple, list] = {}
        self._calls_by_function: Optional[dict] = None
        self._before_constructor_calls: set = set()
        self._derived_now: Optional[tuple] = None  # (model, ClassDef) whose instance a walk follows
        self._summaries_running: set = set()
        self._subclass_calls: dict = {}  # base class __init__ -> its subclasses' super().__init__ calls
        self._plain_aliases: dict[int, dict] = {}
        self._assigned: dict[int, set] = {}  # id(function) -> attributes it assigns
        self._flag_walks: set = set()  # flag tests whose assignments are being looked up
        self._copies: Optional[dict] = None  # `self.n_gpus = args.n_gpus` copies (_instance_copies)  # id(function) -> spelling -> other spellings


def analysed(module: cst.Module, path: str = "<string>") -> SemanticModel:
    """The semantic model of a parsed file with its flow model attached (`model.flow`)."""
    model = SemanticModel(module, path)
    model.flow = Flow(model)
    return model
