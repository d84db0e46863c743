"""What a DataParallel / DistributedDataParallel wrapper is: the one recogniser that the flow
model (`Flow.wrappings_at`) and every rule ask, re-exported by `dplint.wrappers`.

A call builds a wrapper when the class it calls is one of `WRAPPER_CLASSES` (named through
the file's imports and aliases), or a class of the project, of this file or of another one,
that derives from one at any depth (`class MyDDP(DDP)`, `class Fast(MyDDP)` in another file).
What counts is what the class derives from, never its name: a project class named
`DataParallel` that derives from `nn.Module` is not a wrapper.

This module reads other files only through `model.flow` and `model.project`, and imports
nothing above the semantic model: the flow model can ask it without an import circle.
"""

from __future__ import annotations

import weakref
from typing import Optional

import libcst as cst

from dplint.semantic import WRAPPER_KINDS, SemanticModel, Wrapping, argument, peel_self_returning

# Classes whose objects keep the user's model as `.module`, run it in their own `forward`
# and prefix its state-dict keys with `module.`: torch's two, and the packages' wrappers
# built on them or copying them (apex's DDP keeps `self.module` and all-reduces in backward
# like torch's; mmcv's and mmengine's subclass torch's; PyG's `DataParallel` subclasses
# torch's). Not PyTorch-Encoding's `DataParallelModel`: its forward does not gather.
WRAPPER_CLASSES: dict[str, str] = {
    **WRAPPER_KINDS,
    "apex.parallel.DistributedDataParallel": "DDP",
    "apex.parallel.distributed.DistributedDataParallel": "DDP",
    "mmcv.parallel.MMDataParallel": "DP",
    "mmcv.parallel.data_parallel.MMDataParallel": "DP",
    "mmcv.parallel.MMDistributedDataParallel": "DDP",
    "mmcv.parallel.distributed.MMDistributedDataParallel": "DDP",
    "mmengine.model.MMDistributedDataParallel": "DDP",
    "mmengine.model.wrappers.MMDistributedDataParallel": "DDP",
    "mmengine.model.wrappers.distributed.MMDistributedDataParallel": "DDP",
    "torch_geometric.nn.DataParallel": "DP",
    "torch_geometric.nn.data_parallel.DataParallel": "DP",
}
# Public attributes the packages' wrappers add to the kind's own (`wrappers.wrapper_has`):
# mmcv's and mmengine's run a training step themselves (`model.train_step(data, optimizer)`).
LIBRARY_WRAPPER_ATTRIBUTES: dict[str, frozenset] = {
    "mmcv.parallel.MMDataParallel": frozenset({"train_step", "val_step", "scatter"}),
    "mmcv.parallel.MMDistributedDataParallel": frozenset({"train_step", "val_step", "scatter", "to_kwargs"}),
    "mmengine.model.MMDistributedDataParallel": frozenset({"train_step", "val_step", "test_step", "detect_anomalous_params"}),
    "apex.parallel.DistributedDataParallel": frozenset({
        "allreduce_params", "delay_allreduce", "disable_allreduce", "enable_allreduce", "message_size",
        "gradient_average", "gradient_predivide_factor", "world_size", "retain_allreduce_buffers",
    }),
}
for _long, _short in (("mmcv.parallel.data_parallel.MMDataParallel", "mmcv.parallel.MMDataParallel"),
                      ("mmcv.parallel.distributed.MMDistributedDataParallel", "mmcv.parallel.MMDistributedDataParallel"),
                      ("mmengine.model.wrappers.MMDistributedDataParallel", "mmengine.model.MMDistributedDataParallel"),
                      ("mmengine.model.wrappers.distributed.MMDistributedDataParallel", "mmengine.model.MMDistributedDataParallel"),
                      ("apex.parallel.distributed.DistributedDataParallel", "apex.parallel.DistributedDataParallel")):
    LIBRARY_WRAPPER_ATTRIBUTES[_long] = LIBRARY_WRAPPER_ATTRIBUTES[_short]

_MAX_DEPTH = 6  # base classes followed, and aliases (`Wrap = MyDDP`)
_CLASS_KINDS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()
_BUILT: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()
# The model each wrapping `wrapping_built_by` answered with belongs to (a weak reference: the
# model holds its wrappings), for rules that read the other file's code around it.
_OWNERS: "weakref.WeakKeyDictionary[Wrapping, weakref.ref]" = weakref.WeakKeyDictionary()


def wrapper_kind(model: SemanticModel, func: Optional[cst.BaseExpression], depth: int = _MAX_DEPTH) -> Optional[str]:
    """"DP" / "DDP" when calling `func` builds a wrapper (see the module doc), else None."""
    found = wrapper_class(model, func, depth)
    return found[0] if found is not None else None


def wrapper_class(model: SemanticModel, func: Optional[cst.BaseExpression], depth: int = _MAX_DEPTH) -> Optional[tuple]:
    """(kind, the library wrapper class's qualified name, (model, ClassDef) of the project
    class called or None) when calling `func` builds a wrapper."""
    if func is None or depth <= 0:
        return None
    name = model.qualified_name(func)
    if name in WRAPPER_CLASSES:
        return WRAPPER_CLASSES[name], name, None
    if isinstance(func, cst.Name):
        alias = _alias_value(model, func)
        if alias is not None:  # `Wrapper = DDP if distributed else DP` is two classes: not followed
            return wrapper_class(model, alias, depth - 1)
    found = project_class(model, func)
    if found is None:
        return None
    inherited = class_wrapper(found[0], found[1], depth - 1)
    return None if inherited is None else (inherited[0], inherited[1], found)


def class_wrapper(model: SemanticModel, class_node: cst.ClassDef, depth: int = _MAX_DEPTH) -> Optional[tuple]:
    """(kind, library class) when a project class derives from a wrapper class, at any depth."""
    known = _CLASS_KINDS.setdefault(model, {})
    if class_node not in known:
        known[class_node] = None  # while deciding: a class that derives from itself is none
        for base in class_node.bases:
            if base.keyword is None:
                found = wrapper_class(model, base.value, depth)
                if found is not None:
                    known[class_node] = found[:2]
                    break
    return known[class_node]


def project_class(model: SemanticModel, func: cst.BaseExpression) -> Optional[tuple[SemanticModel, cst.ClassDef]]:
    """(model, ClassDef) of the project class `func` names: defined once in this file, or
    imported (by name, by star import, or as `package.module.Class`) from a project file."""
    if isinstance(func, cst.Name):
        bindings = model.bindings.get(func.value, ())
        class_def = model.classes.get(func.value)
        if class_def is not None and bindings and all(b.node is class_def for b in bindings):
            return model, class_def
        if class_def is not None or len(bindings) > 1:
            return None  # bound more than once: which class runs is not known
        if bindings and not isinstance(bindings[0].node, (cst.ImportFrom, cst.Import)):
            return None
        if not _may_be_a_class(model, func):
            return None
        try:
            resolved = model.flow.resolve_import(func.value)
        except Exception:  # a project that cannot answer is the same as none
            return None
        return resolved if resolved is not None and isinstance(resolved[1], cst.ClassDef) else None
    project = getattr(model, "project", None)
    qualified = model.qualified_name(func) if isinstance(func, cst.Attribute) else None
    if project is None or qualified is None or qualified.startswith("torch.") or not _may_be_a_class(model, func):
        return None
    try:
        resolved = project.resolve(qualified, model)
    except Exception:
        return None
    return resolved if resolved is not None and isinstance(resolved[1], cst.ClassDef) else None


def _may_be_a_class(model: SemanticModel, func: cst.BaseExpression) -> bool:
    """False when the project definition an imported name denotes is, read as text, neither a
    class nor anything naming a wrapper (a cost gate: the answer is never a finding's reason,
    and True wherever the text cannot tell)."""
    project = getattr(model, "project", None)
    head = func
    while isinstance(head, cst.Attribute):
        head = head.value
    if project is None or not isinstance(head, cst.Name) or head.value not in model.imports:
        return True
    qualified = model.qualified_name(func)
    if qualified is None:
        return True
    try:
        return project.mentions(qualified, model, ("class ", "DataParallel"))
    except Exception:
        return True


def _alias_value(model: SemanticModel, name: cst.Name) -> Optional[cst.BaseExpression]:
    """`Wrapper = DistributedDataParallel` (or `= apex.parallel.DistributedDataParallel`),
    bound once in the file: the class the alias names."""
    bindings = model.bindings.get(name.value, ())
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign):
        return None
    value = bindings[0].value
    return value if isinstance(value, (cst.Name, cst.Attribute)) and value is not name else None


def wrapping_built_by(model: SemanticModel, expr: Optional[cst.CSTNode]) -> Optional[Wrapping]:
    """The wrapping `expr` (an expression of `model`) constructs: one of the semantic model's
    torch constructions, or a `Wrapping` for any other call `wrapper_kind` recognises."""
    if type(expr) is not cst.Call:
        return None
    built = _BUILT.setdefault(model, {})
    if expr not in built:
        built[expr] = next((w for w in model.wrappings if w.call is expr), None)
        if built[expr] is None:
            kind = wrapper_kind(model, expr.func)
            if kind is not None:
                built[expr] = _wrapping(model, kind, expr)
        if built[expr] is not None:
            _OWNERS[built[expr]] = weakref.ref(model)
    return built[expr]


def owner_of(wrapping: Wrapping) -> Optional[SemanticModel]:
    """The model whose tree holds a wrapping `wrapping_built_by` answered with (None if unknown)."""
    found = _OWNERS.get(wrapping)
    return found() if found is not None else None


def built_here(model: SemanticModel, wrapping: Wrapping) -> bool:
    """Whether `wrapping` is one of `model`'s own constructions (`wrapping_built_by` made it)."""
    return wrapping in model.wrappings or _BUILT.get(model, {}).get(wrapping.call) is wrapping


def constructions(model: SemanticModel) -> list[Wrapping]:
    """Every wrapper construction of the file, in source order (`wrapping_built_by` of each call)."""
    return [w for w in (wrapping_built_by(model, site.node) for site in model.calls) if w is not None]


def _wrapping(model: SemanticModel, kind: str, call: cst.Call) -> Wrapping:
    inner = peel_self_returning(argument(call, 0, "module"))
    binding = model._binding_of_value(call)
    return Wrapping(
        kind=kind,
        call=call,
        inner=inner,
        inner_key=model.binding_key(inner, call) if inner is not None else None,
        wrapper_key=binding.key if binding is not None else None,
        binding=binding,
        scope=model.scope(call),
        order=model.order(call),
    )


def wrapper_test_kinds(model: SemanticModel, test: cst.BaseExpression, target: str) -> Optional[tuple[str, ...]]:
    """The wrapper kinds a test of the object spelled `target` holds for: `hasattr(m, "module")`
    (("DP", "DDP"): a wrapper keeps the model there), `isinstance(m, DDP)` or a tuple of wrapper
    classes (their kinds); None for any other test."""
    if not (isinstance(test, cst.Call) and len(test.args) == 2 and model.code(test.args[0].value) == target):
        return None
    second = test.args[1].value
    if isinstance(test.func, cst.Name) and test.func.value == "hasattr":
        return ("DP", "DDP") if isinstance(second, cst.SimpleString) and second.evaluated_value == "module" else None
    if isinstance(test.func, cst.Name) and test.func.value == "isinstance":
        classes = [e.value for e in second.elements] if isinstance(second, cst.Tuple) else [second]
        kinds = [wrapper_kind(model, c) for c in classes]
        return tuple(dict.fromkeys(kinds)) if kinds and None not in kinds else None
    return None
