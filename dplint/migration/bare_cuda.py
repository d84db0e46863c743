"""Scripts that name no device: the model and the batches go to the GPU with a bare `.cuda()`.

Program meaning: after `torch.cuda.set_device(local_rank)`, `.cuda()` without an argument puts
its tensor or module on the current device, which is then this rank's GPU. Such a script needs
no device variable to run as one DDP rank per GPU: the process group and `set_device` go just
before the first statement that needs them (the training DataLoader, whose batch size is
divided by the world size, or the model's wrap). A `.cuda(i)` with an argument names one GPU
for every rank: it is a blocker, one per line.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from dplint.semantic import SemanticModel
from dplint.training import called_function


def cuda_calls(model: SemanticModel) -> tuple[list[cst.Call], list[cst.Call]]:
    """The `x.cuda()` calls that name no device (also `x.cuda(non_blocking=True)`), and those
    that name one (`x.cuda(0)`, `x.cuda(args.gpu)`, `x.cuda(device=...)`)."""
    bare, named = [], []
    for site in model.calls:
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            names_device = any(arg.keyword is None or arg.keyword.value == "device" for arg in site.node.args)
            (named if names_device else bare).append(site.node)
    return bare, named


def setup_anchor(model: SemanticModel, wrap_statement: cst.CSTNode,
                 train_loader: cst.Call) -> tuple[Optional[cst.CSTNode], Optional[tuple[cst.CSTNode, str]]]:
    """The statement before which the process group starts, or (None, (node, reason)).

    It is the earliest, in the block that holds them all, of the model's wrap, the
    statement that builds the training DataLoader (or calls the same-file function that
    builds it) and the bare `.cuda()` placements before the wrap, all in the scope of the wrap."""
    scope = model.scope(wrap_statement).node
    points = [wrap_statement]
    loader_scope = model.scope(train_loader).node
    if loader_scope is scope:
        points.append(model.statement_of(train_loader))
    else:
        callers = [model.statement_of(site.node) for site in model.calls
                   if site.scope.node is scope and called_function(model, site.node) is loader_scope]
        if not callers:
            return None, (train_loader, "the training DataLoader is built in a function not called where the model is "
                                        "wrapped: start the process group by hand")
        points += callers
    # A bare `.cuda()` that runs before `set_device` opens a CUDA context and places its
    # tensor on GPU 0 in every rank: the setup goes before the first one of this scope too.
    wrap_order = model.order(wrap_statement)
    points += [model.statement_of(call) for call in cuda_calls(model)[0]
               if model.scope(call).node is scope and model.order(call) < wrap_order]
    block = _common_block(model, points, scope)
    if block is None:
        return None, (wrap_statement, "the model's wrap and the training DataLoader are in different blocks: "
                                      "start the process group by hand")
    owner = model.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if isinstance(owner, (cst.For, cst.While)):
        return None, (owner, "the model is wrapped inside a loop: start the process group by hand")
    tops = [_child_of(model, point, block) for point in points]
    return min(tops, key=model.order), None


def _blocks_above(model: SemanticModel, node: cst.CSTNode, scope: cst.CSTNode) -> list[cst.CSTNode]:
    """The statement blocks around a node, innermost first, up to the scope's own body."""
    found = []
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            found.append(ancestor)
        if ancestor is scope:
            break
    return found


def _common_block(model: SemanticModel, points: list, scope: cst.CSTNode) -> Optional[cst.CSTNode]:
    others = [set(map(id, _blocks_above(model, point, scope))) for point in points[1:]]
    for block in _blocks_above(model, points[0], scope):
        if all(id(block) in seen for seen in others):
            return block
    return None


def _child_of(model: SemanticModel, node: cst.CSTNode, block: cst.CSTNode) -> cst.CSTNode:
    current = node
    while model.parent(current) is not block:
        current = model.parent(current)
    return current
