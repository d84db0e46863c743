"""What a `DataParallel` / `DistributedDataParallel` wrapper object has, and on which paths a
name holds one: shared by the rules about attributes read through a wrapper (DPL015) and
`.module` read from a bare model (DPL016).

The attribute tables are torch 2.13's own (`dir()` of a constructed wrapper minus
`dir(nn.Module())`, public names only); `tests/test_wrappers.py` re-derives them from torch
when it is installed, so a torch upgrade that adds an attribute shows up as a failing test.
Anything else read from a wrapper goes through `nn.Module.__getattr__`, which only knows the
wrapper's own parameters, buffers and sub-modules (just `module`), so it raises
`AttributeError: 'DistributedDataParallel' object has no attribute 'features'`.
"""

from __future__ import annotations

import re
import weakref
from typing import Iterable, Optional, Sequence

import libcst as cst

from dplint.flow import catches_attribute_error, self_consistent
from dplint.semantic import SCOPE_NODES, SemanticModel, Wrapping, dotted_name, literal_value, own_returns
# What a wrapper is: one recogniser for the flow model and every rule (see that module).
from dplint.wrapper_classes import (  # noqa: F401  (re-exported: rules ask `dplint.wrappers`)
    LIBRARY_WRAPPER_ATTRIBUTES,
    WRAPPER_CLASSES,
    built_here,
    class_wrapper,
    constructions,
    owner_of,
    wrapper_class,
    wrapper_kind,
    wrapper_test_kinds,
    wrapping_built_by,
)

# Public attributes of `nn.Module()` in torch 2.13.
MODULE_ATTRIBUTES = frozenset({
    "T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children",
    "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward",
    "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half", "ipu",
    "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules",
    "named_parameters", "parameters", "register_backward_hook", "register_buffer",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter",
    "register_state_dict_post_hook", "register_state_dict_pre_hook", "requires_grad_",
    "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train",
    "training", "type", "xpu", "zero_grad",
})
# What `nn.DataParallel` adds (torch 2.13).
DATA_PARALLEL_ATTRIBUTES = frozenset({
    "device_ids", "dim", "gather", "module", "output_device", "parallel_apply", "replicate",
    "scatter", "src_device_obj",
})
# What `DistributedDataParallel` adds (torch 2.13).
DDP_ATTRIBUTES = frozenset({
    "batched_grad_copy", "broadcast_bucket_size", "broadcast_buffers", "bucket_bytes_cap",
    "bucket_bytes_cap_default", "bucket_bytes_cap_list", "device", "device_ids", "device_type",
    "dim", "find_unused_parameters", "forward_sync_buffers", "gather", "gradient_as_bucket_view",
    "is_multi_device_module", "join", "join_device", "join_hook", "join_process_group", "logger",
    "mixed_precision", "module", "modules_buffers", "named_module_buffers", "no_sync",
    "output_device", "parameters_to_ignore", "process_group", "reducer", "register_comm_hook",
    "require_backward_grad_sync", "require_forward_param_sync", "scatter",
    "skip_all_reduce_unused_params", "static_graph", "to_kwargs",
    "use_side_stream_for_tensor_copies", "will_sync_module_buffers",
})
WRAPPER_CLASS_NAMES = {"DP": "DataParallel", "DDP": "DistributedDataParallel"}


def wrapper_has(kind: str, attribute: str) -> bool:
    """Whether a wrapper of this kind ("DP" / "DDP") has the attribute without the user's help."""
    own = DATA_PARALLEL_ATTRIBUTES if kind == "DP" else DDP_ATTRIBUTES
    return attribute.startswith("_") or attribute in MODULE_ATTRIBUTES or attribute in own


def wrapping_has(model: SemanticModel, wrapping: Wrapping, attribute: str) -> bool:
    """Whether the wrapper object `wrapping` builds has `attribute` without the user's help:
    torch's kind has it (`wrapper_has`), the package wrapper it is adds it (mmcv's
    `train_step`), or a project class it is an instance of (or a project base of that class)
    defines it, sets `self.<attribute>` in a method, or answers unknown names itself
    (`__getattr__` forwarding to `self.module`)."""
    if wrapper_has(wrapping.kind, attribute):
        return True
    owner = wrapping_model(model, wrapping)
    if owner is None:
        return False
    found = wrapper_class(owner, wrapping.call.func) if built_here(owner, wrapping) else None
    if found is None:
        return False
    if attribute in LIBRARY_WRAPPER_ATTRIBUTES.get(found[1], ()):
        return True
    if found[2] is None:
        return False
    class_model, class_node = found[2]
    for node_model, node in [(class_model, class_node), *class_model.flow.project_bases(class_node, depth=6)]:
        if _class_defines(node_model, node, attribute):
            return True
    return False


def _class_defines(model: SemanticModel, class_node: cst.ClassDef, attribute: str) -> bool:
    """A class body that defines `attribute` (a method, a class attribute), sets
    `self.<attribute>` in a method, or defines `__getattr__`."""
    statements = class_node.body.body if isinstance(class_node.body, cst.IndentedBlock) else ()
    for statement in statements:
        if isinstance(statement, cst.FunctionDef) and statement.name.value in (attribute, "__getattr__"):
            return True
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Assign, cst.AnnAssign)) and attribute in _target_names(small) for small in statement.body
        ):
            return True
    stack = [class_node.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value == attribute and isinstance(node.value, cst.Name) \
                and node.value.value == "self" and is_store(model, node):
            return True
        if isinstance(node, cst.ClassDef) and node is not class_node:
            continue
        stack.extend(model.children(node))
    return False


def feasible(path: Iterable) -> bool:
    """A path on which no test both holds and fails (`if multi_gpu:` ... `if not multi_gpu:`)."""
    return self_consistent(tuple(path))


_WRAPPER_CHECK = re.compile(
    r"^(hasattr\(.+,['\"]module['\"]\)|isinstance\(.+,.*(DataParallel|DDP|DP)\b.*\)|type\(.+\)(is|==|in).*(DataParallel|DDP|DP)\b.*)$"
)


def _excluded_by_a_check(path, wrapped: bool) -> bool:
    """A path that tested the object itself (`m.module if hasattr(m, "module") else m`): a
    wrapper cannot be where the check failed, nor a bare model where it held."""
    return any(_WRAPPER_CHECK.match(c.test) and c.holds != wrapped for c in path)


def _checks_here(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple:
    """The tests of the object `expr` itself that enclose `at`, a conditional expression's
    included (`m.module if is_parallel(m) else m`: a value reaching `m` does not carry the
    test, unlike an `if` statement's): a test of another object says nothing about this one."""
    target = _SPACE.sub("", model.code(expr))
    found = []
    for condition in conditions_at(model, at):
        match = _WRAPPER_CHECK.match(condition.test)
        if match and _tested_object(condition.test) == target:
            found.append(condition)
    return tuple(found)


def _tested_object(test: str) -> str:
    """The first argument of `hasattr(m,...)` / `isinstance(m,...)` / `type(m)...` (no spaces)."""
    inner = test[test.index("(") + 1:]
    depth = 0
    for index, char in enumerate(inner):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return inner[:index]
            depth -= 1
        elif char == "," and depth == 0:
            return inner[:index]
    return inner


_SPACE = re.compile(r"\s+")


def wrapper_paths(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[list[Wrapping], int, int]:
    """(wrappings `expr` may hold at `at`, paths where it is a wrapper, paths where it is not).

    Only feasible paths count; a value the flow cannot tell (an unknown call, a parameter with
    several callers) counts as "not a wrapper" for the second number and as unknown for the
    third: callers that need certainty check `unknown_paths` themselves."""
    wrapped, bare, found = 0, 0, []
    checks = _checks_here(model, expr, at)
    for wrapping, path in model.flow.wrappings_at(expr, at):
        if not feasible((*path, *conditions_at(model, at))) or _excluded_by_a_check((*path, *checks), wrapping is not None):
            continue
        if wrapping is None:
            bare += 1
        else:
            wrapped += 1
            if wrapping not in found:
                found.append(wrapping)
    return found, wrapped, bare


def known_bare_paths(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode,
                     wrappings: Iterable[Wrapping] = ()) -> int:
    """How many feasible reaching values of `expr` are surely not wrappers: the very value one
    of `wrappings` wraps on another path (`if ws > 1: net = DDP(net)` leaves `net` bare when
    the test fails, whatever it holds), or an instance of a class the project defines.
    A third-party call (`apex.parallel.DistributedDataParallel(net)`) may be a wrapper too."""
    inner_exprs, inner_bindings = set(), set()
    for wrapping in wrappings:
        owner = wrapping_model(model, wrapping) if wrapping.inner is not None else None
        if owner is None:
            continue
        for value in owner.flow.values_at(wrapping.inner, wrapping.call):
            if value.known:
                inner_exprs.add(_place(value.model, value.expr))
            if value.binding is not None:
                inner_bindings.add(_place(value.model, value.binding.node, value.binding.key))
    count = 0
    checks = _checks_here(model, expr, at)
    for value in model.flow.values_at(expr, at):
        if not feasible((*value.conditions, *conditions_at(model, at))) or _excluded_by_a_check((*value.conditions, *checks), False):
            continue
        if value.known and wrapping_built_by(value.model, value.expr) is not None:
            continue
        if not value.known and value.binding is not None and value.binding.value is not None \
                and wrapping_built_by(value.model, value.binding.value) is not None:
            continue  # a wrapper's own binding whose value the question ran out of steps for: not bare
        if value.known and isinstance(value.expr, cst.Call) and _library_object_of(value.model, value.expr):
            continue  # `GraphParallel(net)` of an installed package: may keep the model at `.module`
        if (value.known and _place(value.model, value.expr) in inner_exprs) or (
                value.binding is not None and _place(value.model, value.binding.node, value.binding.key) in inner_bindings):
            count += 1
        elif value.known and isinstance(value.expr, cst.Call) and _builds_project_class(value.model, value.expr):
            count += 1
    return count


def _place(model: SemanticModel, node: cst.CSTNode, key: str = "") -> tuple:
    """Where a node is: its file and its index in the file's tree, the same in two parses of
    one text (a project may hold an older parse of the file a value was followed into)."""
    try:
        return model.path, model.order(node), key
    except KeyError:
        return model.path, id(node), key


def _library_object_of(model: SemanticModel, call: cst.Call) -> bool:
    """`Holder(net, ...)`: an instance of a class from an installed package (not torch, not
    the project) that is handed an object positionally. What it is stays unknown: a package's
    own parallel wrapper or an EMA copy keeps the model at `.module` like torch's wrappers do.
    Builders that take no object (`resnet50(weights=None)`, `create_model("vit")`), functions
    (`build_model(cfg)`) and the project's own classes stay known."""
    dotted = dotted_name(call.func)
    if not dotted or not dotted.rpartition(".")[2][:1].isupper():
        return False
    head = dotted.partition(".")[0]
    if head not in model.imports or model.imports[head].split(".")[0] == "torch":
        return False
    if not any(arg.keyword is None and not arg.star and isinstance(arg.value, (cst.Name, cst.Attribute))
               for arg in call.args):
        return False
    return model.flow.callee(call) is None


def _builds_project_class(model: SemanticModel, call: cst.Call) -> bool:
    """`Net()` for a class of the project whose objects have no `module` attribute of their
    own: not a wrapper subclass (`class DataParallelWithCallback(DataParallel)` is one), nor
    the project's own wrapper that keeps the model at `self.module` like torch's wrappers do."""
    callee = model.flow.callee(call)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return False
    return not class_has_module(callee.model, callee.node)


def class_has_module(model: SemanticModel, class_node: cst.ClassDef) -> bool:
    """Whether objects of a project class have `.module` (or may, by forwarding): the class
    derives from a wrapper class (`class_wrapper`, at any depth), or it or one of its project
    bases names a base ending in `DataParallel` (a package's class this cannot read may keep
    the model at `.module` too: "may" errs toward silence), assigns
    `self.module = ...` in a method (`class WrappedModel(nn.Module)` keeping the model there),
    defines `module` in its body, or answers unknown attributes itself (`__getattr__`)."""
    if class_wrapper(model, class_node) is not None:
        return True
    classes = [(model, class_node), *model.flow.project_bases(class_node)]
    for owner, node in classes:
        if any((dotted_name(base.value) or "").endswith("DataParallel") for base in node.bases):
            return True
        if _class_defines(owner, node, "module"):
            return True
    return False


def _target_names(statement) -> set[str]:
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    return {t.value for t in targets if isinstance(t, cst.Name)}


def wrapping_model(model: SemanticModel, wrapping: Wrapping) -> Optional[SemanticModel]:
    """The model (this file's or an imported one's) whose tree holds the wrapping's call."""
    if built_here(model, wrapping):
        return model
    owner = owner_of(wrapping)
    if owner is not None:
        return owner
    project = getattr(model, "project", None)
    return project.model_owning(wrapping.call) if project is not None else None


_BLOCKS_WITH_ASSERTS: "weakref.WeakKeyDictionary[SemanticModel, set]" = weakref.WeakKeyDictionary()


def conditions_at(model: SemanticModel, node: cst.CSTNode) -> tuple:
    """The branch conditions that hold where `node` runs (the `if` tests around it in its scope)."""
    found = []
    child = node
    asserting = _BLOCKS_WITH_ASSERTS.get(model)
    if asserting is None:  # the blocks holding an `assert` statement (most hold none)
        asserting = _BLOCKS_WITH_ASSERTS[model] = {_block_of(model, a) for a in model.nodes_of(cst.Assert)}
    for ancestor in model.ancestors(node):
        kind = type(ancestor)  # exact types: cheaper than `isinstance`
        if kind in SCOPE_NODES:
            break
        if kind is cst.If or kind is cst.IfExp:
            in_body = _is_within(child, ancestor.body)
            in_else = kind is cst.If and ancestor.orelse is not None and child is ancestor.orelse
            if kind is cst.IfExp:
                in_else = child is ancestor.orelse
            if in_body or in_else:
                found.extend(_conjuncts(model, ancestor.test, in_body))
        if ancestor in asserting:
            # `assert not distributed, "..."` earlier in the block: what runs after it has it
            for statement in ancestor.body:
                if statement is child:
                    break
                # `if x: assert y` keeps its small statements in the suite itself
                smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else (statement,)
                for small in smalls:
                    if isinstance(small, cst.Assert):
                        found.extend(_conjuncts(model, small.test, True))
        child = ancestor
    return tuple(found)


def _block_of(model: SemanticModel, small: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The block whose `.body` lists the statement holding a small statement: the indented
    block or module of its line, or the one-line suite itself (`if x: assert y`)."""
    holder = model.parent(small)
    return holder if isinstance(holder, cst.SimpleStatementSuite) else model.parent(holder)


def _conjuncts(model: SemanticModel, test: cst.BaseExpression, holds: bool) -> list:
    """The test's condition, and those of its parts that hold with it: both sides of an `and`
    that holds (`if acc_step and local_rank != -1:`), both of an `or` that fails, and the
    branch tests that the values of a compared name imply (`Flow.value_implied`)."""
    found = [model.flow.condition(test, holds=holds), *model.flow.value_implied(test, holds)]
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And if holds else cst.Or):
        found += _conjuncts(model, test.left, holds) + _conjuncts(model, test.right, holds)
    return found


def _is_within(child: cst.CSTNode, part: cst.CSTNode) -> bool:
    return child is part


def unwrapped_by_a_helper(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Every assignment reaching `expr` at `at` binds what a project unwrap helper returns
    (`self.gen = self.bare_gen()`, the helper a method of a base class in another file): a
    function that returns `m.module` where it tests `m` is a wrapper and `m` itself otherwise
    (`if isinstance(m, DataParallel): return m.module` / `return m`, or one conditional
    expression). Its result is the bare model on every path."""
    key = model.binding_key(expr, at)
    if key is None:
        return False
    reaching = model.flow.reaching(key, at)
    if not reaching:
        return False
    for binding, _ in reaching:
        value = binding.value
        if not isinstance(value, cst.Call):
            return False
        callee = model.flow.callee(value)
        if callee is None or not isinstance(callee.node, cst.FunctionDef) or not _unwrap_helper(callee.model, callee.node):
            return False
    return True


def _unwrap_helper(model: SemanticModel, function: cst.FunctionDef) -> bool:
    returned = [r.value for r in own_returns(function)]
    if len(returned) == 1 and isinstance(returned[0], cst.IfExp):
        returned = [returned[0].body, returned[0].orelse]
    texts = {_SPACE.sub("", model.code(e)) for e in returned if e is not None}
    objects = {t[:-len(".module")] for t in texts if t.endswith(".module")}
    if len(objects) != 1 or texts != {*objects, *(o + ".module" for o in objects)}:
        return False
    target = next(iter(objects))
    source = _SPACE.sub("", model.code(function))
    return any(_tested_object(match.group(0)) == target for match in _CHECK_IN_SOURCE.finditer(source))


# A wrapper test of an object spelled anywhere in a function's source (spaces removed).
_CHECK_IN_SOURCE = re.compile(r"(?:hasattr\([^()]+,['\"]module['\"]\)|isinstance\([^()]+,[^:]*?(?:DataParallel|DDP|DP)\b[^:]*?\))")


def narrowed_to_wrapper(model: SemanticModel, name_expr: cst.BaseExpression, node: cst.CSTNode) -> Optional[bool]:
    """Whether an enclosing test checks the object itself: `hasattr(m, "module")`,
    `isinstance(m, (DataParallel, DDP))` (True where the check holds, False in its else);
    None when no such test encloses the node."""
    target = model.code(name_expr)
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            checks = _checks_wrapper(model, ancestor.test, target)
            if checks is not None:
                return checks if child is ancestor.body else not checks
        if isinstance(ancestor, cst.While) and child is ancestor.body:
            # `while isinstance(m, DDP): m = m.module`: the body runs only while the check holds
            checks = _checks_wrapper(model, ancestor.test, target)
            if checks is not None:
                return checks
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            # `hasattr(m, "features") and m.features`: the right side runs only if the check held
            checks = _checks_wrapper(model, ancestor.left, target)
            if checks is not None:
                return checks if isinstance(ancestor.operator, cst.And) else not checks
        child = ancestor
    return None


def lacks_tested_attribute(model: SemanticModel, name_expr: cst.BaseExpression, node: cst.CSTNode, attribute: str) -> bool:
    """Whether `node` runs where the nearest enclosing test of the object is `hasattr(m,
    "<attribute>")` and fails: there `m.<attribute>` raises, whatever `m` is (`m.config if
    hasattr(m, "config") else m.config`, the `.module.` of the second side lost)."""
    target = model.code(name_expr)
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            if _checks_wrapper(model, ancestor.test, target) is not None:
                test, holds = ancestor.test, child is ancestor.body
                while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                    test, holds = test.expression, not holds
                return not holds and _is_hasattr(model, test, target, attribute)
        child = ancestor
    return False


def _is_hasattr(model: SemanticModel, test: cst.BaseExpression, target: str, attribute: str) -> bool:
    """`hasattr(<target>, "<attribute>")`."""
    return (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "hasattr"
            and len(test.args) == 2 and model.code(test.args[0].value) == target
            and isinstance(test.args[1].value, cst.SimpleString) and test.args[1].value.evaluated_value == attribute)


def _checks_wrapper(model: SemanticModel, test: cst.BaseExpression, target: str, aliases: int = 3) -> Optional[bool]:
    negate = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negate = test.expression, not negate
    aliased = model.flow.boolean_alias(test) if aliases and isinstance(test, cst.Name) else None
    if aliased is not None:
        # `wrapped = isinstance(m, DDP)` ... `m.module if wrapped else m`
        found = _checks_wrapper(model, aliased[0], target, aliases - 1)
        return None if found is None else found != (negate != aliased[1])
    if isinstance(test, cst.BooleanOperation):
        for side in (test.left, test.right):
            found = _checks_wrapper(model, side, target)
            if found is not None:
                return found != negate if isinstance(test.operator, cst.And) else None
        return None
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Call):
        # `type(m) is DDP`, `type(m) in (DP, DDP)`
        operator = test.comparisons[0].operator if len(test.comparisons) == 1 else None
        found = _checks_wrapper(model, test.left, target)
        if found is None or not isinstance(operator, (cst.Is, cst.In, cst.Equal, cst.IsNot, cst.NotIn, cst.NotEqual)):
            return None
        return found != negate if isinstance(operator, (cst.Is, cst.In, cst.Equal)) else found == negate
    if not isinstance(test, cst.Call) or not test.args:
        return None
    function = model.code(test.func)
    first = model.code(test.args[0].value)
    if first != target:
        return None
    if function in ("hasattr", "isinstance", "type"):
        return not negate
    return None


def wrapper_kinds_by_test(model: SemanticModel, base: cst.BaseExpression, node: cst.CSTNode) -> Optional[tuple[str, ...]]:
    """The wrapper kinds `base` must be at `node` because an enclosing test of the object
    itself holds there and nothing rebinds it in between: `hasattr(m, "module")` (("DP",
    "DDP"): a wrapper keeps the model there), `isinstance(m, DDP)` (("DDP",)), also in a
    conditional expression and on the right of `and`. None where no such test encloses it."""
    key = model.binding_key(base, node)
    if key is None:
        return None
    target = None  # the code of `base`, read once a test could be about it
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        test, holds = None, True
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            test, holds = ancestor.test, child is ancestor.body
        elif isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right and isinstance(ancestor.operator, cst.And):
            test = ancestor.left
        if test is not None:
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, holds = test.expression, not holds
            if isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value in ("hasattr", "isinstance"):
                target = model.code(base) if target is None else target
                kinds = wrapper_test_kinds(model, test, target)
                if kinds is not None:
                    # the same object as tested: no binding of its name between the test and here
                    same = {id(b) for b, _ in model.flow.reaching(key, test)} == {id(b) for b, _ in model.flow.reaching(key, node)}
                    return kinds if holds and same else None
        child = ancestor
    return None


def attribute_error_handled(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether `node` runs in the body of a `try` (in its own function) that an `except`
    catching AttributeError follows (`except AttributeError:`, bare, `Exception`): the
    `try: m.module ... except: <bare-model fallback>` idiom handles the bare model itself."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.Try) and child is ancestor.body \
                and any(catches_attribute_error(handler) for handler in ancestor.handlers):
            return True
        child = ancestor
    return False


def is_store(model: SemanticModel, node: cst.Attribute) -> bool:
    """`m.x = ...`, `m.x += ...`, `del m.x`: the attribute is written, not read."""
    parent = model.parent(node)
    if isinstance(parent, (cst.AssignTarget, cst.Del)):
        return True
    return isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is node


# A test that a machine answers by its hardware (`len(opt.gpu_ids)`, `n_gpu > 1`,
# `torch.cuda.device_count() > 1`, `torch.cuda.is_available()`): the user's machine decides it,
# not the configuration the calling script sets up.
_HARDWARE_WORD = re.compile(r"gpu|device_count|cuda", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def hardware_words(test: str) -> set[str]:
    """The identifiers of a test's text that name GPUs or devices (`gpu_ids`, `device_count`)."""
    return {word for word in _IDENTIFIER.findall(test) if _HARDWARE_WORD.search(word)}


def wrapped_on_some_machines(model: SemanticModel, wrapping: Wrapping, at: cst.CSTNode) -> bool:
    """A wrapping made in another file's factory under a hardware test (`if opt.isTrain and
    len(opt.gpu_ids): model = DataParallel(model)`) that the code at `at` does not repeat: a
    CPU or one-GPU machine takes the bare path whatever the calling script configures."""
    owner = wrapping_model(model, wrapping)
    if owner is None or owner is model:
        return False
    words = set().union(*(_hardware_words_of(owner, c.test) for c in conditions_at(owner, wrapping.call) if c.holds))
    if not words:
        return False
    here = set().union(*(_hardware_words_of(model, c.test) for c in conditions_at(model, at)))
    return not (words & here)


def made_by_a_wrapping_factory(model: SemanticModel, wrapping: Wrapping) -> bool:
    """A wrapping made in another file by a function that returns a wrapper on every path
    (`def parallelize(net, rank): return DDP(net.to(rank), device_ids=[rank])`): the factory
    decides nothing, so where the value is bare, it is this file's own path that did not
    call it (`if args.distributed: model = parallelize(model, rank)`)."""
    owner = wrapping_model(model, wrapping)
    if owner is None or owner is model:
        return False
    function = next((a for a in owner.ancestors(wrapping.call) if type(a) in SCOPE_NODES), None)
    if not isinstance(function, cst.FunctionDef):
        return False
    returns = [r for r in own_returns(function) if r.value is not None]
    return bool(returns) and len(returns) == len(own_returns(function)) and all(
        owner.flow.wrapped_on_every_path(r.value, r) for r in returns)


def _hardware_words_of(model: SemanticModel, test: str) -> set[str]:
    """`hardware_words` of a test, and of what its names are bound to in the file
    (`gpu_num = torch.cuda.device_count()` ... `if gpu_num > 1:` names `device_count`)."""
    words = hardware_words(test)
    for name in set(_IDENTIFIER.findall(test)):
        for binding in model.bindings.get(name, ()):
            if binding.value is not None:
                words |= hardware_words(model.code(binding.value))
    return words


def tied_to_a_wrapper_having(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode, attribute: str) -> bool:
    """Whether the read at `at` sits under a test that every wrapping having `attribute` was
    made under and no wrapping lacking it was: `if local_rank != -1: model = DDP(model)` ...
    `if local_rank != -1: with model.no_sync():` is meant for the DDP path, even when an
    `if n_gpu > 1: model = DataParallel(model)` elsewhere could also reach it (the two tests
    are exclusive in practice, but not the same test)."""
    here = {(c.test, c.scope, c.holds) for c in conditions_at(model, at)}
    having, lacking = [], []
    for wrapping, path in model.flow.wrappings_at(expr, at):
        if wrapping is None:
            continue
        keys = {(c.test, c.scope, c.holds) for c in path}
        (having if wrapping_has(model, wrapping, attribute) else lacking).append(keys)
    if not having or not lacking:
        return False
    return bool(set.intersection(*having) & here - set.union(*lacking))


# --------------------------------------------------------------------------- containers
# Methods that change a list or `nn.ModuleList` in place (besides the appends we follow).
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__", "__delitem__"})
# Calls that build a sequence from their one argument (or an empty one without it).
_SEQUENCE_BUILDERS = frozenset({"torch.nn.ModuleList", "list", "tuple"})


def indexed_values(model: SemanticModel, subscript: cst.Subscript) -> Optional[list]:
    """What `seq[k]` (a literal int `k`) holds, as `Flow.values_at` values: element `k` of
    the list, tuple or `nn.ModuleList` that `seq` holds on every path, built by a display
    (`[a, b]`, `nn.ModuleList([a, b])`, or empty) and then only appended to, one
    `seq.append(x)` statement after another in the block that built it
    (`losses = nn.ModuleList([]); losses.append(ce); losses.append(dp_kd)`: `losses[1]` is
    `dp_kd`). None when it can't be told: another index, a sequence changed otherwise
    (appends in a loop or a branch, `insert`, `seq[i] = x`, `+=`), or built elsewhere."""
    try:
        index = literal_value(subscript.slice[0].slice.value) if len(subscript.slice) == 1 and isinstance(
            subscript.slice[0].slice, cst.Index) else None
    except ValueError:
        return None
    if not isinstance(index, int) or isinstance(index, bool):
        return None
    found: list = []
    for value in model.flow.values_at(subscript.value, subscript):
        items = _sequence_items(value) if value.known else None
        if items is None or not -len(items) <= index < len(items):
            return None
        element, at = items[index]
        found.extend(value.model.flow.values_at(element, at))
    return found or None


def _sequence_items(value) -> Optional[list]:
    """(element expression, where it is read) for each element of the sequence a value builds, in order."""
    model, built = value.model, value.expr
    if isinstance(built, cst.Call) and model.qualified_name(built.func) in _SEQUENCE_BUILDERS and len(built.args) <= 1:
        if built.args and (built.args[0].keyword is not None or built.args[0].star):
            return None
        built = built.args[0].value if built.args else cst.List([])
    if not isinstance(built, (cst.List, cst.Tuple)) or any(isinstance(e, cst.StarredElement) for e in built.elements):
        return None
    items = [(element.value, built) for element in built.elements]
    binding = value.binding
    if binding is None or not isinstance(binding.node, cst.Assign) or binding.node.value is not value.expr:
        return items  # a display used as it is (`return [a, b]`, a default)
    statement = model.parent(binding.node)
    block = model.parent(statement) if statement is not None else None
    body = getattr(block, "body", None)
    if not isinstance(body, Sequence) or statement not in body:
        return None
    appends = set()
    for following in body[body.index(statement) + 1:]:
        appended = _appended(model, following, binding.key)
        if appended is not None:
            appends.add(appended)
            items.append((appended.args[0].value, appended))
    return None if _changed_otherwise(model, binding, appends) else items


def _appended(model: SemanticModel, statement: cst.CSTNode, key: str) -> Optional[cst.Call]:
    """The call of a statement that is just `seq.append(x)`."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    expr = statement.body[0]
    call = expr.value if isinstance(expr, cst.Expr) else None
    if (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "append"
            and len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star
            and model.binding_key(call.func.value, call) == key):
        return call
    return None


def _changed_otherwise(model: SemanticModel, binding, appends: set) -> bool:
    """Whether the sequence bound by `binding` is changed in place anywhere in its scope but by `appends`."""
    stack = [binding.scope.node]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and node not in appends and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in _MUTATORS and model.binding_key(node.func.value, node) == binding.key:
            return True
        if isinstance(node, (cst.AugAssign, cst.Del)) or (isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Subscript)):
            target = node.target
            while isinstance(target, cst.Subscript):
                target = target.value
            if model.binding_key(target, node) == binding.key:
                return True
        stack.extend(model.children(node))
    return False
