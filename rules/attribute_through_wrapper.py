"""DPL015 attribute-through-wrapper: an attribute of the user's model read through a wrapper."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel
from dplint.training import handed_in, inherited_wrappers, names_an_entry, wrappings as wrappers_built
from dplint.project import owns
from dplint.wrappers import (
    WRAPPER_CLASS_NAMES,
    is_store,
    lacks_tested_attribute,
    narrowed_to_wrapper,
    tied_to_a_wrapper_having,
    unwrapped_by_a_helper,
    wrapper_has,
    wrapper_kinds_by_test,
    wrapper_paths,
    wrapping_model,
)
from dplint.wrappers import conditions_at, feasible, wrapping_built_by, wrapping_has


class AttributeThroughWrapper(Rule):
    """
    ## What it does
    Flags an attribute or method of the user's model read through a `DataParallel` /
    `DistributedDataParallel` wrapper (`ddp.features(x)`, `dp.fc`, `dp.num_classes`), where
    the name holds the wrapper on at least one path: `model = DDP(model)` before it, or
    `if distributed: model = DDP(model)`. The wrapper is followed through names, branches,
    `self.x` attributes, same-file functions that build and return it, imported project
    files, parameters that other files' callers fill (`train(model)` in `main.py` after
    `model = DDP(model)`; `Trainer(model)` stored as `self.model`), and into subclasses: `self.net = DDP(self.net)` in `BaseTrainer.__init__` (this
    file or another) is what `self.net` holds in `class Trainer(BaseTrainer)` unless the
    subclass's constructor replaces it; the base class's test (`if cfg.dist:`) is then the
    instance's own construction, not a caller's configuration, so the read is flagged on the
    wrapped path, and stays silent under the same test's `else` (`self.net.module.x if
    self.cfg.dist else self.net.x`). Attributes the wrapper has itself (everything of `nn.Module`, and what
    `DataParallel` / DDP add: `module`, `device_ids`, `no_sync`, ...; torch 2.13's own
    list) are never flagged, nor names that start with `_`, nor a wrapped optimizer's
    methods (optimizer-in-dataparallel, DPL010, reports those).

    A test of the object itself is evidence of what it is on its branch, whatever the flow
    knows of its values: where `hasattr(m, "module")` or `isinstance(m, DDP)` holds and `m`
    is not rebound since, `m.model` reads through a wrapper (`m.module.model[-1] if
    hasattr(m, "module") else m.model[-1]` written with the two sides swapped).

    Silent when the code cannot tell what the name holds (a parameter that callers pass
    different things, an unknown library's wrapper or a project subclass with its own
    `__getattr__`), when the wrapper exists only on some paths and those are decided in
    another file (a factory's `if opt.isTrain:`; but where the only bare path is this file's own
    `net.module if n_gpu > 1 else net` of a wrapper the other file always builds, the other path is
    that wrapper and is flagged), when the attribute is assigned on the wrapper in the file
    (`ddp.epoch = 0`; or on the same wrapper object through another name, in this file or the
    one that made it: `dp.optimize = False`, read as `feature_maker.optimize` in the function
    `dp` is passed to), under the very test that made the wrapper that has the attribute when
    the wrapper lacking it was made under another (`if n_gpu > 1: DataParallel` /
    `elif local_rank != -1: DDP`, then `if step_skips and local_rank != -1: model.no_sync()`:
    the parts of a compound test are judged one by one), and under a test of the object itself (`if hasattr(m, "features")`,
    `isinstance(m, DDP)` in its `else`; but where `hasattr(m, "config")` failed, `m.config`
    is flagged: the object was just found to lack it), and on what a project unwrap helper returned
    (`self.net = self.bare_net()` with `bare_net` a method, of this file or a base class's
    file, returning `m.module` where it tests `isinstance(m, DataParallel)` or
    `hasattr(m, "module")`, `m` otherwise).

    ## Why is this bad?
    A wrapper is an `nn.Module` whose only sub-module is `module`; `nn.Module.__getattr__`
    does not forward to it, so in torch 2.13 the read raises
    `AttributeError: 'DistributedDataParallel' object has no attribute 'features'`
    (`'DataParallel' object has no attribute 'fc'` for `nn.DataParallel`). The script works on
    one GPU, where the wrapper is skipped, and crashes on the multi-GPU path.

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    feats = model.extract_features(x)
    ```

    Use instead:
    ```python
    model = DDP(model, device_ids=[rank])
    feats = model.module.extract_features(x)
    ```

    ## Fix safety
    The fix inserts `.module` (`model.module.extract_features`); it is safe when the name
    holds a wrapper on every path, because the code it changes raises today. Where the name
    is a wrapper only on some paths (`if torch.cuda.device_count() > 1:`), `.module` would break
    the bare path: the fix reads `getattr(model, "module", model).extract_features`, right on
    both, and is unsafe, since a bare model with a `module` attribute of its own would change.
    """

    code = "DPL015"
    name = "attribute-through-wrapper"
    severity = Severity.ERROR
    summary = "an attribute of the model read through a DataParallel/DDP wrapper raises AttributeError"
    fix_applicability = Applicability.SAFE
    fix_safety = "safe when wrapped on every path, else unsafe"
    tokens = ("DataParallel",)  # DistributedDataParallel contains it too

    VALID = (
        # The wrapper's own API.
        "import torch.nn as nn\n"
        "model = nn.DataParallel(net)\n"
        "model.train()\n"
        "params = model.parameters()\n"
        "inner = model.module.features\n",
        # Unwrapped before use.
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(net)\n"
        "model = model.module\n"
        "feats = model.features(x)\n",
        # Guarded by a test of the object itself.
        "import torch.nn as nn\n"
        "model = nn.DataParallel(net) if n > 1 else net\n"
        "head = model.module.head if hasattr(model, 'module') else model.head\n",
        # Set on the wrapper by the user, then read.
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(net)\n"
        "model.epoch = 0\n"
        "print(model.epoch)\n",
    )
    INVALID = (
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(net, device_ids=[rank])\n"
            "feats = model.extract_features(x)\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(net, device_ids=[rank])\n"
                "feats = model.module.extract_features(x)\n"
            ),
        ),
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "model = Net()\n"
            "if torch.cuda.device_count() > 1:\n"
            "    model = nn.DataParallel(model)\n"
            "print(model.num_classes)\n",
            expected=(  # right on both paths: `model.module` would raise on one GPU
                "import torch\n"
                "import torch.nn as nn\n"
                "model = Net()\n"
                "if torch.cuda.device_count() > 1:\n"
                "    model = nn.DataParallel(model)\n"
                'print(getattr(model, "module", model).num_classes)\n'
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        only_inherited = not wrappers_built(model)
        # no wrapper built here, returned by a helper the file calls or left by a base class:
        # only a test of the object itself can say it is one
        only_tested = only_inherited and not inherited_wrappers(model) and model.project is None
        if only_tested and "module" not in model.text and "isinstance" not in model.text:
            return
        stored = _assigned_attributes(model)
        stores: dict = {}  # per model: attribute -> the Attribute nodes that assign it
        for node in model.nodes_of(cst.Attribute):
            if is_store(model, node):
                continue
            attribute = node.attr.value
            if attribute.startswith("_") or (wrapper_has("DP", attribute) and wrapper_has("DDP", attribute)):
                continue
            base = node.value
            key = model.binding_key(base, node)
            tested = wrapper_kinds_by_test(model, base, node) if key is not None else None
            if tested is not None:
                if (key, attribute) not in stored and not any(wrapper_has(kind, attribute) for kind in tested):
                    yield _read_on_tested_wrapper(model, node, tested)
                continue
            if only_tested:
                continue
            if key is None:
                if only_inherited or not names_an_entry(model, base, node):
                    continue  # `nets["G"].x` with `nets = {"G": DDP(g)}` names one object, as a name does
            elif (key, attribute) in stored:
                continue
            # No wrapper built in this file: a base class's, one handed in, or one a call of
            # another file returns on every path (`model, ema = build_training_mode(cfg, m)`).
            gated = key is not None and only_inherited and not (
                _inherited_attribute(model, key, node) or handed_in(model, key, node))
            if gated and not _returned_by_a_call(model, key, node):
                continue
            wrappings, wrapped, bare = wrapper_paths(model, base, node)
            if gated and bare:
                continue
            wrappings = [w for w in wrappings if not wrapping_has(model, w, attribute) and not wraps_optimizer(model, w)]
            if not wrappings or (narrowed_to_wrapper(model, base, node) is not None
                                 and not lacks_tested_attribute(model, base, node, attribute)):
                continue  # a test of the object decides this branch, unless it found the attribute missing
            wrappings = [w for w in wrappings if not _set_on_wrapper(model, w, attribute, stores)]
            if not wrappings:
                continue  # `dp.optimize = False` on that very wrapper, read here under another name
            if bare and not any(wrapping_model(model, w) is model for w in wrappings) \
                    and not bare_only_where_unwrapped(model, base, node) \
                    and not made_by_a_base_class(model, base, node, wrappings):
                # Wrapped only on some paths, decided in another file (`if opt.isTrain:` in a
                # factory): the caller's configuration usually settles it; say nothing. Unless
                # the bare paths are this file's own `net.module` (`base = net.module if
                # n_gpu > 1 else net`): then the other path is the wrapper itself.
                continue
            if tied_to_a_wrapper_having(model, base, node, attribute):
                continue  # `if local_rank != -1: model.no_sync()`, the test that made the DDP
            if unwrapped_by_a_helper(model, base, node):
                continue  # `g = self.bare_gen()`: a helper that returns `.module` of a wrapper, else the object
            kind = WRAPPER_CLASS_NAMES[wrappings[0].kind]
            line = model.position(wrappings[0].call)[0].line if wrappings[0].scope is not None and owns(model, wrappings[0].call) else None
            where = "" if bare == 0 else f" on the path where it is wrapped{f' (line {line})' if line else ''}"
            target = model.code(base)
            if bare:
                # wrapped only on some paths: `target.module` would raise on the others
                inner = f'getattr({target}, "module", {target})'
                advice = f"read it from the wrapped model where there is one, `{inner}.{attribute}`"
                fix = Fix(
                    Applicability.UNSAFE,
                    f"Read `{attribute}` from `{inner}`",
                    (Edit(node, node.with_changes(value=cst.parse_expression(inner))),),
                ) if _names_only(base) else None  # a call would run twice
            else:
                advice = f"read it from the wrapped model, `{target}.module.{attribute}`"
                fix = Fix(
                    Applicability.SAFE,
                    f"Read `{attribute}` from `{target}.module`",
                    (Edit(node, node.with_changes(value=cst.Attribute(base, cst.Name("module")))),),
                )
            yield Violation(
                node=node,
                message=(
                    f"`{target}.{attribute}` reads `{attribute}` through the {kind} wrapper{where}: torch raises "
                    f"`AttributeError: '{kind}' object has no attribute '{attribute}'`; {advice}"
                ),
                fix=fix,
            )


def _read_on_tested_wrapper(model: SemanticModel, node: cst.Attribute, kinds: tuple) -> Violation:
    """`m.x` where the enclosing test says `m` is a wrapper: `m.module.x` is what it meant."""
    target, attribute = model.code(node.value), node.attr.value
    kind = " or ".join(WRAPPER_CLASS_NAMES[k] for k in kinds)
    return Violation(
        node=node,
        message=(
            f"`{target}.{attribute}` reads `{attribute}` through the {kind} wrapper that the enclosing test "
            f"finds `{target}` to be: torch raises `AttributeError: '{WRAPPER_CLASS_NAMES[kinds[0]]}' object has no "
            f"attribute '{attribute}'`; read it from the wrapped model, `{target}.module.{attribute}`"
        ),
        fix=Fix(
            Applicability.SAFE,
            f"Read `{attribute}` from `{target}.module`",
            (Edit(node, node.with_changes(value=cst.Attribute(node.value, cst.Name("module")))),),
        ),
    )


def _returned_by_a_call(model: SemanticModel, key: str, node: cst.CSTNode) -> bool:
    """Some binding of `key` in the file takes what a project call returns (`m = build(...)`,
    `m, ema = build(...)`): the flow model may follow it into the callee."""
    for binding in model.bindings.get(key, ()):
        value = binding.value
        if value is None and isinstance(binding.node, cst.Assign):
            value = binding.node.value  # one target of `a, b = build(...)`
        if isinstance(value, cst.Call) and not (model.qualified_name(value.func) or "").startswith("torch"):
            return True
    return False


def _names_only(expr: cst.BaseExpression) -> bool:
    """`model`, `self.model`: an expression that may be read twice without running anything new."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def wraps_optimizer(model: SemanticModel, wrapping) -> bool:
    """`nn.DataParallel(optimizer)`: optimizer-in-dataparallel (DPL010) reports that one."""
    owner = wrapping_model(model, wrapping)
    if owner is None or wrapping.inner is None:
        return False
    for value in owner.flow.values_at(wrapping.inner, wrapping.call):
        if value.known and isinstance(value.expr, cst.Call):
            name = value.model.qualified_name(value.expr.func) or ""
            if name.startswith("torch.optim."):
                return True
    return False


def _inherited_attribute(model: SemanticModel, key: str, at: cst.CSTNode) -> bool:
    """`self.x` read in a class whose project base class binds `self.x` (the only way a wrapper
    built in another file's base class reaches a file that builds none)."""
    scope = model.scope(at).class_scope
    return key.startswith("self.") and scope is not None and isinstance(scope.node, cst.ClassDef) \
        and bool(model.flow.bases_binding(scope.node, key))


def made_by_a_base_class(model: SemanticModel, base: cst.BaseExpression, at: cst.CSTNode, wrappings) -> bool:
    """`self.net` read in a class whose project base class (another file's `BaseTrainer`) built
    one of `wrappings` in its own methods: the instance's own construction decided it, as if it
    were this class's code, not a factory's caller configuration."""
    scope = model.scope(at)
    if not model.code(base).startswith(f"{scope.self_name}.") or scope.class_scope is None:
        return False
    bases = [c for _, c in model.flow.project_bases(scope.class_scope.node)]
    for wrapping in wrappings:
        owner = wrapping_model(model, wrapping)
        if owner is None:
            continue
        made_in = next((a for a in owner.ancestors(wrapping.call) if isinstance(a, cst.ClassDef)), None)
        if made_in is not None and any(made_in is c for c in bases):
            return True
    return False


def bare_only_where_unwrapped(model: SemanticModel, base: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Every feasible value of `base` at `at` that is not a wrapper is a `.module` this file reads
    off one (`base = net.module if n_gpu > 1 else net`): where it is not unwrapped here, it is the
    wrapper the other file built, whatever that file decided."""
    unwrapped = 0
    here = conditions_at(model, at)
    for value in model.flow.values_at(base, at):
        if not feasible((*value.conditions, *here)):
            continue
        if value.known and wrapping_built_by(value.model, value.expr) is not None:
            continue
        if not (value.known and value.model is model and isinstance(value.expr, cst.Attribute)
                and value.expr.attr.value == "module"):
            return False
        unwrapped += 1
    return unwrapped > 0


def _set_on_wrapper(model: SemanticModel, wrapping, attribute: str, stores: dict) -> bool:
    """Whether `attribute` is assigned on the wrapper object `wrapping` made, through any name
    that holds it (`model = DataParallel(net); model.optimize = False`, then read as
    `feature_maker.optimize` in the function it is passed to): an instance attribute of the
    wrapper, so the read works. Stores of this file and of the file that made the wrapper."""
    for owner in dict.fromkeys((model, wrapping_model(model, wrapping))):
        if owner is None:
            continue
        if id(owner) not in stores:
            found: dict = {}
            for node in owner.nodes():
                if isinstance(node, cst.Attribute) and is_store(owner, node):
                    found.setdefault(node.attr.value, []).append(node)
            stores[id(owner)] = found
        for store in stores[id(owner)].get(attribute, ()):
            if any(value.known and value.expr is wrapping.call for value in owner.flow.values_at(store.value, store)):
                return True
    return False


def _assigned_attributes(model: SemanticModel) -> set[tuple[str, str]]:
    """(key, attribute) pairs assigned anywhere in the file (`ddp.epoch = 0`, `setattr(ddp, "x", v)`),
    except on an object known to be no wrapper there (`model.head = Head()` before
    `model = DDP(model)`: the bare model gets the attribute, the wrapper made later does not)."""
    found = set()
    for node in model.nodes_of(cst.Attribute):
        if is_store(model, node):
            key = model.binding_key(node.value, node)
            if key is not None and not _known_bare_at(model, node.value, node):
                found.add((key, node.attr.value))
    for site in model.calls:
        call = site.node
        if isinstance(call.func, cst.Name) and call.func.value == "setattr" and len(call.args) >= 2:
            key = model.binding_key(call.args[0].value, call)
            name = call.args[1].value
            if key is not None and isinstance(name, cst.SimpleString):
                found.add((key, name.evaluated_value))
    return found


def _known_bare_at(model: SemanticModel, base: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Every value `base` may hold at `at` is known, and none is a wrapper."""
    if isinstance(base, cst.Name) and base.value == model.scope(at).self_name:
        return False  # `self.x = v` in a method: the instance, whatever class it is
    values = model.flow.values_at(base, at)
    return bool(values) and all(v.known for v in values) and all(w is None for w, _ in model.flow.wrappings_at(base, at))
