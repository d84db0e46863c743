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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from dplint.wrapper_classes import wrapping_built_by

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, SemanticModel, Scope, Wrapping

_SPACE = re.compile(r"\s+")
_EXIT = object()  # records key: the state when a walked body falls off its end
_MAX_DEPTH = 12
_MAX_STEPS = 400  # values_at steps per question


@dataclass(frozen=True)
class Condition:
    test: str  # the test's source without whitespace; `not x` is stored as x
    holds: bool
    scope: int = 0  # id() of the function owning the test's root name (0: global/unknown)
    # Conditions known wherever the test holds / fails (not part of its identity): the parts
    # of `a and b` where it holds, of `a or b` where it fails.
    if_holds: tuple = field(default=(), compare=False)
    if_fails: tuple = field(default=(), compare=False)

    def negated(self) -> "Condition":
        return Condition(self.test, not self.holds, self.scope, self.if_holds, self.if_fails)

    def implied(self) -> tuple:
        """The conditions this one implies: the parts of a compound test, and for a count of
        GPUs or processes (`n_gpu`, `len(gpu_ids)`, `world_size`, a whole number, never
        negative): `n == 1` holding is `n > 1` failing and `n > 1` holding is `n == 1`
        failing. `n == 1` failing is read as `n > 1` holding: the zero count (no GPU at all)
        is a run the code does not say it supports, and nothing is reported for it.

        Several GPUs (a GPU count, not a process count, above one: `len(gpu_ids) > 1`,
        `torch.cuda.device_count() > 1`) imply `torch.cuda.is_available()`: `device_count()`
        is 0 without CUDA, and a run naming several GPU ids on a machine without CUDA is not
        one the code supports (`if torch.cuda.is_available() and len(ids) > 1: DataParallel`
        read back under `len(ids) > 1` alone is not reported); several ids in a list imply its
        first is a GPU id (`len(ids) > 1` holding is `ids[0] < 0` failing: `-1`, the usual
        "run on the CPU" id, comes alone). A process count (`world_size`) implies nothing
        about CUDA: several processes run on CPUs too (gloo)."""
        found = self.if_holds if self.holds else self.if_fails
        count = _count_test(self.test)
        if count is None:
            return found
        subject, operator = count.group(1), count.group(2)
        several = self.holds != (operator == "==")
        if several and _gpu_count(self.test):
            found = (*found, _CUDA_AVAILABLE)
            if subject.startswith("len(") and subject.endswith(")"):
                # `len(gpu_ids) > 1`: the first id is a GPU, not the CPU marker (`gpu_ids[0] < 0`)
                found = (*found, Condition(subject[4:-1] + "[0]<0", False, 0))
        if operator == "==":
            return (*found, Condition(subject + ">1", not self.holds, self.scope))
        return (*found, Condition(subject + "==1", False, self.scope)) if self.holds else found

    @property
    def tests_process_group(self) -> bool:
        """`dist.is_initialized()`, `torch.distributed.is_initialized()`: whether the process
        group is up, which a DistributedDataParallel needs (not `torch.cuda.is_initialized()`)."""
        return self.test.endswith("is_initialized()") and not self.test.endswith("cuda.is_initialized()")


Path = tuple  # tuple[Condition, ...]


def consistent(first: Sequence[Condition], second: Sequence[Condition]) -> bool:
    """No test holds on one path and fails on the other (with what each condition implies:
    `a and b` holding on one path, `not b` on the other)."""
    if any(_implies_more(c) for c in (*first, *second)):
        return self_consistent((*first, *second))
    seen = {(c.test, c.scope): c.holds for c in first}
    return all(seen.get((c.test, c.scope), c.holds) == c.holds for c in second)


def _implies_more(condition: Condition) -> bool:
    return bool(condition.if_holds or condition.if_fails or _count_test(condition.test))


def self_consistent(path: Sequence[Condition]) -> bool:
    """No test both holds and fails on the path with all it implies (`with_implied`), and no
    compound test fails while all its parts hold (`a and b` failing where `a` and `b` hold)."""
    path = with_implied(path) if any(_implies_more(c) for c in path) else tuple(path)
    seen: dict = {}
    for condition in path:
        if seen.setdefault((condition.test, condition.scope), condition.holds) != condition.holds:
            return False
    for condition in path:
        other = condition.if_fails if condition.holds else condition.if_holds
        if other and all(_known(seen, c, 3) for c in other):
            return False
    return True


def _ends_in_exit(body: cst.BaseSuite, model: "SemanticModel") -> bool:
    """Whether a block's last statement is a `return`, or one that ends the path (`ends_path`)."""
    last = body.body[-1] if isinstance(body, cst.IndentedBlock) and body.body else None
    if isinstance(body, cst.SimpleStatementSuite):
        last = body
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return type(last.body[-1]) is cst.Return or ends_path(model, last.body[-1])
    return False


# Calls that end the process, so that nothing after them runs on that path: `sys.exit()`
# (SystemExit), `os._exit()`, `os.abort()`; and the builtins `exit()` / `quit()` (`ends_path`).
PROCESS_EXITS = frozenset({"sys.exit", "os._exit", "os.abort"})


def ends_path(model: "SemanticModel", small: cst.CSTNode) -> bool:
    """A small statement after which its path does not go on: `raise`, `assert False` (or
    `assert 0`), or a call that ends the process (`PROCESS_EXITS`, `exit()`, `quit()`). A
    branch that ends so is not a way the program continues: `if mode == "dp": net = DP(net)`
    / `else: raise NotImplementedError` leaves `net` wrapped on every path that goes on.
    (`return` ends the function, not the path of its caller: the walks treat it apart.)"""
    kind = type(small)
    if kind is cst.Raise:
        return True
    if kind is cst.Assert:
        return _static(model, small.test) is False
    if kind is cst.Expr and type(small.value) is cst.Call:
        func = small.value.func
        if (model.qualified_name(func) or "") in PROCESS_EXITS:  # `sys.exit`, `from os import _exit`
            return True
        if type(func) is cst.Name and func.value in ("exit", "quit"):
            return not model.bindings.get(func.value)  # the builtin, not a name the file binds
    return False


def _known(seen: dict, condition: Condition, depth: int) -> bool:
    """Whether the path has the condition: itself, or all its parts (`a and b` holding where
    `a` and `b` hold; a flag set under `a` and `b` holding where they do, `_with_flag_origin`)."""
    if seen.get((condition.test, condition.scope)) == condition.holds:
        return True
    parts = condition.if_holds if condition.holds else condition.if_fails
    return bool(parts) and depth > 0 and all(_known(seen, c, depth - 1) for c in parts)


def with_implied(path: Sequence[Condition]) -> tuple:
    """The conditions of a path and all they imply (`Condition.implied`)."""
    out: list = []
    stack = list(reversed(path))
    while stack:
        condition = stack.pop()
        if any(condition == c and condition.holds == c.holds for c in out):
            continue
        out.append(condition)
        stack.extend(condition.implied())
    return tuple(out)


# A test of a count of GPUs or processes against one: `n_gpu==1`, `len(args.gpu_ids)>1`.
_COUNT_TEST = re.compile(r"^(len\(.*\)|.*(?:device_count\(\)|world_size|gpu|nproc|num_process)\w*)(==|>)1$", re.IGNORECASE)


# A count of GPUs (not of processes): what `Condition.implied` reads as needing CUDA.
_GPU_COUNT = re.compile(r"gpu|device|cuda", re.IGNORECASE)
_PROCESS_COUNT = re.compile(r"world_size|nproc|num_process|rank", re.IGNORECASE)
_CUDA_AVAILABLE = Condition("torch.cuda.is_available()", True, 0)


@lru_cache(maxsize=4096)
def _count_test(text: str):
    return _COUNT_TEST.match(text)


def _portable(conditions: Sequence[Condition]) -> Path:
    """The conditions kept when a value crosses into another file, whose names the others are
    not in: tests of torch's own state (`torch.cuda.is_available()`,
    `torch.distributed.is_initialized()`), and a count of the run's GPUs spelled the same way
    (`len(device_ids) > 1`, `n_gpu == 1`: one run has one number of GPUs, as
    `wrapped_on_some_machines` reads a factory's hardware test repeated by its caller). A
    bare model that stays bare because CUDA is missing or one GPU id was given, handed to a
    checkpoint helper of another file that tests the same count, keeps that path."""
    return tuple(c for c in conditions if c.scope == 0 and (
        c.test.startswith(("torch.cuda.", "torch.distributed.")) or _gpu_count(c.test)))


def _gpu_count(text: str) -> bool:
    """A test of a count of GPUs against one (`len(gpu_ids) > 1`), not of processes."""
    count = _count_test(text)
    return count is not None and bool(_GPU_COUNT.search(count.group(1))) and not _PROCESS_COUNT.search(count.group(1))


def _join(first: Sequence[Condition], second: Sequence[Condition]) -> Path:
    out = list(first)
    for condition in second:
        if condition not in out:
            out.append(condition)
    return tuple(out)


@dataclass(eq=False)
class Value:
    model: "SemanticModel"
    expr: Optional[cst.BaseExpression]  # None: unknown
    conditions: Path = ()
    binding: Optional["Binding"] = None  # the last binding followed to get here

    @property
    def known(self) -> bool:
        return self.expr is not None


@dataclass(eq=False)
class Callee:
    model: "SemanticModel"
    node: cst.CSTNode  # FunctionDef or ClassDef
    bound: bool  # the first parameter receives the instance

    @property
    def function(self) -> Optional[cst.FunctionDef]:
        """The function that runs: the def, or a class's own `__init__`."""
        if isinstance(self.node, cst.FunctionDef):
            return self.node
        return class_method(self.node, "__init__")


def class_method(node: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    for statement in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            return statement
    return None


def _blocks(body: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    if isinstance(body, cst.IndentedBlock):
        return body.body
    return (body,)  # SimpleStatementSuite: one "statement" of small statements


# Dict-entry flags read inside another entry's branch tests, at most (see `_dictionary_flag`).
MAX_FLAG_DEPTH = 2
_OPEN_FLAGS = [0]

class Flow:
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

    # ------------------------------------------------------------- reaching definitions
    def reaching(self, key: str, at: cst.CSTNode) -> list[tuple["Binding", Path]]:
        return [entry for entry in self._reaching(key, at) if id(entry[0]) not in self._inherited_of]

    def _reaching(self, key: str, at: cst.CSTNode) -> list[tuple["Binding", Path]]:
        model = self.model
        use_scope = model.scope(at)
        owner = model.owner_scope(key, use_scope)
        if owner is None:
            return []
        if key.startswith("self."):
            return self._reaching_attribute(key, at, owner, use_scope)
        if owner.kind == "module" and use_scope is not owner and use_scope.kind == "function":
            # A function's body runs when it is called, after the module body defined what it
            # reads (`def main(): train()` above `def train(): ...`): the module's final bindings.
            records = self._records.get((owner, key, owner.node))
            if records is None:
                self._reaching_in(owner, key, owner.node, owner.node, initial=None)
                records = self._records.get((owner, key, owner.node), {})
            final = records.get(_EXIT)
            if final:
                return list(final)
        return self._reaching_in(owner, key, at, owner.node, initial=None)

    def _reaching_in(self, owner: "Scope", key: str, at: cst.CSTNode, body_owner: cst.CSTNode,
                     initial: Optional[list], tag: str = "") -> list:
        record_key = (owner, key, body_owner, tag) if tag else (owner, key, body_owner)
        records = self._records.get(record_key)
        if records is None:
            records = self._records[record_key] = {}
            self._walk_scope(owner, key, body_owner, records, initial)
        for node in (at, *self.model.ancestors(at)):
            state = records.get(node)
            if state is not None:
                return list(state)
            if node is body_owner:
                break
        live = self.model.binding_at(key, at)  # not reached by the walk: source order decides
        return [(live, ())] if live is not None else []

    def _reaching_attribute(self, key: str, at: cst.CSTNode, owner: "Scope", use_scope: "Scope") -> list:
        method = use_scope.node if use_scope.class_scope is owner else None
        if method is None:
            inherited = self._inherited_binding(owner, key)
            return [(b, ()) for b in self.model.bindings.get(key, ()) if b.scope is owner] + (
                [(inherited, ())] if inherited is not None else [])
        before = self._constructor_only_callee(owner, key, method)
        if before is not None:  # a walk of its own: the method's usual walk starts elsewhere
            return self._reaching_in(owner, key, at, method, before, tag="constructor calls")
        return self._reaching_in(owner, key, at, method, self._left_by_others(owner, key, method))

    def _constructor_only_callee(self, owner: "Scope", key: str, method: cst.CSTNode) -> Optional[list]:
        """For a method called only by its class's `__init__` (`self.load(path)` before
        `self.model = DataParallel(self.model)`) that does not bind `self.key` itself: what
        reaches its calls there; None for any other method (what other methods leave)."""
        if not isinstance(method, cst.FunctionDef) or method.name.value.startswith("__") \
                or not isinstance(owner.node, cst.ClassDef):
            return None
        constructor = class_method(owner.node, "__init__")
        if constructor is None or any(
                b.scope is owner and _inside(self.model, b.node, method) for b in self.model.bindings.get(key, ())):
            return None
        sites = self.call_sites(method)
        if not sites or any(_enclosing_function(self.model, call) is not constructor for call, _ in sites):
            return None
        guard = (id(method), key)
        if guard in self._before_constructor_calls:
            return None
        self._before_constructor_calls.add(guard)
        try:
            found: list = []
            for call, _ in sites:
                # Nothing of the constructor's own before the call (its walk may have started
                # empty, for what it leaves): what the other methods leave (`self.build()`).
                entries = self._reaching_attribute(key, call, owner, self.model.scope(call)) \
                    or self._left_by_others(owner, key, constructor)
                found.extend(e for e in entries if e not in found)
            return found
        finally:
            self._before_constructor_calls.discard(guard)

    def _left_by_others(self, owner: "Scope", key: str, method: Optional[cst.CSTNode],
                        derived: Optional[tuple] = None) -> list:
        """`_attribute_left`, and what the base classes left (`super().__init__(model)` wrapped
        it): live in every method, unless the class's own constructor replaces it or `method`
        itself calls the base's method (then the walk takes it up at that call). `derived`:
        the (model, ClassDef) of the most-derived class whose instance is followed, for the
        methods that `self.m()` runs."""
        initial = self._attribute_left(owner, key, method, derived)
        for entry in self._state_at_own_calls(owner, key, method):
            if entry not in initial:
                initial.append(entry)
        inherited = self._inherited_binding(owner, key)
        if inherited is not None and not any(b is inherited for b, _ in initial) \
                and not self._base_calls(owner, key, method) and not self._constructor_replaces(owner, key, method):
            initial.extend(e for e in self._inherited_left(owner, key, method, inherited, derived) if e not in initial)
        return initial

    def _inherited_left(self, owner: "Scope", key: str, method: Optional[cst.CSTNode], inherited: "Binding",
                        derived: Optional[tuple]) -> list:
        """What the base classes left in `self.key`, with the paths on which the class's own
        constructor keeps it: `super().__init__(...)` then `self.setup()`, whose `if rank is not
        None: self.task = DDP(self.task)` keeps the base's value only where the test failed.
        Any path when the constructor does not call the base's (or is `method` itself)."""
        constructor = class_method(owner.node, "__init__") if isinstance(owner.node, cst.ClassDef) else None
        if constructor is None or constructor is method or not self._base_calls(owner, key, constructor):
            return [(inherited, ())]
        left = self._exit_state(owner, key, constructor, derived)
        kept = [entry for entry in left or () if entry[0] is inherited]
        return kept or [(inherited, ())]

    def _state_at_own_calls(self, owner: "Scope", key: str, method: Optional[cst.CSTNode]) -> list:
        """What `self.key` holds where another method of the class calls `method` on the
        instance (`self.to_gpu()` in `__init__`): what `method` finds on entry there, which
        `_attribute_left` leaves out (it drops what `method` itself binds)."""
        if not isinstance(method, cst.FunctionDef) or not isinstance(owner.node, cst.ClassDef) \
                or (id(method), key) in self._before_constructor_calls:
            return []
        found: list = []
        self._before_constructor_calls.add((id(method), key))
        try:
            for call, _ in self.call_sites(method) or ():
                caller = _enclosing_function(self.model, call)
                if caller is None or caller is method or self.model.scope(caller.body).class_scope is not owner:
                    continue
                for entry in self._reaching_attribute(key, call, owner, self.model.scope(call)):
                    if entry not in found:
                        found.append(entry)
        finally:
            self._before_constructor_calls.discard((id(method), key))
        return found

    def _attribute_left(self, owner: "Scope", key: str, method: Optional[cst.CSTNode],
                        derived: Optional[tuple] = None) -> list:
        """What the class's methods other than `method` leave in `self.key`: what is live when
        each ends, with the branch conditions it took (`self.net = build(); if ddp: self.net =
        DDP(self.net)`), constructor first."""
        bindings = [b for b in self.model.bindings.get(key, ()) if b.scope is owner]
        elsewhere = [b for b in bindings if method is None or not _inside(self.model, b.node, method)]
        elsewhere.sort(key=lambda b: _method_rank(self.model, b.node))
        initial: list = []
        for other in dict.fromkeys(_enclosing_function(self.model, b.node) for b in elsewhere):
            if other is None:
                continue
            if derived is not None and derived[1] is not owner.node and other.name.value != "__init__" and \
                    (_method_on_instance(derived, other.name.value) or (None, None, other))[2] is not other:
                continue  # overridden by the instance's class: this one never runs on it
            left = self._exit_state(owner, key, other, derived)
            if left is None:  # it always returns: what is live at its returns (`return self`)
                left = self._returned_state(owner, key, other, derived) or [
                    (b, self.branch_conditions(b.node)) for b in elsewhere if _enclosing_function(self.model, b.node) is other]
            # not what `method` itself binds (through a call of it there): what it finds on entry
            initial.extend(entry for entry in left if entry not in initial and not (
                method is not None and entry[0] is not _PASSED and entry[0].node is not None
                and _owns(self.model, entry[0]) and _inside(self.model, entry[0].node, method)))
        return initial

    # ------------------------------------------------------ attributes of base classes
    def _inherited_binding(self, owner: "Scope", key: str) -> Optional["Binding"]:
        """A stand-in Binding for "what a project base class's methods left in `self.key`", or
        None when no base class (of this file or imported, up to three levels) binds it."""
        if owner is None or owner.kind != "class" or not isinstance(owner.node, cst.ClassDef):
            return None
        cache_key = (id(owner.node), key)
        if cache_key not in self._inherited:
            self._inherited[cache_key] = None  # a class hierarchy that loops answers "none"
            if self.bases_binding(owner.node, key):
                from dplint.semantic import Binding

                stand_in = Binding(key, None, owner.node, owner, -1)
                self._inherited_of[id(stand_in)] = owner
                self._inherited[cache_key] = stand_in
        return self._inherited[cache_key]

    def bases_binding(self, class_node: cst.ClassDef, key: str, depth: int = 3) -> list[tuple]:
        """(model, ClassDef, class Scope) of the nearest project base classes of `class_node`
        (a class of this file) whose methods bind `self.key` (`self.model = DDP(model)` in
        `BaseTrainer.__init__`), first bases first."""
        cache_key = (id(class_node), key)
        if cache_key in self._bases_binding:
            return self._bases_binding[cache_key]
        self._bases_binding[cache_key] = []
        found: list = []
        for base in class_node.bases:
            named = self._class_named(base.value)
            if named is None or named[1] is class_node:
                continue
            base_model, base_class = named
            binding = next((b for b in base_model.bindings.get(key, ()) if b.scope.node is base_class), None)
            if binding is not None:
                found.append((base_model, base_class, binding.scope))
            elif depth > 1:
                found.extend(base_model.flow.bases_binding(base_class, key, depth - 1))
        self._bases_binding[cache_key] = found
        return found

    def project_bases(self, class_node: cst.ClassDef, depth: int = 3) -> list[tuple]:
        """(model, ClassDef) of every project base class of `class_node` (a class of this
        file), of this file or imported, nearest first, up to `depth` levels."""
        found: list = []
        for base in class_node.bases:
            named = self._class_named(base.value)
            if named is None or named[1] is class_node or any(named[1] is c for _, c in found):
                continue
            found.append(named)
            if depth > 1:
                found.extend(b for b in named[0].flow.project_bases(named[1], depth - 1) if not any(b[1] is c for _, c in found))
        return found

    def _base_calls(self, owner: "Scope", key: str, method: Optional[cst.CSTNode]) -> list[tuple]:
        """(call, base model, base method, bound) for each call in `method` of a base class's
        constructor or of a base method that binds `self.key` (`super().__init__(model, cfg)`,
        `Base.__init__(self, model)`): where the base's value of `self.key` takes over."""
        if not isinstance(method, cst.FunctionDef) or not isinstance(owner.node, cst.ClassDef):
            return []
        cache_key = (id(owner.node), key, id(method))
        if cache_key in self._base_call_cache:
            return self._base_call_cache[cache_key]
        scope = self.model.scope(method.body)
        self_name = _instance_parameter(self.model, scope) if scope.node is method else None
        base_names = {base.value.value for base in owner.node.bases if isinstance(base.value, cst.Name)}
        found = []
        for call in self._own_calls(method):
            func = call.func
            if not isinstance(func, cst.Attribute) or not (
                isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) and func.value.func.value == "super"
                or isinstance(func.value, cst.Name) and func.value.value in base_names
            ):
                continue  # cheap test first: only `super().m(...)` and `Base.m(self, ...)` qualify
            base = self._base_method(owner.node, call, self_name)
            if base is None:
                continue
            base_model, base_method, bound = base
            if base_method.name.value == "__init__" or any(
                _inside(base_model, b.node, base_method) for b in base_model.bindings.get(key, ())
            ):
                found.append((call, base_model, base_method, bound))
        self._base_call_cache[cache_key] = found
        return found

    def _own_calls(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls a function's own body makes (its scope's, not nested functions')."""
        if self._calls_by_function is None:
            self._calls_by_function = {}
            for site in self.model.calls:
                self._calls_by_function.setdefault(site.scope.node, []).append(site.node)
        return self._calls_by_function.get(function, [])

    def _constructor_replaces(self, owner: "Scope", key: str, method: cst.CSTNode) -> bool:
        """Whether the class's own `__init__` (not `method`) surely replaces what its base
        classes left in `self.key`: a binding after its `super().__init__(...)`, or a binding
        of its body's top level when it never calls the base's constructor."""
        constructor = class_method(owner.node, "__init__") if isinstance(owner.node, cst.ClassDef) else None
        if constructor is None or constructor is method:
            return False
        inherited = self._inherited_binding(owner, key)
        if self._base_calls(owner, key, constructor):
            left = self._exit_state(owner, key, constructor)
            return left is not None and not any(b is inherited for b, _ in left)
        for binding in self.model.bindings.get(key, ()):
            if binding.scope is owner and _enclosing_function(self.model, binding.node) is constructor:
                statement = self.model.statement_of(binding.node)
                if self.model.parent(self.model.parent(statement)) is constructor:
                    return True
        return False

    def _inherited_values(self, owner: "Scope", key: str, path: Path, depth: int,
                          derived: Optional[tuple] = None) -> list[Value]:
        """What `self.key` may hold as the base classes of `owner` (a class of this file) left
        it: each base's own values, its constructor's parameters mapped to what this class's
        `super().__init__(...)` passes, and its branch tests on `self.x` read as this class's.
        The base's `self.m()` calls run the methods of `derived` (default: `owner`'s class), the
        class of the instance: a subclass's override of `cuda()` called by the base `__init__`."""
        derived = derived or (self.model, owner.node)
        values: list[Value] = []
        constructor = class_method(owner.node, "__init__")
        calls = self._base_calls(owner, key, constructor) if constructor is not None else []
        for base_model, base_class, base_scope in self.bases_binding(owner.node, key):
            flow = base_model.flow
            base_init = class_method(base_class, "__init__")
            to_base = [c for c in calls if c[2] is base_init and base_init is not None]
            context = ((base_init, to_base[0][0], self.model, to_base[0][3]),) if len(to_base) == 1 else ()
            for binding, conditions in flow._left_by_others(base_scope, key, None, derived):
                if binding is _PASSED:
                    continue
                override = self._overriding_method(owner, base_model, binding)
                if id(binding) in flow._inherited_of:
                    found = flow._inherited_values(base_scope, key, conditions, depth - 1, derived)
                elif not _owns(base_model, binding):
                    # bound by a method of the instance's own class (`derived`), which `self.m()`
                    # in the base ran: that class's values, the path read as that class's
                    other = derived[0] if _owns(derived[0], binding) else None
                    found = [Value(self.model, None, ())] if other is None else other.flow._binding_values(
                        key, binding, _as_subclass_conditions(conditions, base_class, derived[1]), (), depth - 1)
                elif override is not None:
                    live = _as_subclass_conditions(conditions, base_class, owner.node)
                    found = [Value(v.model, v.expr, _join(live, v.conditions), v.binding) for v in
                             self.returned_values(Callee(self.model, override, True), binding.value, base_model, (), depth - 1)]
                else:
                    found = flow._binding_values(key, binding, conditions, context, depth - 1)
                for value in found:
                    if value.model is base_model or value.model is self.model:
                        mapped = _as_subclass_conditions(value.conditions, base_class, owner.node) \
                            if value.model is base_model else value.conditions
                        values.append(Value(value.model, value.expr, _join(path, mapped), value.binding))
                    else:
                        values.append(Value(value.model, value.expr, _join(path, _portable(value.conditions)), value.binding))
        return values or [Value(self.model, None, path)]

    def _overriding_method(self, owner: "Scope", base_model: "SemanticModel", binding: "Binding") -> Optional[cst.FunctionDef]:
        """`self.model = self._build_model().to(device)` in a base class's method, where the
        subclass `owner` (of this file) defines `_build_model` itself: on its instances the
        subclass's method runs, so its returns are what the attribute holds."""
        from dplint.semantic import peel_self_returning

        value = peel_self_returning(binding.value)
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) \
                or not isinstance(value.func.value, cst.Name) or not isinstance(owner.node, cst.ClassDef):
            return None
        method = _enclosing_function(base_model, binding.node)
        if method is None or _instance_parameter(base_model, base_model.scope(method.body)) != value.func.value.value:
            return None
        return class_method(owner.node, value.func.attr.value)

    def branch_conditions(self, node: cst.CSTNode) -> Path:
        """The `if` tests around a node inside its own function (outermost first)."""
        found = []
        child = node
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                found.append(self.condition(ancestor.test, holds=child is ancestor.body))
            child = ancestor
        return tuple(reversed(found))

    def _walk_scope(self, owner: "Scope", key: str, body_owner: cst.CSTNode, records: dict,
                    initial: Optional[list], derived: Optional[tuple] = None) -> None:
        # A walk may ask questions that start another walk (a branch test's condition looks
        # up the callers of its function): the state of this one is restored afterwards.
        saved = getattr(self, "_index", None), getattr(self, "_records_now", None), self._derived_now
        self._derived_now = derived
        try:
            self._walk_scope_now(owner, key, body_owner, records, initial)
        finally:
            self._index, self._records_now, self._derived_now = saved

    def _walk_scope_now(self, owner: "Scope", key: str, body_owner: cst.CSTNode, records: dict,
                        initial: Optional[list]) -> None:
        bindings = [b for b in self.model.bindings.get(key, ()) if b.scope is owner]
        if body_owner is not owner.node:
            bindings = [b for b in bindings if _inside(self.model, b.node, body_owner)]
        index = {}
        state = list(initial or ())
        for binding in bindings:
            if isinstance(binding.node, cst.Param):
                state = [(binding, ())]
                continue
            index.setdefault(self._anchor(binding.node), []).append(binding)
        inherited = self._inherited_binding(owner, key) if key.startswith("self.") else None
        if inherited is not None:
            # `super().__init__(model)`: from here on, what the base class left (a binding in
            # the same statement, `self.net = super().build()`, comes after it)
            for call, *_ in self._base_calls(owner, key, body_owner):
                index.setdefault(self._anchor(call), []).insert(0, inherited)
        if key.startswith("self.") and isinstance(body_owner, cst.FunctionDef) and isinstance(owner.node, cst.ClassDef):
            # `self.cuda()` whose method (the most-derived class's) binds `self.key`: from
            # there on, what that method leaves (a binding in the same statement comes after)
            for call, effect in self._self_method_calls(owner, key, body_owner):
                index.setdefault(self._anchor(call), []).insert(0, effect)
        self._index = index
        self._records_now = records
        node = body_owner
        if isinstance(node, cst.Module):
            records[_EXIT] = self._walk_block(node.body, state, ())
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            records[_EXIT] = self._walk_block(_blocks(node.body), state, ())

    def _exit_state(self, owner: "Scope", key: str, method: cst.FunctionDef,
                    derived: Optional[tuple] = None) -> Optional[list]:
        """The bindings of `key` live when `method` falls off its end (None: it never does)."""
        record_key = self._exit_key(owner, key, method, derived)
        records = self._records.get(record_key)
        if records is None:
            records = self._records[record_key] = {}
            self._walk_scope(owner, key, method, records, None, derived)
        return records.get(_EXIT)

    @staticmethod
    def _exit_key(owner: "Scope", key: str, method: cst.FunctionDef, derived: Optional[tuple]) -> tuple:
        """The records key of a method's walk for what it leaves: started empty (its own
        bindings only), apart from the walks that answer reads inside it (started with what
        the other methods leave), so neither answers for the other whichever runs first."""
        if derived is None or derived[1] is owner.node:
            return owner, key, method, ("exit",)
        return owner, key, method, ("exit", id(derived[1]))

    def _returned_state(self, owner: "Scope", key: str, method: cst.FunctionDef, derived: Optional[tuple]) -> list:
        """The bindings of `key` live at the `return` statements of `method` (its exit walk's)."""
        records = self._records.get(self._exit_key(owner, key, method, derived)) or {}
        left: list = []
        for statement in self.own_returns(method):
            state = records.get(statement) or records.get(self.model.statement_of(statement)) or ()
            left.extend(entry for entry in state if entry not in left)
        return left

    def _anchor(self, node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, (cst.For, cst.With, cst.ExceptHandler, cst.FunctionDef, cst.ClassDef)):
            return node
        statement = self.model.statement_of(node)
        if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and len(statement.body) > 1:
            # `a = f(); b = g(a)` on one line: each small statement binds in turn.
            for small in statement.body:
                if small is node or _inside(self.model, node, small):
                    return small
        return statement

    def _walk_block(self, statements: Sequence[cst.CSTNode], state: Optional[list], ctx: Path) -> Optional[list]:
        for statement in statements:
            if state is None:
                return None  # unreachable: after return / raise
            state = self._walk_statement(statement, state, ctx)
        return state

    def _bind_here(self, node: cst.CSTNode, state: list, ctx: Path) -> list:
        found = self._index.get(node)
        if not found:
            return state
        if isinstance(found[-1], _MethodCall):
            return found[-1].apply(state, ctx)
        return [(found[-1], ctx)]

    # -------------------------------------------------- methods called on the instance
    def _self_method_calls(self, owner: "Scope", key: str, function: cst.FunctionDef) -> list:
        """(call, _MethodCall) for each `self.m(...)` of `function` whose method binds
        `self.key`, `m` looked up as Python does on the instance being analysed: the
        most-derived class (`_derived_now`, else `owner`'s class) first, then its project
        bases (a base `__init__` calling `self.cuda()` runs the subclass's `cuda`)."""
        self_name = _instance_parameter(self.model, self.model.scope(function.body))
        if self_name is None:
            return []
        derived = self._derived_now or (self.model, owner.node)
        found = []
        for call in self._own_calls(function):
            func = call.func
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == self_name):
                continue
            resolved = _method_on_instance(derived, func.attr.value)
            if resolved is None:
                continue
            method_model, class_node, method = resolved
            class_scope = next((b.scope for b in method_model.bindings.get(key, ())
                                if b.scope.node is class_node and _inside(method_model, b.node, method)), None)
            if class_scope is not None and method is not function:
                found.append((call, _MethodCall(method_model, class_scope, method, key, derived)))
        return found

    def method_summary(self, owner: "Scope", key: str, method: cst.FunctionDef, derived: tuple) -> Optional[list]:
        """What `self.key` holds when `method` (of this file's class `owner`) returns, on an
        instance of the most-derived class `derived`: (binding, path) entries, `_PASSED`
        standing for what the caller had in it; None while the method is being walked
        (a method that calls itself)."""
        record_key = (owner, key, method, ("summary", id(derived[1])))
        records = self._records.get(record_key)
        if records is None:
            if record_key in self._summaries_running:
                return None
            self._summaries_running.add(record_key)
            try:
                records = {}
                self._walk_scope(owner, key, method, records, [(_PASSED, ())], derived)
                self._records[record_key] = records
            finally:
                self._summaries_running.discard(record_key)
        left = list(records.get(_EXIT) or ())
        for statement in self.own_returns(method):
            state = records.get(statement) or records.get(self.model.statement_of(statement)) or ()
            left.extend(entry for entry in state if entry not in left)
        return left

    def _walk_statement(self, statement: cst.CSTNode, state: list, ctx: Path) -> Optional[list]:
        self._records_now[statement] = state
        model = self.model
        kind = type(statement)  # exact types: cheaper than `isinstance`
        if kind is cst.SimpleStatementLine or kind is cst.SimpleStatementSuite:
            state = self._bind_here(statement, state, ctx)
            for small in statement.body if len(statement.body) > 1 else ():
                self._records_now[small] = state
                state = self._bind_here(small, state, ctx)
            if any(type(small) is cst.Return or ends_path(model, small) for small in statement.body):
                return None
            return state
        if kind is cst.If:
            state = self._bind_here(statement, state, ctx)  # a walrus in the test
            return self._walk_if(statement, state, ctx)
        if kind is cst.For or kind is cst.While:
            before = state
            if kind is cst.For:
                entry = self._bind_here(statement, state, ctx)
            else:
                entry = state
                if _static(model, statement.test) is False:
                    return self._walk_else(statement.orelse, state, ctx)
            first = self._walk_block(_blocks(statement.body), entry, ctx)
            looped = _merge(entry, first) if first is not None else entry
            end = self._walk_block(_blocks(statement.body), looped, ctx)
            after = _merge(before, end) if end is not None else before
            if kind is cst.For and end is not None:
                after = _merge(after, end)
            return self._walk_else(statement.orelse, after, ctx)
        if kind is cst.Try or kind.__name__ == "TryStar":
            body = self._walk_block(_blocks(statement.body), state, ctx)
            handler_in = _merge(state, body) if body is not None else state
            ends = []
            for handler in statement.handlers:
                guard = self.handler_conditions(statement, handler)
                entry = self._bind_here(handler, _extend(handler_in, guard), _join(ctx, guard))
                self._records_now[handler] = entry
                ends.append(self._walk_block(_blocks(handler.body), entry, ctx))
            if statement.orelse is not None and body is not None:
                body = self._walk_block(_blocks(statement.orelse.body), body, ctx)
            after = _merge_all([body, *ends])
            if statement.finalbody is not None:
                final_in = after if after is not None else handler_in
                final = self._walk_block(_blocks(statement.finalbody.body), final_in, ctx)
                return None if after is None else final
            return after
        if kind is cst.With:
            state = self._bind_here(statement, state, ctx)
            return self._walk_block(_blocks(statement.body), state, ctx)
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            return self._bind_here(statement, state, ctx)
        if kind is cst.Match:
            ends = [state]
            for case in statement.cases:
                self._records_now[case] = state
                ends.append(self._walk_block(_blocks(case.body), state, ctx))
            return _merge_all(ends)
        return state

    def _walk_else(self, orelse, state: Optional[list], ctx: Path) -> Optional[list]:
        if orelse is None or state is None:
            return state
        return self._walk_block(_blocks(orelse.body), state, ctx)

    def _walk_if(self, statement: cst.If, state: list, ctx: Path) -> Optional[list]:
        truth = _static(self.model, statement.test)
        if truth is True:
            return self._walk_block(_blocks(statement.body), state, ctx)
        if truth is False:
            return self._walk_orelse(statement.orelse, state, ctx)
        condition = self.condition(statement.test)
        positive, negative = (condition,), (condition.negated(),)
        body = self._walk_block(_blocks(statement.body), _extend(state, positive), _join(ctx, positive))
        rest = self._walk_orelse(statement.orelse, _extend(state, negative), _join(ctx, negative))
        return _merge_all([body, rest])

    def _walk_orelse(self, orelse, state: list, ctx: Path) -> Optional[list]:
        if orelse is None:
            return state
        if isinstance(orelse, cst.If):
            return self._walk_statement(orelse, state, ctx)
        return self._walk_block(_blocks(orelse.body), state, ctx)

    # ------------------------------------------------------------------- conditions
    def condition(self, test: cst.BaseExpression, holds: bool = True) -> Condition:
        key = (id(test), holds)
        if key not in self._conditions:
            found = self._with_flag_origin(self._with_parts(self._condition(test, holds), test, holds), test)
            found = self._with_branch_flag(found, test)
            self._conditions[key] = (test, found)  # keeps `test` alive: ids stay unique
        return self._conditions[key][1]

    def _with_parts(self, condition: Condition, test: cst.BaseExpression, holds: bool) -> Condition:
        """The condition with what its compound test implies: where `a and b` holds, `a` and
        `b` hold (`if torch.cuda.device_count() > 1 and distributed:` ... `if not
        distributed:` cannot both hold); where `a or b` fails, both fail."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        if not isinstance(test, cst.BooleanOperation):
            return condition
        both = isinstance(test.operator, cst.And)
        parts = (self.condition(test.left, both), self.condition(test.right, both))
        # `holds` is whether the compound test holds on this path, `condition.holds` how its text is stored
        this, other = (parts, ()) if holds == both else ((), parts)
        if_holds, if_fails = (this, other) if condition.holds else (other, this)
        return Condition(condition.test, condition.holds, condition.scope, if_holds, if_fails)

    def _with_flag_origin(self, condition: Condition, test: cst.BaseExpression) -> Condition:
        """A flag set False and then True under some tests (`multi = False` ... `if use_cuda:
        if torch.cuda.device_count() > 1: multi = True`) holds exactly where those tests held:
        the condition `multi` gets them as its parts, like the test `use_cuda and
        torch.cuda.device_count() > 1` (where it fails, they cannot all have held). Only a
        local bound those two times and nowhere else; unchanged otherwise."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if not isinstance(test, cst.Name) or condition.test != test.value or condition.if_holds or condition.if_fails:
            return condition
        bindings = self.model.bindings.get(test.value, ())
        if len(bindings) != 2 or test in self._flag_walks:
            return condition
        unset, set_ = sorted(bindings, key=lambda b: b.order)
        if unset.scope is not set_.scope or not all(isinstance(b.node, cst.Assign) and len(b.node.targets) == 1
                                                     and isinstance(b.value, cst.Name) for b in bindings) \
                or (_static(self.model, unset.value), _static(self.model, set_.value)) != (False, True):
            return condition
        self._flag_walks.add(test)
        try:
            if not any(binding is set_ for binding, _ in self.reaching(test.value, test)):
                return condition
            before, parts = self.branch_conditions(unset.node), self.branch_conditions(set_.node)
        finally:
            self._flag_walks.discard(test)
        if len(parts) <= len(before) or parts[:len(before)] != before:
            return condition
        return Condition(condition.test, condition.holds, condition.scope, parts[len(before):], ())

    def _with_branch_flag(self, condition: Condition, test: cst.BaseExpression) -> Condition:
        """A flag bound to opposite constants in the two arms of one `if` (`if rank is not
        None: wrapped = True; net = DDP(net)` / `else: wrapped = False`) holds exactly where
        that arm's tests held and fails where the other arm's did; one set to a constant and
        then to the other under some tests (`self.distributed = False` ... `if ws > 1:
        self.distributed = True`) holds or fails, as set the second time, where those tests
        held. A local of a function (or a global), or an attribute of the method's instance
        (`self.distributed`, read in any method of the class), bound those two times and
        nowhere else in the file, both in one function; unchanged otherwise."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if condition.if_holds or condition.if_fails or test in self._flag_walks:
            return condition
        bindings = self._flag_bindings(test)
        if bindings is None:
            return condition
        first, second = sorted(bindings, key=lambda b: b.order)
        values = (_static(self.model, first.value), _static(self.model, second.value))
        if values not in ((False, True), (True, False)):
            return condition
        if _enclosing_function(self.model, first.node) is not _enclosing_function(self.model, second.node):
            return condition
        self._flag_walks.add(test)
        try:
            if isinstance(test, cst.Name) and not any(b is first or b is second for b, _ in self.reaching(test.value, test)):
                return condition
            on_first, on_second = self.branch_conditions(first.node), self.branch_conditions(second.node)
        finally:
            self._flag_walks.discard(test)
        common = 0
        while common < min(len(on_first), len(on_second)) and on_first[common] == on_second[common]:
            common += 1
        first_parts, second_parts = on_first[common:], on_second[common:]
        if not first_parts and second_parts:
            # set, then set again under some tests: only the second binding says where it held
            first_parts = ()
        elif not (first_parts and second_parts and first_parts[0] == second_parts[0].negated()):
            return condition  # not the two arms of one `if`
        holds_parts, fails_parts = (second_parts, first_parts) if values[1] else (first_parts, second_parts)
        return Condition(condition.test, condition.holds, condition.scope, holds_parts, fails_parts)

    def _flag_bindings(self, test: cst.BaseExpression) -> Optional[list]:
        """The two plain assignments of the flag `test` (a name, or `self.x` in a method), or None."""
        scope = self.model.scope(test)
        if isinstance(test, cst.Name):
            owner = self.model.owner_scope(test.value, scope)
            if owner is None or owner.kind not in ("function", "module"):
                return None
            bindings = [b for b in self.model.bindings.get(test.value, ()) if b.scope is owner]
            if len(bindings) != len(self.model.bindings.get(test.value, ())):
                return None  # also a name of another function, or `global`: not one flag
        elif isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name) \
                and scope.self_name == test.value.value and scope.class_scope is not None:
            bindings = [b for b in self.model.bindings.get("self." + test.attr.value, ())
                        if b.scope is scope.class_scope]
        else:
            return None
        if len(bindings) != 2 or not all(isinstance(b.node, cst.Assign) and len(b.node.targets) == 1
                                         and b.value is not None for b in bindings):
            return None
        return bindings

    def _condition(self, test: cst.BaseExpression, holds: bool = True, aliases: int = 3) -> Condition:
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        aliased = self.boolean_alias(test) if aliases and isinstance(test, cst.Name) else None
        if aliased is not None:
            # `ddp = True if world_size else False` ... `if ddp:` is the test `world_size`, and
            # `wrapped = isinstance(m, DDP)` ... `if wrapped` is the isinstance test itself
            expression, negated = aliased
            return self._condition(expression, holds != negated, aliases - 1)
        flag = self._dictionary_flag(test) if isinstance(test, cst.Subscript) else None
        if flag is not None:
            # `config["distributed"]`, set True under `if torch.cuda.device_count() > 1:` and
            # False in its `else` (here or in the file that built the dict): that test
            return Condition(flag.test, flag.holds == holds, flag.scope, flag.if_holds, flag.if_fails)
        inlined = self._predicate_body(test) if isinstance(test, cst.Call) else None
        if inlined is not None:
            # `is_distributed(model)` with `def is_distributed(m): return isinstance(m, DDP)`
            # is the test `isinstance(model, DDP)` itself, wherever it is spelled either way
            return Condition(inlined, holds, 0)
        compared = _type_test_text(self.model, test) or _comparison_text(self.model, test)
        if compared is not None:
            # `len(ids) <= 1` is `not len(ids) > 1`; `1 < len(ids)` is `len(ids) > 1`
            text, negated = compared
            return Condition(self._as_instance_text(test, text), holds != negated, 0)
        text = _SPACE.sub("", self.model.code(test))
        parens = len(getattr(test, "lpar", ()))
        if parens and text.startswith("(" * parens) and text.endswith(")" * parens):
            text = text[parens:-parens]
        root = test
        while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
            root = root.value if not isinstance(root, cst.Call) else root.func
        scope = 0
        if isinstance(root, cst.Name):
            use_scope = self.model.scope(test)
            if use_scope.self_name == root.value and use_scope.class_scope is not None:
                # `self.distributed` is one test in every method of the class; one copied by the
                # constructor from its argument is the caller's test (`_caller_spelling`).
                attribute = test
                while isinstance(attribute, (cst.Attribute, cst.Subscript, cst.Call)):
                    inner = attribute.func if isinstance(attribute, cst.Call) else attribute.value
                    if inner is root:
                        break
                    attribute = inner
                spelled = self._caller_spelling(use_scope, attribute.attr.value) \
                    if isinstance(attribute, cst.Attribute) and attribute.value is root and text.startswith(root.value + ".") else None
                if spelled is not None:
                    rest = text[len(root.value) + 1 + len(attribute.attr.value):]
                    return Condition(spelled[0] + rest, holds, spelled[1])
                return Condition(text, holds, id(use_scope.class_scope.node))
            owner = self.model.owner_scope(root.value, use_scope)
            scope = id(owner.node) if owner is not None and owner.kind == "function" else 0
            stored_as = self._stored_on_instance(owner, root.value) if owner is not None else None
            if stored_as is not None and text.startswith(root.value):
                # `self.args = args` in this method: `args.distributed` is `self.args.distributed`.
                class_node, attribute = stored_as
                return Condition("self." + attribute + text[len(root.value):], holds, id(class_node))
            passed = self._caller_argument(owner, root.value) if owner is not None else None
            if passed is not None and text.startswith(root.value):
                # `def train(args): if args.distributed:` with the only call `train(args)` in
                # `main`: the same test as `main`'s own `if args.distributed:`.
                argument_name, caller_scope = passed
                return Condition(argument_name + text[len(root.value):], holds, caller_scope)
        return Condition(text, holds, scope)

    def _as_instance_text(self, test: cst.Comparison, text: str) -> str:
        """`_instance_text`, then an option the constructor copied from its argument spelled
        as that argument's caller spells it (`_caller_spelling`)."""
        text = self._instance_text(test, text)
        start = 4 if text.startswith("len(self.") else 0
        if not text[start:].startswith("self."):
            return text
        attribute = re.match(r"\w+", text[start + 5:])
        scope = self.model.scope(test)
        # one caller up, as the caller's own comparisons are spelled (not followed further)
        spelled = self._caller_spelling(scope, attribute.group(0), 1) if attribute and scope.self_name == "self" else None
        if spelled is None:
            return text
        return text[:start] + spelled[0] + text[start + 5 + len(attribute.group(0)):]

    def _caller_spelling(self, scope: "Scope", attribute: str, depth: int = 3) -> Optional[tuple[str, int]]:
        """(text, scope id) of what `self.attribute` holds, as the one caller of the class
        spells it, when the class's `__init__` binds it once, from its parameter (`self.procs =
        opts.procs`, `self.args = args`), and nothing else in the file binds it: with
        `Runner(net, opts)` the only construction (in `launch(rank, opts)`), `self.procs > 1`
        in any method is the test `opts.procs > 1` around the caller's wrap. None otherwise."""
        class_scope = scope.class_scope if scope is not None else None
        if class_scope is None or not isinstance(class_scope.node, cst.ClassDef):
            return None
        constructor = class_method(class_scope.node, "__init__")
        bindings = self.model.bindings.get("self." + attribute, ())
        if constructor is None or len(bindings) != 1 or bindings[0].scope is not class_scope \
                or not isinstance(bindings[0].node, cst.Assign) or len(bindings[0].node.targets) != 1 \
                or _enclosing_function(self.model, bindings[0].node) is not constructor:
            return None
        root = value = bindings[0].value
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name) or root.value == _instance_parameter(self.model, self.model.scope(constructor.body)):
            return None
        constructor_scope = self.model.scope(constructor.body)
        if len([b for b in self.model.bindings.get(root.value, ()) if b.scope is constructor_scope]) != 1:
            return None  # rebound in the constructor: not the argument any more
        passed = self._caller_argument(constructor_scope, root.value, depth)
        if passed is None:
            return None
        return passed[0] + _SPACE.sub("", self.model.code(value))[len(root.value):], passed[1]

    def _instance_text(self, test: cst.Comparison, text: str) -> str:
        """A comparison on a parameter the method stores on the instance, spelled as the
        attribute (`self.config = config` ... `config["gpuid"][0] >= 0` is the test
        `self.config["gpuid"][0] >= 0` of every method of the class)."""
        root = test.left
        if isinstance(root, cst.Call) and isinstance(root.func, cst.Name) and root.func.value == "len" and len(root.args) == 1:
            root = root.args[0].value
        copied = self._as_instance_copy(root, text)
        if copied is not None:
            return copied
        if isinstance(root, cst.Name) and text.startswith((root.value, "len(" + root.value)):
            # `n_gpu = args.n_gpu` ... `n_gpu > 1` is the test `args.n_gpu > 1`, as its callers spell it
            scope = self.model.scope(test)
            source = next((other for other in self._aliases_in(scope).get(root.value, ())
                           if "." in other), None) if scope.kind == "function" else None
            if source is not None:
                start = 4 if text.startswith("len(") else 0
                return text[:start] + source + text[start + len(root.value):]
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if not isinstance(root, cst.Name) or not text.startswith((root.value, "len(" + root.value)):
            return text
        owner = self.model.owner_scope(root.value, self.model.scope(test))
        if owner is None or owner.kind != "function":
            return text
        stored_as = self._stored_on_instance(owner, root.value)
        if stored_as is None:
            return text
        start = 4 if text.startswith("len(") else 0
        return text[:start] + "self." + stored_as[1] + text[start + len(root.value):]

    def _as_instance_copy(self, subject: cst.BaseExpression, text: str) -> Optional[str]:
        """A comparison on an option the method copies onto the instance, spelled as the copy
        (`self.n_gpus = args.n_gpus` ... `args.n_gpus > 1` is the test `self.n_gpus > 1` of every
        method of the class), when the class binds that attribute only there; None otherwise."""
        method = next((a for a in self.model.ancestors(subject) if isinstance(a, cst.FunctionDef)), None)
        if method is None:
            return None
        copies = self._instance_copies()
        while isinstance(subject, (cst.Attribute, cst.Subscript)):
            if isinstance(subject, cst.Attribute):
                source = _SPACE.sub("", self.model.code(subject))
                attribute = copies.get((method, source))
                for start in (0, 4):  # `args.n_gpus > 1`, `len(args.gpu_ids) > 1`
                    if attribute is not None and text[start:].startswith(source) and (start == 0 or text.startswith("len(")):
                        return text[:start] + "self." + attribute + text[start + len(source):]
            subject = subject.value
        return None

    def _instance_copies(self) -> dict:
        """(method, `args.n_gpus`) -> `n_gpus` for each `self.n_gpus = args.n_gpus`: an
        attribute of the instance bound once in the file, to an attribute of a name."""
        if self._copies is None:
            self._copies = {}
            for key, bindings in self.model.bindings.items():
                if not key.startswith("self.") or len(bindings) != 1:
                    continue
                value = bindings[0].value
                if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value != "self":
                    method = next((a for a in self.model.ancestors(bindings[0].node) if isinstance(a, cst.FunctionDef)), None)
                    self._copies[(method, _SPACE.sub("", self.model.code(value)))] = key[5:]
        return self._copies

    def handler_conditions(self, statement: cst.CSTNode, handler: cst.ExceptHandler) -> Path:
        """What holds where an `except` that catches AttributeError (bare, `Exception`,
        `BaseException`, a tuple naming one) runs after a `try` whose body reads `.module` of
        one object: `try: sd = net.module.state_dict() except AttributeError: sd =
        net.state_dict()` runs the handler for a bare `net`, the test `hasattr(net, "module")`
        failed. Nothing for other handlers, or reads of `.module` from several objects."""
        if not catches_attribute_error(handler):
            return ()
        targets: dict = {}
        stack = list(_blocks(statement.body))
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(node, cst.Attribute) and node.attr.value == "module" \
                    and isinstance(node.value, (cst.Name, cst.Attribute)):
                targets.setdefault(_SPACE.sub("", self.model.code(node.value)), node.value)
            stack.extend(self.model.children(node))
        if len(targets) != 1:
            return ()
        (text,) = targets
        return (Condition(f'hasattr({text},"module")', False, 0),)

    def _dictionary_flag(self, test: cst.Subscript) -> Optional[Condition]:
        """The branch test a dict entry stands for (as a holding Condition) when the dict that
        reaches `test` (through `self.x = x`, a parameter's only caller, other files: every
        plain name holding it on the way) gets that key by `d["key"] = True` statements under
        one test and `d["key"] = False` statements where it failed, and no other way the
        analysis sees. None otherwise."""
        from dplint.semantic import literal_value

        try:
            key = literal_value(test.slice[0].slice.value) if len(test.slice) == 1 \
                and isinstance(test.slice[0].slice, cst.Index) else None
        except ValueError:
            return None
        if not isinstance(key, str) or test in self._inlining or _OPEN_FLAGS[0] >= MAX_FLAG_DEPTH:
            return None
        # The stores' own branch tests may be entries again (`if cfg["amp"]: cfg["dist"] = ...`):
        # followed a little way only, and never back into a test still being read.
        self._inlining.add(test)
        _OPEN_FLAGS[0] += 1
        try:
            holders = self._dict_holders(test.value, test, 4)
            stores = [(owner, assign) for owner, scope_node, name in holders for assign in _entry_stores(owner, scope_node, name, key)]
            paths: dict = {True: [], False: []}
            for owner, assign in stores:
                flag = _static(owner, assign.value) if isinstance(assign.value, cst.Name) else None
                if flag is None:
                    return None  # set to something else than a literal True / False
                paths[flag].append(owner.flow.branch_conditions(assign))
        finally:
            self._inlining.discard(test)
            _OPEN_FLAGS[0] -= 1
        if not paths[True] or not paths[False]:
            return None
        for condition in reversed(paths[True][0]):
            if all(condition in path for path in paths[True]) and all(condition.negated() in path for path in paths[False]):
                return condition
        return None

    def _dict_holders(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> list:
        """(model, scope node, name) of each plain name that holds the object `expr` holds at
        `at`, back to where it was made: `self.config` <- `__init__(self, config)` <- the
        only call `Trainer(model, config)` <- `main(config)`'s parameter..."""
        model = self.model
        key = model.binding_key(expr, at)
        entries = self.reaching(key, at) if key is not None and depth > 0 else []
        if len({id(binding) for binding, _ in entries}) != 1:
            return []
        binding = entries[0][0]
        holders = [(model, binding.scope.node, key)] if "." not in key else []
        node = binding.node
        if isinstance(node, cst.Param):
            function = model.parent(model.parent(node))
            sites = self.all_call_sites(function) if isinstance(function, cst.FunctionDef) else None
            if not sites or len(sites) != 1:
                return holders
            caller, call, bound = sites[0]
            argument = self.parameter_argument(call, function, node.name.value, bound)
            if argument is None or argument is node.default:
                return holders
            return holders + caller.flow._dict_holders(argument, call, depth - 1)
        if isinstance(node, cst.Assign) and isinstance(binding.value, (cst.Name, cst.Attribute)):
            return holders + self._dict_holders(binding.value, node, depth - 1)
        return holders

    def value_implied(self, test: cst.BaseExpression, holds: bool) -> Path:
        """The branch conditions a comparison of a name with a whole number implies through
        the values the name may hold: `if cuda_count > 1: world_size = dist.get_world_size()
        else: world_size = 1` ... where `world_size == 1` fails, the literal 1 cannot be
        what it holds, so the test `cuda_count > 1` held. Empty when no literal is ruled out."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        if isinstance(test, cst.Call):
            return self._alias_checks(test, holds)
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return ()
        left, right = test.left, test.comparisons[0].comparator
        operator = _SPACE.sub("", self.model.code(test.comparisons[0].operator))
        if isinstance(left, cst.Integer) and operator in _MIRRORED_COMPARISONS:
            left, right, operator = right, left, _MIRRORED_COMPARISONS[operator]
        if not isinstance(left, cst.Name) or not isinstance(right, cst.Integer) or operator not in _INTEGER_TESTS:
            return ()
        number = int(right.value, 0)
        entries = self.reaching(left.value, test)
        kept = []
        for binding, path in entries:
            node, value = binding.node, binding.value
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(value, cst.Integer) \
                    and _INTEGER_TESTS[operator](int(value.value, 0), number) != holds:
                continue  # this literal makes the test come out the other way
            kept.append(path)
        if not kept or len(kept) == len(entries):
            return ()
        return tuple(c for c in kept[0] if all(c in path for path in kept[1:]))

    def _alias_checks(self, test: cst.Call, holds: bool) -> Path:
        """The same wrapper check spelled on the other names of the tested object: `model =
        self.model` ... `model.module if hasattr(self.model, "module") else model` tests `model`
        too, when the function binds `model` once, to `self.model`, and never rebinds
        `self.model` (nor a plain name aliased so): both spellings hold one value throughout."""
        if not (isinstance(test.func, cst.Name) and test.func.value in ("hasattr", "isinstance") and test.args
                and test.args[0].keyword is None and not test.args[0].star):
            return ()
        scope = self.model.scope(test)
        if scope.kind != "function":
            return ()
        aliases = self._aliases_in(scope)
        if not aliases:
            return ()
        subject = _SPACE.sub("", self.model.code(test.args[0].value))
        text, head = _SPACE.sub("", self.model.code(test)), test.func.value + "("
        if subject not in aliases or not text.startswith(head + subject):
            return ()
        rest = text[len(head) + len(subject):]
        return tuple(Condition(head + other + rest, holds, 0) for other in aliases[subject])

    def _aliases_in(self, scope: "Scope") -> dict:
        """spelling -> the other spellings of its value in this function: a local bound once by
        a plain `alias = name` / `alias = self.attr` whose source the function never rebinds."""
        found = self._plain_aliases.get(id(scope.node))
        if found is not None:
            return found
        found = {}
        for name in scope.local_names:
            bindings = [b for b in self.model.bindings.get(name, ()) if b.scope is scope]
            if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign):
                continue
            node, value = bindings[0].node, bindings[0].value
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, (cst.Name, cst.Tuple)) \
                    or not self._never_rebound(scope, value):  # `model, config = self.model, self.config` too
                continue
            source = _SPACE.sub("", self.model.code(value))
            found.setdefault(source, []).append(name)
            found.setdefault(name, []).append(source)
        self._plain_aliases[id(scope.node)] = found
        return found

    def _never_rebound(self, scope: "Scope", value: Optional[cst.BaseExpression]) -> bool:
        """Whether `value`, a plain name or an attribute of the method's instance, keeps one
        value through the function: a name bound at most once in it, `self.x` never assigned in it."""
        if isinstance(value, cst.Name):
            if value.value not in scope.local_names:
                return value.value != scope.self_name and value.value in self.model.bindings
            return len([b for b in self.model.bindings.get(value.value, ()) if b.scope is scope]) <= 1
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) \
                and scope.self_name is not None and value.value.value == scope.self_name:
            key = scope.self_name + "." + value.attr.value
            return not any(_inside(self.model, b.node, scope.node) for b in self.model.bindings.get(key, ()))
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value != scope.self_name:
            # `n_gpu = args.n_gpu`: `args` bound once (a parameter), `args.n_gpu` never assigned here
            return self._never_rebound(scope, value.value) and \
                _SPACE.sub("", self.model.code(value)) not in self._assigned_attributes(scope.node)
        return False

    def _assigned_attributes(self, function: cst.CSTNode) -> set:
        """The attributes a function assigns (`args.n_gpu = 1`, `opt.x += 1`), as text without spaces."""
        from dplint.semantic import children_of

        found = self._assigned.get(id(function))
        if found is not None:
            return found
        found, stack = set(), list(children_of(function))
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            targets = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets = [node.target]
            while targets:
                target = targets.pop()
                if isinstance(target, (cst.Tuple, cst.List)):
                    targets.extend(e.value for e in target.elements)
                elif isinstance(target, cst.Attribute):
                    found.add(_SPACE.sub("", self.model.code(target)))
            stack.extend(children_of(node))
        self._assigned[id(function)] = found
        return found

    def boolean_alias(self, name: cst.Name) -> Optional[tuple[cst.BaseExpression, bool]]:
        """(test, negated) when `name` is a local of a function bound once, by a plain
        assignment, to a truth test: `ddp = bool(ws)`, `ddp = True if ws else False`, `ddp = ws`,
        `wrapped = isinstance(m, DDP)`, `multi = len(ids) > 1`; a module's global too, bound
        once in the file (`distributed = torch.cuda.device_count() > 1` at the top of a
        script, no `global distributed` rebinding it). None otherwise."""
        owner = self.model.owner_scope(name.value, self.model.scope(name))
        if owner is None or owner.kind not in ("function", "module"):
            return None
        if owner.kind == "module" and len(self.model.bindings.get(name.value, ())) != 1:
            return None  # bound in a function too (a local of the same name, or `global`)
        bindings = [b for b in self.model.bindings.get(name.value, ()) if b.scope is owner]
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign) or bindings[0].value is None:
            return None
        if len(bindings[0].node.targets) != 1 or not isinstance(bindings[0].node.targets[0].target, cst.Name):
            return None
        value, negated = bindings[0].value, False
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "bool" \
                and len(value.args) == 1 and not value.args[0].star:
            value = value.args[0].value
        elif isinstance(value, cst.IfExp) and _static(self.model, value.body) is not None \
                and _static(self.model, value.orelse) is not None:
            body, orelse = _static(self.model, value.body), _static(self.model, value.orelse)
            if body == orelse:
                return None
            value, negated = value.test, not body
        if isinstance(value, (cst.Name, cst.Attribute, cst.Comparison)):
            return value, negated
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("isinstance", "hasattr"):
            return value, negated
        if isinstance(value, cst.Call) and not value.args \
                and (self.model.qualified_name(value.func) or "") in _STATE_QUERIES:
            return value, negated  # `use_cuda = torch.cuda.is_available()`: the query itself
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
            return value, negated
        return None

    def _predicate_body(self, call: cst.Call) -> Optional[str]:
        """The test a one-line predicate of the project runs, with its parameters replaced by
        the call's arguments (names and attributes only): `is_model_distributed(model)` ->
        `isinstance(model,DistributedDataParallel)`; None for anything else."""
        if not call.args or any(arg.keyword is not None or arg.star for arg in call.args):
            return None
        if not all(isinstance(arg.value, (cst.Name, cst.Attribute)) for arg in call.args):
            return None
        if call in self._inlining:
            return None  # a predicate whose resolution asks about itself
        self._inlining.add(call)
        try:
            callee = self.callee(call)
        finally:
            self._inlining.discard(call)
        if callee is None or callee.bound or not isinstance(callee.node, cst.FunctionDef):
            return None
        from dplint.semantic import is_docstring  # semantic imports this module

        function = callee.node
        body = list(function.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        if not body or not all(isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 for line in body):
            return None
        returned = body[-1].body[0]
        params = function.params
        if not isinstance(returned, cst.Return) or returned.value is None or isinstance(params.star_arg, cst.Param) \
                or params.star_kwarg is not None or params.kwonly_params or len(params.params) != len(call.args):
            return None
        text = _SPACE.sub("", callee.model.code(returned.value))
        type_test = _type_test_text(callee.model, returned.value)
        if type_test is not None and not type_test[1]:
            text = type_test[0]  # `return type(m) in (DP, DDP)`: the isinstance test, as it is read anywhere
        # locals set before the return (`kinds = (DP, DDP)`; `return isinstance(m, kinds)`)
        for line in reversed(body[:-1]):
            assign = line.body[0]
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
                return None
            local = assign.targets[0].target.value
            text = re.sub(rf"\b{re.escape(local)}\b", lambda _: _SPACE.sub("", callee.model.code(assign.value)), text)
        for param, arg in zip(params.params, call.args):
            text = re.sub(rf"\b{re.escape(param.name.value)}\b", _SPACE.sub("", self.model.code(arg.value)), text)
        return text

    def _caller_argument(self, owner: "Scope", name: str, depth: int = 3) -> Optional[tuple]:
        """(name, scope id) of what the only call of function `owner` passes for its parameter
        `name`, when that is a plain name (followed through further single callers)."""
        function = owner.node
        if depth <= 0 or owner.kind != "function" or not isinstance(function, cst.FunctionDef):
            return None
        params = function.params
        if name not in {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}:
            return None
        sites = self.call_sites(function)
        if not sites or len(sites) != 1:
            return None
        call, bound = sites[0]
        passed = self.parameter_argument(call, function, name, bound)
        if not isinstance(passed, cst.Name):
            return None
        caller = self.model.owner_scope(passed.value, self.model.scope(call))
        if caller is None:
            return None
        further = self._caller_argument(caller, passed.value, depth - 1)
        if further is not None:
            return further
        return passed.value, id(caller.node) if caller.kind == "function" else 0

    def _stored_on_instance(self, owner: "Scope", name: str) -> Optional[tuple]:
        """(class, attribute) when method `owner` stores its local `name` as `self.attribute`."""
        if owner.kind != "function" or owner.class_scope is None:
            return None
        if self._instance_aliases is None:
            self._instance_aliases = {}
            for key, bindings in self.model.bindings.items():
                if not key.startswith("self."):
                    continue
                for binding in bindings:
                    if isinstance(binding.value, cst.Name):
                        method = next((a for a in self.model.ancestors(binding.node) if isinstance(a, cst.FunctionDef)), None)
                        self._instance_aliases.setdefault((method, binding.value.value), (binding.scope.node, key[5:]))
        found = self._instance_aliases.get((owner.node, name))
        if found is None and isinstance(owner.node, cst.FunctionDef):
            key = (id(owner.node), name)
            if key not in self._base_stores:
                self._base_stores[key] = self._stored_by_base_method(owner, name)
            found = self._base_stores[key]
        return found

    def _stored_by_base_method(self, owner: "Scope", name: str) -> Optional[tuple]:
        """(class, attribute) when method `owner` hands its local `name` to a base class's method
        (`super().setup(use_gpu)`, `Base.setup(self, use_gpu=use_gpu)`) whose body stores that
        parameter as `self.attribute` outright: the subclass's `self.attribute` is then `name`."""
        class_node = owner.class_scope.node
        self_name = _instance_parameter(self.model, owner)
        for call in (site.node for site in self.model.calls_in(owner.node)):
            if not any(isinstance(arg.value, cst.Name) and arg.value.value == name for arg in call.args):
                continue
            found = self._base_method(class_node, call, self_name)
            if found is None:
                continue
            base_model, method, bound = found
            for param in (*method.params.posonly_params, *method.params.params, *method.params.kwonly_params):
                passed = self.parameter_argument(call, method, param.name.value, bound)
                if isinstance(passed, cst.Name) and passed.value == name:
                    attribute = _stores_parameter(method, param.name.value)
                    if attribute is not None:
                        return class_node, attribute
        return None

    def _base_method(self, class_node: cst.ClassDef, call: cst.Call, self_name: Optional[str]) -> Optional[tuple]:
        """(model, method, bound) of the base class method `call` runs: `super().m(...)`,
        `super(Cls, self).m(...)` (bound) or `Base.m(self, ...)` (self passed explicitly)."""
        func = call.func
        if not isinstance(func, cst.Attribute) or self_name is None:
            return None
        if isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) and func.value.func.value == "super":
            bases, bound = class_node.bases, True
        elif isinstance(func.value, cst.Name) and call.args and isinstance(call.args[0].value, cst.Name) \
                and call.args[0].value.value == self_name and call.args[0].keyword is None:
            bases = [base for base in class_node.bases if isinstance(base.value, cst.Name) and base.value.value == func.value.value]
            bound = False
        else:
            return None
        for base in bases:
            found = self._class_named(base.value)
            if found is not None:
                method = class_method(found[1], func.attr.value)
                if method is not None and not _is_static(method):
                    return found[0], method, bound
        return None

    def _class_named(self, expr: cst.BaseExpression, local: bool = False) -> Optional[tuple]:
        """(model, ClassDef) of a base class named in this file or (unless `local`) imported
        from the project."""
        if not isinstance(expr, cst.Name):
            return None
        if expr.value in self.model.classes:
            return self.model, self.model.classes[expr.value]
        if local:
            return None
        resolved = self.resolve_import(expr.value)
        if resolved is not None and isinstance(resolved[1], cst.ClassDef):
            return resolved
        return None

    # ------------------------------------------------------------------------ values
    def values_at(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None,
                  path: Path = (), _context: tuple = (), _depth: int = _MAX_DEPTH) -> list[Value]:
        if self._active == 0:
            self._steps = 0
        self._active += 1
        try:
            self._steps += 1
            if self._steps > _MAX_STEPS:  # a question that fans out too far: cannot tell
                return [Value(self.model, None, path)]
            return self._values_at(expr, at, path, _context, _depth)
        finally:
            self._active -= 1

    def _values_at(self, expr, at, path: Path, _context: tuple, _depth: int) -> list[Value]:
        from dplint.semantic import peel_self_returning

        model = self.model
        at = expr if at is None else at
        if expr is None or _depth <= 0:
            return [Value(model, None, path)]
        expr = peel_self_returning(expr)
        if isinstance(expr, cst.IfExp):
            truth = _static(model, expr.test, at)
            if truth is not None:
                return self.values_at(expr.body if truth else expr.orelse, at, path, _context, _depth - 1)
            condition = self.condition(expr.test)
            return [
                *self.values_at(expr.body, at, _join(path, (condition,)), _context, _depth - 1),
                *self.values_at(expr.orelse, at, _join(path, (condition.negated(),)), _context, _depth - 1),
            ]
        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return [Value(model, expr, path)]
        key = model.binding_key(expr, at)
        if key is None:
            if isinstance(expr, cst.Call):
                return self._call_values(expr, path, _context, _depth)
            return [Value(model, expr, path)]
        entries = self._reaching(key, at)
        if not entries:
            if isinstance(expr, cst.Name) and expr.value not in model.bindings:
                return [Value(model, expr, path)]  # a builtin or a name from a star import
            return [Value(model, None, path)]
        values: list[Value] = []
        for binding, conditions in entries:
            if _context and self._dead_in_call(binding, _context):
                continue
            joined = _join(path, conditions)
            if id(binding) in self._inherited_of:
                values.extend(self._inherited_values(self._inherited_of[id(binding)], key, joined, _depth))
                continue
            owner = self._binding_model(binding)
            if owner is not model:  # a base class's method that `self.m()` ran bound it: read it there
                values.extend(owner.flow._binding_values(key, binding, joined, (), _depth) if owner is not None
                              else [Value(model, None, joined)])
                continue
            values.extend(self._binding_values(key, binding, joined, _context, _depth))
        return values

    def _binding_model(self, binding: "Binding") -> Optional["SemanticModel"]:
        """The model whose tree holds `binding`: this one, or, for a binding that a walk took
        from a method of another file (`self.resume()` of a project base class), that file's
        model (None when it is no longer loaded). Its values are read in its own file's flow."""
        from dplint.project import owns

        if binding.node is None or owns(self.model, binding.node) or self.model.project is None:
            return self.model
        return self.model.project.model_owning(binding.node)

    def _binding_values(self, key: str, binding: "Binding", joined: Path, _context: tuple, _depth: int) -> list[Value]:
        """What one binding of `key` (of this file) gives, on the path `joined`."""
        model = self.model
        if binding.value is not None:
            found = self.values_at(binding.value, binding.node, joined, _context, _depth - 1)
        elif isinstance(binding.node, cst.Param):
            found = self._parameter_values(binding, joined, _context, _depth)
        elif isinstance(binding.node, (cst.Assign, cst.AnnAssign)) and isinstance(
            binding.node.value, cst.Call
        ):
            found = self._unpacked_values(binding, joined, _context, _depth)
        elif isinstance(binding.node, cst.ImportFrom) and model.project is not None:
            found = self._imported_values(key, joined, _depth)
        else:
            found = [Value(model, None, joined)]
        for value in found:
            if value.binding is None:
                value.binding = binding
        return found

    def value_expressions(self, expr, at=None) -> list[cst.BaseExpression]:
        """The known expressions (of this file) `expr` may hold; [] when any is unknown."""
        values = self.values_at(expr, at)
        if any(not v.known or v.model is not self.model for v in values):
            return []
        return [v.expr for v in values]

    def _dead_in_call(self, binding: "Binding", context: tuple) -> bool:
        """Whether the call being followed never reaches `binding`: it sits under an `if` of
        that function whose test this call's arguments decide against it (`if len(gpu_ids) >
        0: net = DataParallel(net, gpu_ids)` in `init_net(net, gpu_ids=[])` called without
        `gpu_ids`). Only tests on the function's own names whose every value is a literal."""
        function = context[0][0]
        node = binding.node
        if isinstance(node, cst.Param) or _enclosing_function(self.model, node) is not function:
            return False
        child = node
        for ancestor in self.model.ancestors(node):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                truth = self._truth_in_call(ancestor.test, context)
                if truth is not None and truth != (child is ancestor.body):
                    return True
            child = ancestor
        return False

    def _truth_in_call(self, test: cst.BaseExpression, context: tuple) -> Optional[bool]:
        """The truth of `x`, `not x`, `len(x) > 1`, `x >= 2` (`x` a name) when every value the
        followed call gives `x` is a literal (a list or tuple counts by its length); else None."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._truth_in_call(test.expression, context)
            return None if inner is None else not inner
        if isinstance(test, cst.Name):
            values = self._literals_in_call(test, context, sized=False)
            answers = {bool(v) for v in values} if values is not None else set()
            return answers.pop() if len(answers) == 1 else None
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        operators = {cst.GreaterThan: ">", cst.GreaterThanEqual: ">=", cst.LessThan: "<",
                     cst.LessThanEqual: "<=", cst.Equal: "==", cst.NotEqual: "!="}
        operator = operators.get(type(target.operator))
        if operator is None or not isinstance(target.comparator, cst.Integer):
            return None
        left = test.left
        if isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "len" \
                and len(left.args) == 1 and isinstance(left.args[0].value, cst.Name):
            values = self._literals_in_call(left.args[0].value, context, sized=True)
        elif isinstance(left, cst.Name):
            values = self._literals_in_call(left, context, sized=False)
            if values is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
        else:
            return None
        if not values:
            return None
        bound = int(target.comparator.value.replace("_", ""), 0)
        compare = {">": lambda a: a > bound, ">=": lambda a: a >= bound, "<": lambda a: a < bound,
                   "<=": lambda a: a <= bound, "==": lambda a: a == bound, "!=": lambda a: a != bound}[operator]
        answers = {compare(v) for v in values}
        return answers.pop() if len(answers) == 1 else None

    def _literals_in_call(self, name: cst.Name, context: tuple, sized: bool) -> Optional[list]:
        """Every value `name` holds in the followed call as a Python literal (a list's or
        tuple's length when `sized`: only a default, `gpu_ids=[]` or `kwargs.get("gpu_ids",
        [])`, which nothing appends to before the call); None when any is not a literal."""
        from dplint.semantic import literal_value

        found = []
        for value in self.values_at(name, name, (), context, _MAX_DEPTH // 2):
            expr = value.expr
            if sized and isinstance(expr, (cst.List, cst.Tuple)) and not any(
                    isinstance(e, cst.StarredElement) for e in expr.elements) and _default_display(value.model, expr):
                found.append(len(expr.elements))
                continue
            if sized or expr is None:
                return None
            try:
                found.append(literal_value(expr))
            except ValueError:
                return None
        return found

    def _keyword_of_kwargs(self, call: cst.Call, path: Path, context: tuple, depth: int) -> Optional[list[Value]]:
        """`kwargs.get("gpu_ids", [])` on a function's `**kwargs`, in a followed call of that
        function: the keyword argument the call passes, else the default (None: cannot tell)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "get" and isinstance(func.value, cst.Name)
                and call.args and isinstance(call.args[0].value, cst.SimpleString) and len(call.args) <= 2):
            return None
        entries = self._reaching(func.value.value, call)  # the parameter, once per path
        if not entries or any(b is not entries[0][0] for b, _ in entries) or not isinstance(entries[0][0].node, cst.Param):
            return None
        param = entries[0][0].node
        function = self.model.parent(self.model.parent(param))
        if not isinstance(function, cst.FunctionDef) or function.params.star_kwarg is not param:
            return None
        frame = next((f for f in context if f[0] is function), None)
        if frame is None:
            return None
        _, outer_call, caller, _bound = frame
        rest = context[context.index(frame) + 1:]
        if any(arg.star == "**" for arg in outer_call.args):
            return None
        keyword = call.args[0].value.evaluated_value
        for arg in outer_call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return caller.flow.values_at(arg.value, outer_call, path, rest, depth - 1)
        if len(call.args) == 2:
            return self.values_at(call.args[1].value, call, path, context, depth - 1)
        return None

    def _call_values(self, call: cst.Call, path: Path, context: tuple, depth: int) -> list[Value]:
        if context:
            from_kwargs = self._keyword_of_kwargs(call, path, context, depth)
            if from_kwargs is not None:
                return from_kwargs
        callee = self.callee(call)
        if callee is None or isinstance(callee.node, cst.ClassDef):
            return [Value(self.model, call, path)]
        # A value's conditions are in the terms of the file that asked for it: a callee of this
        # file hands back conditions of this file even for a value made in another (a caller's
        # wrapper, passed in and returned by `unwrap(m)`: `m.module if wrapped else m`).
        return [
            Value(v.model, v.expr, _join(path, v.conditions if v.model is self.model or callee.model is self.model
                                         else _portable(v.conditions)), v.binding)
            for v in callee.model.flow.returned_values(callee, call, self.model, context, depth - 1)
        ]

    def returned_values(self, callee: Callee, call: Optional[cst.Call], caller: Optional["SemanticModel"] = None,
                        context: tuple = (), depth: int = _MAX_DEPTH) -> list[Value]:
        """What a call of a function returns (its generator object for a generator)."""
        function = callee.function
        if not isinstance(callee.node, cst.FunctionDef) or function is None:
            return [Value(caller or self.model, call, ())]
        if self.is_generator(function):
            return [Value(caller or self.model, call, ())]
        returns = self.own_returns(function)
        if not returns:
            return [Value(self.model, None, ())]
        inner_context = ((function, call, caller or self.model, callee.bound), *context) if call is not None else context
        values: list[Value] = []
        for statement in returns:
            values.extend(self.values_at(statement.value, statement, self._passed_early_exits(statement), inner_context, depth))
        return values

    def _passed_early_exits(self, statement: cst.CSTNode) -> Path:
        """The tests that failed for `statement` to run after an earlier `if <test>: return ...`
        (no `else`) of its function: `if self.kind == "light": return Light()` ... `return
        DataParallel(heavy)` returns the wrapper only where `self.kind == "light"` failed."""
        found = []
        child = statement
        for ancestor in self.model.ancestors(statement):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
            if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
                for earlier in ancestor.body:
                    if earlier is child:
                        break
                    if isinstance(earlier, cst.If) and earlier.orelse is None and _ends_in_exit(earlier.body, self.model) \
                            and _static(self.model, earlier.test) is None:
                        found.append(self.condition(earlier.test).negated())
            child = ancestor
        return tuple(found)

    def _parameter_values(self, binding: "Binding", path: Path, context: tuple, depth: int) -> list[Value]:
        param = binding.node
        function = self.model.parent(self.model.parent(param))
        if not isinstance(function, cst.FunctionDef):
            return [Value(self.model, None, path)]
        for frame_function, call, caller, bound in context:
            if frame_function is function:
                rest = context[1:]
                argument = caller.flow.parameter_argument(call, function, param.name.value, bound)
                if argument is None:
                    return [Value(self.model, None, path)]
                argument_model = self.model if argument is param.default else caller
                return argument_model.flow.values_at(argument, call if argument_model is caller else param, path, rest, depth - 1)
        # Callers in other files are looked up only for a function this file never calls: a
        # parameter question is asked for every rule, and the lookup may parse other files.
        own = self.call_sites(function)
        sites = [(self.model, call, bound) for call, bound in own] if own else self.all_call_sites(function)
        if not sites or len(sites) != 1:
            return [Value(self.model, None, path)]  # no caller, or callers that may differ: say nothing
        (caller, call, bound) = sites[0]
        argument = self.parameter_argument(call, function, param.name.value, bound)
        if argument is None:
            return [Value(self.model, None, path)]
        if argument is param.default or caller is self.model:
            where = param if argument is param.default else call
            return self.values_at(argument, where, path, context, depth - 1)
        # The only caller is in another file: its values, with its own conditions.
        return [
            Value(v.model, v.expr, _join(path, v.conditions if v.model is self.model else _portable(v.conditions)), v.binding)
            for v in caller.flow.values_at(argument, call, (), (), depth - 1)
        ]

    def values_per_caller(self, param: "Binding") -> Optional[list[list[Value]]]:
        """For a parameter's binding: what each call of its function passes (the argument's
        values, or its default's), one list per call site in source order; None when the
        function escapes, has no caller, or a call's star-args hide the argument. Rules that
        need every caller to agree (all wrappers, all inner models) judge the lists."""
        node = param.node
        function = self.model.parent(self.model.parent(node)) if isinstance(node, cst.Param) else None
        if not isinstance(function, cst.FunctionDef):
            return None
        sites = self.all_call_sites(function)
        if not sites:
            return None
        per_caller = []
        for caller, call, bound in sites:
            argument = self.parameter_argument(call, function, node.name.value, bound)
            if argument is None:
                return None
            if argument is node.default:
                per_caller.append(self.values_at(argument, node))
            else:
                per_caller.append(caller.flow.values_at(argument, call))
        return per_caller

    def _unpacked_values(self, binding: "Binding", path: Path, context: tuple, depth: int) -> list[Value]:
        """`train_dl, val_dl = make_loaders(...)`: the element of each returned tuple."""
        node = binding.node
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        index = _element_index(self.model, targets, binding.key)
        if index is None:
            return [Value(self.model, None, path)]
        values = []
        for value in self.values_at(node.value, node, path, context, depth - 1):
            expr = value.expr
            if isinstance(expr, (cst.Tuple, cst.List)) and len(expr.elements) > index and not any(
                isinstance(e, cst.StarredElement) for e in expr.elements
            ):
                values.extend(value.model.flow.values_at(expr.elements[index].value, expr, value.conditions, (), depth - 1))
            else:
                values.append(Value(self.model, None, path))
        return values

    def _imported_values(self, key: str, path: Path, depth: int) -> list[Value]:
        resolved = self.resolve_import(key)
        if resolved is None:
            return [Value(self.model, None, path)]
        other, node = resolved
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            return other.flow.values_at(node.value, node, (), (), depth - 1)
        return [Value(other, None, path)]

    def resolve_import(self, name: str) -> Optional[tuple["SemanticModel", cst.CSTNode]]:
        """The other file's model and top-level node an imported name denotes (needs a
        project), imported by name or by a star import of a project module."""
        project = self.model.project
        if project is None:
            return None
        qualified = self.model.imports.get(name) or self._star_imported_name(name)
        if qualified is None:
            return None
        try:
            return project.resolve(qualified, self.model)
        except Exception:  # a project that cannot answer is the same as no project
            return None

    def _star_imported_name(self, name: str) -> Optional[str]:
        """`tools.keep` for a `keep` that this file binds nowhere, after `from tools import *`
        of a project module that exports it (`Project.star_imported`)."""
        project = self.model.project
        if project is None or not (self.model.star_imports or self.model.relative_star_imports):
            return None
        try:
            return project.star_imported(name, self.model)
        except Exception:  # a project that cannot answer is the same as no project
            return None

    def _star_imported_callee(self, name: str) -> Optional[Callee]:
        """The project function or class that a call of a star-imported name runs."""
        if self._star_imported_name(name) is None:
            return None
        resolved = self.resolve_import(name)
        if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
            return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        return None

    # ------------------------------------------------------------------- truthiness
    def truth(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None, path: Path = ()) -> Optional[bool]:
        """Whether `expr` is truthy on `path` (None: unknown)."""
        from dplint.semantic import literal_value

        if expr is None:
            return None
        at = expr if at is None else at
        condition = self.condition(expr)
        for known in path:
            if (known.test, known.scope) == (condition.test, condition.scope):
                return known.holds == condition.holds
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.truth(expr.expression, at, path)
            return None if inner is None else not inner
        if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
            target = expr.comparisons[0]
            if isinstance(target.operator, (cst.Is, cst.IsNot)) and _is_none(target.comparator):
                answers = set()
                for value in self.values_at(expr.left, at):
                    if not consistent(value.conditions, path):
                        continue
                    answers.add(_none_ness(value.expr))
                if len(answers) != 1 or None in answers:
                    return None
                (is_none,) = answers
                return is_none if isinstance(target.operator, cst.Is) else not is_none
            return None
        if isinstance(expr, cst.BooleanOperation):
            left, right = self.truth(expr.left, at, path), self.truth(expr.right, at, path)
            if isinstance(expr.operator, cst.And):
                return False if False in (left, right) else (True if left is right is True else None)
            return True if True in (left, right) else (False if left is right is False else None)
        answers = set()
        for value in self.values_at(expr, at):
            if not consistent(value.conditions, path):
                continue
            if value.expr is None or value.model is not self.model and not isinstance(value.expr, cst.Name):
                return None
            if value.expr is expr:
                try:
                    answers.add(bool(literal_value(value.expr)))
                except ValueError:
                    return None
                continue
            # The value's own truth, on this path (another file's conditions are its own).
            on_path = _join(path, value.conditions) if value.model is self.model else value.conditions
            answers.add(value.model.flow.truth(value.expr, value.expr, on_path))
        if len(answers) != 1:
            return None
        return answers.pop()

    # --------------------------------------------------------------------- wrappers
    def wrappings_at(self, expr, at=None) -> list[tuple[Optional["Wrapping"], Path]]:
        found = []
        for value in self.values_at(expr, at):
            # What a wrapper is has one answer (`dplint.wrapper_classes`): torch's, a package's,
            # a project subclass of one, in this file or another.
            wrapping = wrapping_built_by(value.model, value.expr) if value.known else None
            found.append((wrapping, value.conditions))
        return found

    def wrapped_on_some_path(self, expr, at=None) -> Optional["Wrapping"]:
        return next((w for w, _ in self.wrappings_at(expr, at) if w is not None), None)

    def wrapped_on_every_path(self, expr, at=None) -> bool:
        found = self.wrappings_at(expr, at)
        return bool(found) and all(w is not None for w, _ in found)

    # ------------------------------------------------------------------- functions
    def callee(self, call: cst.Call, local: bool = False) -> Optional[Callee]:
        """The function or class of this file (or, unless `local`, of the project) that
        `call` runs (memoised: rules ask about the same calls again and again)."""
        key = (id(call), local)
        if key not in self._callees:
            self._callees[key] = self._callee(call, local)
        return self._callees[key]

    def _callee(self, call: cst.Call, local: bool = False) -> Optional[Callee]:
        model = self.model
        func = call.func
        if isinstance(func, cst.Name):
            name = func.value
            if name not in model.functions and name not in model.classes and (local or name not in model.imports):
                aliased = self._aliased_callees(name, call, local)
                if aliased:
                    return aliased[0] if len(aliased) == 1 else None  # several: `callees` lists them
                return None if local else self._star_imported_callee(name)
            return self._named_callee(name, call, local)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            scope = model.scope(call)
            if _instance_parameter(model, scope) == func.value.value:
                found = self._method_of_class(model, scope.class_scope.node, func.attr.value, local)
                if found is not None and not _is_static(found[1]):
                    return Callee(found[0], found[1], True)
                return None
        if isinstance(func, cst.Attribute) and not local and model.project is not None:
            # `data_utils.build_loader(...)` after `from . import data_utils` / `import data_utils`.
            from dplint.semantic import dotted_name

            dotted = dotted_name(func)
            head = dotted.partition(".")[0] if dotted else None
            if head in model.imports and head not in model.functions and head not in model.classes:
                qualified = model.imports[head] + dotted[len(head):]
                if not qualified.startswith("torch."):
                    try:
                        resolved = model.project.resolve(qualified, model)
                    except Exception:
                        resolved = None
                    if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
                        return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        if isinstance(func, cst.Attribute) and (
            func.attr.value in self._method_names() or not local and self._made_from_import(func.value)
        ):
            # `trainer.fit()` where `trainer = Trainer(...)`, a class of this file (or, unless
            # `local`, of another project file: `from trainer import Trainer`).
            values = self.values_at(func.value, call)
            if len(values) == 1 and isinstance(values[0].expr, cst.Call) and values[0].model is model:
                made = self.callee(values[0].expr, local=local)
                if made is not None and isinstance(made.node, cst.ClassDef):
                    method = class_method(made.node, func.attr.value)
                    if method is not None and not _is_static(method):
                        return Callee(made.model, method, True)
        return None

    def _named_callee(self, name: str, at: cst.CSTNode, local: bool) -> Optional[Callee]:
        """The function or class of this file (or, unless `local`, imported from the project)
        that `name` denotes at `at`: one definition only."""
        model = self.model
        reaching = self.reaching(name, at)
        if len({id(binding) for binding, _ in reaching}) != 1:
            return None  # defined twice (`if fast: def step()... else: def step()...`)
        for binding, _ in reaching[:1]:
            if isinstance(binding.node, cst.FunctionDef):
                return Callee(model, binding.node, _is_method(model, binding.node))
            if isinstance(binding.node, cst.ClassDef):
                return Callee(model, binding.node, True)
            if isinstance(binding.node, cst.ImportFrom) and not local:
                resolved = self.resolve_import(name)
                if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
                    return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
            return None
        return None

    def callees(self, call: cst.Call, local: bool = False) -> list[Callee]:
        """Every function or class `call` may run: `callee`'s one, or each class a local alias
        may hold (`Exp = LongTerm` / `Exp = Anomaly` down an if/elif chain, then `Exp(args)`),
        for a rule that follows each the way it follows each of several values."""
        one = self.callee(call, local)
        if one is not None:
            return [one]
        if isinstance(call.func, cst.Name):
            return self._aliased_callees(call.func.value, call, local) or []
        return []

    def _aliased_callees(self, name: str, at: cst.CSTNode, local: bool, depth: int = 3) -> Optional[list[Callee]]:
        """The definitions a local alias may hold where it is called (`Exp = Experiment`, one
        per branch of an if/elif chain, `make = models.build`): None unless every binding
        that reaches `at` names a function or class of the project (or, with `local`, of
        this file)."""
        model = self.model
        if depth <= 0 or not any(isinstance(b.value, (cst.Name, cst.Attribute)) for b in model.bindings.get(name, ())):
            return None  # a cheap test first: most called local names hold no definition
        reaching = self.reaching(name, at)
        if not reaching:
            return None
        found: list[Callee] = []
        for binding, _ in reaching:
            value = binding.value
            if not isinstance(binding.node, (cst.Assign, cst.AnnAssign)) or not isinstance(value, (cst.Name, cst.Attribute)):
                return None
            if isinstance(value, cst.Name):
                other = value.value
                if other in model.functions or other in model.classes or (not local and other in model.imports):
                    denoted = [self._named_callee(other, value, local)]
                else:
                    denoted = self._aliased_callees(other, value, local, depth - 1) or [None]
            else:
                denoted = [None if local else self._module_attribute_callee(value)]
            for callee in denoted:
                if callee is None:
                    return None
                if not any(c.node is callee.node for c in found):
                    found.append(callee)
        return found

    def _module_attribute_callee(self, expr: cst.Attribute) -> Optional[Callee]:
        """`models.Experiment` after `import models` / `from . import models`: that project
        module's function or class."""
        from dplint.semantic import dotted_name

        model = self.model
        dotted = dotted_name(expr)
        head = dotted.partition(".")[0] if dotted else None
        if model.project is None or head not in model.imports or head in model.functions or head in model.classes:
            return None
        qualified = model.imports[head] + dotted[len(head):]
        if qualified.startswith("torch."):
            return None
        try:
            resolved = model.project.resolve(qualified, model)
        except Exception:
            return None
        if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
            return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        return None

    def _method_of_class(self, model: "SemanticModel", class_node: cst.ClassDef, name: str, local: bool,
                         depth: int = 3) -> Optional[tuple["SemanticModel", cst.FunctionDef]]:
        """(model, method) that `self.name(...)` runs in `class_node`: its own, else the first
        base class of the project that defines it (`self.save_network(...)` in a subclass of
        `BaseModel`)."""
        method = class_method(class_node, name)
        if method is not None:
            return model, method
        if depth <= 0:
            return None
        for base in class_node.bases:
            found = model.flow._class_named(base.value, local)
            if found is not None and found[1] is not class_node:
                inherited = self._method_of_class(found[0], found[1], name, local, depth - 1)
                if inherited is not None:
                    return inherited
        return None

    def _made_from_import(self, expr: cst.BaseExpression) -> bool:
        """A cheap test before following values: a name this file binds to a call of an
        imported name (`trainer = Trainer(...)` after `from trainer import Trainer`)."""
        from dplint.semantic import dotted_name

        if not isinstance(expr, cst.Name) or self.model.project is None:
            return False
        for binding in self.model.bindings.get(expr.value, ()):
            if isinstance(binding.value, cst.Call):
                dotted = dotted_name(binding.value.func)
                head = dotted.partition(".")[0] if dotted else None
                if head in self.model.imports and not self.model.imports[head].startswith("torch"):
                    return True
        return False

    def _method_names(self) -> set:
        if self._methods is None:
            self._methods = {
                statement.name.value
                for node in self.model.classes.values()
                for statement in (node.body.body if isinstance(node.body, cst.IndentedBlock) else ())
                if isinstance(statement, cst.FunctionDef)
            }
        return self._methods

    def call_sites(self, function: cst.CSTNode) -> Optional[list[tuple[cst.Call, bool]]]:
        """(call, bound) for every call of a same-file function or class (its constructor);
        None when it may be called from where we can't see."""
        if self._call_sites is None:
            self._call_sites = {}  # a question asked while collecting sees no call sites, not a second collection
            self._call_sites = self._collect_call_sites()
        return self._call_sites.get(function)

    def all_call_sites(self, function: cst.FunctionDef) -> Optional[list[tuple["SemanticModel", cst.Call, bool]]]:
        """(model, call, bound) for every call of a function (or of a class's constructor,
        `function` being its `__init__`) of this file that the project shows: this file's and,
        when the file is checked as part of a project, other files' (`from engine import
        train_one_epoch`, `Trainer(model, loader)` made in `main.py`); see
        `Project.callers`. None when some caller may be unseen, or there is none."""
        if self._call_sites is None:
            self._call_sites = {}  # as in call_sites: no re-entrant collection
            self._call_sites = self._collect_call_sites()
        if function in self._escaping:
            return None
        if function not in self._call_sites:  # no call here: is it passed around here?
            owner_class = self.model.parent(self.model.parent(function)) if _is_method(self.model, function) else None
            if _escapes(self.model, function, function.name.value, owner_class, set()):
                return None
        sites = [(self.model, call, bound) for call, bound in self._call_sites.get(function, ())]
        project = self.model.project
        if project is not None:
            try:
                others = project.callers(self.model, function)
            except Exception:  # a project that cannot answer: callers unknown
                others = None
            if others is None:
                # a base class's constructor, which `Project.callers` does not follow through
                # the subclasses (`class Trainer(BaseTrainer)` is a use it cannot call): their
                # `super().__init__(...)` calls, when every subclass makes one
                others = self._subclass_constructor_calls(function)
            if others is None:
                return None
            sites.extend(others)
        return sites or None

    def _subclass_constructor_calls(self, function: cst.FunctionDef) -> Optional[list]:
        """(model, call, bound) of each `super().__init__(...)` / `Base.__init__(self, ...)`
        that the project's subclasses (other files, named by their base's plain name) make of
        the class whose `__init__` is `function`; None when there is none, when a subclass
        has no `__init__` of its own (its callers run this one: not followed), or when its
        `__init__` does not call this one exactly once."""
        if function in self._subclass_calls:
            return self._subclass_calls[function]
        self._subclass_calls[function] = None  # a subclass's `__init__` that leads back here: unknown
        self._subclass_calls[function] = found = self._find_subclass_constructor_calls(function)
        return found

    def _find_subclass_constructor_calls(self, function: cst.FunctionDef) -> Optional[list]:
        import os

        class_node = self.model.parent(self.model.parent(function))
        project = self.model.project
        if not isinstance(class_node, cst.ClassDef) or self.model.classes.get(class_node.name.value) is not class_node \
                or function.name.value != "__init__" or not hasattr(project, "project_files"):
            return None
        subclassing = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\([^)]*\b" + re.escape(class_node.name.value) + r"\b", re.M)
        own = os.path.abspath(self.model.path)
        found: list = []
        for path in project.project_files(own):
            if os.path.abspath(path) == own:
                continue
            text = project.file_text(path)
            if not text or class_node.name.value not in text or not subclassing.search(text):
                continue
            other = project.model_for(path)
            if other is None:
                continue
            for subclass in list(other.classes.values()):
                if not any((other.flow._class_named(base.value) or (None, None))[1] is class_node for base in subclass.bases):
                    continue
                constructor = class_method(subclass, "__init__")
                if constructor is None:
                    return None
                calls = [call for call in other.flow._own_calls(constructor) if _calls_base_constructor(call, class_node)]
                if len(calls) != 1:
                    return None
                bound = not (isinstance(calls[0].func, cst.Attribute) and isinstance(calls[0].func.value, cst.Name))
                found.append((other, calls[0], bound))
        return found or None

    def _collect_call_sites(self) -> dict:
        model = self.model
        sites: dict = {}
        for site in model.calls:
            callee = self.callee(site.node, local=True)
            if callee is None or callee.model is not model:
                continue
            target = callee.node
            if isinstance(target, cst.ClassDef):
                target = callee.function
                if target is None:
                    continue
            sites.setdefault(target, []).append((site.node, callee.bound))
        # Escapes: a name used other than as the callee of a call (a callback, an export).
        result = {}
        for target, calls in sites.items():
            name = target.name.value
            owner_class = model.parent(model.parent(target)) if _is_method(model, target) else None
            if _escapes(model, target, name, owner_class, {c for c, _ in calls}):
                self._escaping.add(target)
                continue
            result[target] = calls
        return result

    def parameter_argument(self, call: cst.Call, function: cst.FunctionDef, name: str, bound: bool) -> Optional[cst.BaseExpression]:
        """The expression a call passes for parameter `name` (or its default); None if unclear."""
        params = function.params
        positional = [*params.posonly_params, *params.params]
        if bound and positional:
            positional = positional[1:]
        if any(arg.star for arg in call.args):
            return None
        index = 0
        for arg in call.args:
            if arg.keyword is None:
                if index < len(positional) and positional[index].name.value == name:
                    return arg.value
                index += 1
            elif arg.keyword.value == name:
                return arg.value
        for param in (*positional, *params.kwonly_params):
            if param.name.value == name:
                return param.default
        return None

    def is_generator(self, function: cst.FunctionDef) -> bool:
        return function in self.model.generators

    def own_returns(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own return statements; empty when one returns nothing (None)."""
        found = self.model.returns.get(function, [])
        return found if all(statement.value is not None for statement in found) else []


# --------------------------------------------------------------------------- helpers
# Stands for "what `self.x` held when the method was called" in a method's summary.
_PASSED = object()


@dataclass(eq=False)
class _MethodCall:
    """An index entry of a walk: `self.m(...)` here runs `method` (of `model`'s class scope
    `owner`), which binds `key`: its summary replaces the state."""
    model: "SemanticModel"
    owner: "Scope"
    method: cst.FunctionDef
    key: str
    derived: tuple

    def apply(self, state: list, ctx: Path) -> list:
        summary = self.model.flow.method_summary(self.owner, self.key, self.method, self.derived)
        if summary is None:
            return state
        out: list = []
        for binding, conditions in summary:
            entries = [(b, _join(c, conditions)) for b, c in state] if binding is _PASSED \
                else [(binding, _join(ctx, conditions))]
            out.extend(e for e in entries if e not in out)
        return out


def _calls_base_constructor(call: cst.Call, base: cst.ClassDef) -> bool:
    """`super().__init__(...)`, `super(Sub, self).__init__(...)` or `Base.__init__(self, ...)`."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "__init__":
        return False
    if isinstance(func.value, cst.Call):
        return isinstance(func.value.func, cst.Name) and func.value.func.value == "super"
    return isinstance(func.value, cst.Name) and func.value.value == base.name.value


def _owns(model: "SemanticModel", binding) -> bool:
    return any(b is binding for b in model.bindings.get(binding.key, ()))


def _method_on_instance(derived: tuple, name: str) -> Optional[tuple]:
    """(model, ClassDef, FunctionDef) of the method `name` that an instance of the class
    `derived` (model, ClassDef) runs: its own, else its nearest project base's."""
    model, class_node = derived
    method = class_method(class_node, name)
    if method is not None:
        return model, class_node, method
    for base_model, base_class in model.flow.project_bases(class_node):
        method = class_method(base_class, name)
        if method is not None:
            return base_model, base_class, method
    return None


def _as_subclass_conditions(conditions: Path, base_class: cst.ClassDef, subclass: cst.ClassDef) -> Path:
    """A base class's tests on `self.x` (one test in all its methods) are the same tests in a
    subclass's methods: the same instance."""
    return tuple(Condition(c.test, c.holds, id(subclass)) if c.scope == id(base_class) else c for c in conditions)


def _stores_parameter(method: cst.FunctionDef, param: str) -> Optional[str]:
    """The attribute a method stores its parameter in outright (`self.x = param`, a statement
    of its body, not under a branch); None when it does not."""
    positional = [*method.params.posonly_params, *method.params.params]
    if not positional or not isinstance(method.body, cst.IndentedBlock):
        return None
    self_name = positional[0].name.value
    for statement in method.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Name) or small.value.value != param:
                continue
            for target in small.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == self_name:
                    return t.attr.value
    return None


def _static(model: "SemanticModel", test: cst.BaseExpression, at=None) -> Optional[bool]:
    from dplint.semantic import literal_value, names_a_definition

    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.Name):
        # A constant: a name the file binds once, to a literal (`use_cuda = True`), or to a
        # function or class (`not evaluate` with `def evaluate(...)` is always False).
        if names_a_definition(model, test.value):
            return True
        bindings = model.bindings.get(test.value, ())
        if len(bindings) == 1 and bindings[0].value is not None and isinstance(bindings[0].node, cst.Assign):
            test = bindings[0].value
        else:
            return None
    try:
        return bool(literal_value(test))
    except ValueError:
        return None


# Argument-free queries of torch's state, the same answer wherever asked in one run.
_STATE_QUERIES = {"torch.cuda.is_available", "torch.distributed.is_available", "torch.distributed.is_initialized"}
_NEGATED_COMPARISONS = {"<=": ">", ">=": "<", "!=": "==", "isnot": "is", "notin": "in"}
_INTEGER_TESTS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
    "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
}
_MIRRORED_COMPARISONS = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


def _entry_stores(model: "SemanticModel", scope_node: cst.CSTNode, name: str, key: str) -> list:
    """The `name["key"] = ...` statements of a scope (not of the functions inside it)."""
    found = []
    stack = [scope_node.body] if isinstance(scope_node, (cst.FunctionDef, cst.ClassDef)) else [scope_node]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                store = target.target
                if isinstance(store, cst.Subscript) and isinstance(store.value, cst.Name) and store.value.value == name \
                        and len(store.slice) == 1 and isinstance(store.slice[0].slice, cst.Index) \
                        and isinstance(store.slice[0].slice.value, cst.SimpleString) \
                        and store.slice[0].slice.value.evaluated_value == key:
                    found.append(node)
            continue
        stack.extend(model.children(node))
    return found


def catches_attribute_error(handler: cst.ExceptHandler) -> bool:
    """`except:`, `except AttributeError`, `except Exception as e`, `except (KeyError,
    AttributeError)`: a handler that an AttributeError raised in the `try` reaches."""
    kinds = handler.type
    if kinds is None:
        return True
    names = kinds.elements if isinstance(kinds, cst.Tuple) else [kinds]
    for item in names:
        value = item.value if isinstance(item, cst.Element) else item
        if isinstance(value, cst.Attribute):
            value = value.attr
        if isinstance(value, cst.Name) and value.value in ("AttributeError", "Exception", "BaseException"):
            return True
    return False


def _type_test_text(model: "SemanticModel", test: cst.BaseExpression) -> Optional[tuple[str, bool]]:
    """(text, negated) of a test of an object's exact class spelled as the `isinstance` test it
    stands for: `type(m) is DDP` and `type(m) == DDP` are `isinstance(m,DDP)`, `type(m) in (DP,
    DDP)` is `isinstance(m,(DP,DDP))`, `is not` / `!=` / `not in` their negations (exact class
    against isinstance differs only for a subclass of the class tested); None for anything else."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    left, target = test.left, test.comparisons[0]
    if not (isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "type"
            and len(left.args) == 1 and left.args[0].keyword is None and not left.args[0].star):
        return None
    operator = _SPACE.sub("", model.code(target.operator))
    classes = target.comparator
    if operator in ("in", "notin") and not (isinstance(classes, cst.Tuple) and classes.elements):
        return None  # `type(m) in kinds`: a name whose tuple we do not look up
    if operator not in ("is", "isnot", "==", "!=", "in", "notin"):
        return None
    text = _SPACE.sub("", model.code(classes))
    if isinstance(classes, cst.Tuple) and not classes.lpar:
        text = "(" + text + ")"
    return "isinstance(" + _SPACE.sub("", model.code(left.args[0].value)) + "," + text + ")", operator in ("isnot", "!=", "notin")


def _comparison_text(model: "SemanticModel", test: cst.BaseExpression) -> Optional[tuple[str, bool]]:
    """(text, negated) of a one-operator comparison in one spelling: `a <= b` is `not a > b`,
    `1 < n` is `n > 1`, `x is not None` is `not x is None`; None for anything else."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or test.lpar:
        return None
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    operator = _SPACE.sub("", model.code(target.operator))
    if isinstance(left, (cst.Integer, cst.Float, cst.SimpleString)) and not isinstance(right, (cst.Integer, cst.Float, cst.SimpleString)) \
            and operator in _MIRRORED_COMPARISONS:
        left, right, operator = right, left, _MIRRORED_COMPARISONS[operator]
    negated = operator in _NEGATED_COMPARISONS
    operator = _NEGATED_COMPARISONS.get(operator, operator)
    left_text, right_text = _SPACE.sub("", model.code(left)), _SPACE.sub("", model.code(right))
    if operator == "<" and isinstance(right, cst.Integer) and _count_test(left_text + "==1"):
        # a count is a whole number: `n_gpu >= 2` is `n_gpu > 1`, `n_gpu < 2` is `not n_gpu > 1`
        operator, negated, right_text = ">", not negated, str(int(right.value, 0) - 1)
    return left_text + operator + right_text, negated


def _default_display(model: "SemanticModel", expr: cst.BaseExpression) -> bool:
    """A list or tuple display that is a parameter's default or the default of a
    `mapping.get(key, default)` call: a fresh object no code of the file filled (a display
    bound to a name may be appended to: `ids = []; ids.append(0)`)."""
    parent = model.parent(expr)
    if isinstance(parent, cst.Param):
        return parent.default is expr
    call = model.parent(parent) if isinstance(parent, cst.Arg) else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "get" \
        and len(call.args) == 2 and call.args[1] is parent


def _is_none(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _none_ness(expr) -> Optional[bool]:
    """True for the literal None, False for a value that is never None, None when unknown."""
    if expr is None:
        return None
    if _is_none(expr):
        return True
    if isinstance(expr, (cst.Call, cst.List, cst.Dict, cst.Tuple, cst.Lambda, cst.Integer, cst.Float,
                         cst.SimpleString, cst.ConcatenatedString)):
        return False
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return False
    return None


def _extend(state: list, conditions: Path) -> list:
    return [(binding, _join(path, conditions)) for binding, path in state]


def _merge(first: list, second: list) -> list:
    out = list(first)
    for entry in second:
        if not any(b is entry[0] and p == entry[1] for b, p in out):
            out.append(entry)
    return _collapse(out)


def _merge_all(states: list) -> Optional[list]:
    live = [s for s in states if s is not None]
    if not live:
        return None
    out = live[0]
    for state in live[1:]:
        out = _merge(out, state)
    return out


_MAX_PATHS = 6  # paths kept per binding; beyond it only the conditions they all share


def _collapse(state: list) -> list:
    """(b, c+x) and (b, c+not x) -> (b, c): the binding is live whichever way x went.

    Paths are merged per binding; a binding reached on more than `_MAX_PATHS` paths keeps only
    the conditions common to all of them (weaker, so still true), which bounds the cost on long
    chains of unrelated `if`s."""
    groups: dict[int, tuple] = {}
    for binding, path in state:
        group = groups.setdefault(id(binding), (binding, []))
        if path not in group[1]:
            group[1].append(path)
    out = []
    for binding, paths in groups.values():
        if len(paths) > _MAX_PATHS:
            shared = [c for c in paths[0] if all(c in other for other in paths[1:])]
            paths = [tuple(shared)]
        changed = True
        while changed and len(paths) > 1:
            changed = False
            for i, path in enumerate(paths):
                for j in range(i + 1, len(paths)):
                    other_path = paths[j]
                    if len(other_path) != len(path):
                        continue
                    differ = [k for k, (a, b) in enumerate(zip(path, other_path)) if a != b]
                    if len(differ) == 1 and path[differ[0]].negated() == other_path[differ[0]]:
                        merged = path[: differ[0]] + path[differ[0] + 1:]
                        paths = [q for k, q in enumerate(paths) if k not in (i, j)]
                        if merged not in paths:
                            paths.append(merged)
                        changed = True
                        break
                if changed:
                    break
        out.extend((binding, path) for path in paths)
    return out


def _inside(model: "SemanticModel", node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in model.ancestors(node))


def _enclosing_function(model: "SemanticModel", node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    return next((a for a in model.ancestors(node) if isinstance(a, cst.FunctionDef)), None)


def _replaced_later_in_its_method(model: "SemanticModel", binding: "Binding", bindings: list) -> bool:
    method = next((a for a in model.ancestors(binding.node) if isinstance(a, cst.FunctionDef)), None)
    if method is None:
        return False
    for other in bindings:
        if other is binding or other.order <= binding.order or not _inside(model, other.node, method):
            continue
        statement = model.statement_of(other.node)
        block = model.parent(statement)
        if block is not None and model.parent(block) is method:
            return True
    return False


def _method_rank(model: "SemanticModel", node: cst.CSTNode) -> tuple:
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return (0 if ancestor.name.value in ("__init__", "setup", "__post_init__") else 1, model.order(node))
    return (2, model.order(node))


def _instance_parameter(model: "SemanticModel", scope: "Scope") -> Optional[str]:
    """The name holding the class's instance in a method: its first parameter, or a
    parameter literally named `self` of a static method (`@staticmethod def _worker(rank,
    self, ...)`, an `mp.spawn` target handed the instance in `args`)."""
    if scope.class_scope is None:
        return None
    if scope.self_name is not None:
        return scope.self_name
    function = scope.node
    if isinstance(function, cst.FunctionDef) and any(
        p.name.value == "self" for p in (*function.params.posonly_params, *function.params.params)
    ):
        return "self"
    return None


def _is_method(model: "SemanticModel", function: cst.FunctionDef) -> bool:
    block = model.parent(function)
    return isinstance(model.parent(block), cst.ClassDef) and not _is_static(function)


def _is_static(function: cst.FunctionDef) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
               for d in function.decorators)


def _escapes(model: "SemanticModel", target: cst.FunctionDef, name: str, owner_class, calls: set) -> bool:
    """A function whose callers we may not all see: decorated, or referenced other than as
    a callee (a callback, `mp.spawn(main_worker, ...)`). Callers in other files are not
    counted: the file's own calls are what its code shows."""
    if target.decorators and not all(
        isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod",) for d in target.decorators
    ):
        return True
    callee_nodes = {c.func for c in calls}
    callee_attrs = {c.func.attr for c in calls if isinstance(c.func, cst.Attribute)}
    if name == "__init__" and isinstance(owner_class, cst.ClassDef):
        # A constructor escapes with its class: subclassed, passed around, made elsewhere.
        for node, _, _ in model.references.get(owner_class.name.value, ()):
            if node is not owner_class.name and node not in callee_nodes and not _super_argument(model, node):
                return True
        return False
    defined_in = next((a for a in model.ancestors(target) if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Module))), None)
    for node, scope, _ in model.references.get(name, ()):
        parent = model.parent(node)
        if node in callee_nodes or node in callee_attrs:
            continue
        if scope.kind == "function" and name in scope.local_names and scope.node is not defined_in:
            continue  # a local of another function (`def train(evaluate=False)`), not this function
        if node is target.name:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr is node and owner_class is None:
            continue  # `obj.name`: another object's attribute
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            continue  # `MNIST(root, train=True)`: a keyword argument's name, not the function
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName)) and node is not target.name:
            continue  # a parameter or another definition of the same spelling elsewhere
        return True
    return False


def _super_argument(model: "SemanticModel", node: cst.CSTNode) -> bool:
    """`Trainer` in `super(Trainer, self).__init__(...)`: naming the class to find its bases."""
    arg = model.parent(node)
    call = model.parent(arg) if isinstance(arg, cst.Arg) else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "super"


def _element_index(model: "SemanticModel", targets, key: str) -> Optional[int]:
    if len(targets) != 1 or not isinstance(targets[0], (cst.Tuple, cst.List)):
        return None
    elements = targets[0].elements
    if any(isinstance(e, cst.StarredElement) for e in elements):
        return None
    for index, element in enumerate(elements):
        if model.binding_key(element.value, element.value) == key:
            return index
    return None
