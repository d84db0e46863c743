"""DPL001 wrapper-train: `.train()`/`.eval()` on the wrapped model instead of its wrapper."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, method_call
from dplint.training import inner_model_use, wrapper_reference

MODE_METHODS = ("train", "eval")


class WrapperTrain(Rule):
    """
    ## What it does
    Flags `.train()` / `.eval()` called on the model inside a DataParallel/DDP wrapper
    instead of on the wrapper:
    - on a model after it was wrapped into a *different* name
      (`model_dp = nn.DataParallel(model)` ... `model.train()`), in the same function or as
      `self.x` of the same class set only where it is wrapped;
    - on `wrapper.module`, where `wrapper` holds a wrapper on some path: a name, a `self.x`
      attribute, a parameter that every caller in the file passes a wrapper, the result of a
      same-file function that builds one, or a wrapper passed through a helper that returns
      its argument (`model = on_gpu(nn.DataParallel(net))`);
    - on a name bound to `wrapper.module` while `wrapper` still holds the wrapper
      (`core = net.module` ... `core.train()`), reported without a fix; silent when the
      function also runs its forward through that name (validation through the inner module
      on purpose: the mode of the module that runs is the one that matters).

    Wrappers are `torch.nn.DataParallel`, `DistributedDataParallel` and project classes that
    subclass them. `model = DDP(model)` rebinds the name to the wrapper and is never flagged.
    Silent on DeepSpeed engines and Accelerate-prepared models (`engine.module.train()`),
    on values returned by helpers of other packages, and when the wrapper name may be unbound
    at the call (the wrapper is built on one branch only).

    ## Why is this bad?
    Less than folklore says. `Module.train()` recurses *down* only, so the wrapper's own
    `training` flag is not updated. The forward is still right: `DataParallel` replicates
    its inner module on every forward and the replicas copy its `training` flag, and
    `DistributedDataParallel` never reads `self.training`; Dropout and BatchNorm follow the
    inner module's mode (checked on torch 2.13). Only `model_dp.training` goes stale, which
    matters to code that reads it (logging, hooks, `if model.training:` branches). Calling
    the mode method on the wrapper sets both and keeps the two flags consistent.

    ## Example
    ```python
    model_dp = nn.DataParallel(model)
    model.train()
    ```

    Use instead:
    ```python
    model_dp = nn.DataParallel(model)
    model_dp.train()  # sets model_dp.training and, recursively, model's
    ```

    ## Fix safety
    The fix calls the method on the wrapper; it is safe: the wrapper's `train()` sets the
    inner module's mode exactly as before, and the wrapper's flag too. It is offered only
    when the call's result is unused (the wrapper's `train()` returns the wrapper, not the
    inner model) and the wrapper name is certainly bound at the call. When the wrapper is
    created on one branch only (`if n_gpu > 1: model_dp = nn.DataParallel(model)`) and the
    name may be unbound, nothing is reported.
    """

    code = "DPL001"
    name = "wrapper-train"
    severity = Severity.INFO
    summary = "`.train()`/`.eval()` on the wrapped model leaves only the wrapper's `.training` flag stale"
    fix_applicability = Applicability.SAFE
    tokens = (("DataParallel", ".train("), ("DataParallel", ".eval("))

    VALID = (
        # Rebinding: `model` is the wrapper from here on.
        "import torch.nn as nn\n"
        "model = nn.DataParallel(model)\n"
        "model.train()\n",
        # The mode is set on the wrapper.
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "ddp_model = DDP(model)\n"
        "ddp_model.eval()\n",
        # The wrapper exists on one branch only: `model_dp` may be unbound at the call.
        "import torch\n"
        "if torch.cuda.device_count() > 1:\n"
        "    model_dp = torch.nn.DataParallel(model)\n"
        "model.train()\n",
        # Before the wrapping, the model is all there is.
        "import torch.nn as nn\n"
        "model.train()\n"
        "model_dp = nn.DataParallel(model)\n",
        # A helper of another package: what it returns is unknown.
        "import torch.nn as nn\n"
        "from devices import on_gpu\n"
        "model = on_gpu(nn.DataParallel(net))\n"
        "model.module.train()\n",
        # The alias of the inner module is only saved; a deep copy of it is toggled.
        "import copy\n"
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "net = DDP(net)\n"
        "core = net.module\n"
        "ema = copy.deepcopy(core)\n"
        "ema.eval()\n"
        "torch.save(core.state_dict(), 'last.pt')\n",
        # Not torch's wrapper.
        "from mylib import DataParallel\n"
        "model_dp = DataParallel(model)\n"
        "model.train()\n",
    )
    INVALID = (
        # The inner module through an alias: reported, no fix (the alias may be used elsewhere).
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def run(net, distributed):\n"
            "    core = net\n"
            "    if distributed:\n"
            "        net = DDP(net)\n"
            "        core = net.module\n"
            "    core.train()\n",
            expected=None,
        ),
        # A wrapper passed through a same-file helper that returns its argument.
        Example(
            "import torch.nn as nn\n"
            "def on_gpu(m):\n"
            "    return m.cuda()\n"
            "model = on_gpu(nn.DataParallel(net))\n"
            "model.module.train()\n",
            expected=(
                "import torch.nn as nn\n"
                "def on_gpu(m):\n"
                "    return m.cuda()\n"
                "model = on_gpu(nn.DataParallel(net))\n"
                "model.train()\n"
            ),
        ),
        Example(
            "import torch.nn as nn\n"
            "model_dp = nn.DataParallel(model).cuda()\n"
            "model.train()\n",
            expected=(
                "import torch.nn as nn\n"
                "model_dp = nn.DataParallel(model).cuda()\n"
                "model_dp.train()\n"
            ),
        ),
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model)\n"
            "model.module.eval()  # before validation\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(model)\n"
                "model.eval()  # before validation\n"
            ),
        ),
        # `model_dp` holds the model itself when the wrapping did not run: the fix is safe.
        Example(
            "import torch\n"
            "model_dp = model\n"
            "if torch.cuda.device_count() > 1:\n"
            "    model_dp = torch.nn.DataParallel(model)\n"
            "model.eval()\n",
            expected=(
                "import torch\n"
                "model_dp = model\n"
                "if torch.cuda.device_count() > 1:\n"
                "    model_dp = torch.nn.DataParallel(model)\n"
                "model_dp.eval()\n"
            ),
        ),
        # A trainer class: the wrapper is an attribute set in __init__.
        Example(
            "import torch.nn as nn\n"
            "class Trainer:\n"
            "    def __init__(self, net):\n"
            "        self.net = net\n"
            "        self.parallel = nn.DataParallel(self.net)\n"
            "    def fit(self):\n"
            "        self.net.train()\n",
            expected=(
                "import torch.nn as nn\n"
                "class Trainer:\n"
                "    def __init__(self, net):\n"
                "        self.net = net\n"
                "        self.parallel = nn.DataParallel(self.net)\n"
                "    def fit(self):\n"
                "        self.parallel.train()\n"
            ),
        ),
        # The result is used: the wrapper's `train()` would return the wrapper, so no fix.
        Example(
            "import torch.nn as nn\n"
            "model_dp = nn.DataParallel(model)\n"
            "net = model.train()\n",
            expected=None,
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for site in model.calls:
            method = method_call(site.node)
            if method is None or method[1] not in MODE_METHODS:
                continue
            receiver, mode = method
            use = inner_model_use(model, receiver, site.node)
            if use is None:
                continue
            if use.alias is not None and _forwards_through(model, receiver, site.node):
                continue  # the alias is the model this function runs: its mode is the one that matters
            if use.wrapper is not None:
                wrapper = model.code(use.wrapper)
                message = (
                    f"`{model.code(receiver)}.{mode}()` sets the mode of the wrapped module only: the forward "
                    f"already follows it, but `{wrapper}.training` goes stale; call `{wrapper}.{mode}()`, which sets both"
                )
            else:
                wrapper = wrapper_reference(model, use.wrapping, site.node)
                if wrapper is None:
                    continue  # the wrapper name may be unbound here: say nothing
                inner = model.code(receiver)
                message = (
                    f"`{inner}.{mode}()` on the model wrapped by `{wrapper}`: the forward through `{wrapper}` "
                    f"already follows `{inner}`'s mode, so only `{wrapper}.training` goes stale; "
                    f"call `{wrapper}.{mode}()`, which sets both"
                )
            fix = None if use.alias is not None else self._fix(model, site.node, receiver, wrapper)
            yield Violation(site.node, message, fix)

    @staticmethod
    def _fix(model: SemanticModel, call: cst.Call, receiver: cst.BaseExpression, wrapper: str) -> Optional[Fix]:
        if not isinstance(model.parent(call), cst.Expr):
            return None  # the result is used: `wrapper.train()` returns the wrapper instead
        return Fix(Applicability.SAFE, f"Call it on `{wrapper}`", (Edit(receiver, wrapper),))


def _forwards_through(model: SemanticModel, alias: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """The function also calls the alias itself (`core(x)`): it works on the inner module on
    purpose (validation through `model.module`), so setting that module's mode is right."""
    key = model.binding_key(alias, at)
    scope = model.scope(at)
    return any(
        site.scope is scope and model.binding_key(site.node.func, site.node) == key
        for site in model.calls
    )
