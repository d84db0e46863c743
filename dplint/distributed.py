"""Shared knowledge of multi-process scripts: does a file run on several ranks, and which code
runs on one rank only.

A file runs on several ranks when it calls `torch.distributed.init_process_group` or builds a
`DistributedDataParallel`. Code runs on one rank (or on a rank-dependent subset) when it sits
under a *rank guard*: an `if` (or `x if ... else y`, or `... and x`) whose test involves a
rank or a main-process helper (`rank == 0`, `dist.get_rank() == 0`,
`args.local_rank in (-1, 0)`, `int(os.environ["RANK"]) == 0`, `is_main_process()`,
`accelerator.is_main_process`, `trainer.is_global_zero`, `args.gpu == 0`), after an early exit
such as `if not is_master: return`, in a function decorated `@rank_zero_only` / `@master_only`,
or in a function defined in this file whose every call we can see is itself guarded.

"Involves a rank" is judged from the words the code uses, because rank-0 helpers live in
other files: an identifier or string mentioning rank, master, main process, global zero,
world/local process zero, or primary; a name bound to such an expression; a call to a
function of this file that returns one. Where the code can't tell (a function nobody in this
file calls, a callback), the answer is "can't tell" and rules stay silent.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from dplint.semantic import SemanticModel, argument, dotted_name, peel_self_returning

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# Start one process per rank, each running the function passed first.
SPAWNERS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}
# `sys.exit()` and friends end the rank that runs them, like `return` ends a function.
EXITS = {"sys.exit", "exit", "quit", "os._exit"}

RANK_WORDS = re.compile(
    r"rank|master|main_?process|is_main|global_zero|process_zero|is_primary|is_chief",
    re.IGNORECASE,
)
# `args.gpu == 0` / `device_id == 0`: the process index under mp.spawn, compared with 0.
DEVICE_INDEX_WORDS = re.compile(r"gpu|device_id", re.IGNORECASE)
MAX_DEPTH = 8


@dataclass(frozen=True)
class Route:
    """How every rank reaches a node: the unguarded calls leading to it, innermost first
    (empty when the node runs at module level or in a function every rank runs)."""

    calls: tuple[cst.Call, ...] = ()


def is_multi_process(model: SemanticModel) -> bool:
    """The file initialises a process group or builds a DistributedDataParallel."""
    return any(site.qualified_name == INIT_PROCESS_GROUP for site in model.calls) or any(
        wrapping.kind == "DDP" for wrapping in model.wrappings
    )


# ------------------------------------------------------------------------ rank tests
def mentions_rank(model: SemanticModel, expr: Optional[cst.CSTNode], depth: int = 2) -> bool:
    """Whether an expression involves a rank or a main-process notion (see the module doc)."""
    if expr is None:
        return False
    for node in _subtree(expr):
        if isinstance(node, cst.Name) and RANK_WORDS.search(node.value):
            return True
        if isinstance(node, cst.Attribute) and RANK_WORDS.search(node.attr.value):
            return True
        if isinstance(node, (cst.SimpleString, cst.FormattedStringText)) and RANK_WORDS.search(node.value):
            return True
        if isinstance(node, cst.Comparison) and _device_index_is_zero(node):
            return True
        if depth > 0 and isinstance(node, cst.Name) and _is_operand(model, node):
            value = model.value_at(node, node)  # `is_master = rank == 0` ... `if is_master:`
            if value is not None and value is not node and mentions_rank(model, value, depth - 1):
                return True
        if depth > 0 and isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            if any(_returns_rank_test(model, function, depth - 1) for function in model.functions.get(node.func.value, ())):
                return True
    return False


def _is_operand(model: SemanticModel, name: cst.Name) -> bool:
    """A name used as a value, not as the object of an attribute or a callee (`args` in
    `args.x`, `f` in `f()`): only such names are followed to what they hold."""
    parent = model.parent(name)
    return not (isinstance(parent, cst.Attribute) and parent.value is name) and not (
        isinstance(parent, cst.Call) and parent.func is name
    )


def _device_index_is_zero(comparison: cst.Comparison) -> bool:
    sides = [comparison.left, *(target.comparator for target in comparison.comparisons)]
    names = [side for side in sides if isinstance(side, (cst.Name, cst.Attribute))]
    zero = any(isinstance(side, cst.Integer) and side.value == "0" for side in sides)
    return zero and any(DEVICE_INDEX_WORDS.search(_last_identifier(name)) for name in names)


def _last_identifier(expr: cst.BaseExpression) -> str:
    return expr.attr.value if isinstance(expr, cst.Attribute) else expr.value  # type: ignore[union-attr]


def _returns_rank_test(model: SemanticModel, function: cst.FunctionDef, depth: int) -> bool:
    returns = [node for node in _subtree(function.body) if isinstance(node, cst.Return) and node.value is not None]
    return any(mentions_rank(model, statement.value, depth) for statement in returns)


def _subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


# ------------------------------------------------------------------------ guards
def enclosing_function(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost def or lambda around a node; None at module level (or in a class body)."""
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return ancestor
    return None


def is_rank_guarded(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether a node, inside its own function (or module), runs only on some ranks."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return _has_rank_decorator(ancestor)
        if isinstance(ancestor, cst.If) and child is not ancestor.test and mentions_rank(model, ancestor.test):
            return True
        if isinstance(ancestor, cst.IfExp) and child is not ancestor.test and mentions_rank(model, ancestor.test):
            return True
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right and mentions_rank(model, ancestor.left):
            return True
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)) and _after_rank_exit(model, ancestor, child):
            return True
        child = ancestor
    return False


def _has_rank_decorator(definition: cst.CSTNode) -> bool:
    """`@rank_zero_only`, `@master_only`, `@main_process_only`..."""
    if not isinstance(definition, cst.FunctionDef):
        return False
    for decorator in definition.decorators:
        target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        if isinstance(target, (cst.Name, cst.Attribute)) and RANK_WORDS.search(_last_identifier(target)):
            return True
    return False


def _after_rank_exit(model: SemanticModel, block: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """`if not is_master: return` (or `raise`, `continue`, `break`, `sys.exit()`) earlier in the block."""
    for sibling in block.body:  # type: ignore[attr-defined]
        if sibling is statement:
            return False
        if isinstance(sibling, cst.If) and mentions_rank(model, sibling.test):
            branches = [sibling.body, sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None]
            if any(branch is not None and _ends_in_exit(model, branch) for branch in branches):
                return True
    return False


def _ends_in_exit(model: SemanticModel, block: cst.BaseSuite) -> bool:
    last = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    if isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
        return True
    return (
        isinstance(last, cst.Expr)
        and isinstance(last.value, cst.Call)
        and (model.qualified_name(last.value.func) or dotted_name(last.value.func)) in EXITS
    )


# ------------------------------------------------------------------------ reachability
@dataclass(eq=False)
class _CallGraph:
    callers: dict[cst.FunctionDef, list[cst.Call]]
    spawned: set[cst.FunctionDef]


_GRAPHS: "weakref.WeakKeyDictionary[SemanticModel, _CallGraph]" = weakref.WeakKeyDictionary()


def callers_of(model: SemanticModel, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls in this file that we can tell call this function (by name or `self.`/instance)."""
    return _graph(model).callers.get(function, [])


def every_rank_reaches(model: SemanticModel, node: cst.CSTNode) -> Optional[Route]:
    """A Route when every rank provably runs `node`; None when guarded or when we can't tell.

    Module-level code and functions started by `torch.multiprocessing.spawn` run on every
    rank; a function does when one of its calls in this file does, unguarded.
    """
    return _route(model, node, frozenset())


def _route(model: SemanticModel, node: cst.CSTNode, visiting: frozenset) -> Optional[Route]:
    if len(visiting) > MAX_DEPTH or is_rank_guarded(model, node):
        return None
    function = enclosing_function(model, node)
    if function is None:
        in_class = any(isinstance(a, cst.ClassDef) for a in model.ancestors(node))
        return None if in_class else Route()
    if not isinstance(function, cst.FunctionDef) or function in visiting:
        return None
    graph = _graph(model)
    if function in graph.spawned:
        return Route()
    for call in graph.callers.get(function, ()):
        route = _route(model, call, visiting | {function})
        if route is not None:
            return Route((call, *route.calls))
    return None


def _graph(model: SemanticModel) -> _CallGraph:
    graph = _GRAPHS.get(model)
    if graph is None:
        graph = _CallGraph({}, set())
        for site in model.calls:
            if site.qualified_name in SPAWNERS:
                graph.spawned.update(_called_functions(model, argument(site.node, 0, "fn"), site.node))
                continue
            for function in _called_functions(model, site.node.func, site.node):
                graph.callers.setdefault(function, []).append(site.node)
        _GRAPHS[model] = graph
    return graph


def _called_functions(model: SemanticModel, func: Optional[cst.BaseExpression], at: cst.CSTNode) -> list[cst.FunctionDef]:
    """The defs of this file a callee expression names: `f`, `self.f`, `obj.f` with `obj = C(...)`."""
    if isinstance(func, cst.Name):
        return _visible_functions(model, func.value, at)
    if not isinstance(func, cst.Attribute):
        return []
    method = func.attr.value
    scope = model.scope(at)
    owner = func.value
    if isinstance(owner, cst.Name) and scope.self_name == owner.value and scope.class_scope is not None:
        return _methods(model, scope.class_scope.node, method)
    instance = peel_self_returning(model.value_at(owner, at))
    if isinstance(instance, cst.Call) and isinstance(instance.func, cst.Name):
        class_node = model.classes.get(instance.func.value)
        if class_node is not None and _visible_functions(model, instance.func.value, at, kind=cst.ClassDef):
            return _methods(model, class_node, method)
    return []


def _visible_functions(model: SemanticModel, name: str, at: cst.CSTNode, kind=cst.FunctionDef) -> list:
    """Defs (or classes) named `name` in the scope a call at `at` resolves that name in.

    A def later in the file counts: a function body runs after the module defined everything.
    A name that scope also binds otherwise (an assignment, a parameter) resolves to nothing.
    """
    scope = model.scope(at)
    while scope is not None:
        if scope.kind == "class" and scope.node is not model.scope(at).node:
            scope = scope.parent
            continue
        if name in scope.local_names:
            bindings = [b for b in model.bindings.get(name, ()) if b.scope is scope]
            if not bindings or not all(isinstance(b.node, kind) for b in bindings):
                return []
            return [b.node for b in bindings]
        scope = scope.parent
    return []


def _methods(model: SemanticModel, class_node: cst.CSTNode, name: str) -> list[cst.FunctionDef]:
    body = class_node.body.body if isinstance(class_node, cst.ClassDef) else ()
    return [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name]
