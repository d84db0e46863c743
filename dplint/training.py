"""Shared knowledge of the training step: what is back-propagated, what feeds it, which calls
are losses, which expressions hold a DataParallel/DDP wrapper or the model inside it, and
which copy a tensor to the host.

"Back-propagated" means something the code shows: `loss.backward()`,
`scaler.scale(loss).backward()`, `accelerator.backward(loss)` / `fabric.backward(loss)`,
`engine.backward(loss)` on a DeepSpeed engine, `torch.autograd.backward(loss)` (`backprops`),
and, without a backward call in the file, `torch.autograd.grad(loss, ...)`, the return of a
Lightning `training_step` and the return of a loss module's `forward` (`implicit_roots`).

What *feeds* a back-propagated tensor (`feeds_backward`) is followed backwards from those
roots through every binding that may reach a read (`model.flow.reaching`), `self.x` across
the methods of a class, arithmetic, calls, subscripts, attributes, `with amp.scale_loss(...)
as scaled:`, into the returns of same-file functions, methods and module `forward`s called on
the way, and from their parameters back to the argument of that very call. Globals read in a
function, other files' functions and unknown callees are not entered.

Wrappers (`wrappings`, `held_wrapper`): torch's two, a project class that subclasses one, a
same-file (or, with `model.project`, other-file) function that returns one, and helpers that
return their argument (`on_gpu(nn.DataParallel(net))`). DeepSpeed engines and
Accelerate-prepared models are not torch wrappers: nothing is said about them.

Kept here until `dplint/flow.py` has them (see `reaching_bindings`, `callee_of`,
`call_sites`): wrappers a same-file helper returns (`Flow.wrappings_at` recognises torch's, the
packages' and project subclasses through `dplint.wrapper_classes`); a parameter judged over
*every* caller, not only a single call site; a cheap `reaching` (it walks a function once
per name and renders each `if` test); `callee` for a top-level function defined after its
caller.
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from dplint.flow import Callee
from dplint.wrapper_classes import wrapper_kind as shared_wrapper_kind, wrapping_built_by
from dplint.project import may_call_function_matching
from dplint.semantic import (
    SELF_RETURNING_METHODS,
    Binding,
    CallSite,
    SemanticModel,
    Wrapping,
    argument,
    children_of,
    dotted_name,
    literal_value,
    method_call,
    peel_self_returning,
    subtree,
)

# Owners of a `.backward(loss)` method that back-propagates its argument.
BACKWARD_OWNERS = {
    "accelerate.Accelerator",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
}
# Loss scalers called like a function, `loss_scaler(loss, optimizer, ...)`: their `__call__`
# back-propagates the first argument and steps the optimizer (timm's `utils/cuda.py`).
CALLED_BACKWARD_OWNERS = {
    "timm.utils.NativeScaler",
    "timm.utils.ApexScaler",
    "timm.utils.cuda.NativeScaler",
    "timm.utils.cuda.ApexScaler",
}
DEEPSPEED_INITIALIZE = "deepspeed.initialize"
AUTOGRAD_BACKWARD = "torch.autograd.backward"
AUTOGRAD_GRAD = "torch.autograd.grad"
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
    flows: dict[None, set[cst.CSTNode]]  # one flow for the whole file, computed on first use


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
    if _called_loss_scaler(model, call):
        loss = argument(call, 0, "loss")
        return Backprop(site, (loss,)) if loss is not None else None
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


def _called_loss_scaler(model: SemanticModel, call: cst.Call) -> bool:
    """`loss_scaler(loss, optimizer)` where the name (or `self.x`) holds, on every path, one
    of the CALLED_BACKWARD_OWNERS (made in this file or, through a parameter, in a caller's)."""
    if not call.args or model.binding_key(call.func, call) is None or isinstance(call.func, cst.Name) and (
            call.func.value in model.functions or call.func.value in model.classes):
        return False
    values = model.flow.values_at(call.func, call)
    return bool(values) and all(
        isinstance(value.expr, cst.Call) and value.model.qualified_name(value.expr.func) in CALLED_BACKWARD_OWNERS
        for value in values)


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
    """Whether the value of `node` flows into a tensor that the file back-propagates.

    The flow starts at every back-propagated root (`backprops`) and at the values the file
    hands to a trainer that back-propagates them (`implicit_roots`), and runs backwards:
    through the names of a function (every binding that may reach the read, see
    `reaching_bindings`), `self.x` attributes (bound in the same method, else in any method
    of the class), the returns of same-file functions, methods and `forward`s of same-file
    classes called on the way, and from a parameter to the argument of the call the flow
    came in through (or of every call in the file, when the backward is in the function
    itself). Names of enclosing scopes (globals) are not followed.
    """
    return node in _global_flow(model)


def _global_flow(model: SemanticModel) -> set[cst.CSTNode]:
    facts = _facts(model)
    flow = facts.flows.get(None)
    if flow is None:
        roots = [root for backprop in facts.backprops for root in backprop.roots]
        roots.extend(implicit_roots(model))
        flow = facts.flows[None] = _flow(model, roots)
    return flow


# A call context: the (function, call) pairs the flow entered functions through, innermost last.
_Context = tuple


def _flow(model: SemanticModel, roots: list[cst.BaseExpression]) -> set[cst.CSTNode]:
    """Every expression node whose value (and gradient) can reach one of `roots`."""
    seen: set[tuple[cst.CSTNode, _Context]] = set()
    nodes: set[cst.CSTNode] = set()
    stack: list[tuple[cst.CSTNode, _Context]] = [(root, ()) for root in roots]
    while stack and len(seen) < _MAX_FLOW_NODES:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        node, context = item
        nodes.add(node)
        if isinstance(node, cst.Name):
            stack.extend(_name_sources(model, node, context))
        elif isinstance(node, cst.Attribute):
            if node.attr.value == "data":  # `out.data` is detached
                continue
            key = model.binding_key(node, node)
            if key is not None and key.startswith("self."):
                stack.extend((source, ()) for source in _attribute_sources(model, key, node))
            else:
                stack.append((node.value, context))  # never `.attr`, a name that is not a variable
        elif isinstance(node, cst.Call):
            method = method_call(node)
            if method is not None and method[1] in GRADIENT_STOPS:
                continue
            entered = _entered_function(model, node)
            if entered is not None:
                function, returns = entered
                inner_context = context[-4:] + ((function, node),)
                stack.extend((value, inner_context) for value in returns)
                continue
            if not isinstance(node.func, cst.Name):  # the callee's own binding is not data
                stack.append((node.func, context))
            stack.extend((arg.value, context) for arg in node.args)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        else:
            stack.extend((child, context) for child in children_of(node))
    return nodes


def _name_sources(model: SemanticModel, name: cst.Name, context: _Context) -> list[tuple[cst.CSTNode, _Context]]:
    sources: list[tuple[cst.CSTNode, _Context]] = []
    for binding in reaching_bindings(model, name.value, name):
        if isinstance(binding.node, cst.Param):
            sources.extend(_parameter_sources(model, binding.node, context))
        else:
            sources.extend((source, context) for source in binding_sources(binding))
    return sources


def _parameter_sources(model: SemanticModel, param: cst.Param, context: _Context) -> list[tuple[cst.CSTNode, _Context]]:
    """The arguments a parameter takes: from the call the flow came in through, else from every
    call of the function in the file."""
    function = _function_of_param(model, param)
    if function is None:
        return []
    for index in range(len(context) - 1, -1, -1):
        entered, call = context[index]
        if entered is function:
            value = argument_for(model, function, param, call)
            return [(value, context[:index])] if value is not None else []
    arguments = parameter_arguments(model, param)
    return [(value, ()) for value in arguments or ()]


def _attribute_sources(model: SemanticModel, key: str, at: cst.CSTNode) -> list[cst.CSTNode]:
    return [source for binding in reaching_bindings(model, key, at) for source in binding_sources(binding)]


def binding_sources(binding: Binding) -> list[cst.CSTNode]:
    """The expressions a binding took its value from."""
    node = binding.node
    if binding.value is not None:
        return [binding.value]
    if isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None:
        return [node.value]  # `logits, aux = model(x)`: the tuple's parts come from this value
    if isinstance(node, cst.AugAssign):
        return [node.target, node.value]  # `loss += reg`: the previous `loss` and `reg`
    if isinstance(node, cst.With):  # `with amp.scale_loss(loss, opt) as scaled_loss:`
        key = binding.key
        return [item.item for item in node.items if item.asname is not None and _binds(item.asname.name, key)]
    return []


def _binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and name.startswith("self."):
        return target.attr.value == name[len("self."):]
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds(element.value, name) for element in target.elements)
    return False


# ------------------------------------------------------------------ following values
def reaching_bindings(model: SemanticModel, key: str, at: cst.CSTNode, globals_too: bool = False) -> list[Binding]:
    """The bindings of `key` (a name, or `self.x`) that may hold its value when `at` runs.

    Inside one function: the last binding before `at` that certainly ran (`runs_before`), and
    every later one before `at` that sits in a branch, a loop or a `try` (it ran on some
    paths). A `self.x` not bound earlier in the same method: every binding in the other
    methods of the class. A name of an enclosing scope (a global read in a function): none,
    since when the function runs is unknown; with `globals_too`, every module-level binding.

    (A cheap over-approximation of `model.flow.reaching`, which walks the function once per
    name and costs seconds on long scripts; it can replace this once it is memoised per test.)
    """
    here = model.scope(at)
    owner = model.owner_scope(key, here)
    if owner is None:
        return []
    position = model.order(at)
    candidates = model.bindings.get(key, ())
    if key.startswith("self."):
        local = [b for b in candidates if b.scope is owner and model.scope(b.node) is here and b.order < position]
        if not local:
            return [b for b in candidates if b.scope is owner and model.scope(b.node) is not here]
    else:
        if owner is not here:
            # With `globals_too`, a module-level name read in a function may hold any of its
            # module-level values (the function runs after the module body bound them).
            if globals_too and owner.kind == "module":
                return [b for b in candidates if b.scope is owner]
            return []
        local = [b for b in candidates if b.scope is owner and b.order < position]
    reaching: list[Binding] = []
    for binding in reversed(local):
        reaching.append(binding)
        if isinstance(binding.node, cst.Param) or runs_before(model, binding.node, at):
            break
    return reaching


def called_function(model: SemanticModel, call: cst.Call) -> Optional[cst.FunctionDef]:
    """The same-file function a call runs (`helper(...)`, `self.method(...)`); None for
    classes, other files and anything unknown."""
    callee = callee_of(model, call)
    if callee is None or callee.model is not model or not isinstance(callee.node, cst.FunctionDef):
        return None
    return callee.node


def callee_of(model: SemanticModel, call: cst.Call):
    """`model.flow.callee(call)`, and a function defined once at the top of the file and never
    rebound, called from a function defined before it (flow answers None there: it reads the
    module's bindings where the caller is defined, not where it runs)."""
    callee = model.flow.callee(call)
    if callee is not None or not isinstance(call.func, cst.Name):
        return callee
    name = call.func.value
    definitions = [d for d in model.functions.get(name, ()) if model.scope(d).kind == "module"]
    bindings = model.bindings.get(name, ())
    if len(definitions) != 1 or len(bindings) != 1 or bindings[0].node is not definitions[0]:
        return None
    if model.owner_scope(name, model.scope(call)) is not model.scope(definitions[0]):
        return None
    return Callee(model, definitions[0], False)


def partial_callee(model: SemanticModel, call: cst.Call) -> Optional[Callee]:
    """`back(loss)` where `back = functools.partial(push_back, scale)` (also `self.back`): the
    function of this file (or imported from the project), or the method of this class
    (`partial(self._backward, ...)`), that the partial object runs, when every value the
    called name may hold is a partial of that one function; None otherwise."""
    func = call.func
    if "partial" not in model.text or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    key = func.value if isinstance(func, cst.Name) else model.binding_key(func, call)
    if not any(isinstance(binding.value, cst.Call) and (dotted_name(binding.value.func) or "").endswith("partial")
               for binding in model.bindings.get(key or "", ())):
        return None  # (cheap: most calls are of names never bound to a partial)
    found = []
    for value in model.flow.values_at(func, call):
        made, other = value.expr, value.model
        if not (isinstance(made, cst.Call) and other.qualified_name(made.func) == "functools.partial"
                and made.args and made.args[0].keyword is None and not made.args[0].star):
            return None
        target, callee = made.args[0].value, None
        if isinstance(target, cst.Name):
            reaching = other.flow.reaching(target.value, target)
            node = reaching[0][0].node if len(reaching) == 1 else None
            if isinstance(node, cst.FunctionDef):
                callee = Callee(other, node, False)
            elif isinstance(node, cst.ImportFrom):
                resolved = other.flow.resolve_import(target.value)
                if resolved is not None and isinstance(resolved[1], cst.FunctionDef):
                    callee = Callee(resolved[0], resolved[1], False)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            scope = other.scope(target)
            owner = scope.class_scope
            if owner is not None and target.value.value == scope.self_name:
                method = class_method(owner.node, target.attr.value)
                callee = Callee(other, method, True) if method is not None else None
        if callee is None:
            return None
        found.append(callee)
    return found[0] if found and all(callee.node is found[0].node for callee in found) else None


def class_method(class_def: cst.CSTNode, name: str) -> Optional[cst.FunctionDef]:
    """The method `name` defined directly in a class body (the last one, as Python keeps it)."""
    if not isinstance(class_def, cst.ClassDef):
        return None
    found = None
    for statement in class_def.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            found = statement
    return found


def constructed_class(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[cst.ClassDef]:
    """The same-file class whose instance `expr` holds (`criterion` after `criterion = MyLoss()`)."""
    value = peel_self_returning(model.value_at(expr, at, peel=True))
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        class_def = model.classes.get(value.func.value)
        if class_def is not None and all(b.node is class_def for b in model.bindings.get(value.func.value, ())):
            return class_def
    return None


def _entered_function(model: SemanticModel, call: cst.Call) -> Optional[tuple[cst.FunctionDef, list[cst.BaseExpression]]]:
    """(function, its return values) for a call into a same-file function, method, or the
    `forward` of a same-file module class; None for anything else (or a function that
    returns nothing we can see)."""
    function = called_function(model, call)
    if function is None:
        class_def = constructed_class(model, call.func, call)
        function = class_method(class_def, "forward") if class_def is not None else None
    if function is None:
        return None
    returns = return_values(model, function)
    return (function, returns) if returns else None


_RETURNS: "weakref.WeakKeyDictionary[SemanticModel, dict[cst.CSTNode, list[cst.BaseExpression]]]" = (
    weakref.WeakKeyDictionary()
)


def return_values(model: SemanticModel, function: cst.FunctionDef) -> list[cst.BaseExpression]:
    """The values of a function's own `return` statements (not those of nested functions)."""
    by_function = _RETURNS.get(model)
    if by_function is None:
        by_function = _RETURNS[model] = {}
        for node in model.nodes_of(cst.Return):
            if node.value is not None:
                by_function.setdefault(model.scope(node).node, []).append(node.value)
    return by_function.get(function, [])


def _function_of_param(model: SemanticModel, param: cst.Param) -> Optional[cst.FunctionDef]:
    for ancestor in model.ancestors(param):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
        if isinstance(ancestor, cst.Lambda):
            return None
    return None


def _positional_params(function: cst.FunctionDef) -> list[cst.Param]:
    return [*function.params.posonly_params, *function.params.params]


def argument_for(model: SemanticModel, function: cst.FunctionDef, param: cst.Param,
                 call: cst.Call, bound: Optional[bool] = None) -> Optional[cst.BaseExpression]:
    """The argument `call` passes for `param` of `function` of `model` (its default when it
    passes none); None when it can't be told (`*args`, `**kwargs`)."""
    if bound is None:
        bound = model.scope(function).kind == "class" and not _is_static(function)
    return model.flow.parameter_argument(call, function, param.name.value, bound)


def _is_static(function: cst.FunctionDef) -> bool:
    return any(
        isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
        for d in function.decorators
    )


def call_sites(model: SemanticModel, function: cst.FunctionDef) -> Optional[list[tuple[cst.Call, bool]]]:
    """(call, bound) for the calls of a same-file function (`model.flow.call_sites`); for a
    top-level function that flow does not link to its callers (defined after them), every
    reference must be the callee of a call, and the function undecorated."""
    sites = model.flow.call_sites(function)
    if sites is not None or function.decorators or model.scope(function).kind != "module":
        return sites
    calls = []
    for reference, _, _ in model.references.get(function.name.value, ()):
        parent = model.parent(reference)
        if isinstance(parent, cst.Call) and parent.func is reference:
            if callee_of(model, parent) is None or callee_of(model, parent).node is not function:
                return None
            calls.append((parent, False))
        elif isinstance(parent, cst.Attribute) and parent.attr is reference:
            continue  # `model.train()`: another object's attribute of the same name
        elif reference is not function.name:
            return None
    return calls or None


def parameter_arguments(model: SemanticModel, param: cst.Param) -> Optional[list[cst.BaseExpression]]:
    """What every call of the parameter's function in this file passes for it
    (`model.flow.call_sites`); None when the function escapes (passed as a value, decorated, a
    method called on another object), is never called here, or a call can't be mapped."""
    function = _function_of_param(model, param)
    sites = call_sites(model, function) if function is not None else None
    if not sites:
        return None
    arguments = [model.flow.parameter_argument(call, function, param.name.value, bound) for call, bound in sites]
    return None if any(value is None for value in arguments) else arguments


# ------------------------------------------------------------ back-propagation elsewhere
LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")
TORCH_MODULE_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module"}
TORCH_LOSS_BASES = {"torch.nn.modules.loss._Loss", "torch.nn.modules.loss._WeightedLoss"}


def implicit_roots(model: SemanticModel) -> list[cst.BaseExpression]:
    """Values differentiated without a `.backward()` call in the file: the `outputs` of
    `torch.autograd.grad(...)`, the loss of Lightning's `self.manual_backward(loss)`, what a
    Lightning `training_step` returns (Lightning runs
    `backward()` on it), and what the `forward` of a loss module returns (an `nn.Module`
    subclass named like a loss, or a subclass of torch's `_Loss`: its caller back-propagates
    it)."""
    roots: list[cst.BaseExpression] = []
    for site in model.calls:
        if site.qualified_name == AUTOGRAD_GRAD and not site.in_no_grad:
            outputs = argument(site.node, 0, "outputs")
            if outputs is not None:
                roots.append(outputs)  # `torch.autograd.grad(loss, params)` differentiates `loss`
        method = method_call(site.node)
        if method is not None and method[1] == "manual_backward" and site.node.args:
            roots.append(site.node.args[0].value)  # Lightning's manual optimization
    for class_def in _classes(model):
        bases = class_bases(model, class_def)
        if any(_is_lightning_module(name) for name in bases):
            method = class_method(class_def, "training_step")
            if method is not None:
                roots.extend(return_values(model, method))
        if bases & TORCH_LOSS_BASES or (bases & TORCH_MODULE_BASES and "loss" in class_def.name.value.lower()):
            method = class_method(class_def, "forward")
            if method is not None:
                roots.extend(return_values(model, method))
    return roots


def _classes(model: SemanticModel) -> list[cst.ClassDef]:
    return [b.node for bindings in model.bindings.values() for b in bindings if isinstance(b.node, cst.ClassDef)]


def _is_lightning_module(name: str) -> bool:
    return name.startswith(LIGHTNING_PACKAGES) and name.endswith("LightningModule")


def class_bases(model: SemanticModel, class_def: cst.ClassDef, depth: int = 6) -> set[str]:
    """Qualified names of a class's bases, through bases defined in the same file."""
    names: set[str] = set()
    for base in class_def.bases:
        if base.keyword is not None:
            continue
        name = model.qualified_name(base.value)
        if name is not None:
            names.add(name)
        elif isinstance(base.value, cst.Name) and depth > 0:
            parent = model.classes.get(base.value.value)
            if parent is not None and parent is not class_def:
                names |= class_bases(model, parent, depth - 1)
    return names


# ---------------------------------------------------------------------------- losses
def loss_calls(model: SemanticModel) -> Iterator[cst.Call]:
    """Loss calls whose result is back-propagated (see `feeds_backward`), in source order.

    A loss call is a call to a `torch.nn.*Loss` (or any `*Loss` class) instance, a
    `torch.nn.functional` loss, or -- only when its result is what `.backward()` runs on --
    a callee named like a loss (`compute_loss(...)`, `self.criterion(...)`).
    """
    facts = _facts(model)
    if not facts.backprops and not implicit_roots(model):
        return
    roots = [root for backprop in facts.backprops for root in backprop.roots] + implicit_roots(model)
    direct = set(_direct_calls(model, roots))
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


def _direct_calls(model: SemanticModel, roots: list[cst.BaseExpression]) -> Iterator[cst.Call]:
    """The call a back-propagated root *is* (through names, `scaler.scale(...)`, `.mean()`,
    `/ steps`, a tuple unpacked from it), when its callee is named like a loss."""
    for root in roots:
        value = _peel_root(model, root)
        if isinstance(value, cst.Call) and _named_like_loss(value.func):
            yield value


def peel_backward_root(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """What a back-propagated value is, through names, `scaler.scale(...)`, reductions and
    `/ steps`: usually a loss call or a model's output."""
    return _peel_root(model, expr)


def _peel_root(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    for _ in range(8):
        expr = _value_or_unpacked(model, expr)  # names resolve where they are read, not at the backward
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


def _value_or_unpacked(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """`model.value_at`, and for a name unpacked from a call (`loss, acc = model.loss(...)`)
    that call."""
    value = model.value_at(expr)
    if value is not None or not isinstance(expr, cst.Name):
        return value
    binding = model.binding_at(expr.value, expr)
    if binding is not None and isinstance(binding.node, cst.Assign) and isinstance(binding.node.value, cst.Call):
        targets = binding.node.targets
        if len(targets) == 1 and isinstance(targets[0].target, (cst.Tuple, cst.List)):
            return binding.node.value
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

    Followed: method chains (`out.float().cpu()`), subscripts, attributes and arithmetic, and
    names of the same function to the bindings that may reach the read
    (`out_host = out.cpu()` ... `criterion(out_host, y)`), and from a parameter to the
    arguments every call of its function in the file passes. Not followed: arguments of other
    calls (`criterion(model(x.cpu()), y)` moves the model's input, not the loss's).
    """
    stack: list[cst.CSTNode] = [expr]
    seen: set[cst.CSTNode] = set()
    while stack and len(seen) < _MAX_FLOW_NODES:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, cst.Call):
            if is_host_move(model, node):
                yield node
            if isinstance(node.func, cst.Attribute):
                stack.append(node.func.value)
        elif isinstance(node, cst.Name):
            for binding in reaching_bindings(model, node.value, node):
                if isinstance(binding.node, cst.Param):
                    stack.extend(parameter_arguments(model, binding.node) or ())
                elif binding.value is not None:
                    stack.append(binding.value)
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
    """The file moves something to an accelerator, queries CUDA, or defines a Lightning module
    (Lightning moves it to the accelerator). A DDP wrapping alone is no evidence: DDP on the
    CPU with gloo is common."""
    if any(any(_is_lightning_module(name) for name in class_bases(model, c)) for c in _classes(model)):
        return True
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
# The wrappers are found here rather than in the semantic model's `wrappings`: a subclass of
# DataParallel/DDP defined in the file, a wrapper returned by a same-file function, and a
# wrapper passed through a helper that returns its argument are wrappers too.
_WRAPPERS: "weakref.WeakKeyDictionary[SemanticModel, dict[cst.Call, Wrapping]]" = weakref.WeakKeyDictionary()
_MAX_DEPTH = 8


def wrapper_kind(model: SemanticModel, func: cst.BaseExpression, depth: int = 6) -> Optional[str]:
    """"DP" / "DDP" when calling `func` builds a wrapper: the one recogniser every rule asks
    (`dplint.wrapper_classes.wrapper_kind`: torch's, a package's, a project subclass)."""
    return shared_wrapper_kind(model, func, depth)


# What the source of a class or function that is or returns a wrapper names somewhere.
WRAPPER_WORDS = ("DataParallel", "DP(")
WRAPPER_TEXT = "|".join(map(re.escape, WRAPPER_WORDS))  # the same, as a pattern for `may_call_function_matching`


def may_name_a_wrapper(model: SemanticModel, func: cst.BaseExpression) -> bool:
    """False when `func` is imported from a project definition whose source never names a
    wrapper (read as text, without parsing): it can neither be nor return one of its making."""
    head = func
    while isinstance(head, cst.Attribute):
        head = head.value
    project = getattr(model, "project", None)
    if project is None or not isinstance(head, cst.Name) or head.value not in model.imports:
        return True
    dotted = dotted_name(func)
    qualified = model.imports[head.value] + dotted[len(head.value):] if dotted else model.imports[head.value]
    if qualified.startswith(("torch.", "torch")):
        return True
    # Asked for every call of an imported name, in every file: the answer depends only on the
    # importer's folder (where the name resolves) and the project's texts, so it is kept per run.
    known = _MENTIONS.setdefault(project, {})
    key = (os.path.dirname(os.path.abspath(model.path)), qualified)
    if key not in known:
        try:
            known[key] = project.mentions(qualified, model, WRAPPER_WORDS)
        except Exception:
            known[key] = True
    return known[key]


_MENTIONS: "weakref.WeakKeyDictionary[object, dict[tuple[str, str], bool]]" = weakref.WeakKeyDictionary()


def wrappings(model: SemanticModel) -> list[Wrapping]:
    """Every wrapper construction of the file: direct ones, then calls of same-file functions
    that return one (`model = build_ddp(net)`: a Wrapping at that call, its inner the argument
    passed for the parameter the function wraps)."""
    return list(_wrappers_by_call(model).values())


def inherited_wrappers(model: SemanticModel, depth: int = 3) -> bool:
    """Whether a class of the file subclasses a project class (of this file or imported, up to
    `depth` levels) whose file builds a wrapper (`class Trainer(BaseTrainer)` with
    `self.net = DDP(...)` in `BaseTrainer.__init__`): the subclass's `self.net` may hold it."""
    if model.project is None:
        return False
    seen: set = set()
    stack = [(model, node, depth) for node in model.classes.values()]
    while stack:
        owner, class_node, left = stack.pop()
        for base in class_node.bases:
            named = owner.flow._class_named(base.value)
            if named is None or named[1] is class_node or id(named[1]) in seen:
                continue
            seen.add(id(named[1]))
            if named[0] is not model and wrappings(named[0]):
                return True
            if left > 1:
                stack.append((named[0], named[1], left - 1))
    return False


def _wrappers_by_call(model: SemanticModel) -> dict[cst.Call, Wrapping]:
    by_call = _WRAPPERS.get(model)
    if by_call is None:
        by_call = _WRAPPERS[model] = {}  # visible at once: files that import each other end here
        for site in model.calls:
            kind = wrapper_kind(model, site.node.func)
            if kind is not None:
                inner = _peel(model, argument(site.node, 0, "module"))
                by_call[site.node] = _wrapping(model, kind, site, inner)
        returned_by: dict[cst.FunctionDef, Optional[Wrapping]] = {}
        for site in model.calls:
            if site.node not in by_call:
                returned = _returned_wrapping(model, site, by_call, returned_by)
                if returned is not None:
                    by_call[site.node] = returned
    return by_call


def _wrapping(model: SemanticModel, kind: str, site: CallSite, inner: Optional[cst.BaseExpression]) -> Wrapping:
    binding = assigned_binding(model, site.node)
    return Wrapping(
        kind=kind,
        call=site.node,
        inner=inner,
        inner_key=model.binding_key(inner, site.node) if inner is not None else None,
        wrapper_key=binding.key if binding else None,
        binding=binding,
        scope=site.scope,
        order=site.order,
    )


def construction(model: SemanticModel, wrapping: Wrapping) -> Wrapping:
    """The wrapper construction itself: for a call of a function that returns a wrapper, the
    `DDP(...)` / `nn.DataParallel(...)` call inside it (its `device_ids`, its class)."""
    return _ORIGINS.get(model, {}).get(wrapping.call, wrapping)


def construction_argument(model: SemanticModel, wrapping: Wrapping, position: int, keyword: str) -> Optional[cst.BaseExpression]:
    """An argument of the wrapper construction (`device_ids=`), seen from `wrapping`'s call: a
    parameter of the same-file function that builds it is replaced by what the call passes."""
    origin = construction(model, wrapping)
    value = argument(origin.call, position, keyword)
    if origin is wrapping or not isinstance(value, cst.Name) or model.parent(origin.call) is None:
        return value
    param = _parameter_held(model, value, origin.call)
    function = _function_of_param(model, param) if param is not None else None
    if function is None or called_function(model, wrapping.call) is not function:
        return value
    return argument_for(model, function, param, wrapping.call)


def is_construction(model: SemanticModel, wrapping: Wrapping) -> bool:
    return construction(model, wrapping) is wrapping


_ORIGINS: "weakref.WeakKeyDictionary[SemanticModel, dict[cst.Call, Wrapping]]" = weakref.WeakKeyDictionary()


def _returned_wrapping(model: SemanticModel, site: CallSite, by_call: dict[cst.Call, Wrapping],
                       returned_by: dict[cst.FunctionDef, Optional[Wrapping]]) -> Optional[Wrapping]:
    """A call of a function (of this file or, through `model.project`, of another) that returns
    a wrapper on some path: a Wrapping at the call, its inner the argument the call passes for
    the parameter the function wraps."""
    if not may_name_a_wrapper(model, site.node.func) or not may_call_function_matching(model, site.node.func, WRAPPER_TEXT, 3):
        return None
    callee = callee_of(model, site.node)
    if callee is None or not isinstance(callee.node, cst.FunctionDef):
        return None
    function_model, function = callee.model, callee.node
    if not return_values(function_model, function) or pass_through_argument(model, site.node) is not None:
        return None
    if function not in returned_by:
        wrappers = by_call if function_model is model else _wrappers_by_call(function_model)
        held = (_held(function_model, [value], wrappers) for value in return_values(function_model, function))
        returned_by[function] = next((wrapping for wrapping in held if wrapping is not None), None)
    wrapping = returned_by[function]
    if wrapping is None:
        return None
    param = _parameter_held(function_model, wrapping.inner, wrapping.call)
    inner = None
    if param is not None and _function_of_param(function_model, param) is function:
        inner = _peel(model, model.flow.parameter_argument(site.node, function, param.name.value, callee.bound))
    _ORIGINS.setdefault(model, {})[site.node] = construction(function_model, wrapping)
    return _wrapping(model, wrapping.kind, site, inner)


def _parameter_held(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[cst.Param]:
    """The parameter a name holds through certain bindings of its function (`net = net.to(rank)`)."""
    for _ in range(_MAX_DEPTH):
        key = model.binding_key(expr, at)
        binding = model.binding_at(key, at) if key is not None and not key.startswith("self.") else None
        if binding is None:
            return None
        if isinstance(binding.node, cst.Param):
            return binding.node
        if binding.value is None or not runs_before(model, binding.node, at):
            return None
        expr, at = _peel(model, binding.value), binding.node
    return None


def _peel(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """Self-returning methods (`.cuda()`, `.to(rank)`) and same-file helpers that return their
    argument (`on_gpu(net)`) looked through."""
    for _ in range(_MAX_DEPTH):
        expr = peel_self_returning(expr)
        passed = pass_through_argument(model, expr) if isinstance(expr, cst.Call) else None
        if passed is None:
            return expr
        expr = passed
    return expr


def pass_through_argument(model: SemanticModel, call: cst.Call) -> Optional[cst.BaseExpression]:
    """For a call of a project function that returns one of its parameters on every return
    (through `.cuda()`/`.to(...)`, either branch of `a if c else b`), the argument passed for it."""
    callee = callee_of(model, call)
    if callee is None or not isinstance(callee.node, cst.FunctionDef):
        return None
    function_model, function = callee.model, callee.node
    names = set()
    for returned in return_values(function_model, function):
        for value in _branches(returned):
            if not isinstance(value, cst.Name):
                return None
            names.add(value.value)
    if len(names) != 1:
        return None
    (name,) = names
    params = [p for p in (*_positional_params(function), *function.params.kwonly_params) if p.name.value == name]
    if len(params) != 1:
        return None
    rebound = [
        b for b in function_model.bindings.get(name, ())
        if function_model.scope(b.node).node is function and b.node is not params[0]
    ]
    if rebound:
        return None
    return model.flow.parameter_argument(call, function, name, callee.bound)


def _branches(expr: Optional[cst.BaseExpression]) -> list[cst.BaseExpression]:
    expr = peel_self_returning(expr)
    if isinstance(expr, cst.IfExp):
        return [*_branches(expr.body), *_branches(expr.orelse)]
    return [expr] if expr is not None else []


def assigned_binding(model: SemanticModel, call: cst.Call) -> Optional[Binding]:
    """The name binding whose value is `call`, possibly under `.cuda()`/`.to()`, as one branch
    of `a if c else b`, or as the argument of a helper that returns it (`on_gpu(DDP(net))`)."""
    node: cst.CSTNode = call
    for _ in range(_MAX_DEPTH * 2):
        parent = model.parent(node)
        grandparent = model.parent(parent) if parent is not None else None
        if (
            isinstance(parent, cst.Attribute) and parent.value is node and isinstance(grandparent, cst.Call)
            and grandparent.func is parent and parent.attr.value in SELF_RETURNING_METHODS
        ):
            node = grandparent
        elif isinstance(parent, cst.IfExp) and node is not parent.test:
            node = parent
        elif isinstance(parent, cst.Arg) and isinstance(grandparent, cst.Call) and pass_through_argument(model, grandparent) is node:
            node = grandparent
        elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
            bindings = model.bindings_by_node.get(parent, ())
            return bindings[0] if len(bindings) == 1 else None
        else:
            return None
    return None


def held_wrapper(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> Optional[Wrapping]:
    """The wrapping that `expr` may hold where it is read: on some path, through names (every
    binding that may reach, see `reaching_bindings`), `self.x`, self-returning calls, helpers
    that return their argument, either branch of `a if c else b`, the arguments the file's calls
    pass for a parameter, and the return of a same-file function that builds one."""
    if expr is None:
        return None
    # What the flow model finds on some path counts too: it also follows one element of an
    # unpacked tuple (`model, ema, scaler = build(cfg, model)`) and attributes stored from
    # outside their class (`trainer.model = DDP(trainer.model)`).
    return _held(model, [expr], _wrappers_by_call(model)) or model.flow.wrapped_on_some_path(expr, expr)


def held_wrapper_of_key(model: SemanticModel, key: str, at: cst.CSTNode) -> Optional[Wrapping]:
    """`held_wrapper` for the name or `self.x` attribute `key` read at `at`."""
    return _held_bindings(model, reaching_bindings(model, key, at, globals_too=True), _wrappers_by_call(model))


def _held(model: SemanticModel, exprs: list, by_call: dict[cst.Call, Wrapping], depth: int = _MAX_DEPTH) -> Optional[Wrapping]:
    stack = [(expr, depth) for expr in exprs]
    seen: set[cst.CSTNode] = set()
    while stack:
        expr, depth = stack.pop()
        expr = peel_self_returning(expr)
        if expr is None or depth <= 0 or expr in seen:
            continue
        seen.add(expr)
        if isinstance(expr, cst.IfExp):
            stack.extend(((expr.body, depth), (expr.orelse, depth)))
        elif isinstance(expr, cst.Call):
            passed = pass_through_argument(model, expr)
            if passed is not None:
                stack.append((passed, depth - 1))
            elif expr in by_call:
                return by_call[expr]
        else:
            key = model.binding_key(expr, expr)
            if key is None or key in ("True", "False", "None") or model.parent(expr) is None:
                continue
            for binding in reaching_bindings(model, key, expr, globals_too=True):
                if isinstance(binding.node, cst.Param):
                    found = _held_by_every_caller(model, binding.node, by_call, depth - 1)
                    if found is not None:
                        return found
                elif binding.value is not None:
                    stack.append((binding.value, depth - 1))
    return None


def _held_by_every_caller(model: SemanticModel, param: cst.Param, by_call: dict[cst.Call, Wrapping],
                          depth: int) -> Optional[Wrapping]:
    """The wrapping a parameter holds when every call of its function in the file passes one;
    None when a caller passes something else (or callers can't be known)."""
    if depth <= 0:
        return None
    arguments = parameter_arguments(model, param)
    if arguments is None:
        return _held_by_project_callers(model, param)
    held = [_held(model, [value], by_call, depth) for value in arguments]
    return held[0] if arguments and all(wrapping is not None for wrapping in held) else None


def handed_in(model: SemanticModel, key: str, at: cst.CSTNode) -> bool:
    """Whether the value `key` names at `at` is handed in by other files of the project and
    is a wrapper there: a parameter of the enclosing function that every caller in another
    file fills with one (`train(model, ...)` in `main.py` after `model = DDP(model)`), or a
    `self.x` that the class's `__init__` stores from such a parameter (`Trainer(model)` made
    in `main.py`). A gate before the per-path question (`Flow.wrappings_at`); memoised per
    parameter."""
    if model.project is None:
        return False
    if key.startswith("self."):
        scope = model.scope(at).class_scope
        init = class_method(scope.node, "__init__") if scope is not None and isinstance(scope.node, cst.ClassDef) else None
        if init is None or not _importers_mention_a_wrapper(model, scope.node.name.value):
            return False
        attribute = ".".join(key.split(".")[:2])
        params = [p for b in model.bindings.get(attribute, ()) if model.scope(b.node).node is init
                  and isinstance(b.value, cst.Name) for p in reaching_bindings(model, b.value.value, b.node)]
    else:
        function = model.scope(at).node
        if not isinstance(function, cst.FunctionDef) or not _importers_mention_a_wrapper(model, function.name.value):
            return False
        params = reaching_bindings(model, key.split(".")[0], at)
    memo = _HANDED.setdefault(model, {})
    for binding in params:
        if isinstance(binding.node, cst.Param):
            if binding.node not in memo:
                memo[binding.node] = _held_by_project_callers(model, binding.node) is not None
            if memo[binding.node]:
                return True
    return False


_HANDED: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def _importers_mention_a_wrapper(model: SemanticModel, name: str) -> bool:
    """Whether a project file that uses this one names a wrapper class in the code that calls
    `name` (`Project.importer_pieces`: the statements calling this file's definitions, what they
    pass, and the imports naming those; every wrapper class's name contains `DataParallel`).
    Text only: callers that hand nothing of the kind in are never parsed for it."""
    memo = _HANDED.setdefault(model, {})
    key = ("importers", name)
    if key not in memo:
        pieces = model.project.importer_pieces(model.path) if hasattr(model.project, "importer_pieces") else {}
        call = re.compile(rf"\b{re.escape(name)}\s*\(")
        memo[key] = any("DataParallel" in piece and call.search(piece) for piece in pieces.values())
    return memo[key]


def _held_by_project_callers(model: SemanticModel, param: cst.Param) -> Optional[Wrapping]:
    """The wrapping a parameter holds when its function is called from the project's other
    files (`train(model, ...)` in `main.py` after `model = DDP(model)`) and every such call
    passes a wrapper on some path: the callers' values, as the flow model follows them (names,
    branches, factories, `self.x`). None when one caller passes no wrapper or callers are
    unknown (the function escapes, or the file is linted alone)."""
    if model.project is None:
        return None
    binding = next((b for b in model.bindings_by_node.get(param, ()) if b.node is param), None)
    per_caller = model.flow.values_per_caller(binding) if binding is not None else None
    if not per_caller:
        return None
    found = None
    for values in per_caller:
        wrapping = next((w for w in (wrapping_built_by(v.model, v.expr) for v in values if v.known) if w is not None), None)
        if wrapping is None:
            return None
        found = found or wrapping
    return found


def _held_bindings(model: SemanticModel, bindings: list[Binding], by_call: dict[cst.Call, Wrapping]) -> Optional[Wrapping]:
    for binding in bindings:
        if isinstance(binding.node, cst.Param):
            found = _held_by_every_caller(model, binding.node, by_call, _MAX_DEPTH)
            if found is not None:
                return found
    return _held(model, [b.value for b in bindings if b.value is not None], by_call)


@dataclass(frozen=True)
class InnerUse:
    """An expression that reaches the model inside a wrapper instead of the wrapper."""

    wrapping: Wrapping
    wrapper: Optional[cst.BaseExpression]  # `model_dp` in `model_dp.module`; None for the inner name
    alias: Optional[Binding] = None  # the binding `core = net.module` of an alias: no fix is offered


def inner_model_use(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> Optional[InnerUse]:
    """What reaches the model inside a wrapper: `model` after `model_dp = DP(model)` (same
    function, or `self.x` of the same class); `wrapper.module` on a name or attribute that holds
    a wrapper on some path (`held_wrapper`); or a name bound to such a `wrapper.module` while the
    wrapper's own name still holds the wrapper (`core = net.module` ... `core.train()`)."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "module":
        wrapping = held_wrapper(model, expr.value)
        named = model.binding_key(expr.value, at) is not None or names_an_entry(model, expr.value, at)
        if wrapping is not None and named:
            return InnerUse(wrapping, expr.value)
        return None
    key = model.binding_key(expr, at)
    if key is None:
        return None
    alias = _alias_of_inner(model, key, at)
    if alias is not None:
        return alias
    wrapping = _wrapping_of_inner(model, key, at)
    if wrapping is None or wrapping.wrapper_key is None or wrapping.binding is None:
        return None
    here = model.scope(at)
    if key.startswith("self."):
        # Methods run in any order: the attribute must be set nowhere but where it is wrapped.
        bound_elsewhere = any(
            model.scope(b.node) is not wrapping.scope
            for b in model.bindings.get(key, ())
            if b.scope is here.class_scope
        )
        same = here.class_scope is not None and wrapping.scope.class_scope is here.class_scope and not bound_elsewhere
    else:
        same = wrapping.scope is here
    return InnerUse(wrapping, None) if same else None


def names_an_entry(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`nets["G"]`: an entry of a named container, which names one object as a name does (what
    it holds is the flow model's answer, asked by the callers)."""
    return isinstance(expr, cst.Subscript) and model.binding_key(expr.value, at) is not None


def _alias_of_inner(model: SemanticModel, key: str, at: cst.CSTNode) -> Optional[InnerUse]:
    """`core` after `core = net.module` (or `net.module if isinstance(net, DDP) else net`)."""
    for binding in reaching_bindings(model, key, at):
        for value in _branches(binding.value):
            if not (isinstance(value, cst.Attribute) and value.attr.value == "module"):
                continue
            wrapper_key = model.binding_key(value.value, value)
            if wrapper_key is None or wrapper_key == key:
                continue  # `model = model.module`: the name no longer holds the wrapper
            wrapping = held_wrapper(model, value.value)
            if wrapping is not None and held_wrapper_of_key(model, wrapper_key, at) is wrapping:
                return InnerUse(wrapping, value.value, alias=binding)
    return None


def _wrapping_of_inner(model: SemanticModel, key: str, at: cst.CSTNode) -> Optional[Wrapping]:
    """The wrapping that wrapped the very object `key` holds at `at`, into another name
    (`model_dp = nn.DataParallel(model)` ... `model.train()`); None after `model = DDP(model)`."""
    live = model.binding_at(key, at)
    position = model.order(at)
    found = None
    for wrapping in wrappings(model):
        if wrapping.inner_key != key or wrapping.rebinds or wrapping.order >= position:
            continue
        if model.binding_at(key, wrapping.call) is live and not exclusive_paths(model, wrapping.call, at):
            found = wrapping
    return found


def exclusive_paths(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether no run of the function reaches both nodes: they sit in the two branches of one
    `if`, or under two `if`s with the same test taken opposite ways
    (`if multi_gpu: dp = DP(net)` ... `if not multi_gpu: out = net(x)`)."""
    return bool(separating_tests(model, first, second))


def separating_tests(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> list[cst.BaseExpression]:
    """The tests (around `first`) that put the two nodes on exclusive paths (see
    exclusive_paths): the one `if` whose two branches hold them, or else the `if`s around
    `first` whose test the other node needs answered the other way. Empty when none does."""
    first_conditions = _path_conditions(model, first)
    second_conditions = _path_conditions(model, second)
    found = [node.test for node, (_, truth) in first_conditions.items()
             if node in second_conditions and second_conditions[node][1] != truth]
    if found:
        return found
    tests = {test: truth for test, truth in first_conditions.values()}
    opposite = {test for test, truth in second_conditions.values() if test in tests and tests[test] != truth}
    return [node.test for node, (test, _) in first_conditions.items() if test in opposite]


def choice_fixed_for_the_loop(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether the `if` that puts two nodes on exclusive paths answers alike on every
    iteration of a loop around both: its test reads only names and attributes the loop never
    binds (a parameter, `config.use_amp`) and calls nothing. Such a choice is made once for
    the run, not per step (`if (step + 1) % accumulate:` reads the loop's counter; `if sync:`
    with no loop in the function is its callers' choice, per call: not fixed)."""
    loops = [loop for loop in loops_around(model, first) if loop in loops_around(model, second)]
    if not loops:
        return False
    tests = separating_tests(model, first, second)
    if not tests:
        return False
    bound = _bound_in(model, loops[-1])
    for test in tests:
        for node in subtree(test):
            if isinstance(node, cst.Call):
                return False
            if isinstance(node, (cst.Name, cst.Attribute)) and model.code(node).strip() in bound:
                return False
    return True


def loops_around(model: SemanticModel, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The For/While loops whose body holds `node`, in the same function, outermost first."""
    loops = []
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.For, cst.While)) and ancestor.body is child:
            loops.append(ancestor)
        child = ancestor
    return loops[::-1]


def _bound_in(model: SemanticModel, loop: cst.CSTNode) -> set[str]:
    """The code of every name and attribute the loop binds: its target, assignments, `with
    ... as`, walrus and inner loops' targets."""
    bound: set[str] = set()
    targets = [loop.target] if isinstance(loop, cst.For) else []
    for node in subtree(loop.body):
        if isinstance(node, cst.Assign):
            targets += [target.target for target in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
            targets.append(node.target)
        elif isinstance(node, (cst.AsName, cst.NamedExpr)):
            targets.append(node.name if isinstance(node, cst.AsName) else node.target)
    for target in targets:
        for part in subtree(target):
            if isinstance(part, (cst.Name, cst.Attribute)):
                bound.add(model.code(part).strip())
    return bound


def _path_conditions(model: SemanticModel, node: cst.CSTNode) -> dict[cst.CSTNode, tuple[str, bool]]:
    """The `if` statements and `a if test else b` expressions around a node in its function,
    with their test's code and the branch (True for the body) that holds it; `not x` is read as
    `x` taken the other way."""
    conditions: dict[cst.CSTNode, tuple[str, bool]] = {}
    child: cst.CSTNode = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            truth = child is ancestor.body
            test = ancestor.test
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, truth = test.expression, not truth
            conditions[ancestor] = (model.code(test).strip(), truth)
        child = ancestor
    return conditions


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
