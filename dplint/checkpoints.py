"""Shared knowledge of checkpoints: which expressions are state dicts of wrappers, which models
are bare, the `torch.save` / `torch.load` calls with their literal paths, and which model each
`load_state_dict` targets.

A wrapper's `state_dict()` (`nn.DataParallel` / `DistributedDataParallel`) prefixes every key
with `module.`; the inner model's (`wrapper.module.state_dict()`) does not. For the saves only
(`held_wrapper(..., contained=True)`), a model that holds a wrapper counts too
(`contained_wrapper`): `model.encoder = nn.DataParallel(model.encoder)` gives
`encoder.module.` keys, `AveragedModel(dp)` gives `module.module.` keys (torch 2.13); loads and
the other rules never see these. Checkpoints are
matched by their path: a literal string, a name bound to one, or `os.path.join` of literals,
normalised (`os.path.join("ckpt", "m.pt")` and `"ckpt/m.pt"` are the same file); inside one
file, also by the binding of the name that holds the path (`torch.save(..., path)` and
`torch.load(path)` with the same `path = ...` live at both). Inside a saved
dict, a state dict is addressed by its literal keys: `torch.save({"model": dp.state_dict()}, p)`
saves it under `("model",)`, and `torch.load(p)["model"]` reads it back.

Everything here answers None (or leaves an entry out) where the code cannot tell.
"""

from __future__ import annotations

import os
import posixpath
import re
import weakref
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from dplint.flow import class_method, consistent
from dplint.wrapper_classes import wrapping_built_by
from dplint.project import may_call_function_matching
from dplint.semantic import (
    Binding,
    SemanticModel,
    Wrapping,
    argument,
    children_of,
    literal_value,
    method_call,
    own_returns,
    peel_self_returning,
    walk,
)

TORCH_SAVE = "torch.save"
SAVE_WRAPPED_CODE = "DPL006"  # the rule these facts serve: its pre-filter decides which files it checks
TORCH_LOAD = "torch.load"
CONSUME_PREFIX_MODULE = "torch.nn.modules.utils"
CONSUME_PREFIX_NAME = "consume_prefix_in_state_dict_if_present"
CONSUME_PREFIX = f"{CONSUME_PREFIX_MODULE}.{CONSUME_PREFIX_NAME}"
PATH_JOINS = {"os.path.join", "posixpath.join"}
# Calls whose result is a state dict (a mapping of parameter names to tensors).
STATE_DICT_DOWNLOADS = {"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}
WRAPPER_PREFIX = "module."
WRAPPER_NAMES = {"DP": "DataParallel", "DDP": "DistributedDataParallel"}
MAX_DEPTH = 8


@dataclass(eq=False)
class CheckpointPath:
    """Where a checkpoint is written or read: a literal path, and/or the binding of the name
    that holds the path (two uses of one binding name the same file even when its value is
    not a literal, such as `path = os.path.join(args.out, "best.pt")`)."""

    literal: Optional[str]  # normalised literal path
    binding: Optional[Binding]
    text: str  # for messages: the literal path quoted, or the path expression's code
    # For matching across files: the literal path, or the path with its computed parts as
    # `*` when its file name is literal (`f"{self.folder}/last.pt"` -> "*/last.pt").
    shape: Optional[str] = None
    # In the system's temporary folder (`tempfile.gettempdir() + "/m.ckpt"`, `NamedTemporaryFile`):
    # the file does not outlive the run.
    temporary: bool = False
    # `handle.name`, `args.out`: the attribute's code and the binding of its root name (the
    # same attribute of the same object names the same file).
    attribute: Optional[tuple[Binding, str]] = None
    # A computed path spelled out (`path_spelling`): the same template over the same bindings
    # names the same file, whether a name holds it or the save spells it inline.
    spelling: Optional[str] = None

    def same_file(self, other: "CheckpointPath") -> bool:
        if self.literal is not None and self.literal == other.literal:
            return True
        if self.spelling is not None and self.spelling == other.spelling:
            return True
        if self.attribute is not None and other.attribute is not None:
            return self.attribute[0] is other.attribute[0] and self.attribute[1] == other.attribute[1]
        return self.binding is not None and self.binding is other.binding


@dataclass(eq=False)
class HeldWrapper:
    """A DataParallel/DDP wrapper an expression holds where it is used."""

    wrapping: Wrapping
    bindings: tuple[Binding, ...]  # the bindings followed from the expression to the wrapping
    every_path: bool  # wrapped on every path that reaches the use, not only on some


@dataclass(eq=False)
class WrapperStateDict:
    """`wrapper.state_dict()`: every key starts with `module.`."""

    call: cst.Call  # the `.state_dict()` call
    receiver: cst.BaseExpression  # the expression holding the wrapper
    wrapping: Wrapping
    bindings: tuple[Binding, ...]  # the bindings followed from the receiver to the wrapping
    every_path: bool = True  # the receiver is the wrapper on every path reaching the call
    # `def save_model(model, ...): torch.save(model.state_dict(), out)` called with a wrapper:
    # the parameter's name; `call` is then in the helper (maybe another file), `receiver` the
    # caller's argument.
    helper_parameter: Optional[str] = None
    helper_unwraps: bool = False  # the helper unwraps some wrapper kinds first, not this one


@dataclass(eq=False)
class SavedWrapperStateDict:
    """A wrapper's state dict inside the object one `torch.save` call writes."""

    save: cst.Call  # the torch.save call, or the call of a helper (maybe of another file) that saves it
    path: CheckpointPath
    keys: tuple[str, ...]  # where in the saved object: () is the object itself
    state_dict: WrapperStateDict
    via_name: bool  # the saved object reaches the state dict through a variable
    through_helper: bool = False  # `Saver(dir).dump(ddp.state_dict())`: torch.save runs in the helper


@dataclass(eq=False)
class LoadedCheckpoint:
    """`torch.load(path)` indexed by literal keys: `torch.load(p)["model"]`."""

    call: cst.Call  # the torch.load call
    path: CheckpointPath
    keys: tuple[str, ...]


@dataclass(eq=False)
class StateDictLoad:
    """One `target.load_state_dict(state_dict, ...)` call."""

    call: cst.Call
    target: cst.BaseExpression
    target_is_wrapper: Optional[Wrapping]  # the wrapping the target holds
    target_wrapper_bindings: tuple[Binding, ...]
    target_wrapped_on_every_path: bool
    bare_class: Optional[str]  # the target is a bare model: its class name ("" when unknown)
    argument: Optional[cst.BaseExpression]  # the state dict passed
    strict_false: bool
    wrapper_state_dict: Optional[WrapperStateDict]  # the state dict is a wrapper's, in this file
    loaded: Optional[LoadedCheckpoint]  # the state dict comes from torch.load
    prefix_consumed: bool  # consume_prefix_in_state_dict_if_present(..., "module.") ran on it

    @property
    def target_is_bare(self) -> bool:
        return self.bare_class is not None


@dataclass
class CheckpointFacts:
    saves: list[SavedWrapperStateDict]
    loads: list[StateDictLoad]

    def wrapper_saves_of(self, loaded: Optional["LoadedCheckpoint"]) -> list[SavedWrapperStateDict]:
        """The saves of a wrapper's state dict to the file and keys that `loaded` reads."""
        if loaded is None:
            return []
        return [save for save in self.saves if save.path.same_file(loaded.path) and save.keys == loaded.keys]


_FACTS: "weakref.WeakKeyDictionary[SemanticModel, CheckpointFacts]" = weakref.WeakKeyDictionary()


def checkpoint_facts(model: SemanticModel) -> CheckpointFacts:
    """The file's wrapper-state-dict saves and its load_state_dict calls (computed once per model)."""
    facts = _FACTS.get(model)
    if facts is None:
        facts = CheckpointFacts(list(_wrapper_saves(model)), list(_state_dict_loads(model)))
        _FACTS[model] = facts
    return facts


# ------------------------------------------------------------------------ resolving names
def resolve(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, peel: bool = False):
    """Follow names to the expression they hold: (value, node it was assigned at, bindings followed).

    With `peel`, `.to(...)`/`.cuda()`/`.train()`... are looked through (they return the module).
    The value is None when a name's value is unknown (a parameter, a loop variable...).
    """
    chain: list[Binding] = []
    for _ in range(MAX_DEPTH):
        if expr is None:
            return None, at, tuple(chain)
        if peel:
            expr = peel_self_returning(expr)
        key = model.binding_key(expr, at)
        if key is None or key in ("True", "False", "None"):
            return expr, at, tuple(chain)
        binding = model.binding_at(key, at)
        if binding is None or binding.value is None:
            return None, at, tuple(chain)
        chain.append(binding)
        expr, at = binding.value, binding.node
    return None, at, tuple(chain)


def wrapper_held(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode):
    """(the Wrapping, bindings followed) when `expr` holds a DataParallel/DDP wrapper, else None."""
    value, _, chain = resolve(model, expr, at, peel=True)
    if not isinstance(value, cst.Call):
        return None
    for wrapping in model.wrappings:
        if wrapping.call is value:
            return wrapping, chain
    return None


def held_wrapper(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode,
                 contained: bool = False) -> Optional[HeldWrapper]:
    """The wrapper `expr` holds at `at`, judged per path with the value-flow model: through
    every reaching assignment, same-file builders that return a wrapper, `self.x` set in
    another method, and the branch conditions around `at`. On a branch where the model is
    bare (`if multi_gpu: model = DP(model)` ... `else: save(model.state_dict())`) it holds no
    wrapper. `every_path` is False when some path reaching `at` leaves the model bare or
    unknown. With `contained`, a model holding a wrapper counts too (`contained_wrapper`):
    asked only by the saves, whose keys it changes."""
    textual = wrapper_held(model, expr, at)
    paths = _wrapper_paths(model, expr, at, contained)
    if paths is None:  # the flow model cannot answer: the textual answer
        if textual is None:
            return None
        return HeldWrapper(textual[0], textual[1], not is_conditional(model, textual[1], at))
    every, live = paths
    wrappers = [wrapping for wrapping, _ in live if wrapping is not None]
    if not wrappers:
        if textual is not None and not any(w is textual[0] for w, _ in every) and _chain_reaches(model, textual[1], at):
            # The flow model does not see the wrapper the bindings lead to: trust the bindings
            # (when each of them reaches the next use: not a wrap on a sibling branch).
            return HeldWrapper(textual[0], textual[1], not is_conditional(model, textual[1], at))
        return None  # bare (or unknown) on every path that reaches `at`
    wrapping = textual[0] if textual is not None and any(w is textual[0] for w in wrappers) else wrappers[0]
    bindings = textual[1] if textual is not None else ()
    on_every = all(w is not None for w, _ in live)  # the flow's paths: a branch that raises is none
    return HeldWrapper(wrapping, bindings, on_every)


def _chain_reaches(model: SemanticModel, bindings, at: cst.CSTNode) -> bool:
    """Whether each binding of the chain `wrapper_held` followed reaches the use it was
    followed from (`bare = model` in an `else`, then `model = DP(model)` on the `if` branch
    does not reach it). Unknown to the flow model: True."""
    ordered = sorted(bindings, key=lambda binding: -binding.order)
    use = at
    for binding in ordered:
        try:
            scope = model.scope(use)
            if binding.scope is not scope and not (binding.key.startswith("self.") and binding.scope is scope.class_scope):
                return True  # another function's or class's binding: the flow model judged it
            found = model.flow.reaching(binding.key, use)
        except Exception:
            return True
        if found and not any(other is binding for other, _ in found):
            return False
        use = binding.value if binding.value is not None else binding.node
    return True


def _wrapper_paths(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, contained: bool = False):
    """(every (wrapping or None, path) the flow model finds, those whose path can reach `at`);
    None when it cannot answer."""
    if expr is None:
        return None
    try:
        found = _wrappings_at(model, expr, at, 2, contained)
    except Exception:  # a flow model that cannot answer is the same as none
        return None
    if not found:
        return None
    here = path_at(model, at)
    live = [
        (wrapping, path)
        for wrapping, path in found
        if _self_consistent(path) and consistent(path, here) and not _narrowed_out(wrapping, (*path, *here))
        and not _ddp_without_group(wrapping, here)
    ]
    return found, live


def _wrapped_despite(model: SemanticModel, state_dict: WrapperStateDict, test) -> bool:
    """Whether a wrapper reaches an arm of `... if <test> else ...` on a path that took
    `test` itself (`if opt.distributed: DDP(...) elif n > 1: DataParallel(...)`, then
    `m.module.state_dict() if opt.distributed else m.state_dict()`): the test was matched
    and still leaves a wrapper. A test that matches no branch of the wrap (spelled otherwise,
    `self.cfg.n_gpu` for `cfg.n_gpu`) says nothing: silent where it is wrapped only on some paths."""
    paths = _wrapper_paths(model, state_dict.receiver, state_dict.call)
    if paths is None:
        return False
    return any(wrapping is not None and any((c.test, c.scope) == (test.test, test.scope) for c in conditions)
               for wrapping, conditions in paths[1])


def _ddp_without_group(wrapping: Optional[Wrapping], here) -> bool:
    """A DDP wrapper where `dist.is_initialized()` failed: DDP cannot be built without the group."""
    return wrapping is not None and wrapping.kind == "DDP" and any(not c.holds and c.tests_process_group for c in here)


# Batch-norm converters return the module they are given, wrapper and all, with its
# BatchNorm layers replaced: `torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)`, and the
# `convert_model(m)` of the Synchronized-BatchNorm package (a DataParallel in, its
# DataParallel subclass out).
_CONVERTERS = {"convert_sync_batchnorm", "convert_model"}


def _wrappings_at(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode, depth: int, contained: bool = False) -> list:
    """`model.flow.wrappings_at`, looking through batch-norm converters (and, with
    `contained`, models holding a wrapper: `contained_wrapper`)."""
    found = []
    values = model.flow.values_at(expr, at)
    if len(values) == 1 and not values[0].known and values[0].binding is None:
        values = _attribute_set_unseen(model, expr, at) or values
    for value in values:
        wrapping = None
        if value.known:
            wrapping = wrapping_built_by(value.model, value.expr)  # the one recogniser of wrappers
            converted = _converted_module(value.expr)
            if wrapping is None and converted is not None and depth > 0:
                inner = [w for w, _ in _wrappings_at(value.model, converted, value.expr, depth - 1)]
                if inner and all(w is not None for w in inner):
                    wrapping = inner[0]
            if wrapping is None and contained:
                wrapping = _submodule_wrapping(value.model, value.expr) or _averaged_wrapping(value.model, value.expr, value.conditions)
        found.append((wrapping, value.conditions))
    return found


_REGISTERING = frozenset({"add_module", "register_module"})


def _attribute_set_unseen(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> list:
    """What `self.gen` read in a method may hold when the flow model sees no assignment of it:
    `self.add_module("gen", gen)` in the class's `__init__` (nn.Module registers the object
    under that name, so `self.gen` is it), or `self.gen = ...` in the `__init__` of a subclass
    of the same file (a base class method saving what each subclass builds). Values are those
    of the registered or assigned expression there."""
    if not isinstance(expr, cst.Attribute) or not isinstance(expr.value, cst.Name):
        return []
    scope = model.scope(at)
    class_scope = scope.class_scope if scope is not None else None
    if class_scope is None or scope.self_name != expr.value.value or not isinstance(class_scope.node, cst.ClassDef):
        return []
    owner, name = class_scope.node, expr.attr.value
    subclasses = [c for c in model.classes.values()
                  if c is not owner and any(base is owner for _, base in model.flow.project_bases(c))]
    values: list = []
    for class_node in (owner, *subclasses):
        constructor = class_method(class_node, "__init__")
        if constructor is None or not constructor.params.params:
            continue
        own = constructor.params.params[0].name.value
        for node in _registrations_and_stores(model, constructor):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _REGISTERING \
                    and isinstance(node.func.value, cst.Name) and node.func.value.value == own and len(node.args) >= 2 \
                    and literal_value(node.args[0].value) == name:
                values.extend(model.flow.values_at(node.args[1].value, node))
            elif class_node is not owner and isinstance(node, cst.Assign) and any(
                    isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                    and t.target.value.value == own and t.target.attr.value == name for t in node.targets):
                values.extend(model.flow.values_at(node.value, node))
    return values


_REGISTRATIONS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def _registrations_and_stores(model: SemanticModel, constructor: cst.FunctionDef) -> list:
    """The `x.add_module(...)`-like calls and the assignments to attributes in a constructor,
    found once per file (each read of an unseen `self.x` asks again)."""
    table = _REGISTRATIONS.setdefault(model, {})
    if constructor not in table:
        table[constructor] = [
            node for node in _descendants(constructor)
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _REGISTERING
            or isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Attribute) for t in node.targets)
        ]
    return table[constructor]


def _descendants(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children_of(current)))


# ------------------------------------------------------------ models holding a wrapper
# What a wrapping found by `contained` is: ("submodule", "encoder", every) for `model.encoder =
# DataParallel(model.encoder)` (keys `encoder.module.x`), ("averaged", "", every) for
# `AveragedModel(dp)` (keys `module.module.x`); `every`: wrapped whichever way the branches
# around the wrapping went.
_CONTAINED: "weakref.WeakKeyDictionary[Wrapping, tuple[str, str, bool]]" = weakref.WeakKeyDictionary()
AVERAGED_MODELS = {"torch.optim.swa_utils.AveragedModel"}


def contained_wrapper(wrapping: Optional[Wrapping]) -> Optional[tuple[str, str, bool]]:
    """("submodule", attribute, every) or ("averaged", "", every) when a save's wrapper is not
    the saved model itself but held by it; None for the model itself."""
    return _CONTAINED.get(wrapping) if wrapping is not None else None


_SUBMODULE_WRAPS: "weakref.WeakKeyDictionary[SemanticModel, list]" = weakref.WeakKeyDictionary()


def _submodule_wraps(model: SemanticModel) -> list[tuple[cst.Name, str, Wrapping]]:
    """(owner name, attribute, wrapping) for each `owner.attr = DataParallel(owner.attr)` of
    the file (a sub-module replaced by its wrapper in place)."""
    found = _SUBMODULE_WRAPS.get(model)
    if found is None:
        found = _SUBMODULE_WRAPS[model] = []
        for wrapping in model.wrappings:
            statement = model.parent(wrapping.call)
            value = statement.value if isinstance(statement, cst.Assign) else None
            if value is None or peel_self_returning(value) is not wrapping.call or len(statement.targets) != 1:
                continue
            target = statement.targets[0].target
            if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                    and model.binding_key(target.value, target) is not None and not model.binding_key(target, target) \
                    and wrapping.inner is not None and model.code(wrapping.inner) == model.code(target):
                found.append((target.value, target.attr.value, wrapping))
    return found


def _submodule_wrapping(model: SemanticModel, expr: cst.BaseExpression) -> Optional[Wrapping]:
    """The wrapping of `model.encoder = DataParallel(model.encoder)` when the object built by
    `expr` (`model = Net()`) is the one whose sub-module it replaces: its state dict then has
    `encoder.module.` keys."""
    if not isinstance(expr, cst.Call):
        return None
    for owner, attribute, wrapping in _submodule_wraps(model):
        if any(value.expr is expr for value in model.flow.values_at(owner, owner)):
            _CONTAINED[wrapping] = ("submodule", attribute, not model.flow.branch_conditions(wrapping.call))
            return wrapping
    return None


def _averaged_wrapping(model: SemanticModel, expr: cst.BaseExpression, path) -> Optional[Wrapping]:
    """`AveragedModel(model)` where `model` is a DataParallel/DDP on a path consistent with
    `path`: the averaged copy keeps the wrapper as its `module`, so its keys are
    `module.module.x` (and `n_averaged`)."""
    if not isinstance(expr, cst.Call) or model.qualified_name(expr.func) not in AVERAGED_MODELS:
        return None
    inner = argument(expr, 0, "model")
    if inner is None:
        return None
    live = [(wrapping, inner_path) for wrapping, inner_path in _wrappings_at(model, inner, expr, 1)
            if consistent(inner_path, path) and _self_consistent(inner_path) and not _narrowed_out(wrapping, inner_path)]
    for wrapping, _ in live:
        if wrapping is not None and contained_wrapper(wrapping) is None:
            averaged = Wrapping(wrapping.kind, expr, inner, None, None, None, model.scope(expr), model.order(expr))
            _CONTAINED[averaged] = ("averaged", "", all(w is not None for w, _ in live))
            return averaged
    return None


def _converted_module(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    expr = peel_self_returning(expr)
    if not isinstance(expr, cst.Call) or not expr.args or expr.args[0].keyword is not None or expr.args[0].star:
        return None
    func = expr.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
    return expr.args[0].value if name in _CONVERTERS else None


# `isinstance(m, nn.DataParallel)`, `isinstance(m, (DP, DDP))`, `hasattr(m, "module")`:
# tests that tell a wrapper from a bare model (`m.module if isinstance(m, DDP) else m`).
_WRAPPER_TEST = re.compile(r"^(isinstance\(.*(DataParallel|DDP|\bDP\b).*\)|hasattr\(.*['\"]module['\"]\))$")


def _narrowed_out(wrapping: Optional[Wrapping], path) -> bool:
    """A path that tested for a wrapper contradicts the value: a wrapper where the test
    failed, or a bare model where it held."""
    for condition in path:
        if _WRAPPER_TEST.match(condition.test):
            if (wrapping is not None) != condition.holds:
                return True
    return False


def _self_consistent(path) -> bool:
    seen: dict = {}
    return all(seen.setdefault((c.test, c.scope), c.holds) == c.holds for c in path)


def path_at(model: SemanticModel, node: cst.CSTNode) -> tuple:
    """The branch conditions around `node` inside its function: `if c:` body (c holds), its
    `else`/`elif` (c fails), `a if c else b`, `c and a`."""
    conditions = []
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            conditions.append(model.flow.condition(ancestor.test, child is ancestor.body))
        elif isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            conditions.append(model.flow.condition(ancestor.left, isinstance(ancestor.operator, cst.And)))
        child = ancestor
    return tuple(conditions)


def is_conditional(model: SemanticModel, bindings: tuple[Binding, ...], at: cst.CSTNode) -> bool:
    """Whether one of the bindings may not have run when `at` runs: it sits in a branch or loop
    body (an `if`, `else`, `try`, `except`, `for`, `while`, `match` block) that `at` is not in."""
    around_at = set(model.ancestors(at))
    for binding in bindings:
        scope_node = model.scope(binding.node).node
        for ancestor in model.ancestors(binding.node):
            if ancestor is scope_node:
                break
            if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)):
                owner = model.parent(ancestor)
                if owner is scope_node or isinstance(owner, cst.With):
                    continue
                if ancestor not in around_at:
                    return True
    return False


# ------------------------------------------------------------------------ bare models
def bare_model_class(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[str]:
    """The class name ("" when unknown) when `expr` provably holds a bare (unwrapped) model.

    Bare: `wrapper.module`; a constructor of `torch.nn` or `torchvision.models`; a class defined
    in this file or imported under a CapWords name (a class: its constructor returns an
    instance of it; classes whose name mentions "Parallel" are left out); a function defined in
    this file whose every return is one of those. Anything else (a parameter, `copy.deepcopy`,
    an imported factory function) is unknown: None.
    """
    if isinstance(expr, cst.Attribute) and expr.attr.value == "module" and held_wrapper(model, expr.value, at):
        return ""
    value, value_at, _ = resolve(model, expr, at, peel=True)
    if isinstance(value, cst.Attribute) and value is not expr:
        return bare_model_class(model, value, value_at)
    if isinstance(value, cst.Call):
        return _constructed_class(model, value, MAX_DEPTH)
    return None


def _constructed_class(model: SemanticModel, call: cst.Call, depth: int) -> Optional[str]:
    if depth <= 0 or any(wrapping.call is call for wrapping in model.wrappings):
        return None
    name = model.qualified_name(call.func)
    if name is not None:
        last = name.rsplit(".", 1)[-1]
        if "Parallel" in name or name.startswith("torch.nn.parallel"):
            return None
        if name.startswith("torchvision.models."):
            return last if _is_class_name(last) else ""
        if name.startswith("torch.") and not name.startswith("torch.nn."):
            return None
        return last if _is_class_name(last) else None
    if not isinstance(call.func, cst.Name):
        return None
    local = call.func.value
    bindings = model.bindings.get(local, [])
    if local in model.classes and all(binding.node is model.classes[local] for binding in bindings):
        bases = [model.code(base.value) for base in model.classes[local].bases]
        return None if any("Parallel" in base for base in bases) else local
    definitions = model.functions.get(local, [])
    if not definitions and bindings:
        return _class_held(model, bindings)
    if len(definitions) != 1 or not all(binding.node is definitions[0] for binding in bindings):
        return None
    returns = own_returns(definitions[0])
    if not returns:
        return None
    classes = set()
    for statement in returns:
        value, _, _ = resolve(model, statement.value, statement, peel=True)
        if not isinstance(value, cst.Call):
            return None
        found = _constructed_class(model, value, depth - 1)
        if found is None:
            return None
        classes.add(found)
    return classes.pop() if len(classes) == 1 else ""


def _class_held(model: SemanticModel, bindings: list[Binding]) -> Optional[str]:
    """`model_cls = BertForMaskedLM` (or another class on each branch) ... `model_cls(cfg)`:
    every binding of the name is a class of this file or an imported CapWords name, none a
    wrapper. Its class name when there is one, else ""; None otherwise."""
    classes = set()
    for binding in bindings:
        value = binding.value
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return None
        if isinstance(value, cst.Name) and value.value in model.classes:
            bases = [model.code(base.value) for base in model.classes[value.value].bases]
            if any("Parallel" in base for base in bases):
                return None
            classes.add(value.value)
            continue
        name = model.qualified_name(value)
        last = name.rsplit(".", 1)[-1] if name is not None else ""
        if not _is_class_name(last) or "Parallel" in name or (name.startswith("torch.") and not name.startswith("torch.nn.")):
            return None
        classes.add(last)
    return classes.pop() if len(classes) == 1 else ""


def _is_class_name(name: str) -> bool:
    return name[:1].isupper() and any(ch.islower() for ch in name)


# ------------------------------------------------------------------------ state dicts
def wrapper_state_dict(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[WrapperStateDict]:
    """`expr` is (or holds) `wrapper.state_dict()`."""
    value, value_at, _ = resolve(model, expr, at)
    if not isinstance(value, cst.Call):
        return None
    method = method_call(value)
    if method is None or method[1] != "state_dict":
        return None
    held = held_wrapper(model, method[0], value_at, contained=True)
    if held is None:
        return None
    return WrapperStateDict(value, method[0], held.wrapping, held.bindings, held.every_path)


def literal_path(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[str]:
    """The normalised path a literal, a name bound to one, or `os.path.join` of literals spells."""
    value, value_at, _ = resolve(model, expr, at)
    if isinstance(value, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            text = literal_value(value)
        except ValueError:
            return None
        return posixpath.normpath(text) if isinstance(text, str) and text else None
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in PATH_JOINS and value.args:
        parts = []
        for arg in value.args:
            if arg.star or arg.keyword is not None:
                return None
            part = literal_path(model, arg.value, value_at)
            if part is None:
                return None
            parts.append(part)
        return posixpath.normpath(posixpath.join(*parts))
    return None


def checkpoint_path(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> CheckpointPath:
    literal = literal_path(model, expr, at)
    key = model.binding_key(expr, at)
    binding = model.binding_at(key, at) if key is not None else None
    if literal is not None:
        text = repr(literal)
    else:
        text = f"`{model.code(expr)}`" if expr is not None else "?"
    shape = literal if literal is not None else path_shape(model, expr, at)
    attribute = None
    if binding is None and isinstance(expr, cst.Attribute):
        root = expr
        while isinstance(root, cst.Attribute):
            root = root.value
        root_binding = model.binding_at(root.value, at) if isinstance(root, cst.Name) else None
        if root_binding is not None:
            attribute = (root_binding, model.code(expr))
    spelling = path_spelling(model, expr, at) if literal is None else None
    return CheckpointPath(literal, binding, text, shape, literal is None and _temporary(model, expr, at, 3), attribute, spelling)


def _temporary(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> bool:
    """The path is built from `tempfile` (`tempfile.gettempdir()`, `tmp.name` of a
    `NamedTemporaryFile`, `tempfile.mkdtemp()`), following names."""
    value, value_at, _ = resolve(model, expr, at)
    stack = [value] if value is not None else []
    if isinstance(expr, cst.Name):  # `with tempfile.NamedTemporaryFile() as handle:`
        binding = model.binding_at(expr.value, at)
        if binding is not None and isinstance(binding.node, cst.With):
            stack.extend(item.item for item in binding.node.items)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and (model.qualified_name(node.func) or "").startswith("tempfile."):
            return True
        if isinstance(node, cst.Name) and depth > 0 and node is not value and _temporary(model, node, value_at, depth - 1):
            return True
        if isinstance(node, cst.Attribute) and depth > 0 and _temporary(model, node.value, value_at, depth - 1):
            return True
        if isinstance(node, (cst.Lambda, cst.BaseComp)):
            continue
        stack.extend(model.children(node))
    return False


def path_shape(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, outer=None) -> Optional[str]:
    """`f"{self.folder}/last.pt"` and `os.path.join(out, "last.pt")` -> "*/last.pt": the path
    with computed parts as `*`, when its file name says which file it is: a literal name with
    an extension, or a name with a literal stem of at least 5 characters
    (`"checkpoint_{}.tar".format(epoch)` -> "checkpoint_*.tar", `"/SENet" + "_valid_best"`).
    `outer(name, at)` gives the parts of a parameter from the call being followed."""
    parts = _shape_parts(model, expr, at, MAX_DEPTH, outer)
    if parts is None:
        return None
    shape = posixpath.normpath("".join(parts))
    name = shape.rsplit("/", 1)[-1]
    if shape == name:
        return None  # a bare file name: too common to tie two files together
    named = "*" not in name and "." in name.strip(".")
    stem = name.rsplit(".", 1)[0] if "." in name.strip(".") else name
    if not named and len(stem.replace("*", "")) < 5:
        return None  # `f"{run}.pt"`, `f"{out}/{epoch}"`: any file
    return shape


def shapes_may_match(saved: str, loaded: str) -> bool:
    """Two path shapes that may name one file: the same file name (each computed field of it a
    `*` on both sides: `best(*).th`), and folders where a `*` stands for any text, `/` included
    (`f"./{out}/best({step}).th"` is `*/best(*).th`, `os.path.join(out, f"best({n}).th")` with
    `out = "runs"` is `runs/best(*).th`)."""
    if saved == loaded:
        return True
    saved_folder, _, saved_name = saved.rpartition("/")
    loaded_folder, _, loaded_name = loaded.rpartition("/")
    if saved_name != loaded_name or not saved_folder or not loaded_folder:
        return False
    return bool(_glob(saved_folder).fullmatch(loaded_folder) or _glob(loaded_folder).fullmatch(saved_folder))


def _glob(shape: str) -> "re.Pattern[str]":
    return re.compile(".*".join(re.escape(part) for part in shape.split("*")), re.DOTALL)


_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")


def _shape_parts(model, expr, at, depth, outer=None) -> Optional[list[str]]:
    if expr is None or depth <= 0:
        return None
    literal = literal_path(model, expr, at)
    if literal is not None:
        return [literal]
    value, value_at, _ = resolve(model, expr, at)
    if value is None and outer is not None:
        parameter = _parameter_reached(model, expr, at)
        parts = outer(parameter) if parameter is not None else None
        if parts is not None:
            return parts
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "format"
        and isinstance(value.func.value, cst.SimpleString)
    ):  # `"checkpoint_{}.tar".format(epoch)`
        try:
            template = literal_value(value.func.value)
        except ValueError:
            return None
        return [_FORMAT_FIELD.sub("*", template)] if isinstance(template, str) else None
    if isinstance(value, cst.FormattedString):
        parts = []
        for part in value.parts:
            parts.append(part.value if isinstance(part, cst.FormattedStringText) else "*")
        return parts
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in PATH_JOINS and value.args:
        pieces = []
        for arg in value.args:
            if arg.star or arg.keyword is not None:
                return None
            part = _shape_parts(model, arg.value, value_at, depth - 1, outer)
            pieces.append("".join(part) if part is not None else "*")
        return ["/".join(pieces)]
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):  # `out + "/last.pt"`
        left = _shape_parts(model, value.left, value_at, depth - 1, outer)
        right = _shape_parts(model, value.right, value_at, depth - 1, outer)
        return None if left is None or right is None else left + right
    if value is None or value is expr and not isinstance(value, (cst.SimpleString, cst.ConcatenatedString)):
        return ["*"]
    return None


def path_spelling(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[str]:
    """A computed path written out with names followed to their values and `os.path.join(a, b)`
    as `a/b` (a leading `./` dropped), each part the code cannot compute named by the binding it
    comes from: `resume = os.path.join(run_dir, "last.pt")` ... `torch.load(resume)` and
    `torch.save(..., os.path.join(run_dir, "last.pt"))` spell the same path when both `run_dir`
    are one binding (a parameter, `args = parse_args()`). None when a part is neither a literal,
    a name, an attribute/subscript of a name, an f-string, `+` nor a join of those, or when no
    part is computed (the literal path says it)."""
    parts = _spelling_parts(model, expr, at, MAX_DEPTH)
    if parts is None or not any(part.startswith(_SPELLED) for part in parts):
        return None
    return posixpath.normpath("".join(parts))


_SPELLED = "\x00"  # opens a computed part's token in a spelling


def _spelling_parts(model, expr, at, depth) -> Optional[list[str]]:
    if expr is None or depth <= 0:
        return None
    literal = literal_path(model, expr, at)
    if literal is not None:
        return [literal]
    if isinstance(expr, cst.FormattedString):
        parts = []
        for part in expr.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
                continue
            if part.format_spec or part.conversion:
                return None
            inner = _spelling_parts(model, part.expression, at, depth - 1)
            if inner is None:
                return None
            parts.extend(inner)
        return parts
    if isinstance(expr, cst.Call) and model.qualified_name(expr.func) in PATH_JOINS and expr.args:
        pieces = []
        for arg in expr.args:
            if arg.star or arg.keyword is not None:
                return None
            inner = _spelling_parts(model, arg.value, at, depth - 1)
            if inner is None:
                return None
            pieces.append(inner)
        return [part for index, piece in enumerate(pieces) for part in ([] if index == 0 else ["/"]) + piece]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left = _spelling_parts(model, expr.left, at, depth - 1)
        right = _spelling_parts(model, expr.right, at, depth - 1)
        return None if left is None or right is None else left + right
    root, rest = expr, ""
    while model.binding_key(root, at) is None and isinstance(root, (cst.Attribute, cst.Subscript)):
        rest = model.code(root)[len(model.code(root.value)):] + rest
        root = root.value
    key = model.binding_key(root, at)
    binding = model.binding_at(key, at) if key is not None else None
    if binding is None:
        return None
    value = binding.value
    # Followed to its value unless that is a call's result (`args = parse_args()`): the binding
    # then names the part.
    if not rest and value is not None and (not isinstance(value, cst.Call) or model.qualified_name(value.func) in PATH_JOINS):
        return _spelling_parts(model, value, binding.node, depth - 1)
    return [f"{_SPELLED}{id(binding)}{rest.replace('/', '|')}{_SPELLED}"]


def _parameter_reached(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[str]:
    """The parameter a name (or a chain of names) holds: `out` for `path = out` ... `path`."""
    for _ in range(MAX_DEPTH):
        key = model.binding_key(expr, at) if expr is not None else None
        binding = model.binding_at(key, at) if key is not None else None
        if binding is None:
            return None
        if isinstance(binding.node, cst.Param):
            return key
        if binding.value is None:
            return None
        expr, at = binding.value, binding.node
    return None


def literal_key(expr: cst.BaseExpression) -> Optional[str]:
    """"model" for the subscript `x["model"]`; None for anything but one literal string key."""
    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
        return None
    index = expr.slice[0].slice
    if not isinstance(index, cst.Index):
        return None
    try:
        key = literal_value(index.value)
    except ValueError:
        return None
    return key if isinstance(key, str) else None


def holds_state_dict(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> bool:
    """`expr` holds a state dict or checkpoint: `x.state_dict()`, `torch.load(...)`,
    `load_state_dict_from_url(...)`, or a literal-key item of one (`torch.load(p)["model"]`)."""
    for _ in range(MAX_DEPTH):
        while expr is not None and literal_key(expr) is not None:
            expr = expr.value
        value, at, _ = resolve(model, expr, at)
        if value is None or value is expr:
            break
        expr = value
    if not isinstance(expr, cst.Call):
        return False
    method = method_call(expr)
    if method is not None and method[1] == "state_dict":
        return True
    return model.qualified_name(expr.func) in STATE_DICT_DOWNLOADS | {TORCH_LOAD}


def _wrapper_saves(model: SemanticModel):
    spells_state_dict = _spells_state_dict(model)
    for site in model.calls:
        call = site.node
        if site.qualified_name == TORCH_SAVE:
            path = checkpoint_path(model, argument(call, 1, "f"), call)
            yield from _saved_entries(model, call, path, argument(call, 0, "obj"), call, (), False, MAX_DEPTH)
        elif call.args and site.qualified_name not in (TORCH_LOAD,):
            yield from _saved_through_helper(model, call, spells_state_dict)


# ------------------------------------------------------------------------ helpers that save
@dataclass(eq=False)
class SavedParameter:
    """A function that `torch.save`s one of its parameters: `def dump(self, weights, step):
    torch.save({"weights": weights, "step": step}, path)` saves `weights` under ("weights",)."""

    name: str
    keys: tuple[str, ...]
    path: CheckpointPath  # computed in the helper's file
    path_parameter: Optional[str] = None  # the path is this parameter: the caller's argument names it
    save: Optional[cst.Call] = None  # the helper's torch.save call (its path is computed there)
    # `torch.save(model.state_dict(), out)`: the helper saves the parameter's state dict (this
    # call), not the parameter itself; `unwrapped` are the wrapper kinds ("DP", "DDP") that a
    # test on the way unwraps first (`if isinstance(model, nn.DataParallel): ... else: <here>`).
    state_dict_call: Optional[cst.Call] = None
    unwrapped: frozenset = frozenset()
    # `self.keep(model, folder)`: the parameter is handed on as is to a helper that saves its
    # state dict; this argument at that call (where a wrapper it surely holds is reported)
    handed_on: Optional[cst.BaseExpression] = None


_SAVED_PARAMETERS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def saved_parameters(model: SemanticModel, function: cst.FunctionDef, depth: int = 2) -> list[SavedParameter]:
    """The summary of a function (cached per file): which parameters it saves, where."""
    table = _SAVED_PARAMETERS.setdefault(model, {})
    if function not in table:
        table[function] = []  # guards recursion
        table[function] = list(_find_saved_parameters(model, function, depth))
    return table[function]


def _find_saved_parameters(model: SemanticModel, function: cst.FunctionDef, depth: int):
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
    for site in _calls_in(model, function):
        if site.qualified_name != TORCH_SAVE:
            continue
        call = site.node
        if _forwards_star_args(call, function):
            # `def save_on_master(*args, **kwargs): torch.save(*args, **kwargs)`: the caller's
            # first two arguments are what torch.save gets.
            yield SavedParameter(FORWARDED_OBJECT, (), CheckpointPath(None, None, "?"), FORWARDED_PATH)
            continue
        target = argument(call, 1, "f")
        path = checkpoint_path(model, target, call)
        binding = model.binding_at(target.value, call) if isinstance(target, cst.Name) else None
        path_parameter = target.value if binding is not None and isinstance(binding.node, cst.Param) else None
        for name, keys, state_dict_call in _parameter_entries(model, argument(call, 0, "obj"), call, (), params, MAX_DEPTH):
            unwrapped: Optional[frozenset] = frozenset()
            if state_dict_call is not None:
                unwrapped = _unwrapped_kinds(model, state_dict_call, name)
                if unwrapped is None or unwrapped >= ALL_WRAPPER_KINDS:
                    continue
            yield SavedParameter(name, keys, path, path_parameter, call, state_dict_call, unwrapped)
    if depth > 1:
        yield from _saved_by_inner_helpers(model, function, params, depth)


def _saved_by_inner_helpers(model: SemanticModel, function: cst.FunctionDef, params: set, depth: int):
    """The parameters a function saves by handing them to another helper that saves what it
    gets: `def finetune(args, model): save_checkpoint({"student": model.state_dict()}, path)`
    with `def save_checkpoint(state, path): torch.save(state, path)` saves `model.state_dict()`
    under ("student",), so each caller's wrapper is reported where it is handed to `finetune`."""
    for site in _calls_in(model, function):
        call = site.node
        if site.qualified_name in (TORCH_SAVE, TORCH_LOAD) or not call.args:
            continue
        if not any(not arg.star and (_may_hold_state_dict_at_call(model, arg.value, call) or _is_parameter(model, arg.value, call, params))
                   for arg in call.args):
            continue  # cheap: only a call handing over a state dict or a parameter may save one
        target = called_function(model, call)
        if target is None or target[1] is function:
            continue
        other, helper, bound = target
        for inner in saved_parameters(other, helper, depth - 1):
            if inner.state_dict_call is not None:
                # `self.save_checkpoint(model, path)` whose body saves `model.state_dict()`:
                # this function's parameter, handed on as is, is saved the same way
                if other is not model or inner.name == FORWARDED_OBJECT:
                    continue
                passed = model.flow.parameter_argument(call, helper, inner.name, bound)
                if not _is_parameter(model, passed, call, params):
                    continue
                unwrapped = _unwrapped_kinds(model, call, passed.value)
                if unwrapped is None or (unwrapped | inner.unwrapped) >= ALL_WRAPPER_KINDS:
                    continue
                path = _helper_path(model, call, other, helper, bound, inner)
                yield SavedParameter(passed.value, inner.keys, path, None, None, inner.state_dict_call,
                                     unwrapped | inner.unwrapped, passed)
                continue
            if inner.name == FORWARDED_OBJECT:
                passed = _forwarded(call, FORWARDED_OBJECT, bound)
                path_argument = _forwarded(call, FORWARDED_PATH, bound)
                path = checkpoint_path(model, path_argument, call) if path_argument is not None else inner.path
            else:
                passed = model.flow.parameter_argument(call, helper, inner.name, bound)
                if passed is not None and passed is _default_of(helper, inner.name):
                    continue
                path = _helper_path(model, call, other, helper, bound, inner)
            for name, keys, state_dict_call in _parameter_entries(model, passed, call, (), params, MAX_DEPTH):
                unwrapped: Optional[frozenset] = frozenset()
                if state_dict_call is not None:
                    unwrapped = _unwrapped_kinds(model, state_dict_call, name)
                    if unwrapped is None or unwrapped >= ALL_WRAPPER_KINDS:
                        continue
                yield SavedParameter(name, keys + inner.keys, path, None, None, state_dict_call, unwrapped)


ALL_WRAPPER_KINDS = frozenset(WRAPPER_NAMES)
_KIND_OF_CLASS = {"DataParallel": "DP", "DP": "DP", "DistributedDataParallel": "DDP", "DDP": "DDP"}
_ISINSTANCE = re.compile(r"^isinstance\((\w+),(.+)\)$")
_HASATTR_MODULE = re.compile(r"^hasattr\((\w+),['\"]module['\"]\)$")


def _unwrapped_kinds(model: SemanticModel, at: cst.CSTNode, name: str) -> Optional[frozenset]:
    """The wrapper kinds that the branch tests around `at` rule out for parameter `name`
    (`not isinstance(model, nn.DataParallel)`: "DP"; `not hasattr(model, "module")`: all).
    None when a test says it is a wrapper there (the code knows what it holds)."""
    kinds: set = set()
    for condition in path_at(model, at):
        test = condition.test
        match = _ISINSTANCE.match(test)
        if match and match.group(1) == name:
            classes = re.findall(r"[A-Za-z_][\w.]*", match.group(2))
            tested = {_KIND_OF_CLASS.get(c.rsplit(".", 1)[-1]) for c in classes}
            if condition.holds:
                return None
            kinds |= ALL_WRAPPER_KINDS if None in tested else tested
        match = _HASATTR_MODULE.match(test)
        if match and match.group(1) == name:
            if condition.holds:
                return None
            kinds |= ALL_WRAPPER_KINDS
        if condition.tests_process_group and not condition.holds:
            kinds.add("DDP")  # no process group: not a DDP wrapper
    return frozenset(kinds)


FORWARDED_OBJECT, FORWARDED_PATH = "*obj", "*f"  # torch.save's arguments, forwarded by `*args`


def _forwards_star_args(call: cst.Call, function: cst.FunctionDef) -> bool:
    star = function.params.star_arg
    return (
        isinstance(star, cst.Param)
        and bool(call.args)
        and call.args[0].star == "*"
        and isinstance(call.args[0].value, cst.Name)
        and call.args[0].value.value == star.name.value
    )


def _forwarded(call: cst.Call, name: str, bound: bool) -> Optional[cst.BaseExpression]:
    """The caller's argument that a `*args`-forwarding helper hands torch.save as `obj` / `f`."""
    position = (0 if name == FORWARDED_OBJECT else 1) - (1 if bound else 0)
    if position < 0:
        return None
    return argument(call, position, "obj" if name == FORWARDED_OBJECT else "f")


def _parameter_entries(model, expr, at, keys, params, depth):
    """(parameter name, keys, None) for each parameter the saved object holds, directly or
    under literal keys; (parameter name, keys, the call) for each `parameter.state_dict()`."""
    if expr is None or depth <= 0:
        return
    if _is_parameter(model, expr, at, params):
        yield expr.value, keys, None
        return
    value, value_at, _ = resolve(model, expr, at)
    method = method_call(value) if isinstance(value, cst.Call) else None
    if method is not None and method[1] == "state_dict":
        receiver = peel_self_returning(method[0])
        if _is_parameter(model, receiver, value_at, params):
            yield receiver.value, keys, value
        return
    for key, value, value_at, _ in _literal_items(model, expr, at):
        yield from _parameter_entries(model, value, value_at, keys + (key,), params, depth - 1)


def _is_parameter(model: SemanticModel, expr, at: cst.CSTNode, params: set) -> bool:
    if not isinstance(expr, cst.Name) or expr.value not in params:
        return False
    binding = model.binding_at(expr.value, at)
    return binding is not None and isinstance(binding.node, cst.Param)


def _literal_items(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode):
    """(key, value, where it was written, whether a name was followed) for each entry with a
    literal string key of the dict display `expr` is or holds: `{"model": sd, "epoch": e}`;
    for a list or tuple display, each element under its position "[i]"."""
    value, value_at, chain = resolve(model, expr, at)
    if isinstance(value, (cst.List, cst.Tuple)):
        # `states = [model.state_dict(), optimizer.state_dict(), step]`: keyed by position
        # ("[0]", never equal to a string key a load reads)
        for index, element in enumerate(value.elements):
            if isinstance(element, cst.StarredElement):
                return
            yield f"[{index}]", element.value, value_at, bool(chain)
        return
    if not isinstance(value, cst.Dict):
        return
    for element in value.elements:
        if not isinstance(element, cst.DictElement):
            continue
        try:
            key = literal_value(element.key)
        except ValueError:
            continue
        if isinstance(key, str):
            yield key, element.value, value_at, bool(chain)


def enclosing_def(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return ancestor
    return None


def called_function(model: SemanticModel, call: cst.Call):
    """(the model of its file, the FunctionDef, whether `self` is bound) a call runs: a function
    of this file or of the project (`model.flow.callee`), or a method called on an instance
    built in place or held in a name (`Saver(out).dump(...)`, `saver = Saver(out)`)."""
    try:
        callee = model.flow.callee(call)
    except Exception:
        callee = None
    if callee is not None and isinstance(callee.node, cst.FunctionDef):
        return callee.model, callee.node, callee.bound
    func = call.func
    if isinstance(func, cst.Name):
        # `early_stopping(val_loss, model, path)` with `early_stopping = EarlyStopping(...)`:
        # the instance's `__call__` runs
        holder, method_name = func, "__call__"
    elif isinstance(func, cst.Attribute):
        module_function = _project_module_function(model, func)
        if module_function is not None:
            return module_function
        holder, method_name = func.value, func.attr.value
    else:
        return None
    try:
        instances = model.flow.values_at(holder, call)
    except Exception:
        return None
    found = None
    for instance in instances:
        if not isinstance(instance.expr, cst.Call):
            return None
        try:
            owner = instance.model.flow.callee(instance.expr)
        except Exception:
            owner = None
        if owner is None or not isinstance(owner.node, cst.ClassDef):
            return None
        method = class_method(owner.node, method_name)
        if method is None or (found is not None and found[1] is not method):
            return None
        found = (owner.model, method, True)
    return found


def _project_module_function(model: SemanticModel, func: cst.Attribute):
    """`utils.save_on_master` / `misc.save_checkpoint` with `import utils` / `from util import
    misc`: the function of that project module (needs a project)."""
    qualified = model.qualified_name(func)
    project = getattr(model, "project", None)
    if qualified is None or project is None or qualified.startswith("torch."):
        return None
    try:
        found = project.resolve(qualified, model)
    except Exception:
        return None
    if found is None or not isinstance(found[1], cst.FunctionDef):
        return None
    return found[0], found[1], False


SAVE_CALL = r"save\s*\("  # `torch.save(`, `xm.save(`, `torch_save(` (an alias of torch.save)


def _may_call_a_saver(model: SemanticModel, call: cst.Call) -> bool:
    """Whether `call` may run, by name, a project function that calls a `save(` (two calls
    deep): `save_checkpoint(...)`, `self.saver.dump(...)`, an instance's `__call__`."""
    return may_call_function_matching(model, call.func, SAVE_CALL)


def _saved_through_helper(model: SemanticModel, call: cst.Call, spells_state_dict: bool = True):
    """`Saver(out).dump(ddp.state_dict(), step)` / `save_checkpoint({"model": ddp.state_dict()})`:
    a wrapper's state dict handed to a function that saves that parameter. `spells_state_dict`
    False: the file has no `.state_dict` attribute anywhere (`_spells_state_dict`)."""
    if not _may_call_a_saver(model, call):
        return  # cheapest first: no function of that name in the project calls a `save(`
    candidates = [arg for arg in call.args if not arg.star]
    if not any(
        spells_state_dict and _may_hold_state_dict_at_call(model, arg.value, call) or _may_be_wrapper(model, arg.value)
        for arg in candidates
    ):
        return  # cheap: most calls hand over no state dict or wrapper, and resolving callees costs
    target = called_function(model, call)
    if target is None:
        return
    other, function, bound = target
    for saved in saved_parameters(other, function):
        if saved.state_dict_call is not None:
            yield from _helper_saves_wrapper_parameter(model, call, other, function, bound, saved)
            continue
        if saved.name == FORWARDED_OBJECT:
            passed = _forwarded(call, FORWARDED_OBJECT, bound)
            forwarded_path = _forwarded(call, FORWARDED_PATH, bound)
            if passed is None:
                continue
            path = checkpoint_path(model, forwarded_path, call) if forwarded_path is not None else saved.path
            for entry in _saved_entries(model, call, path, passed, call, (), False, MAX_DEPTH):
                entry.through_helper = True
                yield entry
            continue
        passed = model.flow.parameter_argument(call, function, saved.name, bound)
        if passed is None or passed is _default_of(function, saved.name):
            continue
        path = _helper_path(model, call, other, function, bound, saved)
        if saved.path_parameter is not None:
            path_argument = model.flow.parameter_argument(call, function, saved.path_parameter, bound)
            if path_argument is not None and path_argument is _default_of(function, saved.path_parameter):
                path = checkpoint_path(other, path_argument, path_argument)  # `path="last.pt"` in the def
            elif path_argument is not None:
                path = checkpoint_path(model, path_argument, call)
        for entry in _saved_entries(model, call, path, passed, call, (), False, MAX_DEPTH):
            entry.keys = entry.keys + saved.keys
            entry.through_helper = True
            yield entry


def _may_be_wrapper(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    """A cheap test: the argument is a wrapper's construction, or spells a name a wrapper was
    bound to (`model = DDP(model)`), or a name bound to what a project function of another
    file returns (`self.netG = networks.define_G(...)`: a factory may wrap)."""
    if not model.wrappings:
        return getattr(model, "project", None) is not None and _bound_to_imported_call(model, peel_self_returning(expr))
    expr = peel_self_returning(expr)
    if any(w.call is expr for w in model.wrappings):
        return True
    # A wrapper's key is a name or `self.x`: only a name or an attribute can spell one, as
    # does the owner of a sub-module wrapped in place (`model` of `model.encoder = DP(...)`)
    # and a name bound to an `AveragedModel(...)`.
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    text = model.code(expr)
    return text in {w.wrapper_key for w in model.wrappings} or any(text == owner.value for owner, _, _ in _submodule_wraps(model)) \
        or _bound_to_averaged_model(model, expr) or _bound_to_local_function_call(model, expr) \
        or _left_by_a_base_class(model, expr) \
        or any(value.known and any(w.call is value.expr for w in model.wrappings)
               for value in _attribute_set_unseen(model, expr, expr))


_STATE_DICT_SPELLED: "weakref.WeakKeyDictionary[SemanticModel, bool]" = weakref.WeakKeyDictionary()


def _spells_state_dict(model: SemanticModel) -> bool:
    """Whether an attribute `.state_dict` shows anywhere in the file: without one,
    `_may_hold_state_dict` is False for every expression of it (it only follows same-file
    bindings), and the per-argument walks are skipped."""
    found = _STATE_DICT_SPELLED.get(model)
    if found is None:
        found = _STATE_DICT_SPELLED[model] = any(
            node.attr.value == "state_dict" for node in model.nodes_of(cst.Attribute)
        )
    return found


def _bound_to_averaged_model(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    key = model.binding_key(expr, expr)
    return any(isinstance(b.value, cst.Call) and model.qualified_name(b.value.func) in AVERAGED_MODELS
               for b in model.bindings.get(key or "", ()))


def _bound_to_local_function_call(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    """A name bound (maybe by tuple unpacking) to what a function of this file returns
    (`self.netG, start = load_network()` with `return nn.DataParallel(netG), 0`)."""
    key = model.binding_key(expr, expr)
    for binding in model.bindings.get(key or "", ()):
        node = binding.node
        value = binding.value if binding.value is not None else getattr(node, "value", None) \
            if isinstance(node, (cst.Assign, cst.AnnAssign)) else None
        value = peel_self_returning(value) if value is not None else None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and any(
                isinstance(b.node, cst.FunctionDef) for b in model.bindings.get(value.func.value, ())):
            return True
    return False


def _left_by_a_base_class(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    """`self.model` read in a class whose project base class binds it (`self.model =
    self._build_model()` in `Exp_Basic.__init__`, the subclass's `_build_model` wrapping)."""
    key = model.binding_key(expr, expr)
    scope = model.scope(expr).class_scope
    return bool(key and key.startswith("self.") and scope is not None and isinstance(scope.node, cst.ClassDef)
                and model.flow.bases_binding(scope.node, key))


def _bound_to_imported_call(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    key = model.binding_key(expr, expr)
    for binding in model.bindings.get(key or "", ()):
        value = peel_self_returning(binding.value) if binding.value is not None else None
        if isinstance(value, cst.Call):
            qualified = model.qualified_name(value.func) or ""
            root = model.code(value.func).partition(".")[0]
            if root in model.imports and not qualified.startswith("torch."):
                return True
    return False


def _helper_saves_wrapper_parameter(model, call, other, function, bound, saved: SavedParameter):
    """`save_model(args, model, opt)` where `save_model` saves `model.state_dict()` and the
    caller's `model` is a DataParallel/DDP wrapper on some path that reaches the call (of a
    kind the helper does not unwrap first)."""
    passed = model.flow.parameter_argument(call, function, saved.name, bound)
    if passed is None or passed is _default_of(function, saved.name):
        return
    if _checked_for_wrapper_saves(model, other) and wrapper_state_dict(other, saved.state_dict_call, saved.state_dict_call) is not None:
        return  # the helper's own file sees the wrapper (its only caller passes one): reported there
    if saved.handed_on is not None and _checked_for_wrapper_saves(model, other) \
            and other.flow.wrapped_on_some_path(saved.handed_on, saved.handed_on) is not None:
        return  # where the helper hands it on, the wrapper is seen (its only caller): reported there
    if not model.wrappings and path_at(other, saved.state_dict_call):
        # the wrapper comes from another file's factory and the helper saves under a test
        # (`if len(self.gpu_ids) > 0: save(net.module...) else: save(net...)`) that may be
        # the factory's own: the tests cannot be matched across the three files
        return
    paths = _wrapper_paths(model, passed, call, contained=True)
    if paths is None:
        held = held_wrapper(model, passed, call, contained=True)
        wrappings = [held.wrapping] if held is not None else []
    else:
        wrappings = [wrapping for wrapping, _ in paths[1] if wrapping is not None]
    wrappings = [w for w in wrappings if w.kind not in saved.unwrapped]
    if not wrappings:
        return
    path = _helper_path(model, call, other, function, bound, saved)
    state_dict = WrapperStateDict(saved.state_dict_call, passed, wrappings[0], (), False, saved.name, bool(saved.unwrapped))
    yield SavedWrapperStateDict(call, path, saved.keys, state_dict, True, True)


def _checked_for_wrapper_saves(model: SemanticModel, other: SemanticModel) -> bool:
    """Whether a run checks the helper's file `other` for wrapper saves itself: the pre-filter
    skips a file that (with what it imports) never spells `DataParallel`, such as a base class
    whose `save_network(net, ...)` saves what a subclass in another file passes."""
    if other is model or getattr(other, "project", None) is None:
        return True
    from dplint.registry import rule_catalog
    from dplint.rule import tokens_match

    text = other.project.file_text(os.path.abspath(other.path))
    if text is None:
        return True
    closure = other.project.import_closure(other.path, text)
    tokens = next(entry.tokens for entry in rule_catalog() if entry.code == SAVE_WRAPPED_CODE)
    return tokens_match("\n".join((text, *closure.values())), tokens)


def _helper_path(model, call, other, function, bound, saved: SavedParameter) -> CheckpointPath:
    """Where a helper's torch.save writes, with its parameters read from this call:
    `def save_checkpoint(state, logdir, suffix=""): torch.save(state, logdir + "/SENet" +
    suffix)` called with `suffix="_valid_best"` writes "*/SENet_valid_best"."""
    if saved.save is None:
        return saved.path
    target = argument(saved.save, 1, "f")

    def outer(name: str) -> Optional[list[str]]:
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is None:
            return None
        if passed is _default_of(function, name):
            return _shape_parts(other, passed, passed, MAX_DEPTH)
        return _shape_parts(model, passed, call, MAX_DEPTH)

    shape = path_shape(other, target, saved.save, outer)
    if shape is None or shape == saved.path.shape:
        return saved.path
    literal = shape if "*" not in shape else None
    return CheckpointPath(literal or saved.path.literal, None, repr(literal) if literal else f"`{shape}`", shape)




def _calls_in(model: SemanticModel, function: cst.FunctionDef) -> list:
    """The call sites of `model.calls` whose innermost def (or lambda) is `function`, in order."""
    return model.calls_in(function)


_HOLDS_AT_CALL: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def _may_hold_state_dict_at_call(model: SemanticModel, expr: cst.BaseExpression, call: cst.Call) -> bool:
    """`_may_hold_state_dict` of an argument of a call, two names deep, once per file: a
    file's own saves and its helpers' summaries test the same arguments."""
    table = _HOLDS_AT_CALL.setdefault(model, {})
    key = (expr, call)
    if key not in table:
        table[key] = _may_hold_state_dict(model, expr, call, 2)
    return table[key]


def _may_hold_state_dict(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> bool:
    """A cheap test before resolving a callee: the argument spells `.state_dict`, or a name
    whose last assignment does (`state = {"model": ddp.state_dict()}`)."""
    stack = [expr] if expr is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value == "state_dict":
            return True
        if isinstance(node, cst.Name) and depth > 0:
            value = model.value_at(node, at)
            if value is not None and value is not node and _may_hold_state_dict(model, value, at, depth - 1):
                return True
        if isinstance(node, (cst.Lambda, cst.BaseComp)):
            continue
        stack.extend(model.children(node))
    return False


def _default_of(function: cst.FunctionDef, name: str):
    for param in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params):
        if param.name.value == name:
            return param.default
    return None


def _saved_entries(model, save, path, expr, at, keys, via_name, depth):
    if expr is None or depth <= 0:
        return
    found = wrapper_state_dict(model, expr, at)
    if found is not None:
        reached_by_name = via_name or found.call is not expr
        yield SavedWrapperStateDict(save, path, keys, found, reached_by_name)
        return
    value, _, chain = resolve(model, expr, at)
    if isinstance(value, cst.IfExp):
        # `m.module.state_dict() if cond else m.state_dict()`: each arm on its own path. An arm
        # whose test is not about the wrapper (`device_count() > 1` on an always-wrapped model)
        # still saves the wrapper's keys there.
        test = model.flow.condition(value.test)
        for arm in (value.body, value.orelse):
            for entry in _saved_entries(model, save, path, arm, arm, keys, via_name or bool(chain), depth - 1):
                if entry.state_dict.every_path or _wrapped_despite(model, entry.state_dict, test):
                    yield entry
        return
    for key, value, value_at, followed in _literal_items(model, expr, at):
        yield from _saved_entries(model, save, path, value, value_at, keys + (key,), via_name or followed, depth - 1)


def _loaded_checkpoint(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int = 3):
    """(LoadedCheckpoint or None, whether consume_prefix ran on the object on the way)."""
    keys: list[str] = []
    consumed = _consumed_objects(model)
    position = model.order(at)
    for _ in range(MAX_DEPTH):
        if expr is None:
            return None, False
        key = literal_key(expr)
        if key is not None:
            keys.insert(0, key)
            expr = expr.value
            continue
        name = model.binding_key(expr, at)
        if name is None:
            break
        binding = model.binding_at(name, at)
        if binding is None or binding.value is None:
            return None, False
        if any(b is binding and k == tuple(keys) and order < position for b, k, order in consumed):
            return None, True
        expr, at = binding.value, binding.node
    if isinstance(expr, cst.Call) and model.qualified_name(expr.func) == TORCH_LOAD:
        return LoadedCheckpoint(expr, checkpoint_path(model, argument(expr, 0, "f"), expr), tuple(keys)), False
    if isinstance(expr, cst.Call) and depth > 0:
        loaded = _loaded_by_helper(model, expr, depth - 1)
        if loaded is not None:
            return LoadedCheckpoint(loaded.call, loaded.path, loaded.keys + tuple(keys)), False
    return None, False


def _loaded_by_helper(model: SemanticModel, call: cst.Call, depth: int) -> Optional[LoadedCheckpoint]:
    """`fetch_state(folder)` whose every return is `torch.load(...)` of one path (in this file
    or another of the project): that checkpoint. Only its `shape` can match across files."""
    target = called_function(model, call)
    if target is None:
        return None
    other, function, _ = target
    found: Optional[LoadedCheckpoint] = None
    for statement in own_returns(function):
        loaded, consumed = _loaded_checkpoint(other, statement.value, statement, depth)
        if loaded is None or consumed:
            return None
        if found is not None and (found.path.shape != loaded.path.shape or found.keys != loaded.keys):
            return None
        found = loaded
    if found is None:
        return None
    # A path computed from the helper's parameters is not the same file as one in this file.
    path = CheckpointPath(None, None, found.path.text, found.path.shape)
    return LoadedCheckpoint(found.call, path, found.keys)


_CONSUMED: "weakref.WeakKeyDictionary[SemanticModel, list]" = weakref.WeakKeyDictionary()


def _consumed_objects(model: SemanticModel) -> list[tuple[Binding, tuple[str, ...], int]]:
    """The objects `consume_prefix_in_state_dict_if_present(x, "module.")` strips: (binding of
    the root name, literal keys below it, order of the call)."""
    if model not in _CONSUMED:
        _CONSUMED[model] = list(_find_consumed_objects(model))
    return _CONSUMED[model]


def _find_consumed_objects(model: SemanticModel):
    for site in model.calls:
        if site.qualified_name != CONSUME_PREFIX:
            continue
        try:
            prefix = literal_value(argument(site.node, 1, "prefix"))
        except ValueError:
            continue
        if prefix not in ("module.", "module"):
            continue
        expr = argument(site.node, 0, "state_dict")
        keys: list[str] = []
        while expr is not None and literal_key(expr) is not None:
            keys.insert(0, literal_key(expr))
            expr = expr.value
        name = model.binding_key(expr, site.node)
        binding = model.binding_at(name, site.node) if name else None
        if binding is not None:
            yield binding, tuple(keys), site.order


def _state_dict_loads(model: SemanticModel):
    for site in model.calls:
        method = method_call(site.node)
        if method is None or method[1] != "load_state_dict":
            continue
        call, target = site.node, method[0]
        state_dict = argument(call, 0, "state_dict")
        try:
            strict_false = literal_value(argument(call, 1, "strict")) is False
        except ValueError:
            strict_false = False
        held = held_wrapper(model, target, call)
        bare = None if held else bare_model_class(model, target, call)
        if bare is None and not held and _wrapped_later(model, target, call):
            bare = ""
        loaded, consumed = _loaded_checkpoint(model, state_dict, call)
        from_wrapper = None if consumed else _unconsumed_wrapper_state_dict(model, state_dict, call)
        yield StateDictLoad(
            call=call,
            target=target,
            target_is_wrapper=held.wrapping if held else None,
            target_wrapper_bindings=held.bindings if held else (),
            target_wrapped_on_every_path=bool(held and held.every_path),
            bare_class=bare,
            argument=state_dict,
            strict_false=strict_false,
            wrapper_state_dict=from_wrapper,
            loaded=loaded,
            prefix_consumed=consumed,
        )


def _wrapped_later(model: SemanticModel, target: cst.BaseExpression, call: cst.Call) -> bool:
    """`self.net = build_net(...)`, `self.net.load_state_dict(...)`, then `self.net =
    nn.DataParallel(self.net)` in the same function: whatever the factory returned, the load
    goes into the model before its wrap, a bare one (a wrapper is not wrapped again). In
    between, the name may only be rebound to a call given the model itself (`self.net =
    convert_syncbn_model(self.net)`, `self.net, opt = amp.initialize(self.net, opt)`)."""
    key = model.binding_key(target, call)
    if key is None:
        return False
    function = enclosing_def(model, call)
    at = model.order(call)
    spelled = model.code(target)
    for wrapping in model.wrappings:
        if not wrapping.rebinds or wrapping.inner_key != key or wrapping.order <= at:
            continue
        if enclosing_def(model, wrapping.call) is not function:
            continue
        between = [b for b in model.bindings.get(key, ()) if at < b.order < wrapping.order]
        if all(enclosing_def(model, b.node) is function and _converts(model, b, spelled) for b in between):
            return True
    return False


def _converts(model: SemanticModel, binding: Binding, spelled: str) -> bool:
    """The binding assigns a call that is given the model itself (`m = convert(m)`)."""
    value = binding.value
    if not isinstance(value, cst.Call) and isinstance(binding.node, cst.Assign):
        value = binding.node.value
    return isinstance(value, cst.Call) and any(model.code(arg.value) == spelled for arg in value.args)


def _unconsumed_wrapper_state_dict(model: SemanticModel, expr, at) -> Optional[WrapperStateDict]:
    found = wrapper_state_dict(model, expr, at)
    if found is None:
        return None
    consumed = _consumed_objects(model)
    position = model.order(at)
    _, _, chain = resolve(model, expr, at)
    if any(b is binding and k == () and order < position for binding in chain for b, k, order in consumed):
        return None
    return found


# ------------------------------------------------------------------------ fixes
def name_is_free(model: SemanticModel, name: str) -> bool:
    """No binding, import or read of `name` anywhere in the file (attribute names don't count)."""
    if name in model.bindings or name in model.imports:
        return False
    for node, _, _ in model.references.get(name, ()):
        parent = model.parent(node)
        if not (isinstance(parent, cst.Attribute) and parent.attr is node):
            return False
    return True


def name_is_read(model: SemanticModel, target: cst.Name) -> bool:
    """Whether the name an assignment target binds is used anywhere else in the file
    (conservatively: any other occurrence of the name that is not an attribute name)."""
    for node, _, _ in model.references.get(target.value, ()):
        parent = model.parent(node)
        if node is target or (isinstance(parent, cst.Attribute) and parent.attr is node):
            continue
        return True
    return False


def fresh_name(model: SemanticModel, base: str) -> str:
    name, number = base, 1
    while not name_is_free(model, name):
        name, number = f"{base}_{number}", number + 1
    return name


def has_multiline_string(node: cst.CSTNode) -> bool:
    """A string literal spanning lines: re-indenting the code around it would change its value."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_SimpleString(self, string: cst.SimpleString) -> None:
            nonlocal found
            found = found or "\n" in string.value or "\r" in string.value

        def visit_FormattedString(self, string: cst.FormattedString) -> None:
            nonlocal found
            found = found or string.start.endswith(('"""', "'''"))

    walk(node, Finder())
    return found


def wrapper_kind_name(wrapping: Wrapping) -> str:
    return WRAPPER_NAMES.get(wrapping.kind, wrapping.kind)
