"""Facts about one `target.load_state_dict(state_dict, ...)` call, for any rule to ask.

Each public function answers one question about what the program means, not how one project
spells it:

- `result_is_read`: the load's result (the missing and unexpected keys) is read.
- `keys_matched_to_target`: the code compares the dict's keys with the target's own keys
  (before the load, or after it wherever the load ran), or builds the dict from them.
- `holds_live_tensors`: the dict holds tensors of modules alive in this process (a module's
  `state_dict()`, a copy of it, or a dict filled only from one), not a file's.
- `mismatch_raised_by_strict_load`: a strict load of the same dict into the same target
  raises on any mismatch (its error names every key), and that error reaches the user.
- `published_weights`: the dict is downloaded from a fixed web address; its keys are known.
- `pretrained_initialisation`: the load runs because the caller of a model factory asked for
  published pretrained weights (`resnet50(pretrained=True)`), which lack the model's new head.
- `other_framework_only`: the file's `load_state_dict` is another array framework's.
- `strict_parameters` / `loads_given_strict`: which parameters of a function decide the
  `strict` of a load in it (or in the functions it calls), and which loads a call reaches.
"""

from __future__ import annotations

import builtins
import weakref
from typing import Callable, Optional

import libcst as cst

from dplint.checkpoints import StateDictLoad, called_function, checkpoint_facts, enclosing_def, literal_key, name_is_read
from dplint.flow import class_method
from dplint.semantic import SemanticModel, argument, literal_value, method_call, own_returns, subtree

# ------------------------------------------------------------------------------ tree helpers


def parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def parameter_default(function: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    params = function.params
    return next((p.default for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                 if p.name.value == name), None)


def only_a_parameter(model: SemanticModel, function: cst.FunctionDef, name: str) -> bool:
    """`name` is bound in `function` only as its parameter (`strict = strict and x` rebinds it)."""
    bindings = [b for b in model.bindings.get(name, ()) if b.scope.node is function]
    return bool(bindings) and all(isinstance(b.node, cst.Param) for b in bindings)


def is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def is_load_state_dict(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "load_state_dict"


def _names_in(node: cst.CSTNode) -> list[cst.Name]:
    return [current for current in subtree(node) if isinstance(current, cst.Name)]


def _called_name(call: cst.Call) -> str:
    func = call.func
    return str(func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", ""))


def _root(expr: cst.BaseExpression) -> Optional[str]:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _literal_or_none(expr):
    try:
        return literal_value(expr)
    except ValueError:
        return None


def _sources(model: SemanticModel, expr, at, peeled=(cst.Subscript,)) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
    """What a name or an item of one was taken from, step by step: for `sd` after `ck =
    download(...)` and `sd = ck["model"]`, the names `sd`, `ck` and then the `download(...)` call."""
    found = []
    for _ in range(8):
        while isinstance(expr, peeled):
            expr = expr.value
        found.append((expr, at))
        if not isinstance(expr, cst.Name):
            break
        binding = model.binding_at(expr.value, at)
        if binding is None or binding.value is None:
            break
        expr, at = binding.value, binding.node
    return found


def _root_names(model: SemanticModel, expr, at) -> list[str]:
    """`sd` for `sd`, `sd["model"]`, `ckpt["model"]` (and what `sd = ckpt["model"]` was taken from)."""
    return [node.value for node, _ in _sources(model, expr, at, (cst.Subscript, cst.Attribute))[:4]
            if isinstance(node, cst.Name)]


def _runs_whenever(model: SemanticModel, node: cst.CSTNode, anchor: cst.CSTNode) -> bool:
    """`node` runs whenever `anchor` did, as far as the branches tell: every branch, loop body
    or handler holding `node` also holds `anchor`, and both are in the same function."""
    around_anchor = set(model.ancestors(anchor))
    child: cst.CSTNode = node
    for ancestor in model.ancestors(node):
        if ancestor in around_anchor:
            return True
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ExceptHandler, cst.Else, cst.Match)):
            return False
        if isinstance(ancestor, (cst.If, cst.While, cst.IfExp)) and child is not ancestor.test:
            return False
        if isinstance(ancestor, cst.For) and child is not ancestor.iter:
            return False
        if isinstance(ancestor, cst.BooleanOperation) and child is not ancestor.left:
            return False
        child = ancestor
    return False


# ------------------------------------------------------------- the load's result is read


def result_is_read(model: SemanticModel, call: cst.Call) -> bool:
    """The call's result is used: it is not a statement of its own, nor assigned only to names
    (`_` or names never read again)."""
    parent = model.parent(call)
    if isinstance(parent, cst.Expr):
        return False
    if not isinstance(parent, cst.Assign) or parent.value is not call:
        return True
    for target in parent.targets:
        values = [e.value for e in target.target.elements] if isinstance(target.target, (cst.Tuple, cst.List)) \
            else [target.target]
        for value in values:
            if not isinstance(value, cst.Name) or (value.value != "_" and name_is_read(model, value)):
                return True
    return False


# ----------------------------------------------------- the target's own state dict

# What a module's own tensors are read with, and what walks its submodules.
_OWN_STATE_METHODS = {"state_dict", "named_buffers", "named_parameters", "buffers", "parameters"}
_SUBMODULE_METHODS = {"named_modules", "modules", "named_children", "children"}


def is_own_state_dict(model: SemanticModel, expr: cst.CSTNode, target: cst.BaseExpression) -> bool:
    """`expr` is the target's own state dict: `target.state_dict()` (of the target, its wrapper
    or its inner module; its `.keys()`, a `dict`/`set`/`copy` of it), both branches of a
    conditional unwrap, or what a function returns when given the target, if it returns only
    entries of that module's own tensors (`get_norm_states(module)`)."""
    if isinstance(expr, cst.IfExp):
        return is_own_state_dict(model, expr.body, target) and is_own_state_dict(model, expr.orelse, target)
    while isinstance(expr, cst.Call):
        method = method_call(expr)
        if method is not None and method[1] == "state_dict":
            return _same_module(model, method[0], target)
        if method is not None and method[1] in ("keys", "copy"):
            expr = method[0]
        elif isinstance(expr.func, cst.Name) and expr.func.value in ("dict", "set", "list", "OrderedDict") and expr.args:
            expr = expr.args[0].value
        else:
            return _returns_own_state(model, expr, target)
    return False


def _same_module(model: SemanticModel, receiver: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """`receiver` is the load target, its wrapper or its inner `.module`; a target name bound in
    its scope to a conditional unwrap (`m.module if wrapped else m`) or to another name is that too."""
    code = model.code(receiver)
    wanted = [model.code(target)]
    if isinstance(target, cst.Name):
        scope = model.scope(target)
        for binding in model.bindings.get(target.value, ()):
            value = binding.value
            if binding.scope is not scope or value is None:
                continue
            if isinstance(value, cst.IfExp):
                wanted += [model.code(value.body), model.code(value.orelse)]
            elif isinstance(value, (cst.Name, cst.Attribute)):
                wanted.append(model.code(value))
    return any(code in (each, each + ".module") or each == code + ".module" for each in wanted)


def _returns_own_state(model: SemanticModel, call: cst.Call, target: cst.BaseExpression) -> bool:
    """A function of this file or the project, called with the target, every return of which
    holds only that parameter's own tensors: it reads them itself (`dict(m.named_buffers())`),
    or returns a name bound only to that or to an empty dict filled only by item stores inside
    loops over them (`for name, child in m.named_modules(): for k, v in child.state_dict()...`)."""
    wanted = model.code(target)
    if not any(model.code(arg.value) == wanted for arg in call.args):
        return False
    found = called_function(model, call)
    if found is None:
        return False
    other, function, bound = found
    returns = own_returns(function)
    for name in parameter_names(function) if returns else ():
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is not None and model.code(passed) == wanted:
            sources = _module_names(function, name)
            def reads(node, sources=sources):
                return _reads_own_state(node, sources)
            if all(_filled_only_from(other, function, ret.value, lambda loop: reads(loop.iter), reads) for ret in returns):
                return True
    return False


def _module_names(function: cst.FunctionDef, param: str) -> set[str]:
    """`param` and the loop names bound to its submodules (`for name, child in m.named_modules()`)."""
    names = {param}
    for node in subtree(function.body):
        if isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.iter, cst.Call):
            method = method_call(node.iter)
            if method is not None and method[1] in _SUBMODULE_METHODS and _root(method[0]) == param:
                names |= {n.value for n in _names_in(node.target)}
    return names


def _reads_own_state(node: cst.CSTNode, sources: set[str]) -> bool:
    """`m.state_dict()`, `child.named_buffers()`... on one of `sources` somewhere in `node`."""
    for current in subtree(node):
        method = method_call(current) if isinstance(current, cst.Call) else None
        if method is not None and method[1] in _OWN_STATE_METHODS and _root(method[0]) in sources:
            return True
    return False


def _filled_only_from(model: SemanticModel, function, value, loop_ok: Callable, value_ok: Callable) -> bool:
    """`value` is acceptable itself (`value_ok`), or a name of `function` bound only to such
    values or to an empty dict, and filled only by item stores inside a loop that `loop_ok`
    accepts (`new = {}; for k, p in own.items(): new[k] = p[:n]`)."""
    if value_ok(value):
        return True
    if not isinstance(value, cst.Name):
        return False
    bindings = [b for b in model.bindings.get(value.value, ()) if b.scope.node is function]
    stores = [node for node in subtree(function.body) if isinstance(node, cst.AssignTarget)
              and isinstance(node.target, cst.Subscript) and isinstance(node.target.value, cst.Name)
              and node.target.value.value == value.value]
    if not bindings or any(b.value is None or not (value_ok(b.value) or (_empty_dict(b.value) and stores))
                           for b in bindings):
        return False
    return all(any(isinstance(loop, (cst.For, cst.CompFor)) and loop_ok(loop) for loop in model.ancestors(store))
               for store in stores)


def _empty_dict(expr: cst.BaseExpression) -> bool:
    """`{}`, `dict()`, `OrderedDict()`, `collections.OrderedDict()`."""
    if isinstance(expr, cst.Dict):
        return not expr.elements
    return isinstance(expr, cst.Call) and not expr.args and _called_name(expr) in ("dict", "OrderedDict")


def _own_state_dict_names(model: SemanticModel, load: StateDictLoad) -> set[str]:
    """Names of the load's scope bound to the target's own `state_dict()` (or its keys)."""
    scope = model.scope(load.call)
    return {key for key, bindings in model.bindings.items() for b in bindings
            if b.scope is scope and b.value is not None and is_own_state_dict(model, b.value, load.target)}


def _is_own(model: SemanticModel, expr: cst.BaseExpression, target, own_names: set[str]) -> bool:
    """`expr` is the target's own state dict, spelled out or through a name bound to it."""
    return (isinstance(expr, cst.Name) and expr.value in own_names) or is_own_state_dict(model, expr, target)


def _mentions_own_state_dict(model: SemanticModel, node: cst.CSTNode, target, own_names: set[str]) -> bool:
    return any((isinstance(current, cst.Name) and current.value in own_names)
               or (isinstance(current, cst.Call) and is_own_state_dict(model, current, target))
               for current in subtree(node))


# ------------------------------------------------------ the keys are matched to the target


def keys_matched_to_target(model: SemanticModel, load: StateDictLoad) -> bool:
    """The code matches the dict's keys with the target's own keys, so a mismatch is seen or
    cannot happen: the dict is built from or filtered by the target's state dict (`own.update(
    sd)`, `{k: v for k, v in sd.items() if k in own}`), it is handed together with the target's
    state dict to a function (`sd = intersect_dicts(sd, own)`), or with the target itself to a
    function that compares them or that this analysis cannot read (`check_keys(model, sd)`;
    not Python's builtins such as `print`), or a statement compares the
    key sets (`set(own) - set(sd)`, a loop looking each key up in `own`) before the load, or
    after it wherever the load ran, while the dict is still the one loaded. Counting keys
    (`len(own) - len(sd)`) or checking a literal list of a few keys compares nothing."""
    if load.argument is None:
        return False
    own_names = _own_state_dict_names(model, load)
    if _mentions_own_state_dict(model, load.argument, load.target, own_names):
        return True
    value = model.value_at(load.argument, load.call)
    if isinstance(value, cst.Call) and value is not load.argument and not is_load_state_dict(value):
        if any(_is_own(model, arg.value, load.target, own_names) for arg in value.args):
            return True  # `sd = inflate(ckpt, own)`: made to the model's keys
    roots = _root_names(model, load.argument, load.call)
    if any(root in own_names for root in roots):
        return True  # `own = model.state_dict(); own.update(pretrained); load(own)`
    scope, position = model.scope(load.call), model.order(load.call)
    for root in roots:
        for node, node_scope, order in model.references.get(root, ()):
            if order >= position or node_scope is not scope:
                continue
            around = (model.statement_of(node), *_loops_around(model, node, load.call))
            if any(_compares_keys(model, checked, load.target, own_names) for checked in around):
                return True
            call = model.parent(model.parent(node))
            if isinstance(call, cst.Call) and _handed_with_target(model, call, load.target, own_names):
                return True
    return _keys_compared_after(model, load, own_names)


def _handed_with_target(model: SemanticModel, call: cst.Call, target, own_names: set[str]) -> bool:
    """`call`, given the dict, is given the target's own state dict too (`intersect_dicts(sd,
    model.state_dict())`), or is given the target and either compares the keys in its body or
    cannot be read (`check_keys(model, sd)`, `self.check_keys(sd)` comparing with `self.net`)."""
    if any(_is_own(model, arg.value, target, own_names) for arg in call.args):
        return True
    found = called_function(model, call)
    wanted = model.code(target)
    if found is None:  # code this analysis cannot read (not Python's own `print`), handed both
        builtin = isinstance(call.func, cst.Name) and hasattr(builtins, call.func.value) \
            and call.func.value not in model.bindings and call.func.value not in model.imports
        return not builtin and any(model.code(arg.value) == wanted for arg in call.args)
    other, function, bound = found
    receivers = [wanted] if bound and wanted.startswith("self.") and isinstance(call.func, cst.Attribute) \
        and model.code(call.func.value) == "self" else []
    for name in parameter_names(function):
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is not None and model.code(passed) == wanted:
            receivers.append(name)
    return any(_compares_keys(other, function.body, cst.parse_expression(own), set()) for own in receivers)


def _loops_around(model: SemanticModel, node: cst.CSTNode, load: cst.Call) -> list[cst.CSTNode]:
    """The loops around `node` that do not also hold the load."""
    around_load = set(model.ancestors(load))
    loops = []
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) or ancestor in around_load:
            break
        if isinstance(ancestor, (cst.For, cst.While)):
            loops.append(ancestor)
    return loops


# Set operations that compare two key sets (`own & set(sd)`, `set(sd).difference(own)`).
_KEY_SET_OPERATORS = (cst.Subtract, cst.BitAnd, cst.BitXor)
_KEY_SET_METHODS = {"difference", "intersection", "symmetric_difference", "issubset", "issuperset", "isdisjoint"}


def _compares_keys(model: SemanticModel, node: cst.CSTNode, target, own_names: set[str]) -> bool:
    """`node` compares keys with the target's state dict: a set operation (`set(own) - set(sd)`,
    `set(sd).intersection(own)`), or a loop (not over a literal list) testing membership or
    looking each key up in the target's dict (`own[k].shape`, `own.get(k)`: a key the model
    lacks raises or yields None). A difference of counts (`len(own) - len(sd)`) is no comparison."""
    if not _mentions_own_state_dict(model, node, target, own_names):
        return False
    for current in subtree(node):
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, _KEY_SET_OPERATORS):
            if not _is_count(current.left) and not _is_count(current.right):
                return True
        method = method_call(current) if isinstance(current, cst.Call) else None
        if method is not None and method[1] in _KEY_SET_METHODS:
            return True
        if isinstance(current, (cst.For, cst.CompFor)) and not isinstance(current.iter, (cst.List, cst.Tuple, cst.Set)):
            if _membership_or_lookup(model, current, target, own_names):
                return True
    return False


def _membership_or_lookup(model: SemanticModel, loop, target, own_names: set[str]) -> bool:
    stack = [model.parent(loop) if isinstance(loop, cst.CompFor) else loop]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comparison) and any(isinstance(t.operator, (cst.In, cst.NotIn)) for t in current.comparisons):
            return True
        method = method_call(current) if isinstance(current, cst.Call) else None
        if method is not None and method[1] == "get" and _mentions_own_state_dict(model, method[0], target, own_names):
            return True
        if isinstance(current, cst.Subscript) and literal_key(current) is None:
            if _mentions_own_state_dict(model, current.value, target, own_names):
                return True
        if not isinstance(current, (cst.AssignTarget, cst.Del)):  # `own[k] = v` looks nothing up
            stack.extend(current.children)
    return False


def _is_count(expr: cst.BaseExpression) -> bool:
    """`len(x)`, a number: a count, not a set of keys."""
    return isinstance(expr, (cst.Integer, cst.Float)) or (
        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len")


def _keys_compared_after(model: SemanticModel, load: StateDictLoad, own_names: set[str]) -> bool:
    """The dict, or a name bound to its keys (`file_keys = set(sd.keys())`), is compared with
    the target's keys in a statement after the load that runs whenever the load did, with the
    dict not bound again; or a name bound to its keys is compared before the load."""
    roots = _root_names(model, load.argument, load.call)
    loaded = model.binding_at(roots[0], load.call) if roots else None
    if loaded is None:
        return False
    root, scope, position = roots[0], model.scope(load.call), model.order(load.call)
    for name in {root} | _key_set_names(model, root, loaded, scope):
        for node, node_scope, order in model.references.get(name, ()):
            if node_scope is not scope or (name == root and order <= position):
                continue
            if order > position and (model.binding_at(root, node) is not loaded or not _runs_whenever(model, node, load.call)):
                continue
            if _compares_keys(model, model.statement_of(node), load.target, own_names):
                return True
    return False


def _key_set_names(model: SemanticModel, root: str, loaded, scope) -> set[str]:
    """Names of `scope` bound to the keys of `root`'s dict as loaded (`set(sd.keys())`, `list(sd)`)."""
    names = set()
    for key, bindings in model.bindings.items():
        for binding in bindings:
            if binding.scope is not scope or binding.value is None:
                continue
            expr = binding.value
            while isinstance(expr, cst.Call):
                method = method_call(expr)
                if method is not None and method[1] == "keys" and not expr.args:
                    expr = method[0]
                elif isinstance(expr.func, cst.Name) and expr.func.value in ("set", "list", "sorted", "tuple") \
                        and len(expr.args) == 1:
                    expr = expr.args[0].value
                else:
                    break
            if expr is not binding.value and isinstance(expr, cst.Name) and expr.value == root \
                    and model.binding_at(root, binding.node) is loaded:
                names.add(key)
    return names


# ---------------------------------------------------------------- live tensors, not a file

_LIVE_METHODS = ("state_dict", "named_buffers", "named_parameters")


def holds_live_tensors(model: SemanticModel, load: StateDictLoad) -> bool:
    """The dict holds tensors of modules alive in this process, not a file's: a module's
    `state_dict()` / `named_parameters()` / `named_buffers()` or a copy of one
    (`teacher.load_state_dict(deepcopy(student.state_dict()))`), or a name of the load's
    function bound only to an empty dict, filled only by item stores inside loops over such
    a live dict, and handed to no other call that could add a file's entries (`new.update(f)`)."""
    if load.argument is None:
        return False
    if _live_state_dict(model, load.argument, load.call):
        return True
    function = enclosing_def(model, load.call)
    name = load.argument
    if not isinstance(name, cst.Name) or function is None:
        return False
    if any(b.value is None or not _empty_dict(b.value)
           for b in model.bindings.get(name.value, ()) if b.scope.node is function):
        return False
    for node in subtree(function.body):
        if isinstance(node, cst.Call) and node is not load.call:
            if any(isinstance(a.value, cst.Name) and a.value.value == name.value for a in node.args):
                return False
            method = method_call(node)
            if method is not None and isinstance(method[0], cst.Name) and method[0].value == name.value \
                    and method[1] not in ("items", "keys", "values", "get", "pop"):
                return False
    return _filled_only_from(model, function, name, lambda loop: _iterates_live_state(model, loop.iter, loop),
                             lambda value: False)


def _live_state_dict(model: SemanticModel, expr, at) -> bool:
    value = model.value_at(expr, at)
    while isinstance(value, cst.Call) and value.args and _copies(model, value):
        value = value.args[0].value  # a copy is as live
    method = method_call(value) if isinstance(value, cst.Call) else None
    return method is not None and method[1] in _LIVE_METHODS


def _copies(model: SemanticModel, call: cst.Call) -> bool:
    """`copy.deepcopy(x)`, `deepcopy(x)`, `copy.copy(x)`, `dict(x)`, `OrderedDict(x)`."""
    name = model.qualified_name(call.func) or _called_name(call)
    return name.rsplit(".", 1)[-1] in ("deepcopy", "copy", "dict", "OrderedDict")


def _iterates_live_state(model: SemanticModel, expr, at) -> bool:
    """`own.items()` after `own = net.state_dict()`, `net.named_parameters()`."""
    method = method_call(expr) if isinstance(expr, cst.Call) else None
    if method is not None and method[1] in ("items", "keys", "values") and not expr.args:
        expr = method[0]
    return _live_state_dict(model, expr, at)


# ---------------------------------------------- a strict load of the same dict reports it


def mismatch_raised_by_strict_load(model: SemanticModel, load: StateDictLoad) -> bool:
    """A strict load of the same dict into the same target, in the same function, raises a
    RuntimeError naming every missing and unexpected key, and the error reaches the user: the
    load is the retry in an `except ... as e:` handler that reads `e` (or re-raises) after a
    strict load in the `try`, or a strict load that follows on every path is tried in a `try`
    whose handlers all read the error. `except Exception: print("retrying")` hides it."""
    if load.argument is None:
        return False
    target, argument_code = model.code(load.target), model.code(load.argument)
    function = enclosing_def(model, load.call)
    same = [other for other in checkpoint_facts(model).loads
            if other is not load and _strict_literally(other.call) and other.argument is not None
            and model.code(other.target) == target and model.code(other.argument) == argument_code
            and enclosing_def(model, other.call) is function]
    handler = next((a for a in model.ancestors(load.call)
                    if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ExceptHandler))), None)
    if isinstance(handler, cst.ExceptHandler) and _reads_error(handler):
        trial = model.parent(handler)
        if isinstance(trial, cst.Try) and any(trial.body in model.ancestors(other.call) for other in same):
            return True
    position = model.order(load.call)
    return any(model.order(other.call) > position and _runs_whenever(model, other.call, load.call)
               and _error_reported(model, other.call) for other in same)


def _strict_literally(call: cst.Call) -> bool:
    strict = argument(call, 1, "strict")
    return strict is None or (isinstance(strict, cst.Name) and strict.value == "True")


def _reads_error(handler: cst.ExceptHandler) -> bool:
    """`except RuntimeError as error:` whose body reads `error`, or a handler that re-raises."""
    bound = handler.name.name.value if handler.name is not None and isinstance(handler.name.name, cst.Name) else None
    return any(isinstance(node, cst.Raise) or (bound is not None and isinstance(node, cst.Name) and node.value == bound)
               for node in subtree(handler.body))


def _error_reported(model: SemanticModel, call: cst.Call) -> bool:
    """`call` is tried in its function and every handler of each `try` around it reads the error."""
    child: cst.CSTNode = call
    tried = False
    for ancestor in model.ancestors(call):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            if not all(_reads_error(handler) for handler in ancestor.handlers):
                return False
            tried = True
        child = ancestor
    return tried


# ------------------------------------------------------------------- published weights

# Downloads of published weights: a fixed URL has fixed, known keys.
WEIGHT_DOWNLOADS = {"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}
_DOWNLOAD_NAMES = ("load_url", "load_state_dict_from_url")
_WEB = ("http://", "https://")


def published_weights(model: SemanticModel, load: StateDictLoad) -> bool:
    """The dict is downloaded (`load_state_dict_from_url`, `load_url`) from a fixed address, also
    through names and items (`ck = load_url(URL)`, `ck["model"]`): a literal, a literal key into a
    table, any key into a table bound only at a file's top level to dicts of literal web addresses
    (here, imported from the project, or torchvision's `model_urls`), or an address built on a
    literal `http(s)://` base (`HOST + name`, an f-string, `.format`, `join(base, ...)`, or a
    function whose every return is one). A URL the user passes is not fixed."""
    if load.argument is None:
        return False
    value = _sources(model, load.argument, load.call)[-1][0]
    if not isinstance(value, cst.Call):
        return False
    name = model.qualified_name(value.func) or ""
    local = value.func.value if isinstance(value.func, cst.Name) else ""
    if name not in WEIGHT_DOWNLOADS and name.rsplit(".", 1)[-1] not in _DOWNLOAD_NAMES and local not in _DOWNLOAD_NAMES:
        return False
    url = argument(value, 0, "url")
    if isinstance(url, cst.Name):
        url = model.value_at(url, value)
    if isinstance(url, (cst.SimpleString, cst.ConcatenatedString)) or _web_address(model, url, value):
        return True
    if not isinstance(url, cst.Subscript) or not isinstance(url.value, cst.Name):
        return False
    return literal_key(url) is not None or _url_table(model, url.value.value)


def _web_address(model: SemanticModel, expr, at, depth: int = 3) -> bool:
    if expr is None or depth <= 0:
        return False
    if isinstance(expr, cst.Name):
        value = model.value_at(expr, at)
        return value is not None and value is not expr and _web_address(model, value, at, depth - 1)
    literal = _literal_or_none(expr)
    if isinstance(literal, str):
        return literal.startswith(_WEB)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _web_address(model, expr.left, at, depth)
    if isinstance(expr, cst.FormattedString):
        first = expr.parts[0] if expr.parts else None
        return isinstance(first, cst.FormattedStringText) and first.value.startswith(_WEB)
    if not isinstance(expr, cst.Call):
        return False
    method = method_call(expr)
    if method is not None and method[1] == "format":
        return _web_address(model, method[0], at, depth)
    if _called_name(expr) in ("join", "urljoin") and expr.args:
        return _web_address(model, expr.args[0].value, at, depth)
    found = called_function(model, expr)
    if found is None:
        return False
    other, function, _ = found
    returns = other.flow.own_returns(function)
    return bool(returns) and all(_web_address(other, ret.value, ret, depth - 1) for ret in returns)


def _url_table(model: SemanticModel, name: str, depth: int = 3) -> bool:
    imported = model.imports.get(name)
    if imported is not None:
        if imported.startswith("torchvision.") and imported.endswith("model_urls"):
            return True
        found = model.project.resolve(imported, model) if model.project is not None and depth > 0 else None
        return found is not None and _url_table(found[0], imported.rsplit(".", 1)[-1], depth - 1)
    bindings = model.bindings.get(name, ())
    if not bindings or any(b.scope.kind != "module" for b in bindings):
        return False
    for binding in bindings:
        table = binding.value
        if not isinstance(table, cst.Dict) or not table.elements:
            return False
        for element in table.elements:
            url = _literal_or_none(element.value) if isinstance(element, cst.DictElement) else None
            if not isinstance(url, str) or not url.startswith(_WEB):
                return False
    return True


# ------------------------------------------------------- a factory's pretrained weights


def pretrained_initialisation(model: SemanticModel, call: cst.Call, bare_class: Optional[str]) -> bool:
    """The load runs because a model factory's caller asked for published pretrained weights:
    it sits under a test of a `pretrained` value, or in a function with a `pretrained`
    parameter (`resnet50(pretrained=True)`). Those weights lack the new head on purpose. Not
    so when the `pretrained` value tested is itself the path the dict is read from (the user's
    own file), when the load sits under a test of another parameter handed to `torch.load`
    (`if resume_path:`), or when the test looks for the target's class name in the file name
    (`"Tracker" in cfg.pretrain_file`: a checkpoint of this very model)."""
    for ancestor in model.ancestors(call):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and "pretrain" in model.code(ancestor.test).lower():
            if _user_path_tested(model, call, _presence_tested(ancestor.test)):
                return False
            return not _names_own_class(ancestor.test, bare_class)
        if isinstance(ancestor, cst.FunctionDef):
            names = parameter_names(ancestor)
            if _user_path_tested(model, call, [cst.Name(name) for name in names]):
                return False
            return any("pretrain" in name.lower() for name in names) and not _resume_branch(model, call, ancestor, names)
    return False


def _names_own_class(test: cst.BaseExpression, class_name: Optional[str]) -> bool:
    return bool(class_name) and any(
        isinstance(node, cst.Comparison) and isinstance(node.left, cst.SimpleString)
        and any(isinstance(t.operator, cst.In) for t in node.comparisons)
        and node.left.evaluated_value.lower() == class_name.lower()
        for node in subtree(test))


def _resume_branch(model: SemanticModel, call: cst.Call, function: cst.FunctionDef, names: list[str]) -> bool:
    others = {name for name in names if "pretrain" not in name.lower()}
    tested: set[str] = set()
    child: cst.CSTNode = call
    for ancestor in model.ancestors(call):
        if ancestor is function:
            break
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            tested |= {node.value for node in _names_in(ancestor.test) if node.value in others}
        child = ancestor
    for site in model.calls if tested else ():
        if site.qualified_name == "torch.load" and function in model.ancestors(site.node):
            path = argument(site.node, 0, "f")
            if isinstance(path, cst.Name) and path.value in tested:
                return True
    return False


def _presence_tested(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions `test` checks for presence only: `x`, `not x`, `x is (not) None`,
    joined by `and`/`or` (`x == "imagenet"` checks what it is)."""
    if isinstance(test, cst.BooleanOperation):
        return _presence_tested(test.left) + _presence_tested(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _presence_tested(test.expression)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        only = test.comparisons[0]
        if isinstance(only.operator, (cst.Is, cst.IsNot)) and isinstance(only.comparator, cst.Name) \
                and only.comparator.value == "None":
            return _presence_tested(test.left)
        return []
    return [test] if isinstance(test, (cst.Name, cst.Attribute)) else []


def _user_path_tested(model: SemanticModel, call: cst.Call, tested: list[cst.BaseExpression]) -> bool:
    """A `pretrained` value among `tested` is what the loaded dict was made from (handed to the
    call that returned it: `torch.load(args.pretrained)`): a path or a dict, not a flag."""
    names = {model.code(expr) for expr in tested if "pretrain" in model.code(expr).lower()}
    if not names or not is_load_state_dict(call):
        return False
    source = _sources(model, argument(call, 0, "state_dict"), call)[-1][0]
    return isinstance(source, cst.Call) and any(model.code(arg.value) in names for arg in source.args)


# ------------------------------------------------------------- another array framework

_OTHER_FRAMEWORKS = {"megengine", "paddle", "oneflow", "jittor", "mindspore", "tensorflow", "jax", "flax"}


def other_framework_only(model: SemanticModel) -> bool:
    """The file imports another array framework with a torch-like `load_state_dict` and nothing
    of torch: its loads are that framework's."""
    tops = {name.split(".")[0] for name in (*model.imports.values(), *model.star_imports)}
    return bool(tops & _OTHER_FRAMEWORKS) and not any(top.startswith("torch") for top in tops)


# ------------------------------------------------------ parameters that decide `strict`

_STRICT_PARAMETERS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()
Judge = Callable[[SemanticModel, StateDictLoad], bool]


def strict_parameters(model: SemanticModel, function: cst.FunctionDef, depth: int, judged: Judge) -> dict[str, list]:
    """{parameter: [(model, load)]}: the parameters of `function` (never rebound in it) that
    are the `strict` of a load in its own body that `judged` accepts, or that it hands on,
    in a call whose result it ignores, to such a parameter of another function (up to `depth`)."""
    memo = _STRICT_PARAMETERS.setdefault(model, {})
    key = (function, depth, judged)
    if key in memo:
        return memo[key]
    memo[key] = result = {}  # re-entrant (recursive helpers): nothing yet
    params = set(parameter_names(function))
    if params and "load_state_dict" in model.code(function.body):
        for load in checkpoint_facts(model).loads:
            strict = argument(load.call, 1, "strict")
            if isinstance(strict, cst.Name) and strict.value in params and enclosing_def(model, load.call) is function \
                    and only_a_parameter(model, function, strict.value) and judged(model, load):
                result.setdefault(strict.value, []).append((model, load))
    for inner in model.calls_in(function) if params and depth > 1 else ():
        inner = inner.node
        forwarded = {a.value.value for a in inner.args if isinstance(a.value, cst.Name) and a.value.value in params}
        found = called_function(model, inner) if forwarded and not is_load_state_dict(inner) \
            and not result_is_read(model, inner) else None
        if found is None:
            continue
        callee_model, callee, bound = found
        for name, loads in strict_parameters(callee_model, callee, depth - 1, judged).items():
            passed = model.flow.parameter_argument(inner, callee, name, bound)
            if isinstance(passed, cst.Name) and passed.value in forwarded and only_a_parameter(model, function, passed.value):
                result.setdefault(passed.value, []).extend(loads)
    return result


def loads_given_strict(model: SemanticModel, call: cst.Call, depth: int,
                       judged: Judge) -> list[tuple[SemanticModel, StateDictLoad]]:
    """The loads (that `judged` accepts) whose `strict` is the literal False that `call` passes,
    through the function it runs: resolved as calls are, or, on an object the flow cannot follow,
    the one class of this file or imported from the project that defines the method. A load
    whose target `call` leaves None does not run."""
    found = called_function(model, call) or _only_class_with_method(model, call)
    if found is None or other_framework_only(found[0]):
        return []
    other, function, bound = found
    explicit = {id(arg.value) for arg in call.args if is_false(arg.value)}
    loads = []
    for name, inner in strict_parameters(other, function, depth, judged).items():
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is not None and id(passed) in explicit:
            loads.extend((owner, load) for owner, load in inner
                         if not target_left_none(model, call, other, function, bound, load))
    return loads


def target_left_none(model, call, other, function, bound, load) -> bool:
    """The load's target is a parameter of `function` that `call` passes as None: it does not run."""
    target = load.target
    if not isinstance(target, cst.Name) or enclosing_def(other, load.call) is not function \
            or not only_a_parameter(other, function, target.value):
        return False
    passed = model.flow.parameter_argument(call, function, target.value, bound)
    return isinstance(passed, cst.Name) and passed.value == "None"


def _only_class_with_method(model: SemanticModel, call: cst.Call):
    """(model, method, True) for `obj.method(...)` whose receiver the flow cannot follow, when
    exactly one class of this file or imported by name from the project defines that method."""
    project = model.project
    if project is None or not isinstance(call.func, cst.Attribute) or not isinstance(call.func.value, cst.Name):
        return None
    method = call.func.attr.value
    spelled = f"def {method}("
    if spelled not in model.text and not any(spelled in text for text in project.import_closure(model.path, model.text).values()):
        return None
    classes = [(model, node) for node in model.module.body if isinstance(node, cst.ClassDef)]
    for qualified in set(model.imports.values()):
        if qualified.split(".")[0] == "torch":
            continue
        try:
            resolved = project.resolve(qualified, model)
        except Exception:
            resolved = None
        if resolved is not None and isinstance(resolved[1], cst.ClassDef):
            classes.append(resolved)
    found = [(owner, class_method(node, method), True) for owner, node in classes if class_method(node, method) is not None]
    return found[0] if len(found) == 1 else None
