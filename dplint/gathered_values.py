"""What `nn.DataParallel` gathers, and whether it is a loss: which calls' gathered results a
`backward()` reaches and which part of them, which DataParallel constructions a call holds
that gather over more than one device, and whether the wrapped module's `forward` returns a
0-d loss (a mean or a sum) there, keeps a dimension, or cannot be told.

Every helper answers one question about the program, stated in its docstring. None imports
torch or runs the linted code.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import libcst as cst

from dplint.checkpoints import resolve
from dplint.flow import class_method
from dplint.semantic import SemanticModel, argument, children_of, keyword_arg, literal_value, method_call, own_returns, peel_self_returning
from dplint.training import AUTOGRAD_BACKWARD, FUNCTIONAL_LOSS_NAMES, construction_argument, held_wrapper
from dplint.wrappers import indexed_values, wrapper_kind

# What a loss's `reduction=` makes of it: a 0-d mean or sum ("none" keeps the batch dimension).
REDUCTIONS = {"mean": "mean", "batchmean": "mean", "sum": "sum"}
# `size_average=` / `reduce=` (deprecated) override `reduction`: then we can't tell.
LEGACY_REDUCTION_ARGS = ("size_average", "reduce")
# `x.mean()` / `torch.sum(x)` keep a 0-d result with only these keywords.
WHOLE_TENSOR_KEYWORDS = {"dtype"}
# Positional arguments that cannot be the (deprecated) `size_average`/`reduce` or `reduction`:
# the tensors, and for CTC the lengths. More than these and we can't tell the reduction.
# (torch 2.13 signatures; `mse_loss(input, target, size_average)`, `huber_loss(input, target, reduction)`.)
FUNCTIONAL_POSITIONAL = {
    "binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 3, "cosine_embedding_loss": 3,
    "cross_entropy": 3, "ctc_loss": 4, "gaussian_nll_loss": 3, "margin_ranking_loss": 3,
    "multilabel_soft_margin_loss": 3, "nll_loss": 3, "triplet_margin_loss": 3,
    "triplet_margin_with_distance_loss": 3,
}
# Loss modules whose first positional parameter is `weight` (for the others it is `size_average`).
WEIGHT_FIRST_LOSSES = {"CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"}
REDUCING_CALLS = {"torch.mean", "torch.sum"}
# What `backward()` on a vector raises (`RuntimeError: grad can be implicitly created only for
# scalar outputs`) is caught by a handler of these.
CATCHES_RUNTIME_ERROR = {"RuntimeError", "Exception", "BaseException"}
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
MAX_DEPTH = 6
MAX_STEPS = 256  # expressions walked back from one back-propagated root


# Which part of a forward's result reaches backward: a path of keys from the gathered result
# (`()` is all of it; `(1, 0)` is `out[1][0]`: DataParallel gathers nested tuples, lists and
# dicts element by element), or a part we cannot name.
class _Part:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Unpacked(NamedTuple):
    """`a, b = dp(x)`: element `index` of a result unpacked into `count` names (a forward
    path that returns a display of another length cannot be the one that ran)."""
    index: int
    count: int


WHOLE: tuple = ()
SOME_PART = _Part("SOME_PART")
INFEASIBLE = _Part("INFEASIBLE")  # a return the call site's unpacking rules out
DISPROVEN = _Part("DISPROVEN")  # what reaches backward cannot be the module's loss
BATCH = "batch"  # a returned tensor that keeps a dimension: not a 0-d loss


# ------------------------------------------------------------------ the backward side
def has_explicit_gradient(call: cst.Call, qualified_name: Optional[str]) -> bool:
    """`loss.backward(gradient)` / `torch.autograd.backward(t, grad_tensors)`: a gradient is
    given, so the tensor may have any shape."""
    if qualified_name == AUTOGRAD_BACKWARD:
        return argument(call, 1, "grad_tensors") is not None
    return argument(call, 0, "gradient") is not None


def retried_on_reduced(model: SemanticModel, backward: cst.Call) -> bool:
    """The backward sits in a `try:` whose handler catches the RuntimeError a gathered vector
    raises and reduces there (`except RuntimeError: loss = loss.mean(); loss.backward()`)."""
    child: cst.CSTNode = backward
    for ancestor in model.ancestors(backward):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        in_body, child = isinstance(ancestor, cst.Try) and child is ancestor.body, ancestor
        if in_body and any(_catches_runtime_error(h.type) and _holds_reduction(model, h.body) for h in ancestor.handlers):
            return True
    return False


def _holds_reduction(model: SemanticModel, node: cst.CSTNode) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if is_reduction(model, current):
            return True
        stack.extend(children_of(current))
    return False


def _catches_runtime_error(caught: Optional[cst.BaseExpression]) -> bool:
    if caught is None:
        return True  # a bare `except:`
    if isinstance(caught, cst.Tuple):
        return any(_catches_runtime_error(element.value) for element in caught.elements)
    name = caught.attr.value if isinstance(caught, cst.Attribute) else getattr(caught, "value", None)
    return name in CATCHES_RUNTIME_ERROR


def is_reduction(model: SemanticModel, call: cst.BaseExpression) -> bool:
    """`x.mean()`, `x.sum(0)`, `torch.mean(x)`: whatever the gather made of x, it is reduced."""
    if not isinstance(call, cst.Call):
        return False
    method = method_call(call)
    return (method is not None and method[1] in ("mean", "sum")) or model.qualified_name(call.func) in REDUCING_CALLS


def gathered_results(model: SemanticModel, root: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[cst.Call, object, cst.CSTNode]]:
    """The calls whose result `root` back-propagates as it is, with the part of it used and
    where to report (the call; `out["loss"]` for an element taken by subscript, where the
    reduction belongs): through names (every binding that may reach), tuple unpacking and
    subscripts of the result (`a, b = dp(x)`, `out["loss"]`: DataParallel gathers each
    element alike), `scaler.scale(...)` and arithmetic (`nll(out, y) + 0.5 * aux`: a vector
    plus a number is still a vector; a term multiplied by zero adds nothing); never through a
    reduction (`.mean()`), and not at all when some binding on the way reduces (`if n_gpu > 1:
    loss = loss.mean()`: the author handles the gather)."""
    found: list[tuple[cst.Call, object, cst.CSTNode]] = []
    stack: list[tuple[cst.BaseExpression, cst.CSTNode, object, Optional[cst.CSTNode]]] = [(root, at, WHOLE, None)]
    seen: set[int] = set()
    for _ in range(MAX_STEPS):
        if not stack:
            break
        expr, where, part, anchor = stack.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        if isinstance(expr, cst.Call):
            method = method_call(expr)
            if method is not None and method[1] == "scale" and len(expr.args) == 1:
                stack.append((expr.args[0].value, where, part, anchor))
            elif not is_reduction(model, expr):
                found.append((expr, part, anchor or expr))
        elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
            if not (isinstance(expr.operator, cst.Multiply) and (_is_zero(expr.left) or _is_zero(expr.right))):
                stack.extend(((expr.right, where, part, anchor), (expr.left, where, part, anchor)))  # left first
        elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            stack.append((expr.expression, where, part, anchor))
        elif isinstance(expr, cst.Subscript):
            stack.append((expr.value, where, _deeper(_subscript_part(expr), part), anchor or expr))
        else:
            key = model.binding_key(expr, where)
            if key is None or key in ("True", "False", "None"):
                continue
            reaching = model.flow.reaching(key, where)
            if any(binding.value is not None and is_reduction(model, binding.value) for binding, _ in reaching):
                return []
            for binding, _ in reversed(reaching):
                if binding.value is not None:
                    stack.append((binding.value, binding.node, part, anchor))
                elif isinstance(binding.node, cst.Assign):  # `a, b = dp(x)`, `out, loss = out`
                    stack.append((binding.node.value, binding.node, _deeper(_unpacked_part(model, binding), part), anchor))
    return found


def _deeper(key: object, part: object) -> object:
    """The part of `x` used when `part` of `x[key]` is used."""
    return SOME_PART if key is SOME_PART or part is SOME_PART else (key, *part)


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value.replace("_", "")) == 0


def _subscript_part(subscript: cst.Subscript) -> object:
    if len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index):
        key = _literal_or(subscript.slice[0].slice.value, SOME_PART)
        if isinstance(key, (int, str)) and not isinstance(key, bool):
            return key
    return SOME_PART


def _unpacked_part(model: SemanticModel, binding) -> object:
    """`a, b = dp(x)`: the index of the bound name among the targets."""
    for target in binding.node.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)):
            elements = target.target.elements
            if any(isinstance(e, cst.StarredElement) for e in elements):
                return SOME_PART
            for index, element in enumerate(elements):
                if model.binding_key(element.value, binding.node) == binding.key:
                    return Unpacked(index, len(elements))
    return SOME_PART


# ------------------------------------------------------------------ the wrapper
def gathering_constructions(model: SemanticModel, call: cst.Call) -> list[tuple[SemanticModel, Optional[cst.BaseExpression], cst.CSTNode]]:
    """(model, wrapped module expression, where) for each DataParallel construction that
    `call.func` holds on some path and that gathers over more than one device. DataParallel
    and the classes derived from it (mmcv's `MMDataParallel`, PyG's, the project's) scatter
    and gather as torch's does, unless a project class overrides `forward` or `gather`."""
    wrapping = held_wrapper(model, call.func)
    if wrapping is not None and wrapping.kind == "DP" and _one_device(construction_argument(model, wrapping, 1, "device_ids")):
        return []  # `device_ids` seen from this call (a factory's parameter mapped to its argument)
    found, wrappers = [], 0
    for value in _values_through_indexing(model, call.func, call):
        built = value.expr
        if not value.known or not isinstance(built, cst.Call):
            continue
        cmodel = value.model
        kind = wrapper_kind(cmodel, built.func)
        if kind is not None:
            wrappers += 1
        if kind == "DP" and not _overrides_gather(cmodel, built):
            if not _one_device(cmodel.value_at(argument(built, 1, "device_ids"), built)):
                found.append((cmodel, argument(built, 0, "module"), built))
    if not found and not wrappers and wrapping is not None and wrapping.kind == "DP":
        found.append((model, wrapping.inner, wrapping.call))  # factories and parameters the flow model does not follow
    return found


def _one_device(device_ids: Optional[cst.BaseExpression]) -> bool:
    """`device_ids=[0]`: DataParallel calls the module directly, nothing is gathered."""
    return isinstance(device_ids, (cst.List, cst.Tuple)) and len(device_ids.elements) == 1


def _values_through_indexing(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> list:
    """`Flow.values_at`, and what a literal index of a list or `nn.ModuleList` holds
    (`criterion = criterions[1]` with `criterions.append(nn.DataParallel(kd_loss))`)."""
    values = []
    for value in model.flow.values_at(expr, at):
        held = indexed_values(value.model, value.expr) if isinstance(value.expr, cst.Subscript) else None
        values.extend(held if held is not None else (value,))
    return values


def _overrides_gather(model: SemanticModel, built: cst.Call) -> bool:
    """A project subclass of DataParallel with its own `forward` or `gather`: it may not gather."""
    callee = model.flow.callee(built)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return False
    return any(class_method(callee.node, name) is not None for name in ("forward", "gather"))


# ------------------------------------------------------------------ the wrapped forward
def forward_loss(model: SemanticModel, inner: Optional[cst.BaseExpression], at: cst.CSTNode, element: object):
    """(class name, "mean" | "sum") when the wrapped module's forward returns a 0-d loss (in
    `element` of its result) on every path the call site allows; DISPROVEN when what reaches
    backward cannot be its loss (a torch loss with `reduction="none"` or indexed like a
    container, a forward whose every return the call site's unpacking rules out); None when
    it cannot be told (another library, a registry, a forward that builds its loss in ways
    not followed)."""
    verdicts = [_module_returns(value, element) for value in model.flow.values_at(inner, at)]
    if DISPROVEN in verdicts:
        return DISPROVEN
    return next((v for v in verdicts if v is not None), None)


def _module_returns(value, element: object):
    model, module = value.model, value.expr
    if not value.known or not isinstance(module, cst.Call):
        return None
    torch_loss = _torch_loss_class(model, module)
    if torch_loss is not None:
        # `nn.DataParallel(nn.NLLLoss(weight=w))`: torch's losses reduce to 0-d unless told not to.
        if element != WHOLE or _keyword_literal(module, "reduction") == "none":
            return DISPROVEN  # one tensor, indexed (`dp_loss(x, y)[0]`) or batch-shaped
        reduction = _loss_module_reduction(module, torch_loss)
        return (torch_loss, reduction) if reduction is not None else None
    if isinstance(module.func, cst.Name) and module.func.value in model.classes:
        class_def = model.classes[module.func.value]
        if any(b.node is not class_def for b in model.bindings.get(module.func.value, ())):
            return None  # the class name is rebound: which class runs is unclear
    callee = model.flow.callee(module)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return None
    forward = class_method(callee.node, "forward")
    returns = own_returns(forward) if forward is not None else []
    if not returns or element is SOME_PART:
        return None  # inherited, returns nothing on some path, or a part we cannot name
    reductions = set()
    for statement in returns:
        returned = _element(callee.model, statement.value, statement, element)
        if returned is not INFEASIBLE:
            reductions.add(loss_reduction(callee.model, returned, statement, MAX_DEPTH) if returned is not None else None)
    # A return that cannot reach backward as it is (unpacked otherwise, a container, a tensor
    # that keeps a dimension: backward() would raise on one device too) is not the path that ran.
    reductions.discard(BATCH)
    if not reductions:
        return DISPROVEN
    if None in reductions:
        return None
    return callee.node.name.value, "sum" if reductions == {"sum"} else "mean"


def _element(model: SemanticModel, returned: Optional[cst.BaseExpression], at: cst.CSTNode, element: tuple):
    """The part `element` of a returned expression, through tuple / list / dict displays (names
    followed); None when it cannot be told, INFEASIBLE when the call site's unpacking rules
    this return out (`return logits, stds, anchors` unpacked into two names raises)."""
    expr = returned
    for key in element:
        value, at, _ = resolve(model, expr, at)
        expr = None
        if isinstance(value, (cst.Tuple, cst.List)) and not isinstance(key, str):
            items = value.elements
            if any(isinstance(item, cst.StarredElement) for item in items):
                return None
            if isinstance(key, Unpacked) and len(items) != key.count:
                return INFEASIBLE
            index = key.index if isinstance(key, Unpacked) else key
            if -len(items) <= index < len(items):
                expr = items[index].value
        elif isinstance(value, cst.Dict) and isinstance(key, str):
            expr = _dict_item(value, key)
        if expr is None:
            return None
    if isinstance(resolve(model, expr, at)[0], (cst.Tuple, cst.List, cst.Dict)):
        return INFEASIBLE  # a container reaches backward: not the path that runs
    return expr


def _dict_item(display: cst.Dict, key: str) -> Optional[cst.BaseExpression]:
    for item in display.elements:
        if not isinstance(item, cst.DictElement):
            return None
        try:
            if literal_value(item.key) == key:
                return item.value
        except ValueError:
            return None
    return None


def loss_reduction(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> Optional[str]:
    """"mean" / "sum" when `expr` is a 0-d loss: a torch loss (function or module) with that
    reduction, `x.mean()` / `torch.sum(x)` of a whole tensor, a sum or scaling of such, or a
    helper whose every return is one; BATCH when it keeps a dimension (`x.mean(dim=0)`,
    `reduction="none"`, an input of `forward` returned as it is); None when we can't tell."""
    if expr is None or depth <= 0:
        return None
    if isinstance(expr, (cst.Name, cst.Attribute)):
        if _forward_input(model, expr, at):
            return BATCH  # DataParallel scatters the forward's tensors along the batch dimension
        value, value_at, _ = resolve(model, expr, at)
        return None if value is None or value is expr else loss_reduction(model, value, value_at, depth - 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
        sides = [loss_reduction(model, side, at, depth - 1) for side in (expr.left, expr.right)]
        if BATCH in sides:
            return BATCH  # a vector stays one whatever it is added to or scaled by
        numbers = [isinstance(side, (cst.Integer, cst.Float)) for side in (expr.left, expr.right)]
        if all(side is not None or number for side, number in zip(sides, numbers)) and any(sides):
            kinds = {side for side in sides if side is not None}
            return kinds.pop() if len(kinds) == 1 else "mean"
        return None
    if not isinstance(expr, cst.Call):
        return None
    name = model.qualified_name(expr.func)
    if name in FUNCTIONAL_LOSS_NAMES:
        required = FUNCTIONAL_POSITIONAL.get(name.rsplit(".", 1)[1], 2)
        return _reduction_asked(expr) if _positional_count(expr) <= required else None
    method = method_call(expr)
    if name in REDUCING_CALLS or (method is not None and method[1] in ("mean", "sum")):
        tensor_arguments = 1 if name in REDUCING_CALLS else 0
        positional = [arg for arg in expr.args if arg.keyword is None]
        if len(positional) == tensor_arguments and not any(arg.star for arg in positional) and _only_whole_tensor_keywords(expr):
            return name.rsplit(".", 1)[1] if name in REDUCING_CALLS else method[1]
        return BATCH if _reduces_a_dimension(expr, tensor_arguments) else None
    loss_module = peel_self_returning(resolve(model, expr.func, expr)[0])
    if isinstance(loss_module, cst.Call):
        torch_loss = _torch_loss_class(model, loss_module)
        if torch_loss is not None:
            return _loss_module_reduction(loss_module, torch_loss)
    callee = model.flow.callee(expr)
    if callee is not None and isinstance(callee.node, cst.FunctionDef):
        # `return self.gaussian_nll(mu, sigma, y)`, a helper whose every return is a 0-d loss
        return _returns_reduce(callee.model, callee.model.flow.own_returns(callee.node), depth - 1)
    return None


def _torch_loss_class(model: SemanticModel, call: cst.Call) -> Optional[str]:
    """`CrossEntropyLoss` for `nn.CrossEntropyLoss(...)`: a construction of one of torch's losses."""
    name = model.qualified_name(call.func) or ""
    return name.rsplit(".", 1)[1] if name.startswith("torch.nn.") and name.endswith("Loss") else None


def _loss_module_reduction(construction: cst.Call, class_name: str) -> Optional[str]:
    """The reduction a torch loss module is built with, unless a positional argument may be
    the deprecated `size_average` (every one but a leading `weight`)."""
    weight_first = class_name in WEIGHT_FIRST_LOSSES
    return _reduction_asked(construction) if _positional_count(construction) <= weight_first else None


def _forward_input(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`return x, loss` in `def forward(self, x, y)`: a parameter of a `forward`, unchanged."""
    key = model.binding_key(expr, at)
    binding = model.binding_at(key, at) if key is not None else None
    if binding is None or not isinstance(binding.node, cst.Param):
        return False
    function = model.parent(model.parent(binding.node))
    return isinstance(function, cst.FunctionDef) and function.name.value == "forward" and binding.node.star == ""


def _returns_reduce(model: SemanticModel, returns: list, depth: int) -> Optional[str]:
    """"mean" / "sum" when every one of a function's `return`s is a 0-d loss, else None."""
    kinds = {loss_reduction(model, statement.value, statement, depth) for statement in returns}
    if kinds == {BATCH}:
        return BATCH
    if not kinds or None in kinds or BATCH in kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mean"


def _reduction_asked(call: cst.Call) -> Optional[str]:
    """The reduction a loss function call or loss module construction asks for ("mean" by default)."""
    if any(keyword_arg(call, legacy) is not None for legacy in LEGACY_REDUCTION_ARGS) or any(arg.star for arg in call.args):
        return None
    reduction = keyword_arg(call, "reduction")
    if reduction is None:
        return "mean"
    value = _literal_or(reduction.value, None)
    return BATCH if value == "none" else REDUCTIONS.get(value)


def _reduces_a_dimension(call: cst.Call, tensor_arguments: int) -> bool:
    """`x.sum(1)`, `x.mean(dim=0)`, `torch.mean(x, 0)`: a reduction along a dimension, which
    keeps the others (the batch among them)."""
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return len(positional) > tensor_arguments or keyword_arg(call, "dim") is not None


def _positional_count(call: cst.Call) -> int:
    return sum(1 for arg in call.args if arg.keyword is None)


def _only_whole_tensor_keywords(call: cst.Call) -> bool:
    return all(arg.keyword is None or arg.keyword.value in WHOLE_TENSOR_KEYWORDS for arg in call.args)


def _keyword_literal(call: cst.Call, name: str) -> object:
    found = keyword_arg(call, name)
    return _literal_or(found.value, None) if found is not None else None


def _literal_or(expr: Optional[cst.BaseExpression], default):
    try:
        return literal_value(expr)
    except ValueError:
        return default
