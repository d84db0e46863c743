"""Which ranks reach a node through calls: `some_ranks_route` follows the calls of a
function up to where a rank test restricts them (`if rank == 0: save()` -> `save` -> `sync()`
-> barrier), telling apart the tests every rank answers alike (`rank != -1`, the world size)."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from dplint.distributed import (
    CallSite,
    callers_of,
    enclosing_function,
    guard_tests,
    has_rank_decorator,
    is_rank_guarded,
    main_rank_passes,
    mentions_rank,
    same_on_every_rank,
)
from dplint.semantic import SemanticModel


# How many calls up a route is followed (`if rank == 0: save()` -> `save` -> `sync()` -> barrier).
ROUTE_DEPTH = 4


def some_ranks_route(model: SemanticModel, node: cst.CSTNode, paired: bool = False,
                     depth: int = ROUTE_DEPTH) -> Optional[tuple[cst.Call, ...]]:
    """The calls through which only some ranks reach `node`, innermost first: () when a rank
    guard in its own function is enough, None when every rank reaches it or we can't tell.

    A collective its function calls more than once (`paired`: the first-rank-goes-ahead
    pattern, one call per branch) is matched on every rank that runs the function; it is
    reached by some ranks only when the function itself is, through a call that only the
    main process makes, and the main process passes the collective's own rank tests there
    (`if local_rank == 0: barrier()` inside a function only rank 0 calls)."""
    own_tests = [test for test, _ in guard_tests(model, node) if mentions_rank(model, test)]
    restricted = is_rank_guarded(model, node) and not only_uniform_tests(model, node)
    if restricted and not paired:
        return ()
    function = enclosing_function(model, node)
    if depth <= 0 or not isinstance(function, cst.FunctionDef) or _memoised_and_shared(model, function):
        return None
    for call, bound in _calls_of(model, function):
        need_main = bool(own_tests) or has_rank_decorator(function)
        if need_main and main_rank_passes(model, node, CallSite(call, function, bound)) is not True:
            continue
        route = _caller_route(model, call, function, need_main, depth - 1)
        if route is not None:
            return (call, *route)
    return None


def _caller_route(model: SemanticModel, call: cst.Call, callee: cst.FunctionDef, need_main: bool,
                  depth: int) -> Optional[tuple[cst.Call, ...]]:
    """The calls (outward) through which only some ranks make `call` (with `need_main`: the
    main process among them); None when every rank makes it, or we can't tell."""
    restricted = is_rank_guarded(model, call) and not only_uniform_tests(model, call)
    if need_main and main_rank_passes(model, call) is not True:
        return None
    if restricted:
        # `if rank == 0: run(a)` / `else: run(b)`: one call per branch, every rank runs it;
        # so when the function is also handed on as a value there (`opt.step(closure)` on
        # rank 0, `closure()` on the others): who calls it is out of sight.
        if _calls_in_scope(model, call, callee) > 1 or _passed_on_in_scope(model, call, callee):
            return None
        return ()
    function = enclosing_function(model, call)
    if depth <= 0 or not isinstance(function, cst.FunctionDef) or _memoised_and_shared(model, function):
        return None
    for outer, _ in _calls_of(model, function):
        route = _caller_route(model, outer, function, need_main, depth - 1)
        if route is not None:
            return (outer, *route)
    return None


# Decorators that keep a function's results: a repeated call returns the kept value and runs
# nothing (`functools.cache`, `functools.lru_cache`).
MEMOISERS = {"cache", "lru_cache"}


def _memoised_and_shared(model: SemanticModel, function: cst.FunctionDef) -> bool:
    """`@functools.cache` on a function this file calls more than once: whether a guarded call
    runs its body (and its collectives) or returns a value every rank already computed depends
    on the arguments repeating, which the code can't tell."""
    memoised = False
    for decorator in function.decorators:
        target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", "")
        memoised = memoised or name in MEMOISERS
    return memoised and len(_calls_of(model, function)) > 1


def _calls_in_scope(model: SemanticModel, call: cst.Call, callee: cst.FunctionDef) -> int:
    scope = model.scope(call)
    return sum(1 for other, _ in _calls_of(model, callee) if model.scope(other) is scope)


def _passed_on_in_scope(model: SemanticModel, call: cst.Call, callee: cst.FunctionDef) -> bool:
    """The function's name is read, other than as a callee, in the scope of `call`
    (`optimizer.step(closure)`, `callbacks=[hook]`)."""
    scope, name = model.scope(call), callee.name.value
    for node in model.nodes_of(cst.Name):
        if node.value != name or model.scope(node) is not scope:
            continue
        parent = model.parent(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if isinstance(parent, (cst.FunctionDef, cst.Param)) or isinstance(parent, cst.Arg) and parent.keyword is node:
            continue  # its own name, a parameter, a keyword (`evaluate=True`)
        if model.binding_at(name, node) is not None and model.binding_at(name, node).node is callee:
            return True
    return False


def _calls_of(model: SemanticModel, function: cst.FunctionDef) -> list[tuple[cst.Call, bool]]:
    """The calls of `function` this file shows, each with whether it binds `self`. Calls we
    can't see do not matter here: one route that only some ranks take is enough to hang."""
    sites = model.flow.call_sites(function)
    if sites is not None:
        return sites
    found = []
    for call in callers_of(model, function):
        callee = model.flow.callee(call, local=True)
        found.append((call, bool(callee is not None and callee.bound)))
    return found


# Tests that every rank of one job answers alike: whether the job is distributed at all
# (`rank != -1`, `local_rank == -1`), its size, whether a group exists or contains this rank.
_UNIFORM = re.compile(r"(!=|==|>=|>|<)\s*-1\b|world_size|get_world_size|is_initialized|is_available|not_in_group|distributed\b(?!_)")


def only_uniform_tests(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether every rank test guarding `node` in its function is the same on every rank."""
    rank_tests = [test for test, _ in guard_tests(model, node) if mentions_rank(model, test)]
    return bool(rank_tests) and all(_uniform(model, test) for test in rank_tests)


def _uniform(model: SemanticModel, test: cst.BaseExpression) -> bool:
    text = model.code(test)
    if _UNIFORM.search(text) and not re.search(r"[=<>]\s*0\b|\b0\s*[,)\]]", text):
        return True
    return same_on_every_rank(model, test)
