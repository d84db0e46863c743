"""DPL012 scalar-gather: a DataParallel module whose forward returns a 0-d loss, back-propagated as is."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import resolve
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, Wrapping, argument, keyword_arg, literal_value, method_call, own_returns, peel_self_returning
from dplint.training import AUTOGRAD_BACKWARD, FUNCTIONAL_LOSS_NAMES, backprops, construction_argument, held_wrapper

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
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
MAX_DEPTH = 6


class ScalarGather(Rule):
    """
    ## What it does
    Flags the call of an `nn.DataParallel` wrapper whose module is one of torch's `*Loss`
    modules with a mean or sum reduction, or whose `forward` (a class defined in the same
    file) returns a 0-d loss on every path -- `return F.cross_entropy(out, y)`,
    `return loss` with `loss = self.criterion(out, y)`, `return (out - y).pow(2).mean()` --
    when that result is back-propagated as it is: `loss = dp(x); loss.backward()`,
    `dp(x).backward()`, `scaler.scale(loss).backward()`, or as a term of a sum
    (`loss = dp_criterion(out, y) + 0.5 * aux`).

    The wrapper is found where it is held on some path: a name, a `self.x` attribute set in
    another method, a same-file (or project) function that returns
    `nn.DataParallel(module)` of its argument, a helper that returns its argument, or a
    project subclass of `nn.DataParallel`. Silent when the module's class is unknown (another
    file, a parameter), when `device_ids` names one device, when the gathered value is
    reduced (`.mean()`, `.sum()`) or back-propagated with an explicit gradient.

    ## Why is this bad?
    With 2+ GPUs, `DataParallel.forward` runs one replica per GPU and gathers their outputs
    along dimension 0. Each replica returns a 0-d tensor, and gathering scalars
    (torch 2.13 `torch/nn/parallel/_functions.py`, `Gather.forward`) warns

        UserWarning: Was asked to gather along dimension 0, but all input tensors were
        scalars; will instead unsqueeze and return a vector.

    and returns a vector of one loss per GPU. `loss.backward()` on it then raises
    `RuntimeError: grad can be implicitly created only for scalar outputs` (and `loss.item()`
    fails too). On the CPU or one GPU `DataParallel` calls the module directly and returns the
    0-d loss, so the script works in development and breaks on the multi-GPU machine.

    ## Example
    ```python
    class Net(nn.Module):
        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y)

    model = nn.DataParallel(Net().cuda())
    loss = model(x, y)
    loss.backward()
    ```

    Use instead:
    ```python
    loss = model(x, y).mean()
    loss.backward()
    ```

    ## Fix safety
    The fix reduces at the call site (`loss = model(x, y).mean()`) rather than at the
    `backward()` call, so that every later use of the name (`loss.item()`, logging, the
    backward) sees one number, as on a single device. It appends `.mean()` to the call, or
    `.sum()` when the forward returns a sum (`.sum()`, `reduction="sum"`): the mean of the
    replicas' means (or the sum of their sums) is the loss of the whole batch, as one device
    computes it (for the mean, exactly when the batch splits evenly across the GPUs). It is
    safe: on one device the 0-d result's `.mean()`/`.sum()` is the same value with the same
    gradient, and with 2+ GPUs the code it changes raises today.
    """

    code = "DPL012"
    name = "scalar-gather"
    severity = Severity.WARNING
    summary = "DataParallel forward returns a 0-d loss: a vector on 2+ GPUs, backward() raises"
    fix_applicability = Applicability.SAFE
    tokens = (("DataParallel", "backward"),)  # the gathered loss is back-propagated

    VALID = (
        # Already reduced at the call site.
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return F.cross_entropy(self.fc(x), y)\n"
        "model = nn.DataParallel(Net())\n"
        "loss = model(x, y).mean()\n"
        "loss.backward()\n",
        # The forward returns logits; the loss is computed after the gather.
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "model = nn.DataParallel(Net())\n"
        "loss = nn.CrossEntropyLoss()(model(x), y)\n"
        "loss.backward()\n",
        # reduction="none" keeps the batch dimension: the gather concatenates it.
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return F.cross_entropy(self.fc(x), y, reduction='none')\n"
        "model = nn.DataParallel(Net())\n"
        "model(x, y).mean().backward()\n",
        # A module defined elsewhere: its forward is unknown.
        "import torch.nn as nn\n"
        "from models import LossNet\n"
        "model = nn.DataParallel(LossNet())\n"
        "loss = model(x, y)\n"
        "loss.backward()\n",
    )
    INVALID = (
        # The wrapper comes from a same-file helper and lives in an attribute.
        Example(
            "import torch.nn as nn\n"
            "import torch.nn.functional as F\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x, y):\n"
            "        return F.mse_loss(self.fc(x), y)\n"
            "def parallel(m):\n"
            "    return nn.DataParallel(m).cuda()\n"
            "class Trainer:\n"
            "    def __init__(self):\n"
            "        self.model = parallel(Net())\n"
            "    def step(self, x, y):\n"
            "        loss = self.model(x, y)\n"
            "        loss.backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "import torch.nn.functional as F\n"
                "class Net(nn.Module):\n"
                "    def forward(self, x, y):\n"
                "        return F.mse_loss(self.fc(x), y)\n"
                "def parallel(m):\n"
                "    return nn.DataParallel(m).cuda()\n"
                "class Trainer:\n"
                "    def __init__(self):\n"
                "        self.model = parallel(Net())\n"
                "    def step(self, x, y):\n"
                "        loss = self.model(x, y).mean()\n"
                "        loss.backward()\n"
            ),
        ),
        Example(
            "import torch.nn as nn\n"
            "import torch.nn.functional as F\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x, y):\n"
            "        return F.cross_entropy(self.fc(x), y)\n"
            "model = nn.DataParallel(Net().cuda())\n"
            "loss = model(x, y)\n"
            "loss.backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "import torch.nn.functional as F\n"
                "class Net(nn.Module):\n"
                "    def forward(self, x, y):\n"
                "        return F.cross_entropy(self.fc(x), y)\n"
                "model = nn.DataParallel(Net().cuda())\n"
                "loss = model(x, y).mean()\n"
                "loss.backward()\n"
            ),
        ),
        Example(
            "import torch\n"
            "from torch.nn import DataParallel\n"
            "class WithLoss(torch.nn.Module):\n"
            "    def __init__(self, net):\n"
            "        super().__init__()\n"
            "        self.net = net\n"
            "        self.criterion = torch.nn.MSELoss(reduction='sum')\n"
            "    def forward(self, x, y):\n"
            "        loss = self.criterion(self.net(x), y)\n"
            "        return loss\n"
            "wrapped = DataParallel(WithLoss(net))\n"
            "scaler.scale(wrapped(\n"
            "    x, y)).backward()\n",
            expected=(
                "import torch\n"
                "from torch.nn import DataParallel\n"
                "class WithLoss(torch.nn.Module):\n"
                "    def __init__(self, net):\n"
                "        super().__init__()\n"
                "        self.net = net\n"
                "        self.criterion = torch.nn.MSELoss(reduction='sum')\n"
                "    def forward(self, x, y):\n"
                "        loss = self.criterion(self.net(x), y)\n"
                "        return loss\n"
                "wrapped = DataParallel(WithLoss(net))\n"
                "scaler.scale(wrapped(\n"
                "    x, y).sum()).backward()\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        flagged: set[cst.Call] = set()
        for backprop in backprops(model):
            if _has_explicit_gradient(backprop.site.node, backprop.site.qualified_name):
                continue  # `loss.backward(torch.ones_like(loss))` works on a vector
            for call, wrapping in (held for root in backprop.roots for held in _wrapper_calls(model, root, backprop.site.node)):
                if call in flagged:
                    continue
                found = _scalar_forward(model, wrapping)
                if found is None:
                    continue
                class_name, reduction = found
                flagged.add(call)
                yield Violation(
                    node=call,
                    message=(
                        f"`{class_name}.forward` returns a 0-d loss: with 2+ GPUs nn.DataParallel gathers one "
                        "per GPU into a vector (\"Was asked to gather along dimension 0, but all input tensors "
                        "were scalars\") and `backward()` raises `RuntimeError: grad can be implicitly created "
                        "only for scalar outputs`; on one device nothing shows. "
                        f"Reduce the gathered losses here with `.{reduction}()`"
                    ),
                    fix=Fix(
                        Applicability.SAFE,
                        f"Append `.{reduction}()` to the DataParallel call",
                        (Edit(call, cst.Call(func=cst.Attribute(value=call, attr=cst.Name(reduction)))),),
                    ),
                )


def _has_explicit_gradient(call: cst.Call, qualified_name: Optional[str]) -> bool:
    if qualified_name == AUTOGRAD_BACKWARD:
        return argument(call, 1, "grad_tensors") is not None
    return argument(call, 0, "gradient") is not None


def _wrapper_calls(model: SemanticModel, root: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[cst.Call, Wrapping]]:
    """The calls of DataParallel wrappers whose gathered result `root` back-propagates as it is:
    `root` itself, through names, `scaler.scale(...)` and arithmetic (`nll(out, y) + 0.5 * aux`:
    a vector plus a number is still a vector); never through a reduction (`.mean()`)."""
    found: list[tuple[cst.Call, Wrapping]] = []
    stack: list[tuple[cst.BaseExpression, cst.CSTNode]] = [(root, at)]
    for _ in range(32):
        if not stack:
            break
        expr, where = stack.pop()
        method = method_call(expr) if isinstance(expr, cst.Call) else None
        if method is not None and method[1] == "scale" and len(expr.args) == 1:  # type: ignore[union-attr]
            stack.append((expr.args[0].value, where))  # type: ignore[union-attr]
            continue
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
            stack.extend(((expr.left, where), (expr.right, where)))
            continue
        value = model.value_at(expr, where)
        if value is not expr and isinstance(value, (cst.BinaryOperation, cst.Call)):
            stack.append((value, value))
            continue
        if not isinstance(value, cst.Call):
            continue
        wrapping = held_wrapper(model, value.func)
        if wrapping is not None and wrapping.kind == "DP" and not _single_device(model, wrapping):
            found.append((value, wrapping))
    return found


def _single_device(model: SemanticModel, wrapping: Wrapping) -> bool:
    """`device_ids=[0]`: DataParallel calls the module directly, nothing is gathered."""
    device_ids = construction_argument(model, wrapping, 1, "device_ids")
    return isinstance(device_ids, (cst.List, cst.Tuple)) and len(device_ids.elements) == 1


def _scalar_forward(model: SemanticModel, wrapping: Wrapping) -> Optional[tuple[str, str]]:
    """(class name, "mean" | "sum") when the wrapped module's forward always returns a 0-d loss."""
    inner, _, _ = resolve(model, wrapping.inner, wrapping.call, peel=True)
    if not isinstance(inner, cst.Call):
        return None
    torch_loss = model.qualified_name(inner.func) or ""
    if torch_loss.startswith("torch.nn.") and torch_loss.endswith("Loss"):
        # `nn.DataParallel(nn.NLLLoss(weight=w))`: torch's losses reduce to 0-d unless told not to.
        weight_first = torch_loss.rsplit(".", 1)[1] in WEIGHT_FIRST_LOSSES
        reduction = _loss_reduction(inner) if _positional_count(inner) <= weight_first else None
        return (torch_loss.rsplit(".", 1)[1], reduction) if reduction is not None else None
    if not isinstance(inner.func, cst.Name):
        return None
    class_name = inner.func.value
    class_def = model.classes.get(class_name)
    if class_def is None or any(b.node is not class_def for b in model.bindings.get(class_name, ())):
        return None
    forwards = [s for s in class_def.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"]
    if len(forwards) != 1:
        return None
    returns = own_returns(forwards[0])
    if not returns:
        return None
    reductions = {_reduction(model, statement.value, statement, MAX_DEPTH) for statement in returns}
    if None in reductions:
        return None
    return class_name, "sum" if reductions == {"sum"} else "mean"


def _reduction(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> Optional[str]:
    """"mean" / "sum" when `expr` is a 0-d loss or reduction; None when it isn't or we can't tell."""
    if expr is None or depth <= 0:
        return None
    if isinstance(expr, (cst.Name, cst.Attribute)):
        value, value_at, _ = resolve(model, expr, at)
        return None if value is None or value is expr else _reduction(model, value, value_at, depth - 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
        sides = [_reduction(model, side, at, depth - 1) for side in (expr.left, expr.right)]
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
        return _loss_reduction(expr) if _positional_count(expr) <= required else None
    if name in ("torch.mean", "torch.sum"):
        positional = [arg for arg in expr.args if arg.keyword is None]
        if len(positional) == 1 and not positional[0].star and _only_whole_tensor_keywords(expr):
            return name.rsplit(".", 1)[1]
        return None
    method = method_call(expr)
    if method is not None and method[1] in ("mean", "sum"):
        positional = [arg for arg in expr.args if arg.keyword is None]
        return method[1] if not positional and _only_whole_tensor_keywords(expr) else None
    loss_module = peel_self_returning(resolve(model, expr.func, expr)[0])
    if isinstance(loss_module, cst.Call):
        class_name = model.qualified_name(loss_module.func) or ""
        if class_name.startswith("torch.nn.") and class_name.endswith("Loss"):
            weight_first = class_name.rsplit(".", 1)[1] in WEIGHT_FIRST_LOSSES
            return _loss_reduction(loss_module) if _positional_count(loss_module) <= weight_first else None
    return None


def _loss_reduction(call: cst.Call) -> Optional[str]:
    """The reduction a loss function call or loss module construction asks for ("mean" by default)."""
    if any(keyword_arg(call, legacy) is not None for legacy in LEGACY_REDUCTION_ARGS) or any(arg.star for arg in call.args):
        return None
    reduction = keyword_arg(call, "reduction")
    if reduction is None:
        return "mean"
    try:
        return REDUCTIONS.get(literal_value(reduction.value))
    except ValueError:
        return None


def _positional_count(call: cst.Call) -> int:
    return sum(1 for arg in call.args if arg.keyword is None)


def _only_whole_tensor_keywords(call: cst.Call) -> bool:
    return all(arg.keyword is None or arg.keyword.value in WHOLE_TENSOR_KEYWORDS for arg in call.args)
