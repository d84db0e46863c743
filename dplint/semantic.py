"""The semantic model of one file: what its names are bound to, computed in one pass.

Every rule reads this model instead of walking the tree with its own name tables. It
knows, without importing anything and without LibCST's (slow) scope providers:

* the import-alias table (``import torch.nn as nn``, ``from torch.nn.parallel import
  DistributedDataParallel as DDP``) and so the qualified name of any dotted expression;
* every binding of a plain name or of a ``self.x`` attribute (assignments, parameters,
  loop targets, ``with ... as``), in source order, per scope, following Python's rule that
  a name assigned anywhere in a function is local to it;
* every call, with its scope, the loops around it and whether it runs under
  ``torch.no_grad()`` / ``torch.inference_mode()``;
* the model wrappings (``nn.DataParallel(...)`` / ``DistributedDataParallel(...)``) with the
  name they bind and the name of the model they wrap.

"Before" and "after" mean source order, which is run order inside one function body. Where
the code can't tell what a name holds (a parameter, a tuple unpacked from a call), the model
answers ``None`` and rules stay silent: a false positive costs a user's trust.

``model.flow`` (``dplint/flow.py``, attached by ``dplint.flow.analysed``) answers with *all* reaching values
and the branch conditions they hold under, across the functions and classes of the file and,
through ``model.project``, across files; its module docstring lists that API.
``wrapping_bound_to`` and ``static_truth`` already use it.
"""

from __future__ import annotations

import ast
import bisect
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Iterator, Optional

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition

from dplint.source import line_starts

# Different spellings of the same object, mapped to one canonical qualified name.
CANONICAL_NAMES = {
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.autograd.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.inference_mode": "torch.inference_mode",
    "torch.serialization.save": "torch.save",
    "torch.serialization.load": "torch.load",
    "torch.distributed.distributed_c10d.init_process_group": "torch.distributed.init_process_group",
    "torch.multiprocessing.spawn.spawn": "torch.multiprocessing.spawn",
    "torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer": "torch.distributed.optim.ZeroRedundancyOptimizer",
}

WRAPPER_KINDS = {
    "torch.nn.DataParallel": "DP",
    "torch.nn.parallel.DistributedDataParallel": "DDP",
}
DATA_PARALLEL = "torch.nn.DataParallel"
DISTRIBUTED_DATA_PARALLEL = "torch.nn.parallel.DistributedDataParallel"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
DATA_LOADER = "torch.utils.data.DataLoader"
NO_GRAD_CONTEXTS = {"torch.no_grad", "torch.inference_mode"}
# Names a project's `from common import *` commonly re-exports; read only when the file
# never binds the name itself.
STAR_REEXPORTED_ALIASES = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "dist": "torch.distributed",
    "optim": "torch.optim",
}

# Module methods that return the module itself: `nn.DataParallel(model).cuda()` is still the
# wrapper, and `DDP(model.to(rank))` still wraps `model`.
SELF_RETURNING_METHODS = {
    "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
    "requires_grad_", "share_memory", "to_empty", "xpu", "mps",
}


@dataclass(eq=False)
class Scope:
    node: cst.CSTNode  # the Module, FunctionDef, Lambda or ClassDef
    kind: str  # "module" | "function" | "class"
    parent: Optional["Scope"]
    local_names: set[str] = field(default_factory=set)  # names Python treats as local here
    self_name: Optional[str] = None  # first parameter of a method ("self")

    @property
    def class_scope(self) -> Optional["Scope"]:
        """The class a method belongs to (only for functions defined directly in a class)."""
        if self.kind == "function" and self.parent is not None and self.parent.kind == "class":
            return self.parent
        return None


@dataclass(eq=False)
class Binding:
    key: str  # "model", or "self.model" for an attribute of the method's instance
    value: Optional[cst.BaseExpression]  # None when the code can't tell (parameter, loop target...)
    node: cst.CSTNode  # the statement or parameter that binds it
    scope: Scope  # the owning scope: the function/module, or the class for "self.x"
    order: int


@dataclass(eq=False)
class CallSite:
    node: cst.Call
    qualified_name: Optional[str]  # "torch.save", or None for method calls on variables
    scope: Scope
    order: int
    in_no_grad: bool  # under `with torch.no_grad()` / `inference_mode()` or such a decorator
    loops: tuple[cst.CSTNode, ...]  # enclosing For/While nodes, outermost first


@dataclass(eq=False)
class Loop:
    node: cst.CSTNode  # cst.For or cst.While
    target_key: Optional[str]  # the loop variable of a `for` with a single Name target
    scope: Scope
    order: int
    loops: tuple[cst.CSTNode, ...]  # loops around this one


@dataclass(eq=False)
class Wrapping:
    """One `nn.DataParallel(inner)` / `DistributedDataParallel(inner)` construction."""

    kind: str  # "DP" | "DDP"
    call: cst.Call
    inner: Optional[cst.BaseExpression]  # the wrapped expression, `.to(...)`/`.cuda()` peeled off
    inner_key: Optional[str]  # "model" / "self.model" when the wrapped thing is a name
    wrapper_key: Optional[str]  # the name the wrapper is bound to, if any
    binding: Optional[Binding]  # that binding
    scope: Scope
    order: int

    @property
    def rebinds(self) -> bool:
        """`model = DDP(model)`: the inner name now holds the wrapper."""
        return self.inner_key is not None and self.inner_key == self.wrapper_key


class SemanticModel:
    def __init__(self, module: cst.Module, path: str = "<string>") -> None:
        self.module = module
        self.path = path
        self.imports: dict[str, str] = {}  # local name -> qualified name
        self.calls: list[CallSite] = []
        self.bindings: dict[str, list[Binding]] = {}  # key -> bindings in source order
        self.bindings_by_node: dict[cst.CSTNode, list[Binding]] = {}  # binding statement -> its bindings
        self.loops: list[Loop] = []
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.references: dict[str, list[tuple[cst.CSTNode, Scope, int]]] = {}  # loads of a key
        self._parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self._children: Optional[dict[cst.CSTNode, list[cst.CSTNode]]] = None  # built on first use
        self._order: dict[cst.CSTNode, int] = {}
        self._nodes_by_type: Optional[dict[type, list[cst.CSTNode]]] = None
        self._codes: dict[cst.CSTNode, str] = {}  # node -> its source (`code`)
        self._scope_of: dict[cst.CSTNode, Scope] = {}  # scope-creating node -> Scope
        self._node_scope: dict[cst.CSTNode, Scope] = {}  # any recorded node -> its scope
        self._wrappings: Optional[list[Wrapping]] = None
        self._positions = None
        # The value-flow model of this file (`dplint.flow.Flow`): attached by whoever builds the
        # model (`dplint.flow.analysed`), as `project` is, so that this floor imports no flow.
        self.flow = None
        # The cross-file hook: an object with `resolve(qualified_name, importer)` returning
        # (the other file's SemanticModel, its top-level node) or None; set by the project runner.
        self.project = None
        self.star_imports: list[str] = []  # modules of `from X import *`, in source order
        self.relative_star_imports: list[str] = []  # `from .ema import *`, in source order
        self.returns: dict[cst.CSTNode, list[cst.Return]] = {}  # function -> its own return statements
        self.generators: set[cst.CSTNode] = set()  # functions whose own body yields
        self._text: Optional[str] = None
        self._calls_in: Optional[dict] = None  # innermost def/lambda/class -> its call sites
        _Collector(self).collect(module)

    @property
    def text(self) -> str:
        """The file's source text. Set by whoever parsed it; otherwise rendered once: LibCST's
        `module.code` renders the whole tree again on every read."""
        if self._text is None:
            self._text = self.module.code
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text = value

    # ----------------------------------------------------------------- tree navigation
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self._parent.get(node)

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The node's children in source order, as `node.children` lists them but for the
        TOKEN_NODES, read from the parent table: LibCST's `children` walks the node with a
        visitor on every call."""
        if self._children is None:
            table: dict[cst.CSTNode, list[cst.CSTNode]] = {}
            for child, parent in self._parent.items():
                table.setdefault(parent, []).append(child)
            self._children = table
        found = self._children.get(node)
        if found is None:  # a leaf of this tree, or a node of another file's tree
            return [] if node in self._parent else children_of(node)
        return found

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        node = self._parent.get(node)
        while node is not None:
            yield node
            node = self._parent.get(node)

    def order(self, node: cst.CSTNode) -> int:
        return self._order[node]

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The innermost statement holding the node (a SimpleStatementLine or compound statement)."""
        current: Optional[cst.CSTNode] = node
        while current is not None and not isinstance(
            current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        ):
            current = self._parent.get(current)
        return current if current is not None else node

    def scope(self, node: cst.CSTNode) -> Scope:
        """The scope a node runs in (for a def/class node: the scope it is defined in)."""
        for candidate in (node, *self.ancestors(node)):
            if candidate in self._node_scope:
                return self._node_scope[candidate]
            if candidate is not node and candidate in self._scope_of:
                return self._scope_of[candidate]
        return self._scope_of[self.module]

    def code(self, node: cst.CSTNode, in_place_of: Optional[cst.CSTNode] = None) -> str:
        """The source of a node; with `in_place_of`, rendered at that node's block indentation
        (a multi-line call inside a function keeps its continuation lines' indentation)."""
        if in_place_of is None:
            known = self._codes.get(node)
            if known is None:
                known = self._codes[node] = self.module.code_for_node(node)  # trees never change: once per node
            return known
        state = CodegenState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)
        blocks = [a for a in self.ancestors(in_place_of) if isinstance(a, cst.IndentedBlock)]
        state.indent_tokens = [
            block.indent if block.indent is not None else self.module.default_indent for block in reversed(blocks)
        ]
        node._codegen(state)
        return "".join(state.tokens)

    def contains(self, node: cst.CSTNode) -> bool:
        """Whether `node` belongs to this model's tree (and not to another file's). The
        TOKEN_NODES are not in the tables: an edit anchored on one (a comment line that moves
        with its statement) is looked up among the positions, which it needs anyway."""
        if node is self.module or node in self._parent:
            return True
        return type(node) in TOKEN_NODES and node in self._span_recorder().spans

    def position(self, node: cst.CSTNode):
        """(start, end) CodePositions of a node, 1-based lines and 0-based columns.

        Positions are computed on first use only, so files without findings never pay for them.
        """
        return self._span_recorder().position(node)

    def _span_recorder(self) -> "_SpanRecorder":
        if self._positions is None:
            self._positions = _SpanRecorder(self.module)
        return self._positions

    # ------------------------------------------------------------------------- names
    def qualified_name(self, expr: Optional[cst.CSTNode]) -> Optional[str]:
        """`nn.DataParallel` -> "torch.nn.DataParallel", through the file's imports."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.imports.get(head)
        if base is None:
            base = self._star_imported(head)
            if base is None:
                return None
        name = base + ("." + rest if rest else "")
        return CANONICAL_NAMES.get(name, name)

    def _star_imported(self, head: str) -> Optional[str]:
        """What an unbound name may come from when the file has `from X import *`: a torch
        module's star import gives `torch.nn.<head>`; any other star import is taken to
        re-export the usual torch aliases (`torch`, `nn`, `F`, `dist`) and nothing else."""
        if not self.star_imports or head in self.bindings:
            return None
        if head in STAR_REEXPORTED_ALIASES:
            return STAR_REEXPORTED_ALIASES[head]
        for module in self.star_imports:
            if module == "torch" or module.startswith("torch."):
                return module + "." + head
        return None

    def binding_key(self, expr: Optional[cst.CSTNode], at: Optional[cst.CSTNode] = None) -> Optional[str]:
        """The key a name expression is bound under: "model", or "self.model" inside a method."""
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            scope = self.scope(at if at is not None else expr)
            if scope.self_name is not None and expr.value.value == scope.self_name:
                return "self." + expr.attr.value
        return None

    def binding_at(self, key: str, at: cst.CSTNode) -> Optional[Binding]:
        """The binding of `key` that is live at node `at` (the last one before it in its scope)."""
        owner = self._owner_scope(key, self.scope(at))
        if owner is None:
            return None
        position = self._order[at]
        live = None
        for binding in self.bindings.get(key, ()):
            if binding.scope is owner and binding.order < position:
                live = binding
        return live

    def value_at(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None,
                 depth: int = 8, peel: bool = False) -> Optional[cst.BaseExpression]:
        """Follow names to the expression they were last assigned; None when unknown.

        A non-name expression is returned as it is. `at` defaults to the expression itself.
        With `peel`, self-returning calls are looked through as well: after
        `model = DDP(model); model = model.to(device)`, `model` holds the `DDP(...)` call.
        """
        at = expr if at is None else at
        while depth > 0 and expr is not None:
            if peel:
                expr = peel_self_returning(expr)
            key = self.binding_key(expr, at)
            if key is None or key in ("True", "False", "None"):
                return expr
            binding = self.binding_at(key, at)
            if binding is None or binding.value is None:
                return None
            expr, at, depth = binding.value, binding.node, depth - 1
        return None

    def call_to(self, expr: Optional[cst.CSTNode], *qualified_names: str) -> Optional[cst.Call]:
        """`expr` itself if it is a call to one of the given qualified names."""
        if isinstance(expr, cst.Call) and self.qualified_name(expr.func) in qualified_names:
            return expr
        return None

    def calls_in(self, function: cst.CSTNode) -> list[CallSite]:
        """The call sites whose innermost def, lambda or class is `function`, in source order:
        a function's own calls, indexed once per file (a walk per question costs a lot)."""
        if self._calls_in is None:
            self._calls_in = {}
            for site in self.calls:
                owner = next((a for a in self.ancestors(site.node) if type(a) in SCOPE_NODES), None)
                self._calls_in.setdefault(owner, []).append(site)
        return self._calls_in.get(function, [])

    def nodes(self) -> Iterator[cst.CSTNode]:
        """Every node of the module except the module itself and the TOKEN_NODES (whitespace,
        comments, punctuation), in source order (no tree walk)."""
        return iter(self._parent)

    def nodes_of(self, *node_types: type) -> list[cst.CSTNode]:
        """The nodes of exactly these concrete LibCST types (`cst.Assign`, not a base class
        such as `cst.BaseExpression`), in source order: an index built on first use, so that
        each question does not test every node of the file."""
        if self._nodes_by_type is None:
            self._nodes_by_type = {}
            for node in self._parent:
                self._nodes_by_type.setdefault(type(node), []).append(node)
        if len(node_types) == 1:
            return self._nodes_by_type.get(node_types[0], [])
        found = [node for node_type in node_types for node in self._nodes_by_type.get(node_type, ())]
        return sorted(found, key=self._order.__getitem__)

    def owner_scope(self, key: str, scope: Scope) -> Optional[Scope]:
        """The scope whose binding of `key` a read in `scope` sees (Python's scoping rules)."""
        return self._owner_scope(key, scope)

    def _owner_scope(self, key: str, scope: Scope) -> Optional[Scope]:
        if key.startswith("self."):
            return scope.class_scope
        current: Optional[Scope] = scope
        while current is not None:
            if current.kind == "class" and current is not scope:
                current = current.parent  # class bodies are not visible from their methods
                continue
            if key in current.local_names:
                return current
            current = current.parent
        return None

    # ---------------------------------------------------------------------- wrappers
    @property
    def wrappings(self) -> list[Wrapping]:
        if self._wrappings is None:
            self._wrappings = list(self._find_wrappings())
        return self._wrappings

    def _find_wrappings(self) -> Iterator[Wrapping]:
        for site in self.calls:
            kind = WRAPPER_KINDS.get(site.qualified_name or "")
            if kind is None:
                continue
            inner = argument(site.node, 0, "module")
            inner = peel_self_returning(inner)
            binding = self._binding_of_value(site.node)
            yield Wrapping(
                kind=kind,
                call=site.node,
                inner=inner,
                inner_key=self.binding_key(inner, site.node),
                wrapper_key=binding.key if binding else None,
                binding=binding,
                scope=site.scope,
                order=site.order,
            )

    def _binding_of_value(self, call: cst.Call) -> Optional[Binding]:
        """The binding whose value is `call`, possibly under `.cuda()`/`.to()` or as one branch
        of a conditional expression (`net = DP(model) if n > 1 else model`)."""
        for ancestor in self.ancestors(call):
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
                if not any(value is call for value in _possible_values(ancestor.value)):
                    return None
                for binding in self.bindings_by_node.get(ancestor, ()):
                    return binding
                return None
            if not isinstance(ancestor, (cst.Call, cst.Attribute, cst.Arg, cst.IfExp)):
                return None
        return None

    def wrapping_bound_to(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None) -> Optional[Wrapping]:
        """The wrapping an expression holds: `model_dp` after `model_dp = nn.DataParallel(m)`
        (also when only one branch of `DP(m) if n > 1 else m` wraps)."""
        for value in _possible_values(self.value_at(expr, at, peel=True)):
            for wrapping in self.wrappings:
                if wrapping.call is value:
                    return wrapping
        # Through every reaching binding, same-file helpers (`on_gpu(DDP(net))`), parameters
        # with one caller and constructor arguments stored in `self.x`.
        found = self.flow.wrapped_on_some_path(expr, at)
        return found if found is not None and found in self.wrappings else None

    def wrapping_of_inner(self, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[Wrapping]:
        """The wrapping that wrapped the very object `expr` holds at `at`, into another name.

        `model_dp = nn.DataParallel(model)` ... `model.train()` -> that wrapping.
        After `model = DDP(model)` the name holds the wrapper, so the answer is None.
        """
        key = self.binding_key(expr, at)
        if key is None:
            return None
        live = self.binding_at(key, at)
        position = self._order[at]
        found = None
        for wrapping in self.wrappings:
            if wrapping.inner_key != key or wrapping.rebinds or wrapping.order >= position:
                continue
            if self.binding_at(key, wrapping.call) is live:
                found = wrapping
        return found


# --------------------------------------------------------------------------- helpers
SCOPE_NODES = frozenset((cst.FunctionDef, cst.Lambda, cst.ClassDef))  # the nodes that open a scope
# Whitespace, comments and punctuation: six nodes in ten of a typical file, and nothing any
# analysis asks about (they are read as attributes of their owner, `arg.comma`, when at all).
# The semantic model leaves them out of its tables: no parent, no order, not in `nodes()`.
TOKEN_NODES = frozenset((
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine,
    cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
))


def dotted_name(expr: Optional[cst.CSTNode]) -> Optional[str]:
    """`torch.nn.DataParallel` -> "torch.nn.DataParallel"; None for anything but names/attributes."""
    parts = []
    while type(expr) is cst.Attribute:  # exact types: cheaper than `isinstance`, on a hot path
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def argument(call: cst.Call, position: Optional[int], keyword: Optional[str] = None) -> Optional[cst.BaseExpression]:
    """The value of a call's argument given by position or keyword, or None."""
    index = 0
    for arg in call.args:
        if arg.star:
            return None if keyword is None else _keyword_only(call, keyword)
        if arg.keyword is None:
            if position is not None and index == position:
                return arg.value
            index += 1
        elif keyword is not None and arg.keyword.value == keyword:
            return arg.value
    return None


def _keyword_only(call: cst.Call, keyword: str) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    return None


def keyword_arg(call: cst.Call, keyword: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    return None


def method_call(call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
    """`x.train()` -> (x, "train"); None when the callee is not an attribute."""
    if isinstance(call.func, cst.Attribute):
        return call.func.value, call.func.attr.value
    return None


def peel_self_returning(expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """`nn.DataParallel(m).cuda()` -> `nn.DataParallel(m)`; `m.to(rank)` -> `m`."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in SELF_RETURNING_METHODS
    ):
        expr = expr.func.value
    return expr


def own_returns(function: cst.FunctionDef) -> list[cst.Return]:
    """The function's own return statements (not those of nested functions or classes);
    empty when any of them returns nothing, since then the function may return None."""
    found: list[cst.Return] = []

    class Collector(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

    walk(function, Collector())
    return found if all(statement.value is not None for statement in found) else []


def _possible_values(expr: Optional[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """The expressions a value may be: itself, or either branch of `a if c else b`, with
    self-returning calls (`.cuda()`, `.to(...)`) peeled off."""
    expr = peel_self_returning(expr)
    if isinstance(expr, cst.IfExp):
        return [*_possible_values(expr.body), *_possible_values(expr.orelse)]
    return [expr] if expr is not None else []


def is_docstring(statement: cst.CSTNode) -> bool:
    """A statement that is only a string: a module's, class's or function's docstring when first."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def literal_value(expr: Optional[cst.CSTNode]):
    """The Python value of a simple literal (str, number, True/False/None); raises ValueError otherwise."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        value = expr.evaluated_value
        if value is None:
            raise ValueError("not a literal")
        return value
    if isinstance(expr, cst.Integer):
        return int(expr.value.replace("_", ""), 0)
    if isinstance(expr, cst.Float):
        return float(expr.value.replace("_", ""))
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return -literal_value(expr.expression)
    raise ValueError("not a literal")


# ------------------------------------------------------------------------ collection
class _Collector(cst.CSTVisitor):
    """The one pass over the tree that fills a SemanticModel."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self.stack: list[cst.CSTNode] = []
        self.counter = 0
        self.scopes: list[Scope] = []
        self.loop_stack: list[cst.CSTNode] = []
        self.no_grad_depth = 0
        self._no_grad_nodes: set[cst.CSTNode] = set()  # With / FunctionDef nodes that disable grad
        self.open_assignments: list[Binding] = []

    def collect(self, module: cst.Module) -> None:
        module_scope = Scope(module, "module", None)
        self.model._scope_of[module] = module_scope
        self.scopes.append(module_scope)
        self._walk(module, None)

    def _walk(self, node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> None:
        """`walk(node, self)` with `on_visit` / `on_leave` inlined: this pass meets every
        node of every file, and the two calls per node are a good part of its cost."""
        node_type = type(node)
        if parent is not None:
            self.model._parent[node] = parent
        self.model._order[node] = self.counter
        self.counter += 1
        try:
            method = _VISIT_HANDLERS[node_type]
        except KeyError:
            method = _handler(_VISIT_HANDLERS, "visit_", node_type)
        if method is None or method(self, node) is not False:
            try:
                fields = _CHILD_FIELDS[node_type]
            except KeyError:
                fields = _child_fields(node)
            if fields is None:
                for child in node.children:
                    if type(child) not in TOKEN_NODES:
                        self._walk(child, node)
            else:
                for name in fields:
                    value = getattr(node, name)
                    kind = type(value)
                    if kind is tuple or kind is list:
                        for child in value:
                            if type(child) not in TOKEN_NODES:
                                self._walk(child, node)
                    elif value is not None and kind is not cst.MaybeSentinel and kind not in TOKEN_NODES:
                        self._walk(value, node)
        try:
            method = _LEAVE_HANDLERS[node_type]
        except KeyError:
            method = _handler(_LEAVE_HANDLERS, "leave_", node_type)
        if method is not None:
            method(self, node)

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    # `_walk` is the pass itself; on_visit / on_leave do the same per node for a caller that
    # runs this visitor through LibCST's `visit` (the typed visit_X / leave_X looked up once
    # per type: LibCST's own dispatch looks them up by name for every node).
    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in TOKEN_NODES:
            return False
        if self.stack:
            self.model._parent[node] = self.stack[-1]
        self.model._order[node] = self.counter
        self.counter += 1
        self.stack.append(node)
        method = _handler(_VISIT_HANDLERS, "visit_", type(node))
        return method is None or method(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in TOKEN_NODES:
            return
        method = _handler(_LEAVE_HANDLERS, "leave_", type(original_node))
        if method is not None:
            method(self, original_node)
        self.stack.pop()

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    # -- imports
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
                self.model.imports[local] = full
            else:
                local = full.split(".")[0]
                self.model.imports[local] = local
            self._bind(local, None, node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        # Relative imports keep their dots (".data.build_loader"): never a torch name, but the
        # project layer resolves them.
        dots = "." * len(node.relative)
        base = dots + (dotted_name(node.module) or "") if node.module is not None else dots
        if node.module is not None and dotted_name(node.module) is None:
            return
        if isinstance(node.names, cst.ImportStar):
            if not dots:
                self.model.star_imports.append(base)
            else:
                self.model.relative_star_imports.append(base)  # never torch: for the project layer
            return
        for local, full in import_from_names(node):
            self.model.imports[local] = CANONICAL_NAMES.get(full, full)
            self._bind(local, None, node)

    # -- scopes
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope.local_names.add(node.name.value)
        self._bind(node.name.value, None, node)
        self.model.functions.setdefault(node.name.value, []).append(node)
        if any(self._disables_grad(decorator.decorator) for decorator in node.decorators):
            self._no_grad_nodes.add(node)
            self.no_grad_depth += 1
        scope = Scope(node, "function", self.scope)
        params = node.params
        all_params = [*params.posonly_params, *params.params, *params.kwonly_params]
        for extra in (params.star_arg, params.star_kwarg):
            if isinstance(extra, cst.Param):
                all_params.append(extra)
        if all_params and self.scope.kind == "class" and not _is_staticmethod(node):
            scope.self_name = all_params[0].name.value
        self.model._scope_of[node] = scope
        self.scopes.append(scope)
        for param in all_params:
            scope.local_names.add(param.name.value)
            self._bind(param.name.value, None, param)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()
        if original_node in self._no_grad_nodes:
            self.no_grad_depth -= 1

    def visit_Lambda(self, node: cst.Lambda) -> None:
        scope = Scope(node, "function", self.scope)
        for param in node.params.params:
            scope.local_names.add(param.name.value)
        self.model._scope_of[node] = scope
        self.scopes.append(scope)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.scopes.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope.local_names.add(node.name.value)
        self._bind(node.name.value, None, node)
        self.model.classes[node.name.value] = node
        scope = Scope(node, "class", self.scope)
        self.model._scope_of[node] = scope
        self.scopes.append(scope)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def visit_Global(self, node: cst.Global) -> None:
        # `global x` makes assignments in this function bind the module's x.
        for item in node.names:
            self.scope.local_names.discard(item.name.value)

    # -- bindings
    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, node.value, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, node.value, node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target, None, node)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target, node.value, node)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target, None, node)
        key = node.target.value if isinstance(node.target, cst.Name) else None
        self._add_loop(node, key)

    def leave_For(self, original_node: cst.For) -> None:
        self.loop_stack.pop()

    def visit_While(self, node: cst.While) -> None:
        self._add_loop(node, None)

    def leave_While(self, original_node: cst.While) -> None:
        self.loop_stack.pop()

    def _add_loop(self, node: cst.CSTNode, key: Optional[str]) -> None:
        self.model.loops.append(Loop(node, key, self.scope, self.model._order[node], tuple(self.loop_stack)))
        self.loop_stack.append(node)

    def visit_With(self, node: cst.With) -> None:
        for item in node.items:
            if item.asname is not None:
                self._bind_target(item.asname.name, None, node)
        if any(self._disables_grad(item.item) for item in node.items):
            self._no_grad_nodes.add(node)
            self.no_grad_depth += 1

    def leave_With(self, original_node: cst.With) -> None:
        if original_node in self._no_grad_nodes:
            self.no_grad_depth -= 1

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name, None, node)

    # Comprehension variables live in their own scope; record them as unknown so that a
    # comprehension's `k` never resolves to an outer `k`. They are bound when the visit enters
    # the comprehension, because its element (`k[7:]`) comes before its `for` in the tree.
    def _bind_comprehension(self, node: cst.BaseComp) -> None:
        for_in: Optional[cst.CompFor] = node.for_in
        while for_in is not None:
            self._bind_target(for_in.target, None, node)
            for_in = for_in.inner_for_in

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._bind_comprehension(node)

    def visit_SetComp(self, node: cst.SetComp) -> None:
        self._bind_comprehension(node)

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._bind_comprehension(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._bind_comprehension(node)

    def _bind_target(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression], node: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            values = value.elements if isinstance(value, (cst.Tuple, cst.List)) else None
            elements = target.elements
            exact = values is not None and len(values) == len(elements) and not any(
                isinstance(e, cst.StarredElement) for e in (*elements, *values)
            )
            for index, element in enumerate(elements):
                element_value = values[index].value if exact else None
                self._bind_target(element.value, element_value, node)
            return
        if isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None, node)
            return
        if isinstance(target, cst.Name):
            self._bind(target.value, value, node)
            return
        key = self._self_key(target)
        class_scope = self.scope.class_scope
        if key is not None and class_scope is not None:
            self._add_binding(key, value, node, class_scope)

    def _self_key(self, target: cst.BaseExpression) -> Optional[str]:
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and self.scope.self_name is not None
            and target.value.value == self.scope.self_name
        ):
            return "self." + target.attr.value
        return None

    def _bind(self, name: str, value: Optional[cst.BaseExpression], node: cst.CSTNode) -> None:
        self.scope.local_names.add(name)
        self._add_binding(name, value, node, self.scope)

    def _add_binding(self, key: str, value, node: cst.CSTNode, scope: Scope) -> None:
        binding = Binding(key, value, node, scope, self.model._order.get(node, self.counter))
        self.model.bindings.setdefault(key, []).append(binding)
        self.model.bindings_by_node.setdefault(node, []).append(binding)
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            self.open_assignments.append(binding)

    # An assignment takes effect after its whole statement ran: in `model = DDP(model)` the
    # argument still reads the old `model`. So its order is fixed when the visit leaves it.
    def _close_assignment(self, node: cst.CSTNode) -> None:
        closed = False
        for binding in self.open_assignments:
            if binding.node is node:
                binding.order = self.counter
                closed = True
        if closed:
            # The order is a slot of its own: the next statement (numbered from the counter)
            # comes strictly after the assignment.
            self.counter += 1
            self.open_assignments = [b for b in self.open_assignments if b.node is not node]

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._close_assignment(original_node)

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        self._close_assignment(original_node)

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        self._close_assignment(original_node)

    # -- calls and references
    def visit_Call(self, node: cst.Call) -> None:
        self.model.calls.append(
            CallSite(
                node=node,
                qualified_name=self.model.qualified_name(node.func),
                scope=self.scope,
                order=self.model._order[node],
                in_no_grad=self.no_grad_depth > 0,
                loops=tuple(self.loop_stack),
            )
        )
        self.model._node_scope[node] = self.scope

    def visit_Return(self, node: cst.Return) -> None:
        self.model.returns.setdefault(self.scope.node, []).append(node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.model.generators.add(self.scope.node)

    def visit_Name(self, node: cst.Name) -> None:
        self.model._node_scope[node] = self.scope
        self.model.references.setdefault(node.value, []).append((node, self.scope, self.model._order[node]))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.model._node_scope[node] = self.scope
        key = self._self_key(node)
        if key is not None:
            self.model.references.setdefault(key, []).append((node, self.scope, self.model._order[node]))

    def _disables_grad(self, expr: cst.BaseExpression) -> bool:
        target = expr.func if isinstance(expr, cst.Call) else expr
        name = self.model.qualified_name(target)
        if name in NO_GRAD_CONTEXTS:
            return True
        if name == "torch.set_grad_enabled" and isinstance(expr, cst.Call):
            try:
                return literal_value(argument(expr, 0, "mode")) is False
            except ValueError:
                return False
        return False


def import_from_names(node: cst.ImportFrom) -> list[tuple[str, str]]:
    """(local name, dotted name it binds) for each name of `from m import a as b` (relative
    imports keep their dots: `.data.build_loader`); none for a star import or a module
    spelled in a way that names nothing."""
    dots = "." * len(node.relative)
    base = dots + (dotted_name(node.module) or "") if node.module is not None else dots
    if node.module is not None and dotted_name(node.module) is None or isinstance(node.names, cst.ImportStar) or not base:
        return []
    found = []
    for alias in node.names:
        name = dotted_name(alias.name)
        if name is None:
            continue
        local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
        found.append((local, base + name if base.endswith(".") else base + "." + name))
    return found


class _Span:
    """What LibCST's nodes call `with state.record_syntactic_position(...)` on."""

    __slots__ = ("recorder", "node", "start_node", "end_node", "start")

    def __init__(self, recorder: "_SpanRecorder", node, start_node, end_node) -> None:
        self.recorder, self.node, self.start_node, self.end_node = recorder, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = self.recorder.offset

    def __exit__(self, *exc_info) -> bool:
        spans = self.recorder.spans
        start = spans[self.start_node][0] if self.start_node is not None else self.start
        end = spans[self.end_node][1] if self.end_node is not None else self.recorder.offset
        spans[self.node] = (start, end)
        return False


class _SpanRecorder(CodegenState):
    """LibCST's PositionProvider at ~half the cost: the same codegen pass, but it records
    character offsets (a running sum) and turns only the nodes asked about into lines and
    columns, where LibCST splits every token on newlines."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self._open: list[int] = []
        module._codegen(self)
        self.starts = line_starts("".join(self.tokens))

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        self.offset += sum(len(token) for token in self.indent_tokens)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._open.append(self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._open.pop()
        self.spans.setdefault(node, (start, self.offset))  # a syntactic span, when recorded, wins

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> _Span:
        return _Span(self, node, start_node, end_node)

    def position(self, node: cst.CSTNode) -> tuple[CodePosition, CodePosition]:
        start, end = self.spans[node]
        return self._line_column(start), self._line_column(end)

    def _line_column(self, offset: int) -> CodePosition:
        line = bisect.bisect_right(self.starts, offset)
        return CodePosition(line, offset - self.starts[line - 1])


# ------------------------------------------------------------------------ fast walk
# LibCST's `node.visit(visitor)` rebuilds (and re-validates) every node of the tree even for a
# read-only visitor, and calls two attribute hooks per field: over half the cost of the
# collection pass. `walk` visits the same nodes in the same order without building anything.
_CHILD_FIELDS: dict[type, Optional[tuple[str, ...]]] = {}


def names_a_definition(model: "SemanticModel", name: str) -> bool:
    """The file binds `name` once, to a top-level function or class: a value that is always
    true (`not evaluate` with `def evaluate(...)` is always False)."""
    bindings = model.bindings.get(name, ())
    return len(bindings) == 1 and isinstance(bindings[0].node, (cst.FunctionDef, cst.ClassDef)) \
        and bindings[0].scope.kind == "module"


def walk(node: cst.CSTNode, visitor) -> None:
    """`node.visit(visitor)` for a read-only visitor with `on_visit` / `on_leave` only: the
    same nodes, in the same (source) order, `on_visit` returning False skipping the children."""
    if visitor.on_visit(node):
        for child in children_of(node):
            walk(child, visitor)
    visitor.on_leave(node)


def subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node below it (depth first, last child first: for questions that
    do not depend on the order)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def children_of(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children` (the node's children in source order) without LibCST rebuilding the
    node to list them."""
    try:
        fields = _CHILD_FIELDS[type(node)]
    except KeyError:
        fields = _child_fields(node)
    return list(node.children) if fields is None else list(_fields_children(node, fields))


def _child_fields(node: cst.CSTNode) -> Optional[tuple[str, ...]]:
    """The attributes of a node type that hold its children, in the order LibCST visits them:
    its `_visit_and_replace_children` names each one as the second argument of a `visit_*`
    call. Checked against `node.children` on the first node of the type; None (use
    `children`) where the source cannot be read or the check fails."""
    node_type = type(node)
    from dplint.libcst_fields import CHILD_FIELDS

    known = CHILD_FIELDS.get(node_type.__name__)
    if known is not None and list(_fields_children(node, known)) == list(node.children):
        _CHILD_FIELDS[node_type] = known  # the shipped table, checked on this first node
        return known
    fields: Optional[tuple[str, ...]] = None
    try:
        source = textwrap.dedent(inspect.getsource(node_type._visit_and_replace_children))
        calls = [
            call for call in ast.walk(ast.parse(source))
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("visit_")
            and len(call.args) > 1 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)
        ]
        calls.sort(key=lambda call: (call.lineno, call.col_offset))
        fields = tuple(dict.fromkeys(call.args[1].value for call in calls))
    except Exception:  # no source (a compiled LibCST): LibCST's own listing
        fields = None
    if fields is not None and list(_fields_children(node, fields)) != list(node.children):
        fields = None
    _CHILD_FIELDS[node_type] = fields
    return fields


def _fields_children(node: cst.CSTNode, fields: tuple[str, ...]) -> Iterator[cst.CSTNode]:
    for name in fields:
        value = getattr(node, name)
        if type(value) in (tuple, list):
            yield from value
        elif value is not None and type(value) is not cst.MaybeSentinel:
            yield value


_VISIT_HANDLERS: dict[type, object] = {}
_LEAVE_HANDLERS: dict[type, object] = {}


def _handler(table: dict, prefix: str, node_type: type):
    """_Collector's visit_X / leave_X function for a node type, or None; looked up once per type."""
    try:
        return table[node_type]
    except KeyError:
        method = table[node_type] = getattr(_Collector, prefix + node_type.__name__, None)
        return method


def _is_staticmethod(node: cst.FunctionDef) -> bool:
    return any(
        isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in node.decorators
    )


def static_truth(model: SemanticModel, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None) -> Optional[bool]:
    """Whether an expression is provably truthy (True) or falsy (False); None when unknown.

    Knows literals, names whose every reaching value agrees (all branches, same-file
    callers and helpers: `dplint.flow.Flow.truth`), `not x`, `a and b` / `a or b`, and
    `x is None` / `x is not None` where x holds a call (never None) or the literal None.
    """
    if expr is None:
        return None
    return model.flow.truth(expr, expr if at is None else at)


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
