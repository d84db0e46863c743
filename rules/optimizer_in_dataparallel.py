"""DPL010 optimizer-in-dataparallel: `nn.DataParallel(optimizer)` / `DDP(optimizer)`."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SELF_RETURNING_METHODS, SemanticModel, Wrapping, argument, peel_self_returning
from dplint.training import is_construction, wrappings

# torch 2.13 `torch.optim.__all__` (the classes) and `torch.distributed.optim`'s optimizers.
OPTIMIZER_CLASSES = {
    "Adafactor", "Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "ASGD", "LBFGS", "Muon",
    "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam",
}
# (the long spelling `...zero_redundancy_optimizer.ZeroRedundancyOptimizer` is canonicalised
# to this one by the semantic model)
DISTRIBUTED_OPTIMIZERS = {"torch.distributed.optim.ZeroRedundancyOptimizer"}
# Submodules of torch.optim that are not optimizers (schedulers, averaged models).
NOT_OPTIMIZER_MODULES = {"lr_scheduler", "swa_utils"}
MAX_DEPTH = 8


def is_optimizer_construction(model: SemanticModel, call: cst.Call) -> bool:
    """`torch.optim.SGD(...)`, `optim.adam.Adam(...)`, `ZeroRedundancyOptimizer(...)`."""
    name = model.qualified_name(call.func)
    if name is None:
        return False
    if name in DISTRIBUTED_OPTIMIZERS:
        return True
    parts = name.split(".")
    if parts[:2] != ["torch", "optim"] or parts[-1] not in OPTIMIZER_CLASSES:
        return False
    return len(parts) == 3 or (len(parts) == 4 and parts[2] not in NOT_OPTIMIZER_MODULES)


class OptimizerInDataParallel(Rule):
    """
    ## What it does
    Flags `nn.DataParallel(optimizer)` and `DistributedDataParallel(optimizer)` where the
    argument is (or is a name bound to) a `torch.optim` optimizer, such as
    `torch.optim.SGD(...)` or `ZeroRedundancyOptimizer(...)`. Learning-rate schedulers are
    not optimizers and are not concerned. A project subclass of either wrapper counts, and so
    does a call of a same-file (or project) function that wraps its argument
    (`optimizer = to_gpus(torch.optim.Adam(...))` with `def to_gpus(m): return
    nn.DataParallel(m)`), reported at that call, without a fix. Silent when the argument is a
    parameter or comes from elsewhere.

    ## Why is this bad?
    The wrappers take a `Module`, and an optimizer is not one (re-checked on torch 2.13, CPU):
    - `nn.DataParallel(optimizer)` constructs without error on the CPU and on 2+ GPUs (on one
      GPU it raises `AttributeError: 'SGD' object has no attribute 'to'`). The wrapper has no
      parameters, so `wrapper.zero_grad()` silently clears nothing and gradients accumulate
      across steps; `wrapper.step()` raises
      `AttributeError: 'DataParallel' object has no attribute 'step'`; and
      `wrapper.state_dict()` is an empty dict, so checkpoints lose the optimizer's state.
    - `DistributedDataParallel(optimizer)` raises at construction:
      `AttributeError: 'SGD' object has no attribute 'named_parameters'`.

    An optimizer needs no wrapping: wrap the model, and build the optimizer from
    `wrapper.parameters()` (the same tensors as the inner model's).

    ## Example
    ```python
    model = nn.DataParallel(model)
    optimizer = torch.optim.Adam(model.parameters())
    optimizer = nn.DataParallel(optimizer)
    ```

    Use instead:
    ```python
    model = nn.DataParallel(model)
    optimizer = torch.optim.Adam(model.parameters())
    ```

    ## Fix safety
    The fix unwraps: the wrapper call (with any `.cuda()`/`.to(...)` chained on it) is
    replaced by its argument, and a statement that only rebinds the optimizer to its own
    wrapper (`optimizer = nn.DataParallel(optimizer)`) is deleted. It is unsafe: code that
    works around the wrapper through `optimizer.module.step()` breaks once `.module` is gone.
    """

    code = "DPL010"
    name = "optimizer-in-dataparallel"
    severity = Severity.ERROR
    summary = "an optimizer wrapped in DataParallel / DistributedDataParallel"
    fix_applicability = Applicability.UNSAFE
    # a wrapper around something from torch.optim (or a ZeroRedundancyOptimizer)
    tokens = (("DataParallel", "optim"), ("DataParallel", "Optim"))

    VALID = (
        # The model is wrapped; the optimizer is built from the wrapper's parameters.
        "import torch\n"
        "import torch.nn as nn\n"
        "model = nn.DataParallel(Net())\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        # A scheduler is not wrapped either, but it is not an optimizer: not this rule's business.
        "import torch.nn as nn\n"
        "from torch.optim.lr_scheduler import StepLR\n"
        "scheduler = StepLR(optimizer, 10)\n"
        "model = nn.DataParallel(model)\n",
        # SWA's AveragedModel is a Module: wrapping it is fine.
        "import torch.nn as nn\n"
        "from torch.optim.swa_utils import AveragedModel\n"
        "swa_model = nn.DataParallel(AveragedModel(model))\n",
        # Unknown argument: a parameter.
        "import torch.nn as nn\n"
        "def wrap(thing):\n"
        "    return nn.DataParallel(thing)\n",
    )
    INVALID = (
        # A helper wraps whatever it gets, the optimizer included: reported at the call, no fix.
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "def to_gpus(m):\n"
            "    return nn.DataParallel(m).cuda()\n"
            "model = to_gpus(net)\n"
            "optimizer = to_gpus(torch.optim.SGD(model.parameters(), lr=0.1))\n",
            expected=None,
        ),
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "model = nn.DataParallel(model)\n"
            "optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
            "optimizer = nn.DataParallel(optimizer)\n"
            "optimizer.zero_grad()\n",
            expected=(
                "import torch\n"
                "import torch.nn as nn\n"
                "model = nn.DataParallel(model)\n"
                "optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
                "optimizer.zero_grad()\n"
            ),
        ),
        Example(
            "from torch import optim\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "opt = DDP(optim.SGD(model.parameters(), lr=0.1), device_ids=[rank]).cuda()\n",
            expected=(
                "from torch import optim\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "opt = optim.SGD(model.parameters(), lr=0.1)\n"
            ),
        ),
        Example(
            "import torch\n"
            "base = torch.optim.SGD(params, lr=0.1)\n"
            "if torch.cuda.device_count() > 1:\n"
            "    base = torch.nn.DataParallel(base)\n",
            expected=(
                "import torch\n"
                "base = torch.optim.SGD(params, lr=0.1)\n"
                "if torch.cuda.device_count() > 1:\n"
                "    base = base\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for wrapping in wrappings(model):
            optimizer = _optimizer_held(model, wrapping.inner, wrapping.call)
            if optimizer is None:
                continue
            qualified = model.qualified_name(optimizer.func) or model.code(optimizer.func)
            class_name = qualified.rsplit(".", 1)[-1]
            if wrapping.kind == "DP":
                what = (
                    f"nn.DataParallel wraps an optimizer (`{qualified}`), which is not a Module: the wrapper "
                    "has no parameters, so its `zero_grad()` silently clears nothing, its `step()` raises "
                    "`AttributeError: 'DataParallel' object has no attribute 'step'`, and its `state_dict()` "
                    "is empty"
                )
            else:
                what = (
                    f"DistributedDataParallel wraps an optimizer (`{qualified}`), which is not a Module: it "
                    f"raises `AttributeError: '{class_name}' object has no attribute 'named_parameters'`"
                )
            yield Violation(
                node=wrapping.call,
                message=what + "; wrap the model, not the optimizer",
                fix=_unwrap(model, wrapping) if is_construction(model, wrapping) else None,
            )


def _optimizer_held(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> Optional[cst.Call]:
    """The optimizer construction `expr` holds, inline or through names."""
    for _ in range(MAX_DEPTH):
        value = peel_self_returning(model.value_at(expr, at))
        if isinstance(value, cst.Call):
            return value if is_optimizer_construction(model, value) else None
        if value is None or value is expr:
            return None
        expr, at = value, value
    return None


def _unwrap(model: SemanticModel, wrapping: Wrapping) -> Optional[Fix]:
    argument_expr = argument(wrapping.call, 0, "module")
    if argument_expr is None:
        return None
    outer = _with_self_returning_calls(model, wrapping.call)
    message = "Unwrap the optimizer"
    statement = model.statement_of(outer)
    parent = model.parent(outer)
    rebinds_itself = (
        isinstance(parent, cst.Assign)
        and len(parent.targets) == 1
        and model.binding_key(parent.targets[0].target, parent) is not None
        and model.binding_key(parent.targets[0].target, parent) == model.binding_key(argument_expr, outer)
    )
    if rebinds_itself and _deletable(model, statement, parent):
        return Fix(Applicability.UNSAFE, message, (Edit(statement, kind=EditKind.DELETE_STATEMENT),))
    return Fix(Applicability.UNSAFE, message, (Edit(outer, argument_expr),))


def _with_self_returning_calls(model: SemanticModel, call: cst.Call) -> cst.BaseExpression:
    """`nn.DataParallel(opt).cuda()` for the inner call: what unwrapping replaces."""
    outer: cst.BaseExpression = call
    while True:
        attribute = model.parent(outer)
        method_call = model.parent(attribute) if attribute is not None else None
        if (
            isinstance(attribute, cst.Attribute)
            and attribute.value is outer
            and attribute.attr.value in SELF_RETURNING_METHODS
            and isinstance(method_call, cst.Call)
            and method_call.func is attribute
        ):
            outer = method_call
        else:
            return outer


def _deletable(model: SemanticModel, statement: cst.CSTNode, assign: cst.Assign) -> bool:
    """The statement is this assignment alone, and its block keeps another statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 or statement.body[0] is not assign:
        return False
    block = model.parent(statement)
    return isinstance(block, (cst.IndentedBlock, cst.Module)) and len(block.body) > 1
