"""Shared knowledge of the input pipeline: which expressions are DataLoaders and samplers,
where a sampler goes (its loaders, the loops over them), and which loops are epoch loops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from dplint.semantic import (
    DATA_LOADER,
    DISTRIBUTED_SAMPLER,
    Binding,
    SemanticModel,
    argument,
    peel_self_returning,
    static_truth,
)
from dplint.training import backprops

# torch's own samplers: any of them next to a truthy `shuffle` makes DataLoader raise.
TORCH_SAMPLERS = {
    DISTRIBUTED_SAMPLER,
    "torch.utils.data.RandomSampler",
    "torch.utils.data.SequentialSampler",
    "torch.utils.data.SubsetRandomSampler",
    "torch.utils.data.WeightedRandomSampler",
    "torch.utils.data.sampler.RandomSampler",
    "torch.utils.data.sampler.SequentialSampler",
    "torch.utils.data.sampler.SubsetRandomSampler",
    "torch.utils.data.sampler.WeightedRandomSampler",
}

# DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, ...)
LOADER_SHUFFLE = (2, "shuffle")
LOADER_SAMPLER = (3, "sampler")


def is_loader_call(model: SemanticModel, call: cst.Call) -> bool:
    return model.qualified_name(call.func) == DATA_LOADER


def sampler_call(model: SemanticModel, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None) -> Optional[cst.Call]:
    """The torch sampler construction an expression holds (inline or through names), or None."""
    value = peel_self_returning(model.value_at(expr, at))
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in TORCH_SAMPLERS:
        return value
    return None


def loader_sampler(model: SemanticModel, loader: cst.Call) -> Optional[cst.Call]:
    """The sampler construction passed to a DataLoader call, or None when unknown or absent."""
    return sampler_call(model, argument(loader, *LOADER_SAMPLER), loader)


def is_distributed_sampler(model: SemanticModel, call: Optional[cst.Call]) -> bool:
    return call is not None and model.qualified_name(call.func) == DISTRIBUTED_SAMPLER


# ------------------------------------------------------------------ epochs and set_epoch
# DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False)
SAMPLER_SHUFFLE = (3, "shuffle")
SAMPLER_SEED = (4, "seed")
# DataLoader(..., batch_sampler=None) is its fifth parameter; BatchSampler(sampler, batch_size, drop_last)
LOADER_BATCH_SAMPLER = (4, "batch_sampler")
BATCH_SAMPLERS = {"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"}
BATCH_SAMPLER_SAMPLER = (0, "sampler")

# Builtins that take a sampler or loader without keeping or changing it.
HARMLESS_BUILTINS = {"len", "isinstance"}
# Callables whose result, iterated by a `for`, iterates their argument once, in order.
ITERATION_BUILTINS = {"enumerate", "zip", "iter"}
TQDM_NAMES = {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm.rich.tqdm"}
TRANGE_NAMES = {"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "tqdm.std.trange", "tqdm.rich.trange"}
# What a sampler holder exposes on the way to its sampler; touching one of these off the
# path we follow may reach the sampler in a way we don't track.
SAMPLER_ATTRIBUTES = {"sampler", "batch_sampler", "set_epoch", "epoch"}


@dataclass(eq=False)
class SamplerFlow:
    """Where one sampler construction goes, as far as this file shows.

    `holders` are the bindings that reach the sampler, each with the attribute path from
    the name to the sampler: (`sampler`, ()), (`train_loader`, ("sampler",)),
    (`loader`, ("batch_sampler", "sampler")), and whether the name surely holds it (not when
    `sampler = None` may still be there: `sampler = None` / `if ddp: sampler = ...`). `escapes` is set as soon as the sampler or a
    holder goes where the file can't follow it (an unknown call, a return, a container):
    then nothing can be said about its epochs.
    """

    sampler: cst.Call
    iterations: list[cst.For] = field(default_factory=list)  # `for` loops over it or its loader
    # (binding, path, certain): certain when, wherever the name is live, it holds this value
    holders: list[tuple[Binding, tuple[str, ...], bool]] = field(default_factory=list)
    sets_epoch: bool = False  # `.set_epoch(...)` (or `.epoch = ...`) reaches it somewhere
    escapes: bool = False


def is_shuffling_distributed_sampler(model: SemanticModel, call: cst.Call) -> bool:
    """`DistributedSampler(ds)` or with a provably true `shuffle` (its default is True)."""
    if model.qualified_name(call.func) != DISTRIBUTED_SAMPLER or any(arg.star for arg in call.args):
        return False
    shuffle = argument(call, *SAMPLER_SHUFFLE)
    return shuffle is None or static_truth(model, shuffle, call) is True


def trace_sampler(model: SemanticModel, sampler: cst.Call) -> SamplerFlow:
    """Follow a sampler construction through names, loaders and batch samplers."""
    flow = SamplerFlow(sampler)
    _follow(model, sampler, (), flow, set(), True)
    return flow


def _follow(model: SemanticModel, occurrence: cst.CSTNode, path: tuple[str, ...], flow: SamplerFlow, seen: set,
            certain: bool) -> None:
    """Classify one place an expression reaching the sampler (by `path`) is used."""
    if flow.escapes:
        return
    parent = model.parent(occurrence)
    if isinstance(parent, cst.Attribute) and parent.value is occurrence:
        attribute = parent.attr.value
        if path and attribute == path[0]:
            _follow(model, parent, path[1:], flow, seen, certain)
        elif not path and attribute in ("set_epoch", "epoch"):
            flow.sets_epoch = True
        elif attribute in SAMPLER_ATTRIBUTES:
            flow.escapes = True
        # any other attribute (`loader.dataset`, `sampler.num_samples`) is only read
        return
    if isinstance(parent, cst.Arg) and parent.value is occurrence:
        _follow_argument(model, parent, path, flow, seen, certain)
        return
    if isinstance(parent, cst.For) and parent.iter is occurrence:
        flow.iterations.append(parent)
        return
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is occurrence:
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        key = model.binding_key(targets[0], parent) if len(targets) == 1 else None
        binding = next((b for b in model.bindings.get(key or "", ()) if b.node is parent), None)
        if binding is None:
            flow.escapes = True
        else:
            _follow_binding(model, binding, path, flow, seen, certain)
        return
    if isinstance(parent, cst.IfExp) and occurrence is not parent.test:
        other = parent.orelse if occurrence is parent.body else parent.body
        if not (isinstance(other, cst.Name) and other.value == "None"):
            flow.escapes = True
            return
        _follow(model, parent, path, flow, seen, False)  # `DistributedSampler(ds) if ddp else None`
        return
    if _only_tested(parent, occurrence):
        return
    flow.escapes = True


def _only_tested(parent: Optional[cst.CSTNode], occurrence: cst.CSTNode) -> bool:
    """`if sampler:`, `sampler is None`, `not sampler`, a bare expression statement."""
    if isinstance(parent, (cst.If, cst.While, cst.IfExp)):
        return parent.test is occurrence
    if isinstance(parent, cst.UnaryOperation):
        return isinstance(parent.operator, cst.Not)
    return isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Expr))


def _follow_argument(model: SemanticModel, arg: cst.Arg, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                     certain: bool) -> None:
    call = model.parent(arg)
    value = arg.value
    if not isinstance(call, cst.Call):
        flow.escapes = True  # a class base, a decorator argument...
        return
    name = model.qualified_name(call.func)
    if arg.star:
        flow.escapes = True
    elif name == DATA_LOADER and argument(call, *LOADER_SAMPLER) is value:
        _follow(model, call, ("sampler", *path), flow, seen, certain)
    elif name == DATA_LOADER and argument(call, *LOADER_BATCH_SAMPLER) is value:
        _follow(model, call, ("batch_sampler", *path), flow, seen, certain)
    elif name in BATCH_SAMPLERS and argument(call, *BATCH_SAMPLER_SAMPLER) is value:
        _follow(model, call, ("sampler", *path), flow, seen, certain)
    elif builtin_name(model, call.func) in HARMLESS_BUILTINS:
        pass
    elif is_iteration_wrapper(model, call) and iterating_loop(model, call) is not None:
        flow.iterations.append(iterating_loop(model, call))
    else:
        flow.escapes = True


def _follow_binding(model: SemanticModel, binding: Binding, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                    certain: bool) -> None:
    if (binding, path) in seen:
        return
    seen.add((binding, path))
    certain = certain and _holds_only_this(model, binding)
    flow.holders.append((binding, path, certain))
    key, owner = binding.key, binding.scope
    if key.startswith("self.") and not _attribute_stays_in_class(model, binding):
        flow.escapes = True
        return
    for node, scope, _ in model.references.get(key, ()):
        if not _is_load(model, node) or model.owner_scope(key, scope) is not owner:
            continue  # a store, or another variable of the same name
        if not key.startswith("self.") and scope is not owner:
            flow.escapes = True  # read inside a nested function: runs when (and if) it is called
            return
        live = model.binding_at(key, node)
        if live is None:
            flow.escapes = True  # read where source order can't tell which value it holds
            return
        if live is binding:
            _follow(model, node, path, flow, seen, certain)
        elif binding.order < live.order and _exclusive_branches(model, binding.node, live.node):
            # `if distributed: sampler = DistributedSampler(ds)` / `else: sampler = None`:
            # the name holds one or the other.
            _follow(model, node, path, flow, seen, False)


def _holds_only_this(model: SemanticModel, binding: Binding) -> bool:
    """The key's only binding in its scope, or one that runs unconditionally at the top of
    its function (or module): where it is live, the name holds its value."""
    if sum(1 for other in model.bindings.get(binding.key, ()) if other.scope is binding.scope) == 1:
        return True
    statement = model.statement_of(binding.node)
    block = model.parent(statement)
    if isinstance(block, cst.Module):
        return True
    return isinstance(block, cst.IndentedBlock) and model.parent(block) is model.scope(statement).node


def _exclusive_branches(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether two nodes sit in different branches of one `if` statement."""
    branches = {}
    child = first
    for ancestor in model.ancestors(first):
        if isinstance(ancestor, cst.If):
            branches[ancestor] = child
        child = ancestor
    child = second
    for ancestor in model.ancestors(second):
        if ancestor in branches and ancestor.test is not child:
            return branches[ancestor] is not child and branches[ancestor] is not ancestor.test
        child = ancestor
    return False


def _attribute_stays_in_class(model: SemanticModel, binding: Binding) -> bool:
    """`self.loader` is assigned once in its class, and `.loader` is read nowhere else."""
    key, owner = binding.key, binding.scope
    if sum(1 for b in model.bindings.get(key, ()) if b.scope is owner) != 1:
        return False
    attribute = key[len("self."):]
    for node, scope, _ in model.references.get(attribute, ()):
        parent = model.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            if model.binding_key(parent, parent) != key or scope.class_scope is not owner:
                return False  # `trainer.loader`, or a subclass's `self.loader`
    return True


def _is_load(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether a recorded Name/Attribute occurrence reads the variable (not a store, a
    keyword, a parameter, an attribute name or an import)."""
    parent = model.parent(node)
    if isinstance(parent, cst.Attribute):
        return parent.attr is not node
    if isinstance(parent, cst.Arg):
        return parent.keyword is not node
    if isinstance(parent, (cst.AssignTarget, cst.AnnAssign, cst.For, cst.CompFor)):
        return getattr(parent, "target", None) is not node
    return not isinstance(
        parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName, cst.NameItem)
    )


def builtin_name(model: SemanticModel, func: cst.BaseExpression) -> Optional[str]:
    """"len" for a call of the builtin `len` (a Name the file never binds)."""
    if isinstance(func, cst.Name) and func.value not in model.bindings and func.value not in model.imports:
        return func.value
    return None


def is_iteration_wrapper(model: SemanticModel, call: cst.Call) -> bool:
    return builtin_name(model, call.func) in ITERATION_BUILTINS or model.qualified_name(call.func) in TQDM_NAMES


def iterating_loop(model: SemanticModel, call: cst.Call) -> Optional[cst.For]:
    """The `for` whose iterable is this call, through `enumerate(tqdm(...))`-style nesting."""
    while True:
        parent = model.parent(call)
        if isinstance(parent, cst.For) and parent.iter is call:
            return parent
        if not isinstance(parent, cst.Arg) or parent.star:
            return None
        outer = model.parent(parent)
        if not (isinstance(outer, cst.Call) and is_iteration_wrapper(model, outer)):
            return None
        call = outer


def loops_around(model: SemanticModel, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The For/While loops whose body holds `node`, in the same function, outermost first."""
    loops = []
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.For, cst.While)) and ancestor.body is child:
            loops.append(ancestor)
        child = ancestor
    return loops[::-1]


def runs_backward(model: SemanticModel, loop: cst.CSTNode) -> bool:
    """A training loop: a call in its own body runs backward (see `dplint.training.backprops`:
    `loss.backward()`, `scaler.scale(l).backward()`, `accelerator.backward(l)`,
    `torch.autograd.backward`)."""
    scope = model.scope(loop)
    return any(loop in backprop.site.loops and backprop.site.scope is scope for backprop in backprops(model))


def epoch_count_loop(model: SemanticModel, loop: cst.CSTNode) -> Optional[str]:
    """The loop variable of `for epoch in range(...)` (or `tqdm(range(...))`, `trange(...)`):
    a name holding the epoch number. None for any other loop, and for `_`, which declares
    its value unused."""
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name) or loop.target.value == "_":
        return None
    counter = loop.iter
    if isinstance(counter, cst.Call) and model.qualified_name(counter.func) in TQDM_NAMES:
        counter = argument(counter, 0, "iterable")
    if not isinstance(counter, cst.Call) or any(arg.star for arg in counter.args):
        return None
    if model.qualified_name(counter.func) in TRANGE_NAMES:
        return loop.target.value
    if builtin_name(model, counter.func) == "range" and not any(arg.keyword for arg in counter.args):
        return loop.target.value
    return None
