"""Shared knowledge of the training step: what is back-propagated, what feeds it, which calls
are losses, which run the inner model of a wrapper, and which copy a tensor to the host.

"Back-propagated" means something the code shows: `loss.backward()`,
`scaler.scale(loss).backward()`, `accelerator.backward(loss)` / `fabric.backward(loss)`,
`engine.backward(loss)` on a DeepSpeed engine, `torch.autograd.backward(loss)`. What *feeds*
a back-propagated tensor is followed through the names of the same function (its bindings
in run order), through arithmetic, calls, subscripts and attributes, and through
`with amp.scale_loss(loss, opt) as scaled:`. A name bound in another function, a loop
variable or a parameter is not followed: where the code can't tell, nothing feeds.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from dplint.semantic import (
    Binding,
    CallSite,
    SemanticModel,
    Wrapping,
    argument,
    literal_value,
    method_call,
    peel_self_returning,
)

# Owners of a `.backward(loss)` method that back-propagates its argument.
BACKWARD_OWNERS = {
    "accelerate.Accelerator",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
}
DEEPSPEED_INITIALIZE = "deepspeed.initialize"
AUTOGRAD_BACKWARD = "torch.autograd.backward"
# `backward()` keyword arguments that are not tensors being back-propagated.
BACKWARD_OPTIONS = {"retain_graph", "create_graph", "inputs"}

# torch 2.13: every loss function of torch.nn.functional (and its torch.* aliases).
FUNCTIONAL_LOSSES = {
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
    "cross_entropy", "ctc_loss", "gaussian_nll_loss", "hinge_embedding_loss", "huber_loss",
    "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss", "multi_margin_loss",
    "multilabel_margin_loss", "multilabel_soft_margin_loss", "nll_loss", "poisson_nll_loss",
    "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
}
FUNCTIONAL_LOSS_NAMES = {f"torch.nn.functional.{name}" for name in FUNCTIONAL_LOSSES} | {
    "torch.ctc_loss", "torch.cosine_embedding_loss", "torch.hinge_embedding_loss",
    "torch.margin_ranking_loss", "torch.poisson_nll_loss", "torch.triplet_margin_loss",
}
# Gradients do not flow back through these: `model(x).detach()` is not back-propagated.
GRADIENT_STOPS = {"detach", "detach_", "item", "tolist", "numpy"}
# Reductions that keep "this is the loss": `criterion(out, y).mean().backward()`.
REDUCTIONS = {"mean", "sum"}
# Callee names that say "loss" when the value behind them is unknown: `self.compute_loss(...)`.
LOSS_WORDS = ("loss", "criterion")
ACCELERATOR_DEVICES = ("cuda", "mps", "xpu", "npu", "hpu", "xla")

_MAX_FLOW_NODES = 20000


@dataclass(eq=False)
class Backprop:
    """One call that runs backward, and the expressions whose values it back-propagates."""

    site: CallSite
    roots: tuple[cst.BaseExpression, ...]


@dataclass(eq=False)
class _Facts:
    backprops: list[Backprop]
    flows: dict[Backprop, set[cst.CSTNode]]


_FACTS: "weakref.WeakKeyDictionary[SemanticModel, _Facts]" = weakref.WeakKeyDictionary()


def _facts(model: SemanticModel) -> _Facts:
    facts = _FACTS.get(model)
    if facts is None:
        backprops = [bp for bp in (_backprop_of(model, site) for site in model.calls) if bp is not None]
        facts = _Facts(backprops, {})
        _FACTS[model] = facts
    return facts


# ------------------------------------------------------------------------ backward
def backprops(model: SemanticModel) -> list[Backprop]:
    """Every call in the file that runs backward, in source order."""
    return _facts(model).backprops


def _backprop_of(model: SemanticModel, site: CallSite) -> Optional[Backprop]:
    call = site.node
    if site.qualified_name == AUTOGRAD_BACKWARD:
        tensors = argument(call, 0, "tensors")
        return Backprop(site, (tensors,)) if tensors is not None else None
    method = method_call(call)
    if method is None or method[1] != "backward":
        return None
    receiver = method[0]
    arguments = tuple(
        arg.value for arg in call.args if not (arg.keyword is not None and arg.keyword.value in BACKWARD_OPTIONS)
    )
    if _owns_backward(model, receiver, call):
        return Backprop(site, arguments) if arguments else None
    # `loss.backward()`; with an unknown receiver that takes an argument
    # (`engine.backward(loss)` on a parameter), the argument may be the loss too.
    return Backprop(site, (receiver, *arguments))


def _owns_backward(model: SemanticModel, receiver: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`accelerator` / `fabric` / a DeepSpeed engine: their `.backward(loss)` back-propagates `loss`."""
    value = model.value_at(receiver, at)
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in BACKWARD_OWNERS:
        return True
    key = model.binding_key(receiver, at)
    binding = model.binding_at(key, at) if key is not None else None
    # `engine, optimizer, _, _ = deepspeed.initialize(...)`
    return (
        binding is not None
        and isinstance(binding.node, cst.Assign)
        and isinstance(binding.node.value, cst.Call)
        and model.qualified_name(binding.node.value.func) == DEEPSPEED_INITIALIZE
    )


def feeds_backward(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether the value of `node` flows into a tensor that its own function back-propagates."""
    return any(node in flow for flow in _flows_in_scope(model, model.scope(node)))


def _flows_in_scope(model: SemanticModel, scope) -> Iterator[set[cst.CSTNode]]:
    facts = _facts(model)
    for backprop in facts.backprops:
        if backprop.site.scope is not scope:
            continue
        flow = facts.flows.get(backprop)
        if flow is None:
            flow = facts.flows[backprop] = _flow(model, backprop)
        yield flow


def _flow(model: SemanticModel, backprop: Backprop) -> set[cst.CSTNode]:
    """Every expression node whose value (and gradient) can reach what `backprop` back-propagates."""
    scope = backprop.site.scope
    seen: set[cst.CSTNode] = set()
    stack: list[cst.CSTNode] = list(backprop.roots)
    while stack and len(seen) < _MAX_FLOW_NODES:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, cst.Name):
            stack.extend(_binding_sources(model, node, scope))
        elif isinstance(node, cst.Attribute):
            if node.attr.value != "data":  # `out.data` is detached
                stack.append(node.value)  # never `.attr`, a name that is not a variable
        elif isinstance(node, cst.Call):
            method = method_call(node)
            if method is not None and method[1] in GRADIENT_STOPS:
                continue
            if not isinstance(node.func, cst.Name):  # the callee's own binding is not data
                stack.append(node.func)
            stack.extend(arg.value for arg in node.args)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        else:
            stack.extend(node.children)
    return seen


def _binding_sources(model: SemanticModel, name: cst.Name, scope) -> list[cst.CSTNode]:
    """The expressions a name's live binding took its value from, within `scope`."""
    if model.scope(name) is not scope:
        return []
    binding = model.binding_at(name.value, name)
    if binding is None or binding.scope is not scope:
        return []
    node = binding.node
    if binding.value is not None:
        return [binding.value]
    if isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None:
        return [node.value]  # `logits, aux = model(x)`: the tuple's parts come from this value
    if isinstance(node, cst.AugAssign):
        return [node.target, node.value]  # `loss += reg`: the previous `loss` and `reg`
    if isinstance(node, cst.With):  # `with amp.scale_loss(loss, opt) as scaled_loss:`
        return [item.item for item in node.items if item.asname is not None and _binds(item.asname.name, name.value)]
    return []


def _binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds(element.value, name) for element in target.elements)
    return False


# ---------------------------------------------------------------------------- losses
def loss_calls(model: SemanticModel) -> Iterator[cst.Call]:
    """Loss calls whose result is back-propagated by their own function, in source order.

    A loss call is a call to a `torch.nn.*Loss` (or any `*Loss` class) instance, a
    `torch.nn.functional` loss, or -- only when its result is what `.backward()` runs on --
    a callee named like a loss (`compute_loss(...)`, `self.criterion(...)`).
    """
    facts = _facts(model)
    if not facts.backprops:
        return
    direct = {call for backprop in facts.backprops for call in _direct_calls(model, backprop)}
    for site in model.calls:
        call = site.node
        if site.in_no_grad:
            continue
        if call in direct or is_loss_call(model, call):
            if feeds_backward(model, call):
                yield call


def is_loss_call(model: SemanticModel, call: cst.Call) -> bool:
    """`F.cross_entropy(...)`, `criterion(...)` with `criterion = nn.CrossEntropyLoss()`."""
    if model.qualified_name(call.func) in FUNCTIONAL_LOSS_NAMES:
        return True
    callee = peel_self_returning(model.value_at(call.func, call))
    if isinstance(callee, cst.Call):
        class_name = model.qualified_name(callee.func) or _dotted_tail(callee.func)
        return class_name is not None and class_name.endswith("Loss")
    return False


def loss_inputs(model: SemanticModel, call: cst.Call) -> list[cst.BaseExpression]:
    """The arguments of a loss call that carry the tensors it computes on.

    CTC takes only `log_probs` from the device: its integer `targets` and lengths are
    expected on the CPU by some backends (cuDNN's CTC in several torch releases).
    """
    if _is_ctc(model, call):
        log_probs = argument(call, 0, "log_probs")
        return [log_probs] if log_probs is not None else []
    return [arg.value for arg in call.args]


def _is_ctc(model: SemanticModel, call: cst.Call) -> bool:
    if model.qualified_name(call.func) in ("torch.nn.functional.ctc_loss", "torch.ctc_loss"):
        return True
    callee = peel_self_returning(model.value_at(call.func, call))
    if isinstance(callee, cst.Call):
        class_name = model.qualified_name(callee.func) or _dotted_tail(callee.func)
        return class_name is not None and class_name.endswith("CTCLoss")
    return False


def _direct_calls(model: SemanticModel, backprop: Backprop) -> Iterator[cst.Call]:
    """The call a back-propagated root *is* (through names, `scaler.scale(...)`, `.mean()`,
    `/ steps`), when its callee is named like a loss."""
    for root in backprop.roots:
        value = _peel_root(model, root)
        if isinstance(value, cst.Call) and _named_like_loss(value.func):
            yield value


def _peel_root(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    for _ in range(8):
        expr = model.value_at(expr)  # names resolve where they are read, not at the backward
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
            expr = expr.left  # `loss / accumulation_steps`
            continue
        method = method_call(expr) if isinstance(expr, cst.Call) else None
        if method is not None and method[1] == "scale" and len(expr.args) == 1:
            expr = expr.args[0].value  # `scaler.scale(loss)`
            continue
        if method is not None and method[1] in REDUCTIONS and not expr.args:
            expr = method[0]
            continue
        return expr
    return None


def _named_like_loss(func: cst.BaseExpression) -> bool:
    name = _dotted_tail(func)
    return name is not None and any(word in name.lower() for word in LOSS_WORDS)


def _dotted_tail(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


# ---------------------------------------------------------------------- host copies
def host_moves(model: SemanticModel, expr: cst.BaseExpression) -> Iterator[cst.Call]:
    """`.cpu()` / `.to("cpu")` calls applied to the tensor an argument expression computes.

    Followed: method chains (`out.float().cpu()`), subscripts, attributes and arithmetic.
    Not followed: arguments of other calls (`criterion(model(x.cpu()), y)` moves the model's
    input, not the loss's).
    """
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            if is_host_move(model, node):
                yield node
            if isinstance(node.func, cst.Attribute):
                stack.append(node.func.value)
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            stack.append(node.value)
        elif isinstance(node, cst.BinaryOperation):
            stack.extend((node.right, node.left))
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)


def is_host_move(model: SemanticModel, call: cst.Call) -> bool:
    method = method_call(call)
    if method is None:
        return False
    if method[1] == "cpu":
        return all(arg.keyword is not None and arg.keyword.value == "memory_format" for arg in call.args)
    if method[1] == "to":
        device = argument(call, 0, "device")
        return device is not None and is_cpu_device(model, device, call)
    return False


def is_cpu_device(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`"cpu"`, `torch.device("cpu")`, or a name every binding of which is one of those.

    A name counts only in a file that also uses an accelerator: in a CPU-only script
    `.to(device)` with `device = "cpu"` moves nothing.
    """
    if _is_cpu_literal(model, expr):
        return True
    key = model.binding_key(expr, at)
    live = model.binding_at(key, at) if key is not None else None
    if live is None:
        return False
    same_scope = [b for b in model.bindings.get(key, ()) if b.scope is live.scope]
    return all(_is_cpu_literal(model, b.value) for b in same_scope) and uses_accelerator(model)


def _is_cpu_literal(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> bool:
    if isinstance(expr, cst.Call) and model.qualified_name(expr.func) == "torch.device":
        expr = argument(expr, 0, "type")
    try:
        value = literal_value(expr)
    except ValueError:
        return False
    return isinstance(value, str) and (value == "cpu" or value.startswith("cpu:"))


def uses_accelerator(model: SemanticModel) -> bool:
    """The file moves something to an accelerator or queries CUDA (a DDP wrapping alone is no
    evidence: DDP on the CPU with gloo is common)."""
    for site in model.calls:
        name = site.qualified_name or ""
        if name.startswith("torch.cuda.") or (method_call(site.node) or (None, ""))[1] == "cuda":
            return True
        for arg in site.node.args:
            try:
                value = literal_value(arg.value)
            except ValueError:
                continue
            if isinstance(value, str) and value.startswith(ACCELERATOR_DEVICES):
                return True
    return False


# -------------------------------------------------------------------------- wrappers
@dataclass(frozen=True)
class InnerUse:
    """An expression that reaches the model inside a wrapper instead of the wrapper."""

    wrapping: Wrapping
    wrapper: Optional[cst.BaseExpression]  # `model_dp` in `model_dp.module`; None for the inner name


def inner_model_use(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[InnerUse]:
    """`model` after `model_dp = DP(model)` (same function, or `self.x` of the same class),
    or `model_dp.module` / `model.module` on a name bound to a wrapper."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "module":
        wrapping = model.wrapping_bound_to(expr.value, at)
        if wrapping is not None and model.binding_key(expr.value, at) is not None:
            return InnerUse(wrapping, expr.value)
        return None
    wrapping = model.wrapping_of_inner(expr, at)
    if wrapping is None or wrapping.wrapper_key is None or wrapping.binding is None:
        return None
    here = model.scope(at)
    if wrapping.inner_key.startswith("self."):
        # Methods run in any order: the attribute must be set nowhere but where it is wrapped.
        bound_elsewhere = any(
            model.scope(b.node) is not wrapping.scope
            for b in model.bindings.get(wrapping.inner_key, ())
            if b.scope is here.class_scope
        )
        same = here.class_scope is not None and wrapping.scope.class_scope is here.class_scope and not bound_elsewhere
    else:
        same = wrapping.scope is here
    return InnerUse(wrapping, None) if same else None


def wrapper_reference(model: SemanticModel, wrapping: Wrapping, at: cst.CSTNode) -> Optional[str]:
    """The code naming the wrapper at `at`, when that name is certainly bound there to the
    wrapper (or, on paths where the wrapping did not run, to the very model it wraps:
    `model_dp = model` then `if n_gpu > 1: model_dp = nn.DataParallel(model)`); else None."""
    binding = wrapping.binding
    if binding is None or wrapping.wrapper_key is None:
        return None
    key = wrapping.wrapper_key
    here = model.scope(at)
    if key.startswith("self."):
        if here.self_name is None or here.class_scope is not binding.scope:
            return None
        if not _set_once_in_init(model, binding, at):
            return None
        return f"{here.self_name}.{key[len('self.'):]}"
    if binding.scope is not here or model.binding_at(key, at) is not binding:
        return None
    position = model.order(at)
    earlier = [b for b in model.bindings.get(key, ()) if b.scope is here and b.order < position]
    if not all(b is binding or _aliases_inner(model, b, wrapping) for b in earlier):
        return None
    if not any(runs_before(model, b.node, at) for b in earlier):
        return None
    return key


def _aliases_inner(model: SemanticModel, binding: Binding, wrapping: Wrapping) -> bool:
    return wrapping.inner_key is not None and model.binding_key(binding.value, binding.node) == wrapping.inner_key


def _set_once_in_init(model: SemanticModel, binding: Binding, at: cst.CSTNode) -> bool:
    """`self.x = ...` bound once, unconditionally, in `__init__`; `at` runs after that."""
    init = model.scope(binding.node).node
    if not (isinstance(init, cst.FunctionDef) and init.name.value == "__init__"):
        return False
    if [b for b in model.bindings.get(binding.key, ()) if b.scope is binding.scope] != [binding]:
        return False
    if model.scope(at).node is init:
        return model.order(at) > binding.order and runs_before(model, binding.node, at)
    return _unconditional(model, binding.node, init)


def runs_before(model: SemanticModel, node: cst.CSTNode, at: cst.CSTNode) -> bool:
    """Whether the statement holding `node` certainly ran whenever `at` runs: it comes first,
    in the same function, and every block around it (if/else branch, loop, try, with) also
    holds `at`."""
    if model.scope(node) is not model.scope(at) or model.order(node) >= model.order(at):
        return False
    around_at = set(model.ancestors(at))
    statement = model.statement_of(node)
    stop = model.scope(node).node
    for block in model.ancestors(statement):
        if block is stop:
            return True
        if block not in around_at:
            return False
    return True


def _unconditional(model: SemanticModel, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    """The statement holding `node` sits directly in `function`'s body."""
    return model.parent(model.statement_of(node)) is function.body
