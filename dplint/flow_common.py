"""What the parts of the flow model (``dplint.flow``) share: the answers they give
(``Value``: one thing an expression may hold; ``Callee``: the function or class a call runs),
and the plain syntax questions each part asks: a class's method by name (``class_method``), whether it is a property, a record class's fields, a
block's statements, whether a test is statically known (``_static``), where a path ends
(``ends_path``), a type test's canonical text (``_type_test_text``), whether a node is inside
another, the function around a node, a method's instance parameter, and the stand-in for
"what ``self.x`` held when the method was called" (``_PASSED``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from dplint.flow_paths import Path

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, Scope, SemanticModel


_SPACE = re.compile(r"\s+")


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


def class_methods(node: cst.ClassDef) -> list[cst.FunctionDef]:
    return [s for s in node.body.body if isinstance(s, cst.FunctionDef)] if isinstance(node.body, cst.IndentedBlock) else []


def record_fields(model: "SemanticModel", node: cst.ClassDef) -> Optional[list[str]]:
    """The fields, in order, of a record class whose constructor Python writes: a `@dataclass`
    (without its own `__init__`) or a `typing.NamedTuple` subclass. `Info(loader, sampler)`
    stores each argument in the field of its place or keyword. None for any other class, and
    for a dataclass with bases (their fields come first)."""
    named_tuple = [model.qualified_name(b.value) for b in node.bases] == ["typing.NamedTuple"]
    decorated = any(model.qualified_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                    == "dataclasses.dataclass" for d in node.decorators)
    if not (named_tuple or decorated and not node.bases) or class_method(node, "__init__") is not None:
        return None
    fields = []
    for statement in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and \
                    "ClassVar" not in model.code(small.annotation.annotation):
                fields.append(small.target.value)
    return fields


def is_property(model: "SemanticModel", function: cst.FunctionDef) -> bool:
    """`@property` / `@functools.cached_property` on a method: reading the attribute of an
    instance runs it, and gives what it returns."""
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value == "property"
               and "property" not in model.imports and "property" not in model.bindings
               or model.qualified_name(d.decorator) in ("builtins.property", "functools.cached_property")
               for d in function.decorators)


def _blocks(body: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    if isinstance(body, cst.IndentedBlock):
        return body.body
    return (body,)  # SimpleStatementSuite: one "statement" of small statements


# Stands for "what `self.x` held when the method was called" in a method's summary.
_PASSED = object()


def _owns(model: "SemanticModel", binding) -> bool:
    return any(b is binding for b in model.bindings.get(binding.key, ()))


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


def _inside(model: "SemanticModel", node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in model.ancestors(node))


def _enclosing_function(model: "SemanticModel", node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    return next((a for a in model.ancestors(node) if isinstance(a, cst.FunctionDef)), None)


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


def _is_static(function: cst.FunctionDef) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
               for d in function.decorators)
