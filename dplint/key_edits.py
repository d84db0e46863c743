"""Hand-written edits of a mapping's keys: the loops over a state dict's keys, the cuts made on
each key (`k[7:]`, `k.replace("module.", "")`, `k.partition("module.")[2]`, ...), and the tests
that show which keys carry a prefix where the cut runs.

Every helper answers one question about the program, stated in its docstring. None imports
torch or runs the linted code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

import libcst as cst

from dplint.checkpoints import WRAPPER_PREFIX
from dplint.distributed import enclosing_function, passed_for
from dplint.semantic import SemanticModel, argument, literal_value, method_call, walk
from dplint.wrappers import constructions

# A test or a cut of either names the wrapper's prefix (`k.startswith("module")`, `k.split("module.")`).
WRAPPER_PREFIXES = ("module", "module.")
COMPREHENSIONS = (cst.DictComp, cst.ListComp, cst.SetComp, cst.GeneratorExp)
SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)

# The kinds of prefix edit `prefix_edits` yields.
LSTRIP = "lstrip"  # `k.lstrip("module.")`: strips a set of characters
REPLACE = "replace"  # `k.replace("module.", "")`: removes the text anywhere in the key
SLICE = "slice"  # `k[7:]`, `k[len("module."):]`: cuts seven characters from every key
SPLIT = "split"  # `k.split("module.", 1)[1]`, `k.partition("module.")[2]`: cuts at the text anywhere
FIRST = "first"  # `".".join(k.split(".")[1:])`, `k.partition(".")[2]`: drops the first dotted component


@dataclass
class KeyLoop:
    """A loop or comprehension over a mapping's keys: `for k, v in X.items()` / `for k in X`."""

    node: Union[cst.For, cst.CompFor]
    owner: cst.CSTNode  # the For statement or the comprehension
    key: str
    source: cst.BaseExpression  # X
    # Where a test of the key can guard the edit: (node, the key's name there). An edit in a
    # lambda or function applied to the key (`cut(k)`) adds that body too.
    guard_scopes: tuple[tuple[cst.CSTNode, str], ...] = ()


@dataclass(frozen=True)
class KeyEdit:
    """An expression that cuts a prefix from a string held by a name (a key, if `key_loop` finds its loop)."""

    node: cst.BaseExpression  # the expression that makes the new key
    key: str  # the name of the key it edits
    kind: str  # LSTRIP, REPLACE, SLICE, SPLIT or FIRST


def prefix_edits(model: SemanticModel) -> Iterator[KeyEdit]:
    """The expressions that remove the wrapper's prefix, or the first dotted component, from a
    string held by a plain name: `k.lstrip("module.")`, `k.replace("module.", "")`, `k[7:]`,
    `k[len("module."):]`, `k.split("module.", 1)[1]`, `k.split("module.")[-1]`,
    `k.partition("module.")[2]`, `".".join(k.split(".")[n:])`, `k.split(".", 1)[1]`,
    `k.partition(".")[2]`. Whether the name is a mapping's key is `key_loop`'s question."""
    for site in model.calls:
        method = method_call(site.node)
        if method is None or not isinstance(method[0], cst.Name) or method[1] not in (LSTRIP, REPLACE):
            continue
        old = prefix_value(model, argument(site.node, 0), site.node)
        new = _literal_or_none(argument(site.node, 1)) if method[1] == REPLACE else ""
        # Exactly the wrapper's prefix: `k.replace("module.visual.trunk.", "")` strips another one.
        if old in WRAPPER_PREFIXES and new == "":
            yield KeyEdit(site.node, method[0].value, method[1])
    for node in model.nodes_of(cst.Subscript):
        if len(node.slice) != 1:
            continue
        part = node.slice[0].slice
        if isinstance(node.value, cst.Name) and _cuts_wrapper_length(model, part):
            yield KeyEdit(node, node.value.value, SLICE)
            continue
        cut = _cut_at_separator(model, node)
        if cut is None:
            continue
        kind, key = cut
        if kind == FIRST and isinstance(part, cst.Slice):
            join = model.parent(model.parent(node))  # Subscript -> Arg -> Call
            if not _is_dot_join(join):
                continue
            node = join
        yield KeyEdit(node, key, kind)


def _cut_at_separator(model: SemanticModel, node: cst.Subscript) -> Optional[tuple[str, str]]:
    """(SPLIT | FIRST, key) for `k.split(P, 1)[1]`, `k.split(P)[-1]`, `k.partition(P)[2]` (P the
    wrapper's prefix: SPLIT; P a dot: FIRST) and `k.split(".")[n:]` (FIRST)."""
    call = node.value
    method = method_call(call) if isinstance(call, cst.Call) else None
    if method is None or not isinstance(method[0], cst.Name) or method[1] not in ("split", "partition"):
        return None
    separator = prefix_value(model, argument(call, 0, "sep"), call)
    kind = SPLIT if separator in WRAPPER_PREFIXES else FIRST if separator == "." else None
    if kind is None:
        return None
    part = node.slice[0].slice
    if isinstance(part, cst.Slice):
        whole_tail = part.lower is not None and part.upper is None and part.step is None
        return (kind, method[0].value) if kind == FIRST and method[1] == "split" and whole_tail else None
    index = _literal_or_none(part.value) if isinstance(part, cst.Index) else None
    if index not in ((2,) if method[1] == "partition" else (1, -1)):
        return None
    if kind == FIRST and method[1] == "split" and _literal_or_none(argument(call, 1, "maxsplit")) != 1:
        return None
    return kind, method[0].value


def _is_dot_join(node: Optional[cst.CSTNode]) -> bool:
    method = method_call(node) if isinstance(node, cst.Call) and len(node.args) == 1 else None
    return method is not None and method[1] == "join" and _literal_or_none(method[0]) == "."


def _cuts_wrapper_length(model: SemanticModel, part: cst.BaseSlice) -> bool:
    """`[7:]` or `[len("module."):]`: a slice that drops as many characters as the prefix has."""
    if not isinstance(part, cst.Slice) or part.upper is not None or part.step is not None:
        return False
    return _length_of(model, part.lower) == WRAPPER_PREFIX or _literal_or_none(part.lower) == len(WRAPPER_PREFIX)


def prefix_value(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int = 3):
    """The string a prefix argument holds: a literal, a name bound to one, or a parameter that
    every call of its function in this file passes the same literal for; else None."""
    if expr is None or depth <= 0:
        return None
    value = _literal_or_none(expr)
    if value is not None or not isinstance(expr, cst.Name):
        return value
    binding = model.binding_at(expr.value, at)
    if binding is None:
        return None
    if binding.value is not None:
        return prefix_value(model, binding.value, binding.node, depth - 1)
    function = enclosing_function(model, binding.node) if isinstance(binding.node, cst.Param) else None
    if not isinstance(function, cst.FunctionDef):
        return None
    passed = passed_for(model, function, binding.node)
    values = {prefix_value(model, value, value, depth - 1) for value in passed}
    return values.pop() if len(values) == 1 and passed else None


def key_loop(model: SemanticModel, node: cst.CSTNode, key: str, depth: int = 3) -> Optional[KeyLoop]:
    """The comprehension or `for` loop around `node` that binds `key` to a mapping's keys; for a
    key that is a parameter of a lambda or function (`cut = lambda name: ...`), the loop around
    a call of it whose argument is a loop's key (`{cut(k): v for k, v in sd.items()}`)."""
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, COMPREHENSIONS):
            comp_for: Optional[cst.CompFor] = ancestor.for_in
            while comp_for is not None:
                source = keys_source(comp_for.target, comp_for.iter, key)
                if source is not None:
                    return KeyLoop(comp_for, ancestor, key, source, ((ancestor, key),))
                comp_for = comp_for.inner_for_in
        elif isinstance(ancestor, cst.For):
            source = keys_source(ancestor.target, ancestor.iter, key)
            if source is not None:
                return KeyLoop(ancestor, ancestor, key, source, ((ancestor, key),))
        elif isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return _loop_around_calls(model, ancestor, key, depth) if depth > 0 else None
        elif isinstance(ancestor, cst.ClassDef):
            return None
    return None


def _loop_around_calls(model: SemanticModel, function: cst.CSTNode, key: str, depth: int) -> Optional[KeyLoop]:
    """The key loop around a call of `function` (a def, or a lambda bound to a name) that passes
    a loop's key for its first parameter `key`."""
    params = function.params
    names = [param.name.value for param in (*params.posonly_params, *params.params)]
    if not names or names[0] != key:
        return None
    if isinstance(function, cst.FunctionDef):
        name = function.name.value
    else:
        assign = model.parent(function)
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
            return None
        name = assign.targets[0].target.value
    for site in model.calls:
        call = site.node
        if isinstance(call.func, cst.Name) and call.func.value == name and call.args and isinstance(call.args[0].value, cst.Name):
            loop = key_loop(model, call, call.args[0].value.value, depth - 1)
            if loop is not None:
                loop.guard_scopes = ((function, key), *loop.guard_scopes)
                return loop
    return None


def keys_source(target: cst.BaseExpression, iterable: cst.BaseExpression, key: str) -> Optional[cst.BaseExpression]:
    """The mapping X whose keys `key` takes in `for key in X`, `key in X.keys()`, `key in
    list(X.keys())` (a copy, to rename in place) and `key, v in X.items()`; None otherwise."""
    if (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value in ("list", "tuple")
            and len(iterable.args) == 1 and not iterable.args[0].star):
        iterable = iterable.args[0].value
    method = method_call(iterable) if isinstance(iterable, cst.Call) and not iterable.args else None
    if isinstance(target, cst.Name) and target.value == key:
        if method is not None and method[1] == "keys":
            return method[0]
        return None if isinstance(iterable, cst.Call) else iterable
    if (isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2
            and isinstance(target.elements[0].value, cst.Name) and target.elements[0].value.value == key
            and method is not None and method[1] == "items"):
        return method[0]
    return None


def tested_prefixes(model: SemanticModel, loop: KeyLoop) -> list[str]:
    """The prefixes each key is tested for inside the loop (or the function applied to the
    key): `key.startswith(P)`, `P in key`, `key[:len(P)] == P`, `key.split(".")[0] == "module"`,
    `key.find(P) == 0`."""
    prefixes: list[str] = []

    class Finder(cst.CSTVisitor):
        def __init__(self, key: str) -> None:
            self.key = key

        def visit_Comparison(self, node: cst.Comparison) -> None:
            for target in node.comparisons:
                if isinstance(target.operator, cst.In) and isinstance(target.comparator, cst.Name) and target.comparator.value == self.key:
                    prefixes.append(prefix_value(model, node.left, node))
            prefixes.append(_equal_head_prefix(model, node, self.key))

        def visit_Call(self, node: cst.Call) -> None:
            prefixes.append(key_prefix_test(model, node, self.key))

    for scope, key in loop.guard_scopes:
        walk(scope, Finder(key))
    return [prefix for prefix in prefixes if isinstance(prefix, str)]


def key_prefix_test(model: SemanticModel, test: cst.BaseExpression, key: str) -> Optional[str]:
    """The prefix P that a test of one key checks: `key.startswith(P)`, and the same test
    spelled `key[:len(P)] == P`, `key.split(".")[0] == "module"` or `key.find(P) == 0`."""
    method = method_call(test) if isinstance(test, cst.Call) else None
    if method and method[1] == "startswith" and _is_name(method[0], key):
        value = prefix_value(model, argument(test, 0), test)
        return value if isinstance(value, str) else None
    return _equal_head_prefix(model, test, key) if isinstance(test, cst.Comparison) else None


def _equal_head_prefix(model: SemanticModel, node: cst.Comparison, key: str) -> Optional[str]:
    """The prefix P that `key[:len(P)] == P` (also through a name, `head = key[:7]; head ==
    P`), `key.split(".")[0] == "module"` or `key.find(P) == 0` tests, on either side of `==`."""
    for head, other in _equality_sides(node):
        method = method_call(head) if isinstance(head, cst.Call) else None
        if method and method[1] in ("find", "index") and _is_name(method[0], key) and _literal_or_none(other) == 0:
            value = prefix_value(model, argument(head, 0), head)
            return value if isinstance(value, str) else None
        literal = prefix_value(model, other, node)
        if not isinstance(literal, str):
            continue
        if isinstance(head, cst.Name) and head.value != key:
            head = model.value_at(head, node)  # `head = k[:7]` first
        if isinstance(head, cst.Subscript) and len(head.slice) == 1:
            part = head.slice[0].slice
            if _is_name(head.value, key) and isinstance(part, cst.Slice) and part.lower is None and part.step is None:
                if _slice_length(model, part.upper) == len(literal):
                    return literal  # `key[:7] == "module."`
            if _dotted_component(model, head, key) == 0 and "." not in literal:
                return literal + "."  # `key.split(".")[0] == "module"`: the first component
    return None


def _equality_sides(node: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Both orders of the two sides of `a == b`; none for any other comparison."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, cst.Equal):
        return []
    sides = (node.left, node.comparisons[0].comparator)
    return [sides, sides[::-1]]


def _dotted_component(model: SemanticModel, expr: cst.BaseExpression, key: str) -> Optional[int]:
    """n for `key.split(".")[n]`: the n-th dotted component of the key."""
    if not (isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index)):
        return None
    call = expr.value
    method = method_call(call) if isinstance(call, cst.Call) else None
    if method and method[1] == "split" and _is_name(method[0], key) and prefix_value(model, argument(call, 0, "sep"), call) == ".":
        index = _literal_or_none(expr.slice[0].slice.value)
        return index if isinstance(index, int) else None
    return None


def _slice_length(model: SemanticModel, bound: Optional[cst.BaseExpression]) -> Optional[int]:
    """7 for the bound of `[:7]` and of `[:len("module.")]`."""
    length = _length_of(model, bound)
    if isinstance(length, str):
        return len(length)
    value = _literal_or_none(bound)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _length_of(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[str]:
    """The string P of `len(P)` (a literal, or a name bound to one)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len" and len(expr.args) == 1:
        value = prefix_value(model, expr.args[0].value, expr)
        return value if isinstance(value, str) else None
    return None


def every_key_has_prefix(model: SemanticModel, loop: KeyLoop) -> bool:
    """The loop runs only when every key of the mapping it walks has the wrapper's prefix: under
    `if all(k.startswith("module.") for k in sd):` (or that `all(...)` bound to a name first,
    or joined with `and`). `any(...)` is no such test: keys without the prefix may be there."""
    wanted = model.code(loop.source)
    return any(_all_keys_have_prefix(model, test, wanted) for test in tests_around(model, loop))


def tests_around(model: SemanticModel, loop: KeyLoop) -> Iterator[cst.BaseExpression]:
    """The tests that hold wherever the loop runs: the `and` parts of each `if` (or conditional
    expression) whose body holds it, up to the enclosing function."""
    child: cst.CSTNode = loop.owner
    for ancestor in model.ancestors(loop.owner):
        if isinstance(ancestor, SCOPES):
            return
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body:
            yield from _conjuncts(model, ancestor.test)
        child = ancestor


def _conjuncts(model: SemanticModel, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of `a and b` (a name is followed to the value it was bound to)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_conjuncts(model, test.left), *_conjuncts(model, test.right)]
    if isinstance(test, cst.Name):
        value = model.value_at(test, test)
        return [value] if value is not None and value is not test else []
    return [test]


def _all_keys_have_prefix(model: SemanticModel, test: cst.BaseExpression, mapping: str) -> bool:
    """`all(k.startswith("module.") for k in sd)` (or `sd.keys()`, a list comprehension) for
    the mapping spelled `mapping`."""
    if not (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "all" and len(test.args) == 1):
        return False
    comp = test.args[0].value
    if not isinstance(comp, (cst.GeneratorExp, cst.ListComp)) or comp.for_in.inner_for_in is not None or comp.for_in.ifs:
        return False
    target = comp.for_in.target
    if not isinstance(target, cst.Name):
        return False
    source = keys_source(target, comp.for_in.iter, target.value)
    if source is None or model.code(source) != mapping:
        return False
    return key_prefix_test(model, comp.elt, target.value) in WRAPPER_PREFIXES


def first_key_has_wrapper_prefix(model: SemanticModel, loop: KeyLoop) -> bool:
    """The loop runs only under an `if` (around it, in this function) that tests the first key
    of the mapping it walks for the exact wrapper prefix: `first = next(iter(sd))` then `if
    first.split(".")[0] == "module":` (or `first.startswith("module.")`, `first[:7] ==
    "module."`), or `if list(sd)[0].startswith("module."):`. A wrapper's state dict has the
    prefix on every key and a bare model's on none, so one key decides. `startswith("module")`
    without the dot is not exact (`module_list.0.conv` of a bare Darknet also matches), nor is
    `first.split(".")[1] == "module"` (`encoder.module.conv` of a sub-module wrapped in place)."""
    wanted = model.code(loop.source)
    return any(_tests_first_key(model, test, wanted) for test in tests_around(model, loop))


def _tests_first_key(model: SemanticModel, test: cst.BaseExpression, mapping: str) -> bool:
    method = method_call(test) if isinstance(test, cst.Call) else None
    if method and method[1] == "startswith" and _is_first_key(model, method[0], mapping):
        return prefix_value(model, argument(test, 0), test) == WRAPPER_PREFIX
    for name in _names_tested(test):
        value = model.value_at(name, test)
        if value is not None and value is not name and _is_first_key(model, value, mapping):
            return key_prefix_test(model, test, name.value) == WRAPPER_PREFIX
    return False


def _names_tested(test: cst.BaseExpression) -> list[cst.Name]:
    """The plain names `test` reads on the key's side: `first` in `first.split(".")[0] == ...`."""
    if isinstance(test, cst.Call):
        method = method_call(test)
        return [method[0]] if method and isinstance(method[0], cst.Name) else []
    found: list[cst.Name] = []
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        for side in (test.left, test.comparisons[0].comparator):
            while isinstance(side, (cst.Subscript, cst.Call)):
                side = side.value if isinstance(side, cst.Subscript) else (method_call(side) or (None,))[0]
            if isinstance(side, cst.Name):
                found.append(side)
    return found


def _is_first_key(model: SemanticModel, expr, mapping: str) -> bool:
    """`next(iter(X))`, `list(X)[0]`, `list(X.keys())[0]` for X spelled `mapping`."""
    if isinstance(expr, cst.Call) and _is_name(expr.func, "next") and expr.args:
        inner = expr.args[0].value
        return (isinstance(inner, cst.Call) and _is_name(inner.func, "iter") and bool(inner.args)
                and _spells(model, inner.args[0].value, mapping))
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        listed = expr.value
        return (_literal_or_none(expr.slice[0].slice.value) == 0 and isinstance(listed, cst.Call)
                and _is_name(listed.func, "list") and bool(listed.args) and _spells(model, listed.args[0].value, mapping))
    return False


def _spells(model: SemanticModel, expr: cst.BaseExpression, mapping: str) -> bool:
    """`expr` is the mapping spelled `mapping`, or its `.keys()`."""
    method = method_call(expr) if isinstance(expr, cst.Call) and not expr.args else None
    if method is not None and method[1] == "keys":
        expr = method[0]
    return model.code(expr) == mapping


def one_key_decides(model: SemanticModel, edit: KeyEdit, loop: KeyLoop) -> bool:
    """Dropping each key's first component is decided by a test for `module` on something other
    than each key: the slice start (`start = 1 if next(iter(sd)).startswith("module") else 0`),
    or an `if` around the loop (`if list(sd)[0].startswith("module"):`)."""
    tests: list[cst.CSTNode] = []
    subscript = edit.node.args[0].value if isinstance(edit.node, cst.Call) else None
    if isinstance(subscript, cst.Subscript):
        part = subscript.slice[0].slice
        lower = part.lower if isinstance(part, cst.Slice) else None
        value = model.value_at(lower, lower) if isinstance(lower, cst.Name) else None
        if value is not None:
            tests.append(value)
    for ancestor in model.ancestors(loop.owner):
        if isinstance(ancestor, SCOPES):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            tests.append(ancestor.test)
    return any(_tests_for_wrapper_prefix(model, test) for test in tests)


def _tests_for_wrapper_prefix(model: SemanticModel, expr: cst.CSTNode) -> bool:
    """`expr` holds a `x.startswith("module")` or `"module." in x` test of some string."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            method = method_call(node)
            found = found or bool(method and method[1] == "startswith" and prefix_value(model, argument(node, 0), node) in WRAPPER_PREFIXES)

        def visit_Comparison(self, node: cst.Comparison) -> None:
            nonlocal found
            if any(isinstance(t.operator, cst.In) for t in node.comparisons):
                found = found or prefix_value(model, node.left, node) in WRAPPER_PREFIXES

    walk(expr, Finder())
    return found


def module_inside(prefix: str) -> bool:
    """A tested prefix with `module` inside it (`backbone.module.`): only a sub-module was
    wrapped, so `module.` sits inside the keys, not in front."""
    return "module" in prefix and not prefix.startswith("module")


def replaces_once(call: cst.Call) -> bool:
    """`k.replace(old, new, 1)`: only the first occurrence is replaced."""
    return _literal_or_none(argument(call, 2, "count")) == 1


def wraps_submodule_in_place(model: SemanticModel) -> bool:
    """This file wraps a sub-module in place (`model.encoder = nn.DataParallel(model.encoder)`),
    so its checkpoints hold `module.` inside the keys (`encoder.module.conv.weight`), where only
    `replace` reaches it. `self.model = DDP(self.model)` wraps a whole model."""
    for wrapping in constructions(model):
        assign = model.parent(wrapping.call)
        if not isinstance(assign, cst.Assign) or assign.value is not wrapping.call or wrapping.inner is None:
            continue
        inner = model.code(wrapping.inner)
        for target in assign.targets:
            held = model.code(target.target)
            if held == inner and isinstance(target.target, cst.Attribute) and (not held.startswith("self.") or held.count(".") >= 2):
                return True
    return False


def _is_name(expr: Optional[cst.CSTNode], name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _literal_or_none(expr: Optional[cst.BaseExpression]):
    if expr is None:
        return None
    try:
        return literal_value(expr)
    except ValueError:
        return None
