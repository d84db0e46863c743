"""DPL012 scalar-gather: a DataParallel module whose forward returns a 0-d loss, back-propagated as is."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.gathered_values import (
    DISPROVEN, WHOLE, forward_loss, gathered_results, gathering_constructions, has_explicit_gradient,
    retried_on_reduced,
)
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel
from dplint.training import backprops

GATHER = (
    "with 2+ GPUs nn.DataParallel gathers one per GPU into a vector (\"Was asked to gather along "
    "dimension 0, but all input tensors were scalars\") and `backward()` raises `RuntimeError: grad "
    "can be implicitly created only for scalar outputs`; on one device nothing shows."
)


class ScalarGather(Rule):
    """
    ## What it does
    Flags the call of an `nn.DataParallel` wrapper whose gathered result is back-propagated
    as it is -- `loss = dp(x); loss.backward()`, `dp(x).backward()`,
    `scaler.scale(loss).backward()`, a part of it (`l1, l2 = dp(x)`,
    `out = dp(x); out["loss"].backward()`, `preds, losses = dp(x); losses[0]`: the gather
    maps over tuples, lists and dicts, nested too), or a term of a sum
    (`loss = dp_criterion(out, y) + 0.5 * aux`).

    The evidence is the call site: `backward()` without a gradient only works on a
    one-element tensor, so each replica returns a one-element loss there, and the gather
    makes a vector of them. The wrapped module's `forward`, where the rule can read it,
    either names the reduction (then the fix appends it) or refutes the call site:

    - it names it when every return the call site allows gives a 0-d loss in the part that
      is used: one of torch's `*Loss` modules with a mean or sum reduction,
      `F.cross_entropy(out, y)`, `(out - y).pow(2).mean()`, `self.criterion(out, y)`, a
      helper (function or method, of this file or another) whose every return is one, a
      sum or scaling of them; a return the call site rules out does not count
      (`preds, losses = dp(x)` cannot be the `return preds, stds, anchors` path);
    - it refutes it when no allowed return can be a one-element loss: each keeps a
      dimension (`x.mean(dim=0)`, `reduction="none"`, an input of `forward` returned as
      is), is a container, or is unpacked otherwise; or the module is a torch loss with
      `reduction="none"`, or indexed (`dp_loss(x, y)[0]`). Then the rule says nothing.
    - Otherwise (a module built by a registry or a config, another library, a forward
      whose loss is built in ways not followed, such as `total += ...` in a loop), the
      call site alone is the evidence, and nothing is fixed.

    The wrapper is found on every path where it is held: a name, a `self.x` attribute set in
    another method or by a project base class (`if len(device_ids) > 1: self.model =
    nn.DataParallel(self.model)` in another file's `BaseTrainer.__init__`), a parameter whose callers (in this file or another) pass it, a function
    (of this file or another) that returns `nn.DataParallel(...)`, a helper that returns its
    argument, an element taken by a literal index from a list or `nn.ModuleList` built by a
    display and `append` statements (`criteria[1]`), or a subclass of `nn.DataParallel` of
    the project that keeps torch's `forward` and `gather`, or of mmcv (`MMDataParallel`) or
    PyG (`torch_geometric.nn.DataParallel`), which gather as torch does.

    Silent when `device_ids` names one device, when the result is reduced (`.mean()`,
    `.sum()`, `torch.mean`) before `backward()` -- also on some path only
    (`if n_gpu > 1: loss = loss.mean()`: the author handles the gather), or in the handler
    of a `try:` around the `backward()` that catches its RuntimeError (`except
    RuntimeError: loss.mean().backward()`: a retry on the reduced loss) -- when it goes
    through a call the rule does not know (`reduce_loss(dp(x))`), when it is
    back-propagated with an explicit gradient, when the module's `forward` refutes the call
    site (above), for an element of a list changed otherwise than by `append` statements in
    the block that built it, and for project subclasses that define their own `forward` or
    `gather` (PyTorch-Encoding's `DataParallelModel` returns the replicas' outputs
    ungathered). A file that neither names `DataParallel` nor imports a definition that
    does is not read (the pre-filter): a training function handed the wrapper by a caller
    in another file is only checked when its own file or imports name it.

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
    gradient, and with 2+ GPUs the code it changes raises today. It is offered only when the
    whole result is back-propagated and the forward names its reduction; a part of the
    result (a tuple has no `.mean()`) or a module out of sight is reported, not fixed.
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
        # A module out of sight, its gathered losses averaged on the multi-GPU path.
        "import torch.nn as nn\n"
        "from transformers import AutoModel\n"
        "model = nn.DataParallel(AutoModel.from_pretrained(name))\n"
        "loss = model(**batch)[0]\n"
        "if n_gpu > 1:\n"
        "    loss = loss.mean()\n"
        "loss.backward()\n",
    )
    INVALID = (
        # A wrapped criterion kept in an nn.ModuleList and taken out by index; its forward's
        # losses are summed in a loop (not followed): the call site is the evidence.
        Example(
            "import torch.nn as nn\n"
            "from losses import PairLoss\n"
            "criteria = nn.ModuleList([nn.CrossEntropyLoss()])\n"
            "criteria.append(nn.DataParallel(PairLoss()))\n"
            "pair, _ = criteria[1](a, b)\n"
            "(criteria[0](logits, y) + pair).backward()\n",
            expected=None,
        ),
        # A module from a registry: backward() on its gathered output is the evidence (no fix:
        # whether its losses are means or sums is out of sight).
        Example(
            "import torch.nn as nn\n"
            "from models import build_model\n"
            "model = nn.DataParallel(build_model(cfg)).cuda()\n"
            "loss_rec, loss_kl = model(x)\n"
            "(loss_rec + loss_kl).backward()\n",
            expected=None,
        ),
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
            if has_explicit_gradient(backprop.site.node, backprop.site.qualified_name):
                continue  # `loss.backward(torch.ones_like(loss))` works on a vector
            if retried_on_reduced(model, backprop.site.node):
                continue  # `try: loss.backward()` / `except RuntimeError: loss.mean().backward()`
            for root in backprop.roots:
                for call, element, anchor in gathered_results(model, root, backprop.site.node):
                    verdict = None if call in flagged else _verdict(model, call, element)
                    if verdict is not None:
                        flagged.add(call)
                        yield _violation(call, element, anchor, *verdict)


def _verdict(model: SemanticModel, call: cst.Call, element: object) -> Optional[tuple[Optional[str], Optional[str]]]:
    """(class name, reduction) to report `call`, or None to stay silent: `call` holds a
    DataParallel that gathers over 2+ devices, and no wrapped module's forward refutes that
    `element` of its result is a loss. The class name is None when no forward shows a 0-d
    loss and the call site alone is the evidence."""
    constructions = gathering_constructions(model, call)
    if not constructions:
        return None
    proven: Optional[tuple[str, str]] = None
    for cmodel, inner, at in constructions:
        forward = forward_loss(cmodel, inner, at, element)
        if forward is DISPROVEN:
            return None  # what reaches backward cannot be this module's loss: say nothing
        if forward is not None and proven is None:
            proven = forward
    return proven if proven is not None else (None, None)


def _violation(call: cst.Call, element: object, anchor: cst.CSTNode,
               class_name: Optional[str], reduction: Optional[str]) -> Violation:
    if class_name is not None:
        what = f"`{class_name}.forward` returns a 0-d loss" + ("" if element == WHOLE else " in its result")
        advice = f" Reduce the gathered losses here with `.{reduction}()`"
    else:
        # The module comes from code the project does not show: the call site is the evidence.
        what = (
            "the result of this DataParallel call is back-propagated as it is, so each replica returns "
            "a one-element loss"
        )
        advice = " Reduce the gathered losses (`.mean()`, or `.sum()` for summed losses) before `backward()`"
    fix = None
    if element == WHOLE and reduction is not None:
        fix = Fix(
            Applicability.SAFE,
            f"Append `.{reduction}()` to the DataParallel call",
            (Edit(call, cst.Call(func=cst.Attribute(value=call, attr=cst.Name(reduction)))),),
        )
    return Violation(node=anchor, message=f"{what}: {GATHER}{advice}", fix=fix)
