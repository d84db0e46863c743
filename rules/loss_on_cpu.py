"""DPL003 loss-on-cpu: the back-propagated loss is computed from tensors copied to the host."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, literal_value
from dplint.training import feeds_backward, host_moves, loss_calls, loss_inputs, uses_accelerator


class LossOnCpu(Rule):
    """
    ## What it does
    Flags `.cpu()`, `.to("cpu")`, `.to(torch.device("cpu"))` or `.to(device)` with `device`
    always a CPU device, applied to a tensor that goes into a loss call whose result is
    back-propagated: `loss = criterion(out.cpu(), y.cpu())` then `loss.backward()`.

    A loss call is a call to a `torch.nn.*Loss` (or other `*Loss` class) instance, a
    `torch.nn.functional` loss such as `F.cross_entropy`, or a call named like a loss
    (`compute_loss(...)`, `self.criterion(...)`, `loss, acc = model.loss(...)`) whose result is
    itself back-propagated. Back-propagated means that its value reaches, through names (every
    binding that may reach the read), `self.x` attributes, arithmetic and the returns of
    same-file functions and methods, one of: `.backward()`, `scaler.scale(...).backward()`,
    `accelerator.backward(...)`, `torch.autograd.backward/grad(...)`, Lightning's
    `self.manual_backward(...)`, the return of a Lightning `training_step`, or the return of
    the `forward` of a loss module (an `nn.Module` named like a loss, or a `_Loss` subclass),
    which its caller back-propagates.

    The copy is found inside the loss call and, in a file that uses an accelerator (moves
    something to CUDA, queries it, or defines a Lightning module), also through a name that
    holds it (`out_host = out.float().cpu()` ... `criterion(out_host, y)`, flagged at the
    `.cpu()`) and in the argument that a caller passes to a same-file helper computing the
    loss from its parameter, when that call's result is back-propagated.

    Stays silent on: losses under `torch.no_grad()`, losses only logged or computed after
    `backward()` for metrics, `validation_step` and other Lightning hooks, `.cpu()` on the
    model's *input* (`criterion(model(x.cpu()), y)`), a CPU device name in a file that never
    uses an accelerator, and values that come from other files or from globals read in a
    function.

    ## Why is this bad?
    The results are the same: the loss value and the gradients are identical, because
    autograd flows back through the copy (`ToCopyBackward0`). The cost is on every step: on
    a GPU each `.cpu()` is a blocking device-to-host copy that synchronises the stream
    (`Tensor.cpu()` has no `non_blocking`), the loss then runs on the CPU, and backward adds
    a host-to-device copy of the gradient of every copied tensor that needs one. Metrics
    computed on host copies *after* `backward()` cost nothing extra per step and are not
    flagged.

    ## Example
    ```python
    loss = criterion(outputs.cpu(), labels.cpu())
    loss.backward()
    ```

    Use instead:
    ```python
    loss = criterion(outputs, labels)
    loss.backward()
    accuracy = (outputs.argmax(1) == labels).float().mean().item()  # metrics after backward
    ```

    ## Fix safety
    The fix removes the `.cpu()` / `.to("cpu")` calls written inside the loss call, all of them
    at once; a copy held in a name or made by a caller is reported without a fix (the name
    may have other uses). It is unsafe: some losses were CPU-only (CTC in older torch, some MPS workarounds)
    and a custom loss may rely on CPU inputs, so the result may no longer run. No fix is
    offered when an input of the loss is not copied to the host in the call (it already
    lives there, e.g. labels from a CPU loader: dropping the other copies would mix
    devices), nor for a move with other arguments (`.to("cpu", torch.float64)`) or with a
    comment inside.
    For CTC losses only `log_probs` is checked: some backends expect its integer targets
    and lengths on the CPU.
    """

    code = "DPL003"
    name = "loss-on-cpu"
    severity = Severity.WARNING
    summary = "back-propagated loss computed on host copies: a blocking device-to-host copy every step"
    fix_applicability = Applicability.UNSAFE
    # A back-propagated loss computed on host copies: `.cpu()`, or a "cpu" device literal
    # (`.to("cpu")`, `torch.device("cpu")`, a name bound to one).
    # Back-propagated: `backward`, a Lightning `training_step`, or a loss module's `forward`.
    # Written out: the pre-filter reads this literal without importing the rule.
    # (`manual_backward` contains `backward`.)
    tokens = (
        ('backward', 'cpu()'), ('backward', '"cpu'), ('backward', "'cpu"),
        ('training_step', 'cpu()'), ('training_step', '"cpu'), ('training_step', "'cpu"),
        ('def forward', 'cpu()'), ('def forward', '"cpu'), ('def forward', "'cpu"),
        ('autograd', 'cpu()'), ('autograd', '"cpu'), ('autograd', "'cpu"),
    )

    VALID = (
        # Metrics on host copies after backward().
        "import torch.nn as nn\n"
        "criterion = nn.CrossEntropyLoss()\n"
        "loss = criterion(out, y)\n"
        "loss.backward()\n"
        "val = criterion(out.detach().cpu(), y.cpu()).item()\n",
        # `.cpu()` on the model's input, not on the loss's: not this rule's business.
        "import torch.nn.functional as F\n"
        "loss = F.cross_entropy(model(x.cpu()), y)\n"
        "loss.backward()\n",
        # A loss on host copies that is never back-propagated (validation).
        "import torch\n"
        "criterion = torch.nn.MSELoss()\n"
        "with torch.no_grad():\n"
        "    val_loss = criterion(pred.cpu(), target.cpu())\n",
        # A call that is not a loss: the result is back-propagated, but `model` is no loss.
        "loss = model(x.cpu(), y.cpu())\n"
        "loss.backward()\n",
        # A host copy held in a name, used only for a metric after backward().
        "import torch.nn.functional as F\n"
        "loss, acc = model.loss(emb, labels)\n"
        "loss.backward()\n"
        "acc_host = acc.cpu()\n"
        "history.append(F.l1_loss(out.detach().cpu(), y.cpu()).item())\n",
        # A Lightning validation step: its return is not back-propagated.
        "import lightning.pytorch as pl\n"
        "import torch.nn.functional as F\n"
        "class Model(pl.LightningModule):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        x, y = batch\n"
        "        return F.mse_loss(self(x).cpu(), y.cpu())\n",
        # `device` is not always the CPU.
        "import torch\n"
        "device = torch.device('cpu')\n"
        "if torch.cuda.is_available():\n"
        "    device = torch.device('cuda')\n"
        "loss = torch.nn.functional.mse_loss(out.to(device), y.to(device))\n"
        "loss.backward()\n",
    )
    INVALID = (
        Example(
            "import torch.nn as nn\n"
            "criterion = nn.CrossEntropyLoss()\n"
            "loss = criterion(outputs.cpu(), labels.cpu())\n"
            "loss.backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "criterion = nn.CrossEntropyLoss()\n"
                "loss = criterion(outputs, labels)\n"
                "loss.backward()\n"
            ),
            count=2,
        ),
        Example(
            "import torch\n"
            "import torch.nn.functional as F\n"
            "scaler.scale(F.mse_loss(pred.float().to(torch.device('cpu')), target.to('cpu')) / 4).backward()\n",
            expected=(
                "import torch\n"
                "import torch.nn.functional as F\n"
                "scaler.scale(F.mse_loss(pred.float(), target) / 4).backward()\n"
            ),
            count=2,
        ),
        # A CPU device held in a variable, in a script that uses CUDA.
        Example(
            "import torch\n"
            "host = torch.device('cpu')\n"
            "model.cuda()\n"
            "loss = compute_loss(out.to(host), y.to(host))\n"
            "accelerator.backward(loss)\n",
            expected=(
                "import torch\n"
                "host = torch.device('cpu')\n"
                "model.cuda()\n"
                "loss = compute_loss(out, y)\n"
                "accelerator.backward(loss)\n"
            ),
            count=2,
        ),
        # `labels` stays on the host (a CPU loader): dropping `.cpu()` alone would mix devices.
        Example(
            "import torch.nn as nn\n"
            "criterion = nn.MSELoss()\n"
            "for images, labels in loader:\n"
            "    outputs = model(images.cuda())\n"
            "    loss = criterion(outputs.cpu(), labels)\n"
            "    loss.backward()\n",
            expected=None,
        ),
        # A host copy held in a name: reported at the copy, not fixed.
        Example(
            "import torch\n"
            "import torch.nn.functional as F\n"
            "for x, y in loader:\n"
            "    out_host = model(x.cuda()).float().cpu()\n"
            "    loss = F.smooth_l1_loss(out_host, y)\n"
            "    loss.backward()\n",
            expected=None,
        ),
        # Lightning back-propagates what `training_step` returns.
        Example(
            "import pytorch_lightning as pl\n"
            "import torch.nn as nn\n"
            "class Model(pl.LightningModule):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.criterion = nn.BCEWithLogitsLoss()\n"
            "    def training_step(self, batch, batch_idx):\n"
            "        x, y = batch\n"
            "        loss = self.criterion(self(x).cpu(), y.float().cpu())\n"
            "        return loss\n",
            expected=(
                "import pytorch_lightning as pl\n"
                "import torch.nn as nn\n"
                "class Model(pl.LightningModule):\n"
                "    def __init__(self):\n"
                "        super().__init__()\n"
                "        self.criterion = nn.BCEWithLogitsLoss()\n"
                "    def training_step(self, batch, batch_idx):\n"
                "        x, y = batch\n"
                "        loss = self.criterion(self(x), y.float())\n"
                "        return loss\n"
            ),
            count=2,
        ),
        # A loss returned by a helper and back-propagated by its caller.
        Example(
            "import torch.nn.functional as F\n"
            "def masked_loss(logits, target):\n"
            "    return F.binary_cross_entropy_with_logits(logits.cpu(), target.cpu())\n"
            "def step(model, x, y):\n"
            "    masked_loss(model(x), y).backward()\n",
            expected=(
                "import torch.nn.functional as F\n"
                "def masked_loss(logits, target):\n"
                "    return F.binary_cross_entropy_with_logits(logits, target)\n"
                "def step(model, x, y):\n"
                "    masked_loss(model(x), y).backward()\n"
            ),
            count=2,
        ),
        # Other arguments to `.to(...)`: reported, not fixed.
        Example(
            "import torch\n"
            "loss = torch.nn.L1Loss()(out.to('cpu', torch.float64), y)\n"
            "loss.backward()\n",
            expected=None,
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        found: dict[cst.Call, tuple[str, Optional[Fix]]] = {}
        # A copy made away from the loss call counts only in a file that uses an accelerator:
        # CPU-only scripts write `.cpu()` defensively, and there it moves nothing.
        indirect = None
        for call in loss_calls(model):
            callee = model.code(call.func)
            moves_by_input = []
            for tensor in _tensor_inputs(model, call):
                moves = []
                for move in host_moves(model, tensor):
                    if not _inside(model, move, call):
                        if indirect is None:
                            indirect = uses_accelerator(model)
                        if not (indirect and feeds_backward(model, move)):
                            continue
                    moves.append(move)
                moves_by_input.append(moves)
            fix = _drop_moves(model, call, callee, moves_by_input)
            for move in (move for moves in moves_by_input for move in moves):
                if move not in found or (found[move][1] is None and fix is not None):
                    found[move] = (callee, fix)
        for move in sorted(found, key=model.order):
            callee, fix = found[move]
            yield Violation(
                move,
                f"`{_move_text(model, move)}` copies a tensor to the host for the loss `{callee}(...)`, "
                f"whose result is back-propagated: the loss and gradients are the same, but on a GPU every "
                f"step pays a blocking device-to-host copy here (and, for a tensor that needs grad, a "
                f"host-to-device copy of its gradient in backward()); compute the loss on the device and "
                f"copy only metrics, after backward()",
                fix,
            )


def _inside(model: SemanticModel, node: cst.CSTNode, call: cst.Call) -> bool:
    return any(ancestor is call for ancestor in model.ancestors(node))


# Loss options that are never tensors: a name there does not say where the loss's inputs live.
LOSS_OPTIONS = {
    "reduction", "reduce", "size_average", "ignore_index", "label_smoothing", "beta", "delta", "margin",
    "p", "eps", "swap", "log_input", "full", "blank", "zero_infinity", "log_target", "distance_function",
}


def _tensor_inputs(model: SemanticModel, call: cst.Call) -> list[cst.BaseExpression]:
    options = {arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value in LOSS_OPTIONS}
    return [value for value in loss_inputs(model, call) if value not in options and not _is_literal(value)]


def _is_literal(expr: cst.BaseExpression) -> bool:
    try:
        literal_value(expr)
    except ValueError:
        return False
    return True


def _move_text(model: SemanticModel, move: cst.Call) -> str:
    arguments = ", ".join(
        (f"{arg.keyword.value}=" if arg.keyword is not None else "") + model.code(arg.value) for arg in move.args
    )
    return f".{move.func.attr.value}({arguments})"


def _drop_moves(model: SemanticModel, call: cst.Call, callee: str, moves_by_input: list[list[cst.Call]]) -> Optional[Fix]:
    """Drop every host copy inside the loss call at once, or none: when one input is left on the
    host (`criterion(out.cpu(), labels)` with `labels` from a CPU loader), dropping the others
    would mix devices and raise. A copy held in a name (`out_host = out.cpu()`) or made by a
    caller is not dropped: the name may serve other uses."""
    if not moves_by_input or any(len(moves) != 1 for moves in moves_by_input):
        return None
    if not all(_inside(model, moves[0], call) for moves in moves_by_input):
        return None
    moves = [moves[0] for moves in moves_by_input]
    if not all(_droppable(model, move) for move in moves):
        return None
    # Each edit spans a call without its own parentheses, which therefore stay.
    edits = tuple(Edit(move, move.func.value) for move in moves)
    return Fix(Applicability.UNSAFE, f"Compute `{callee}(...)` on the device: drop its host copies", edits)


def _droppable(model: SemanticModel, move: cst.Call) -> bool:
    """`out.cpu()` -> `out` removes nothing but the move (no other argument, no comment)."""
    if move.func.attr.value == "cpu" and move.args:
        return False
    if move.func.attr.value == "to" and len(move.args) != 1:
        return False
    removed = move.with_changes(func=move.func.with_changes(value=cst.Name("_")))
    return "#" not in model.code(removed)
