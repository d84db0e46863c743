"""DPL002 wrapper-bypass: the training forward goes through the inner model, not the wrapper."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import Binding, CallSite, SemanticModel, Wrapping
from dplint.training import backprops, choice_fixed_for_the_loop, exclusive_paths, feeds_backward, held_wrapper, inner_model_use, wrapper_reference


class WrapperBypass(Rule):
    """
    ## What it does
    Flags a training forward through the model inside a wrapper, outside `torch.no_grad()` /
    `torch.inference_mode()`, when its result feeds a back-propagated tensor
    (`loss.backward()`, `scaler.scale(loss).backward()`, `accelerator.backward(loss)`, also
    through same-file helpers that return the loss, `self.x` attributes across methods, a
    Lightning `training_step` return). The forward through the inner model is:
    - `model(x)` after `ddp_model = DistributedDataParallel(model)` into another name, in the
      same function (or `self.x` of the same class set only where it is wrapped), including
      after `ddp_model = build_ddp(model)` with a same-file (or project) function that returns
      the wrapper of its argument; not on a branch that excludes the wrapping (`if multi_gpu:`
      wrap ... `else: out = model(x)`, or a second `if` with the same test);
    - `wrapper.module(x)`, or a method of it that runs layers (`wrapper.module.predict(x)`;
      not `parameters()`, `state_dict()` and torch's other Module methods, nor names starting
      with `sample`, `get_`, `init`...), where `wrapper` holds a wrapper on some path: a name,
      a `self.x` attribute, a module-level name read in a function, a parameter that every
      caller passes a wrapper (in the file or, for a function only other files call, in the
      project: `train_one_epoch(model, ...)` in `main.py` after `model = DDP(model)`), or a
      function's result, one element of a returned tuple (`model, ema, scaler = build(cfg,
      model)`), or a `self.x` that code outside the class stores into an instance it built
      (`learner = Learner(...)` ... `learner.model = DDP(learner.model)`, also in another file);
    - a name bound to `wrapper.module` (`core = ddp.module`, also
      `ddp.module if isinstance(ddp, DDP) else ddp`) ... `core(x)`, without a fix; silent when
      every backward of the function is on a path that excludes that binding
      (`else: core = ddp.module` ... `if phase == "train": loss.backward()`).

    Wrappers are `torch.nn.DataParallel`, `DistributedDataParallel`, apex's and mmcv's /
    mmengine's wrappers, and project classes derived from one at any depth (`class
    MyDDP(DistributedDataParallel)`; `dplint.wrappers.wrapper_kind`). Silent on DeepSpeed engines,
    Accelerate-prepared models, wrappers returned by helpers outside the project, and when
    callers of a function pass a wrapper in one place and something else in another.

    ## Why is this bad?
    The wrapper does its work in its own forward. Under `DistributedDataParallel` the
    forward prepares the reducer that all-reduces gradients during backward; a forward
    through the inner module skips it, so each rank keeps its own gradients and the replicas
    silently drift apart (checked on torch 2.13 with gloo: after `model(x)`, rank 0 and
    rank 1 kept gradients 1.0 and 2.0; after `ddp_model(x)`, both had the mean 1.5). No error
    or warning is raised. Under `nn.DataParallel` the batch is not scattered: the step runs
    on one GPU only. Reported as an error under DistributedDataParallel (silently wrong
    results) and as a warning under nn.DataParallel (slow).

    Evaluation through the inner model under `torch.no_grad()` is fine and not flagged; so
    is a function that chooses between the two forwards per step, on exclusive paths (skipping
    the all-reduce on gradient-accumulation steps on purpose: `ddp(x) if sync else
    ddp.module(x)` with `sync` computed in the loop). A choice the loop makes once for the
    run (`if config.use_amp:` around the inner forward, the wrapper's in the `else:`) is no
    accumulation: every step of such a run skips the all-reduce, and it is flagged. A
    `torch.compile` of the wrapper is the wrapper for this rule: `compiled.module` reads the
    DDP's inner model through the compiled module.

    ## Example
    ```python
    ddp_model = DDP(model, device_ids=[rank])
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
    ```

    Use instead:
    ```python
    ddp_model = DDP(model, device_ids=[rank])
    for x, y in loader:
        loss = criterion(ddp_model(x), y)
        loss.backward()
    ```

    ## Fix safety
    The fix calls the wrapper instead; it is unsafe because it changes what runs: the
    gradients become averaged across ranks (or the batch is split across GPUs), and a
    model that returns non-tensor outputs may not survive the wrapper's scatter/gather. The
    fix is offered only when the wrapper name is certainly bound at the call.
    """

    code = "DPL002"
    name = "wrapper-bypass"
    severity = Severity.ERROR
    summary = "training forward through the inner model skips the DDP all-reduce (or DataParallel's scatter)"
    fix_applicability = Applicability.UNSAFE
    tokens = (("DataParallel", "backward"),)  # a training step: its loss is back-propagated

    VALID = (
        # Rebinding: `model` is the wrapper.
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(model)\n"
        "loss = criterion(model(x), y)\n"
        "loss.backward()\n",
        # Evaluation through the inner model, under no_grad.
        "import torch\n"
        "model_dp = torch.nn.DataParallel(model)\n"
        "with torch.no_grad():\n"
        "    loss = criterion(model(x), y)\n",
        # The inner model's output is not back-propagated (a logged sample).
        "import torch\n"
        "ddp = torch.nn.parallel.DistributedDataParallel(model)\n"
        "loss = criterion(ddp(x), y)\n"
        "loss.backward()\n"
        "sample = model(x_fixed)\n",
        # The inner model runs only on the path where no wrapper was built.
        "import torch\n"
        "if multi_gpu:\n"
        "    dp = torch.nn.DataParallel(net)\n"
        "    out = dp(x)\n"
        "else:\n"
        "    out = net(x)\n"
        "criterion(out, y).backward()\n",
        # Accelerate's prepared model is not a torch wrapper this rule knows.
        "from accelerate import Accelerator\n"
        "accelerator = Accelerator()\n"
        "model = accelerator.prepare(net)\n"
        "accelerator.backward(criterion(model.module(x), y))\n",
        # The same function also back-propagates through the wrapper (accumulation steps).
        "import torch\n"
        "ddp = torch.nn.parallel.DistributedDataParallel(model)\n"
        "out = ddp.module(x) if accumulating else ddp(x)\n"
        "criterion(out, y).backward()\n",
    )
    INVALID = (
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "ddp_model = DDP(model, device_ids=[rank])\n"
            "for x, y in loader:\n"
            "    loss = criterion(model(x), y)\n"
            "    loss.backward()\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "ddp_model = DDP(model, device_ids=[rank])\n"
                "for x, y in loader:\n"
                "    loss = criterion(ddp_model(x), y)\n"
                "    loss.backward()\n"
            ),
        ),
        Example(
            "import torch.nn as nn\n"
            "model = nn.DataParallel(model)\n"
            "for x, y in loader:\n"
            "    scaler.scale(nn.functional.mse_loss(model.module(x), y)).backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "model = nn.DataParallel(model)\n"
                "for x, y in loader:\n"
                "    scaler.scale(nn.functional.mse_loss(model(x), y)).backward()\n"
            ),
        ),
        # A trainer class: `self.net` is wrapped into `self.ddp` in __init__.
        Example(
            "from torch.nn.parallel import DistributedDataParallel\n"
            "class Trainer:\n"
            "    def __init__(self, net, rank):\n"
            "        self.net = net.to(rank)\n"
            "        self.ddp = DistributedDataParallel(self.net, device_ids=[rank])\n"
            "    def step(self, batch):\n"
            "        logits, aux = self.net(batch['x'])\n"
            "        loss = self.criterion(logits, batch['y']) + 0.1 * aux\n"
            "        loss.backward()\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel\n"
                "class Trainer:\n"
                "    def __init__(self, net, rank):\n"
                "        self.net = net.to(rank)\n"
                "        self.ddp = DistributedDataParallel(self.net, device_ids=[rank])\n"
                "    def step(self, batch):\n"
                "        logits, aux = self.ddp(batch['x'])\n"
                "        loss = self.criterion(logits, batch['y']) + 0.1 * aux\n"
                    "        loss.backward()\n"
            ),
        ),
        # A project subclass of DistributedDataParallel is a wrapper too.
        Example(
            "from torch.nn.parallel import DistributedDataParallel\n"
            "class AttrDDP(DistributedDataParallel):\n"
            "    pass\n"
            "ddp = AttrDDP(net)\n"
            "criterion(net(x), y).backward()\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel\n"
                "class AttrDDP(DistributedDataParallel):\n"
                "    pass\n"
                "ddp = AttrDDP(net)\n"
                "criterion(ddp(x), y).backward()\n"
            ),
        ),
        # The wrapper held in an attribute, the forward through its `.module` in another method.
        Example(
            "import torch.nn as nn\n"
            "class Trainer:\n"
            "    def __init__(self, net):\n"
            "        self.model = nn.DataParallel(net).cuda()\n"
            "    def step(self, x, y):\n"
            "        criterion(self.model.module(x), y).backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "class Trainer:\n"
                "    def __init__(self, net):\n"
                "        self.model = nn.DataParallel(net).cuda()\n"
                "    def step(self, x, y):\n"
                "        criterion(self.model(x), y).backward()\n"
            ),
        ),
        # The wrapper exists on one branch only: flagged, but no fix (the name may be unbound).
        Example(
            "import torch\n"
            "if distributed:\n"
            "    ddp = torch.nn.parallel.DistributedDataParallel(model)\n"
            "loss = criterion(model(x), y)\n"
            "loss.backward()\n",
            expected=None,
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for site in model.calls:
            if site.in_no_grad or not feeds_backward(model, site.node):
                continue  # first: a set computed once per file, where most calls are not
            func = site.node.func
            method = None
            use = inner_model_use(model, func, site.node)
            if use is None and isinstance(func, cst.Attribute) and _may_run_layers(func.attr.value):
                # `ddp.module.predict(x)` / `core.predict(x)` with `core = ddp.module`: a method
                # of the inner model runs its layers without the wrapper's forward too
                method = func.attr.value
                use = inner_model_use(model, func.value, site.node)
                if use is not None and use.wrapper is None:
                    use = None  # `net.predict(x)` on a wrapped name: may be a wrapper-free helper
            if use is None:
                continue
            if _wrapper_forward_is_backpropagated(model, use.wrapping, site, anywhere=method is not None):
                # both paths in one function: a deliberate choice, not a slip; a named method
                # of the inner model beside the wrapper's forward (`m.module.loss_fn(m(x), y)`)
                # may be a helper applied to the wrapper's outputs
                continue
            if use.alias is not None and _alias_excludes_backward(model, use.alias, site):
                continue  # `core = ddp.module` only on the path that never runs backward
            if use.wrapper is not None:
                wrapper = model.code(use.wrapper)
            else:
                wrapper = wrapper_reference(model, use.wrapping, site.node)
            shown = wrapper or use.wrapping.wrapper_key
            callee = model.code(site.node.func)
            if method is not None:
                shown_call = f"the forward through `{shown}`"
            else:
                shown_call = f"`{shown}(...)`"
            if use.wrapping.kind == "DDP":
                severity = Severity.ERROR
                message = (
                    f"`{callee}(...)` runs the model inside the DistributedDataParallel wrapper `{shown}` and its "
                    f"result is back-propagated: DDP's gradient all-reduce does not run for it, so each rank keeps "
                    f"its own gradients and the replicas silently drift apart; call {shown_call}"
                )
            else:
                severity = Severity.WARNING
                message = (
                    f"`{callee}(...)` runs the model inside the nn.DataParallel wrapper `{shown}` and its result is "
                    f"back-propagated: the batch is not split across GPUs, this step runs on one GPU only; "
                    f"call {shown_call}"
                )
            fix = None
            if wrapper is not None and use.alias is None and method is None:
                fix = Fix(Applicability.UNSAFE, f"Call the wrapper `{wrapper}`", (Edit(site.node.func, wrapper),))
            yield Violation(site.node, message, fix, severity)


# torch.nn.Module's own API: calling these on the inner module runs no layers.
MODULE_API = {
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
    "modules", "named_modules", "state_dict", "load_state_dict", "train", "eval", "to", "cuda",
    "cpu", "half", "float", "double", "bfloat16", "zero_grad", "requires_grad_", "apply",
    "register_buffer", "register_parameter", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "get_parameter", "get_submodule", "get_buffer", "add_module",
    "type", "share_memory", "extra_repr",
}


# Method names that by convention prepare inputs rather than run the learned layers
# (`sample_noisy_actions`, `get_config`): calling them on the inner module is no forward.
NON_FORWARD_PREFIXES = ("sample", "get_", "set_", "init", "reset", "make_", "num_", "no_weight_decay")


def _may_run_layers(method: str) -> bool:
    return method != "module" and method not in MODULE_API and not method.startswith(NON_FORWARD_PREFIXES)


def _alias_excludes_backward(model: SemanticModel, alias: Binding, inner: CallSite) -> bool:
    """Every backward of the function runs on a path where the alias was not bound to
    `.module` (`if phase == "train": ... else: core = ddp.module` ... `if phase == "train":
    loss.backward()`)."""
    sites = [b.site.node for b in backprops(model) if b.site.scope is inner.scope]
    return bool(sites) and all(exclusive_paths(model, alias.node, site) for site in sites)


def _wrapper_forward_is_backpropagated(model: SemanticModel, wrapping: Wrapping, inner: CallSite,
                                       anywhere: bool = False) -> bool:
    """The function chooses between the two forwards (`ddp(x) if sync else ddp.module(x)`:
    accumulating local gradients on purpose, what `no_sync()` does): a back-propagated forward
    through the same wrapper on a path that excludes the inner one (`anywhere`: on any path).
    Two forwards that run one after the other are no choice: the inner one's gradients are
    never all-reduced; nor is a choice the training loop makes once for the run (`if
    config.use_amp:` around the inner one, `else:` the wrapper): then every step of such a
    run skips the all-reduce."""
    for site in model.calls:
        if site.scope is not inner.scope or site.in_no_grad or site is inner:
            continue
        if held_wrapper(model, site.node.func) is wrapping and feeds_backward(model, site.node) \
                and (anywhere or exclusive_paths(model, site.node, inner.node)
                     and not choice_fixed_for_the_loop(model, site.node, inner.node)):
            return True
    return False
