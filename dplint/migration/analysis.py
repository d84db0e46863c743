"""What `dplint migrate` changes in a script, found before anything is rewritten.

`plan(model, options)` reads the semantic model of a single-process script (DataParallel, or
one device) and returns either a `Plan` (every place to change) or the blockers, one per
line of the script that stops a safe migration. Nothing here rewrites or imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from dplint.data import is_loader_call, is_tqdm, loader_argument, sampler_call, trains_in
from dplint.migration.bare_cuda import cuda_calls, setup_anchor
from dplint.semantic import SemanticModel, argument
from dplint.training import called_function, parameter_arguments, return_values

DATA_PARALLEL = {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
DISTRIBUTED = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.distributed.init_process_group",
}
# Packages that run the training loop (or the distribution) for the script: migrating around
# them would fight their own launcher.
THIRD_PARTY_TRAINERS = ("lightning", "pytorch_lightning", "accelerate", "transformers", "deepspeed", "ignite",
                        "fastai", "horovod", "composer", "mmengine", "colossalai")
SELF_MOVES = {"to", "cuda"}


@dataclass
class Options:
    validation: str = "all-reduce"  # or "rank0"
    batch: str = "global"  # or "per-rank"


@dataclass
class EvalLoop:
    loop: cst.For
    accumulators: list[tuple[str, bool]]  # (name, started as an int)
    loader: cst.Call


@dataclass
class Plan:
    device_statement: cst.BaseStatement  # the device line, or (bare `.cuda()`) the statement the setup goes before
    device_target: Optional[cst.BaseExpression]  # `device` or `self.device`; None: bare `.cuda()`, no device variable
    setup_scope: cst.CSTNode  # the function (or module) that now starts the process group
    wrap_call: Optional[cst.Call]  # the nn.DataParallel(...) call, or None for a one-device script
    wrap_statement: cst.CSTNode  # its statement (or the optimizer's, before which DDP is inserted)
    unwrap_if: Optional[cst.If]  # `if device_count() > 1:` around the DataParallel wrap
    model_expr: cst.BaseExpression  # what gets wrapped
    model_is_moved: bool  # already `.to(device)` before the wrap
    train_loader: cst.Call
    eval_loops: list[EvalLoop] = field(default_factory=list)
    rank0_statements: list[cst.CSTNode] = field(default_factory=list)  # eval statements run on rank 0 only
    saves: list[cst.SimpleStatementLine] = field(default_factory=list)
    barrier_after: set = field(default_factory=set)
    loads: list[cst.Call] = field(default_factory=list)
    prints: list[cst.SimpleStatementLine] = field(default_factory=list)
    progress_bars: list[cst.Call] = field(default_factory=list)
    epoch_loop: Optional[tuple] = None  # (epoch loop, its loop variable, the training loader as named there)
    destroy_after: Optional[cst.CSTNode] = None  # the statement after which the process group ends
    accumulation: Optional[tuple] = None  # (block, first statement, last statement, sync test)
    notes: list[str] = field(default_factory=list)
    bare_uses: list[cst.BaseExpression] = field(default_factory=list)  # `model` -> `model.module` (rank-0 evaluation)
    sampler_swaps: list[tuple[cst.Call, bool]] = field(default_factory=list)  # RandomSampler(ds) -> DistributedSampler(ds, shuffle=True)
    class_references: list[cst.BaseExpression] = field(default_factory=list)  # other `nn.DataParallel` names -> `DDP`
    outer_move: Optional[cst.Call] = None  # `nn.DataParallel(m).to(device)`: the move goes inside DDP
    batch_counts: list[cst.Call] = field(default_factory=list)  # `len(val_loader)` -> its count over all ranks
    divide_batch: bool = True  # keep the global batch: each rank loads batch_size // world_size


def line(model: SemanticModel, node: cst.CSTNode) -> int:
    return model.position(node)[0].line


def already_distributed(model: SemanticModel) -> Optional[int]:
    """The line of the first DDP wrap or process-group start, or None."""
    for site in model.calls:
        if site.qualified_name in DISTRIBUTED:
            return line(model, site.node)
    return None


def plan(model: SemanticModel, options: Options) -> tuple[Optional[Plan], list[tuple[int, str]]]:
    """The plan, or None and the blockers as (line, reason)."""
    blockers: list[tuple[int, str]] = []
    named = set()  # one line per package, at its first import
    for node in model.nodes_of(cst.Import, cst.ImportFrom):
        for name in _imported_modules(node):
            package = name.split(".")[0]
            if package in THIRD_PARTY_TRAINERS and package not in named:
                named.add(package)
                blockers.append((line(model, node), f"uses a third-party trainer or launcher (`{name}`): migrate with its own tools"))
    train_loops = [loop.node for loop in model.loops if isinstance(loop.node, cst.For) and trains_in(model, loop.node)]
    train_loaders: dict[cst.Call, cst.For] = {}
    for loop in train_loops:
        for call in loader_calls(model, iterated(model, loop.iter), loop):
            train_loaders.setdefault(call, loop)
    if not train_loaders:
        explained = [(loop, _why_no_loader(model, loop)) for loop in train_loops if _why_no_loader(model, loop)]
        loop, why = explained[0] if explained else (train_loops[0] if train_loops else None, "")
        where = line(model, loop) if loop is not None else 1
        blockers.append((where, "no training loop found: no `for` over a DataLoader runs `backward()`" + why))
    elif len(train_loaders) > 1:
        for call in list(train_loaders)[1:]:
            blockers.append((line(model, call), "a second training DataLoader: migrate scripts with one training loop"))
    swaps: list[tuple[cst.Call, bool]] = []
    for call in train_loaders:
        for which in ("sampler", "batch_sampler"):
            if loader_argument(model, call, which) is None:
                continue
            swap = _plain_order_sampler(model, call) if which == "sampler" else None
            if swap is None:
                blockers.append((line(model, call), f"the training DataLoader has its own `{which}=`: a custom sampler cannot be sharded safely"))
            else:
                swaps.append(swap)
        if not _dataset_of(call):
            blockers.append((line(model, call), "the training DataLoader's dataset is not a plain name: bind it to a variable first"))
    wraps = [site.node for site in model.calls if site.qualified_name in DATA_PARALLEL]
    models = _optimized_models(model)
    if len(wraps) > 1:
        for call in wraps[1:]:
            blockers.append((line(model, call), "several models are wrapped in DataParallel: migrate them by hand"))
    if len({key for key, _ in models}) > 1:
        for _, call in models[1:]:
            blockers.append((line(model, call), "an optimizer over another model: several models are trained; migrate them by hand"))
    if not models and not wraps:
        blockers.append((1, "no model found: no optimizer built from `model.parameters()` and no DataParallel"))
    device = _device_statement(model)
    bare_cuda, named_cuda = cuda_calls(model)
    if device is None and not bare_cuda:
        blockers.append((1, "no device variable (`device = torch.device(...)`) and no `.cuda()`: "
                            "move the model and batches with `.to(device)` first"))
    if device is None:
        for call in named_cuda:
            blockers.append((line(model, call), "`.cuda(...)` names one GPU for every rank: use a bare `.cuda()` "
                                                "(the rank's GPU after `set_device`) or a device variable"))
    if blockers:
        return None, sorted(blockers)
    train_loader, train_loop = next(iter(train_loaders.items()))
    if wraps:
        wrap_call = wraps[0]
        wrap_statement = model.statement_of(wrap_call)
        model_expr = argument(wrap_call, 0, "module")
        unwrap_if = _conditional_wrap(model, wrap_statement)
    else:
        wrap_call = None
        key, optimizer_call = models[0]
        wrap_statement = model.statement_of(optimizer_call)
        model_expr = optimizer_call.args[0].value.func.value
        unwrap_if = None
    if model_expr is None:
        blockers.append((line(model, wrap_statement), "the wrapped model is not a plain argument"))
        return None, blockers
    if device is not None:
        statement, target = device
        setup_scope = model.scope(statement).node
    else:  # a bare `.cuda()` script: the process group starts where it is first needed
        statement, problem = setup_anchor(model, wrap_statement, train_loader)
        if statement is None:
            return None, [(line(model, problem[0]), problem[1])]
        target, setup_scope = None, model.scope(wrap_statement).node
    moved = model.value_at(model_expr, wrap_statement)
    result = Plan(statement, target, setup_scope, wrap_call, wrap_statement, unwrap_if, model_expr,
                  _is_moved(moved) or _is_moved(model_expr), train_loader)
    result.sampler_swaps = swaps
    if _order(model, train_loader) < _order(model, statement) and model.scope(train_loader) is model.scope(statement):
        blockers.append((line(model, train_loader), f"the training DataLoader is built before the device is chosen (line {line(model, statement)}): its batch size needs the process group"))
    result.epoch_loop = _epoch_loop(model, train_loops, train_loader)
    result.destroy_after = _end_of_training(model, result, train_loops)
    if result.destroy_after is None:
        blockers.append((line(model, statement), "cannot tell where training ends, to call `dist.destroy_process_group()` there"))
    _plan_evaluation(model, result, train_loader, options, blockers)
    _plan_checkpoints(model, result, blockers)
    _plan_output(model, result)
    _plan_accumulation(model, result, train_loop, blockers)
    if wrap_call is not None:
        receiver = model.parent(wrap_call)
        outer = model.parent(receiver) if isinstance(receiver, cst.Attribute) else None
        if isinstance(outer, cst.Call) and outer.func is receiver and receiver.attr.value in SELF_MOVES:
            result.outer_move = outer
    # `isinstance(model, nn.DataParallel)` and the like now ask about DDP: left alone, the
    # test is False for the DDP wrapper and `model.module` is skipped (a `module.` checkpoint)
    result.class_references = [node for node in model.nodes_of(cst.Name, cst.Attribute)
                               if model.qualified_name(node) in DATA_PARALLEL and node is not getattr(wrap_call, "func", None)
                               and not isinstance(model.parent(node), cst.Attribute)
                               and not any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in model.ancestors(node))]
    result.divide_batch = options.batch == "global"
    if options.batch == "global":
        result.notes.append(f"line {line(model, train_loader)}: the training batch size is divided by the world size, "
                            "so the global batch stays as written (exactly so when it divides evenly)")
    else:
        result.notes.append(f"line {line(model, train_loader)}: the batch size is kept per rank: the global batch "
                            "grows with the world size (scale the learning rate yourself)")
    return (None if blockers else result), sorted(blockers)


def _why_no_loader(model: SemanticModel, loop: cst.For) -> str:
    """What the training loop iterates instead of one DataLoader, when it is a known shape."""
    over = iterated(model, loop.iter)
    if isinstance(over, cst.Call) and isinstance(over.func, cst.Name) and over.func.value == "zip" and len(over.args) > 1:
        return " (it iterates `zip(...)` of several loaders: each needs its own sampler; migrate it by hand)"
    if isinstance(over, cst.Subscript):
        return (f" (it iterates `{model.module.code_for_node(over)}`, a loader looked up by key: "
                "bind the training loader to a name)")
    return ""


def _epoch_loop(model: SemanticModel, train_loops: list, train_loader: cst.Call) -> Optional[tuple]:
    """The loop over epochs (a training loop over no loader, with a loop variable) and a name
    of the training loader inside it, for `loader.sampler.set_epoch(epoch)`; None when not
    found (dplint's own missing-set-epoch fix then has its turn)."""
    for loop in train_loops:
        if loader_calls(model, iterated(model, loop.iter), loop) or not isinstance(loop.target, cst.Name):
            continue
        for node in _walk(loop.body):
            if isinstance(node, (cst.Name, cst.Attribute)) and model.binding_key(node, node) is not None:
                parent = model.parent(node)
                if isinstance(parent, cst.Attribute) and parent.value is node:
                    continue  # `loader.dataset`: the name alone is what is looked at
                if isinstance(node, cst.Name) and isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue
                if train_loader in loader_calls(model, node, node):
                    return loop, loop.target, node
    # The batch loop is in a function the epoch loop calls (`for epoch ...: train()`) and the
    # loader is a name bound once and visible at the epoch loop (a module-level
    # `train_loader = DataLoader(...)`): that name is the loader there too.
    statement = model.parent(train_loader)
    if not (isinstance(statement, cst.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name)):
        return None
    name = statement.targets[0].target.value
    if len(model.bindings.get(name, ())) != 1:
        return None
    candidates = [loop for loop in train_loops
                  if not loader_calls(model, iterated(model, loop.iter), loop) and isinstance(loop.target, cst.Name)
                  and getattr(model.binding_at(name, loop), "value", None) is train_loader]
    # the innermost: in `for run ...: for epoch ...: train()` the epoch is the inner loop's
    inner = [loop for loop in candidates if not any(loop in model.ancestors(other) for other in candidates if other is not loop)]
    return (inner[0], inner[0].target, cst.Name(name)) if len(inner) == 1 else None


def _end_of_training(model: SemanticModel, result: Plan, train_loops: list) -> Optional[cst.CSTNode]:
    """The end of the `if __name__ == "__main__":` block when the process group starts in a
    function or method; else the end of the block that starts it (the module's, or the main
    block's), when that block also runs the training."""
    scope = result.setup_scope
    main_block = next((statement for statement in model.module.body if isinstance(statement, cst.If)
                       and "__main__" in model.module.code_for_node(statement.test) and statement.orelse is None), None)
    if not isinstance(scope, cst.Module) and main_block is not None:
        # after everything the script runs: a `test()` called after `train()` may still
        # print on rank 0 or all-reduce its sums
        return main_block.body.body[-1]
    if isinstance(scope, (cst.FunctionDef, cst.Module)) and any(model.scope(loop).node is scope for loop in train_loops):
        # the end of the block that starts the process group: the function's body, the
        # module's, or the `if __name__ == "__main__":` body that holds it
        block = model.parent(result.device_statement)
        body = block.body if isinstance(block, (cst.IndentedBlock, cst.Module)) else ()
        executable = [s for s in body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        return executable[-1] if executable else None
    return None


def _order(model: SemanticModel, node: cst.CSTNode) -> int:
    return model.order(model.statement_of(node))


def _imported_modules(node) -> list[str]:
    if isinstance(node, cst.Import):
        return [cst.Module([]).code_for_node(alias.name) for alias in node.names]
    if node.relative or node.module is None:
        return []
    return [cst.Module([]).code_for_node(node.module)]


def iterated(model: SemanticModel, expr: cst.BaseExpression) -> cst.BaseExpression:
    """`enumerate(tqdm(loader))` -> `loader`."""
    while isinstance(expr, cst.Call) and expr.args and (
        (isinstance(expr.func, cst.Name) and expr.func.value in ("enumerate", "iter")) or is_tqdm(model, expr.func)
    ):
        expr = expr.args[0].value
    return expr


def loader_calls(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int = 8) -> list[cst.Call]:
    """The DataLoader constructions an expression holds: through names, `self.x`, the
    arguments of the function's callers and the return values of same-file functions."""
    if expr is None or depth == 0:
        return []
    if isinstance(expr, cst.Call):
        if is_loader_call(model, expr):
            return [expr]
        if iterated(model, expr) is not expr:  # `loader = tqdm(loader)`
            return loader_calls(model, iterated(model, expr), iterated(model, expr), depth - 1)
        function = called_function(model, expr)
        if function is None:
            return []
        return [found for value in return_values(model, function) for found in loader_calls(model, value, value, depth - 1)]
    if isinstance(expr, cst.Tuple):
        return []
    key = model.binding_key(expr, at)
    if key is None:
        return []
    binding = model.binding_at(key, at)
    if binding is None and key.startswith("self."):
        bindings = model.bindings.get(key, ())
        binding = bindings[-1] if bindings else None
    if binding is None:
        return []
    if isinstance(binding.node, cst.Param):
        arguments = parameter_arguments(model, binding.node) or []
        return [found for value in arguments for found in loader_calls(model, value, value, depth - 1)]
    if binding.value is None:
        return _unpacked_loader(model, binding, depth)
    return loader_calls(model, binding.value, binding.node, depth - 1)


def _unpacked_loader(model: SemanticModel, binding, depth: int) -> list[cst.Call]:
    """`train_loader, val_loader = build_loaders(...)`: the element of each returned tuple."""
    statement = binding.node
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
        return []
    target = statement.targets[0].target
    if not isinstance(target, cst.Tuple) or not isinstance(statement.value, cst.Call):
        return []
    index = next((i for i, element in enumerate(target.elements)
                  if isinstance(element.value, cst.Name) and element.value.value == binding.key), None)
    function = called_function(model, statement.value)
    if index is None or function is None:
        return []
    found = []
    for value in return_values(model, function):
        if isinstance(value, cst.Tuple) and index < len(value.elements):
            found += loader_calls(model, value.elements[index].value, value, depth - 1)
    return found


def _optimized_models(model: SemanticModel) -> list[tuple[str, cst.Call]]:
    """(model key, optimizer call) for every `torch.optim.X(model.parameters(), ...)`."""
    found = []
    for site in model.calls:
        name = site.qualified_name or ""
        if not name.startswith("torch.optim.") or ".lr_scheduler." in name or not site.node.args:
            continue
        first = site.node.args[0].value
        if isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) and first.func.attr.value == "parameters":
            key = model.binding_key(first.func.value, site.node)
            if key is not None:
                found.append((key, site.node))
    return found


def _device_statement(model: SemanticModel) -> Optional[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """`device = torch.device(...)` (or `self.device = ...`, or `"cuda" if ... else "cpu"`)."""
    for node in model.nodes_of(cst.Assign):
        if len(node.targets) != 1 or model.binding_key(node.targets[0].target, node) is None:
            continue
        value = node.value
        is_device = isinstance(value, cst.Call) and model.qualified_name(value.func) == "torch.device"
        if isinstance(value, cst.SimpleString) and value.evaluated_value.split(":")[0] == "cuda":
            is_device = True  # `device = "cuda"`: one GPU, named as a string
        if isinstance(value, cst.IfExp):
            is_device = any(isinstance(part, cst.SimpleString) and "cuda" in part.value for part in (value.body, value.orelse))
        if is_device and isinstance(model.parent(node), cst.SimpleStatementLine):
            return model.parent(node), node.targets[0].target
    return None


def _conditional_wrap(model: SemanticModel, statement: cst.CSTNode) -> Optional[cst.If]:
    """The `if torch.cuda.device_count() > 1:` whose only statement is the DataParallel wrap."""
    block = model.parent(statement)
    owner = model.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if isinstance(owner, cst.If) and owner.orelse is None and len(block.body) == 1:
        return owner
    return None


def _is_moved(expr: Optional[cst.BaseExpression]) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in SELF_MOVES


def _dataset_of(loader: cst.Call) -> Optional[cst.BaseExpression]:
    dataset = argument(loader, 0, "dataset")
    return dataset if isinstance(dataset, (cst.Name, cst.Attribute)) else None



def _plan_evaluation(model: SemanticModel, result: Plan, train_loader: cst.Call, options: Options, blockers: list) -> None:
    for loop in model.loops:
        node = loop.node
        if not isinstance(node, cst.For) or trains_in(model, node):
            continue
        loaders = [call for call in loader_calls(model, iterated(model, node.iter), node) if call is not train_loader]
        if not loaders or any(isinstance(outer, cst.For) and loader_calls(model, iterated(model, outer.iter), outer)
                              for outer in _enclosing_loops(model, node)):
            continue  # not over a loader, or inside the loop over one
        loader = loaders[0]
        swap = None
        if loader_argument(model, loader, "sampler") is not None and options.validation != "rank0":
            swap = _plain_order_sampler(model, loader)
        if (loader_argument(model, loader, "sampler") is not None and swap is None) or loader_argument(model, loader, "batch_sampler") is not None:
            if options.validation != "rank0":
                blockers.append((line(model, loader), "the evaluation DataLoader has its own sampler: it cannot be sharded safely"))
                continue
        if options.validation == "rank0":
            _plan_rank0(model, result, node, blockers)
            continue
        accumulators = _accumulators(model, node)
        if not accumulators:
            blockers.append((line(model, node), "an evaluation loop without `+=` sums to all-reduce: use `--validation rank0`"))
            continue
        if not _dataset_of(loader):
            blockers.append((line(model, loader), "the evaluation DataLoader's dataset is not a plain name"))
            continue
        result.eval_loops.append(EvalLoop(node, accumulators, loader))
        counts = _batch_counts(model, node, loader)
        result.batch_counts += counts
        for call in counts:
            result.notes.append(f"line {line(model, call)}: `{model.module.code_for_node(call)}` counts this rank's batches; "
                                "it divides sums over every rank, so it is multiplied by the world size")
        if swap is not None:
            result.sampler_swaps.append(swap)
        names = ", ".join(name for name, _ in accumulators)
        result.notes.append(f"line {line(model, node)}: evaluation runs on every rank on its shard; {names} {'is' if len(accumulators) == 1 else 'are'} "
                            "summed over the ranks (DistributedSampler pads the shards to equal length, so up to "
                            "world_size - 1 samples count twice when the set does not divide evenly)")


def _batch_counts(model: SemanticModel, loop: cst.For, loader: cst.Call) -> list[cst.Call]:
    """`len(val_loader)` after the evaluation loop, in its function: once the sums are
    all-reduced they cover every rank's batches, while `len(val_loader)` counts this rank's.
    Every rank's DistributedSampler shard has the same length, so every rank has that many
    batches: the count over all ranks is `len(val_loader) * world_size`."""
    scope = model.scope(loop)
    found = []
    for site in model.calls:
        call = site.node
        if (site.scope is scope and site.order > model.order(loop) and isinstance(call.func, cst.Name)
                and call.func.value == "len" and "len" not in model.bindings and len(call.args) == 1
                and isinstance(call.args[0].value, (cst.Name, cst.Attribute))
                and loader in loader_calls(model, call.args[0].value, call)):
            found.append(call)
    return found


PLAIN_ORDER_SAMPLERS = {
    "torch.utils.data.RandomSampler": True, "torch.utils.data.sampler.RandomSampler": True,
    "torch.utils.data.SequentialSampler": False, "torch.utils.data.sampler.SequentialSampler": False,
}


def _plain_order_sampler(model: SemanticModel, loader: cst.Call) -> Optional[tuple[cst.Call, bool]]:
    """`sampler=RandomSampler(ds)` / `SequentialSampler(ds)` (inline or through one name, with no
    other argument): the order a DistributedSampler gives too, with `shuffle` True or False.
    Anything else (weights, replacement, a subset, a sampler chosen by a condition) is custom."""
    call = sampler_call(model, loader_argument(model, loader, "sampler"), loader)
    if call is None or len(call.args) != 1 or call.args[0].keyword not in (None,) and call.args[0].keyword.value != "data_source":
        return None
    shuffles = PLAIN_ORDER_SAMPLERS.get(model.qualified_name(call.func) or "")
    dataset = argument(loader, 0, "dataset")
    if shuffles is None or not isinstance(call.args[0].value, (cst.Name, cst.Attribute)):
        return None
    if dataset is None or model.module.code_for_node(dataset) != model.module.code_for_node(call.args[0].value):
        return None  # a sampler over another data set than the loader's
    return call, shuffles


def _enclosing_loops(model: SemanticModel, node: cst.CSTNode):
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(ancestor, (cst.For, cst.While)):
            yield ancestor


def _accumulators(model: SemanticModel, loop: cst.For) -> list[tuple[str, bool]]:
    """Names summed with `+=` in the loop that start as a number just before it."""
    found: list[tuple[str, bool]] = []
    for node in _walk(loop.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) and isinstance(node.target, cst.Name):
            name = node.target.value
            binding = model.binding_at(name, loop)
            start = binding.value if binding is not None else None
            if isinstance(start, (cst.Integer, cst.Float)) and name not in [n for n, _ in found]:
                found.append((name, isinstance(start, cst.Integer)))
    return found


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _plan_rank0(model: SemanticModel, result: Plan, loop: cst.For, blockers: list) -> None:
    """Evaluation on rank 0 alone: the statement in the epoch loop that runs it is guarded."""
    statement = _outermost_with(model, loop)
    function = model.scope(loop).node
    if isinstance(function, cst.FunctionDef) and function is not result.setup_scope:
        calls = [site.node for site in model.calls if called_function(model, site.node) is function]
        if len(calls) != 1:
            blockers.append((line(model, loop), "the evaluation function is called from several places: use `--validation all-reduce`"))
            return
        statement = model.statement_of(calls[0])
    bound = _bound_names(statement)
    if bound:
        blockers.append((line(model, statement), f"the evaluation result ({', '.join(sorted(bound))}) would exist on rank 0 only: "
                                                 "use `--validation all-reduce`"))
        return
    result.rank0_statements.append(statement)
    # Through the bare model: DDP's first forward after training broadcasts the buffers
    # (BatchNorm's statistics) from rank 0, even under no_grad; with the other ranks not
    # evaluating, that collective would wait forever.
    wrapper_key = model.binding_key(result.model_expr, result.wrap_statement)
    for node in _walk(statement):
        parent = model.parent(node)
        if isinstance(node, (cst.Name, cst.Attribute)) and model.binding_key(node, node) == wrapper_key and (
                (isinstance(parent, cst.Call) and parent.func is node) or isinstance(parent, cst.Arg)):
            result.bare_uses.append(node)
    result.notes.append(f"line {line(model, statement)}: evaluation runs on rank 0 alone, on the whole set")


def _outermost_with(model: SemanticModel, statement: cst.CSTNode) -> cst.CSTNode:
    """The loop, or the `with torch.no_grad():` (and others) whose body it is all of."""
    while True:
        block = model.parent(statement)
        owner = model.parent(block) if isinstance(block, cst.IndentedBlock) else None
        if not isinstance(owner, cst.With) or len(block.body) != 1:
            return statement
        statement = owner


def _bound_names(statement: cst.CSTNode) -> set[str]:
    names = set()
    for node in _walk(statement):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in targets:
                names |= {n.value for n in _walk(target) if isinstance(n, cst.Name)}
    return names


def _plan_checkpoints(model: SemanticModel, result: Plan, blockers: list) -> None:
    loads = [site for site in model.calls if site.qualified_name == "torch.load"]
    for site in model.calls:
        if site.qualified_name != "torch.save":
            continue
        statement = model.statement_of(site.node)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 or not isinstance(statement.body[0], cst.Expr):
            blockers.append((line(model, site.node), "a `torch.save` that is not a statement of its own: save on rank 0 by hand"))
            continue
        result.saves.append(statement)
        later = [load for load in loads if load.scope is site.scope and load.order > site.order]
        if later:
            if any(isinstance(a, (cst.If, cst.For, cst.While, cst.With, cst.Try)) for a in _ancestors_in_function(model, statement)):
                blockers.append((line(model, site.node), f"a checkpoint saved under a condition or loop is read back at line "
                                                         f"{line(model, later[0].node)}: place the barrier by hand"))
            else:
                result.barrier_after.add(statement)
    for site in loads:
        if argument(site.node, 1, "map_location") is None:
            result.loads.append(site.node)


def _ancestors_in_function(model: SemanticModel, node: cst.CSTNode):
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            return
        yield ancestor


def _plan_output(model: SemanticModel, result: Plan) -> None:
    """Prints and progress bars that now run on rank 0 only: those after the process group
    starts (in its block), and in every function but the ones called before it."""
    early = _functions_called_before(model, result)
    for site in model.calls:
        node = site.node
        scope = site.scope.node
        if scope in early:
            continue
        if scope is result.setup_scope and site.order < model.order(result.device_statement):
            continue
        if isinstance(scope, cst.Module) and scope is not result.setup_scope:
            continue
        if any(ancestor in result.rank0_statements for ancestor in model.ancestors(node)):
            continue
        if isinstance(node.func, cst.Name) and node.func.value == "print" and "print" not in model.bindings:
            statement = model.statement_of(node)
            if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                    and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is node):
                result.prints.append(statement)
        elif is_tqdm(model, node.func) and argument(node, None, "disable") is None:
            result.progress_bars.append(node)


def _functions_called_before(model: SemanticModel, result: Plan) -> set:
    start = model.order(result.device_statement)
    early = set()
    for site in model.calls:
        if site.scope.node is result.setup_scope and site.order < start:
            function = called_function(model, site.node)
            if function is not None:
                early.add(function)
    return early


def _plan_accumulation(model: SemanticModel, result: Plan, loop: cst.For, blockers: list) -> None:
    """A step under `if (i + 1) % k == 0:` in the batch loop: the forward and backward of the
    other batches go under `no_sync()`, so DDP all-reduces once per optimizer step."""
    optimizers = _optimizer_keys(model)
    steps = [site.node for site in model.calls if loop in site.loops and _steps_an_optimizer(model, site.node, optimizers)
             and model.scope(site.node) is model.scope(loop)]
    guarded = [call for call in steps if _if_in_loop(model, call, loop) is not None]
    if not guarded or len(guarded) != len(steps):  # a step on every batch: nothing accumulates
        return
    test_if = _if_in_loop(model, guarded[0], loop)
    block = loop.body
    if not isinstance(block, cst.IndentedBlock) or test_if not in block.body:
        blockers.append((line(model, guarded[0]), "gradient accumulation with the step outside the batch loop's body: add no_sync() by hand"))
        return
    wrapper_key = model.binding_key(result.model_expr, result.wrap_statement)
    forward = backward = None
    for index, statement in enumerate(block.body):
        calls = [n for n in _walk(statement) if isinstance(n, cst.Call)]
        if forward is None and any(model.binding_key(c.func, c) == wrapper_key for c in calls):
            forward = index
        if any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" for c in calls):
            backward = index
    step_index = block.body.index(test_if)
    if forward is None or backward is None or not forward <= backward < step_index:
        blockers.append((line(model, test_if), "gradient accumulation whose forward and backward are not in the batch loop's body before the step: add no_sync() by hand"))
        return
    result.accumulation = (block, block.body[forward], block.body[backward], test_if.test)
    result.notes.append(f"line {line(model, block.body[forward])}: the forward and backward of the batches that do not step "
                        "run under `no_sync()`: gradients are all-reduced once per optimizer step")


def _optimizer_keys(model: SemanticModel) -> set[str]:
    keys = set()
    for site in model.calls:
        name = site.qualified_name or ""
        if name.startswith("torch.optim.") and ".lr_scheduler." not in name:
            statement = model.parent(site.node)
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                key = model.binding_key(statement.targets[0].target, statement)
                if key is not None:
                    keys.add(key)
    return keys


def _steps_an_optimizer(model: SemanticModel, call: cst.Call, optimizers: set[str]) -> bool:
    """`optimizer.step()` or `scaler.step(optimizer)`; not a scheduler's `step()`."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"):
        return False
    if model.binding_key(call.func.value, call) in optimizers:
        return True
    return bool(call.args) and model.binding_key(call.args[0].value, call) in optimizers


def _if_in_loop(model: SemanticModel, node: cst.CSTNode, loop: cst.For) -> Optional[cst.If]:
    for ancestor in model.ancestors(node):
        if ancestor is loop:
            return None
        if isinstance(ancestor, cst.If):
            return ancestor
    return None
