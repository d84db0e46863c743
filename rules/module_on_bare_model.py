"""DPL016 module-on-bare-model: `model.module` where the model is wrapped only on some paths."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel
from dplint.training import wrappings as wrappers_built
from dplint.wrappers import (
    attribute_error_handled,
    conditions_at,
    is_store,
    known_bare_paths,
    made_by_a_wrapping_factory,
    narrowed_to_wrapper,
    wrapped_on_some_machines,
    wrapper_paths,
    wrapping_model,
)

# A test that holds when DeepSpeed runs the model (`if self.deepspeed:`, `args.deepspeed`).
_DEEPSPEED = re.compile(r"deepspeed", re.IGNORECASE)


class ModuleOnBareModel(Rule):
    """
    ## What it does
    Flags `model.module` where `model` holds a `DataParallel` / `DistributedDataParallel`
    wrapper on some paths and a bare model on others, typically
    `if torch.cuda.device_count() > 1: model = nn.DataParallel(model)` followed by an
    unconditional `model.module.state_dict()`. Paths are judged together: a `.module` read
    under the same test that wrapped (`if n_gpu > 1: ... model.module`), or under a test of
    the object itself (`if hasattr(model, "module")`, `isinstance(model, DDP)`, also as a
    loop's test: `while isinstance(m, DDP): m = m.module`), is clean.
    The model is followed through names, branches, `self.x`, same-file functions and imported
    project files; a method the instance calls on itself (`self.cuda()` in `__init__`) is
    followed into the method that runs on it, a subclass's override first, so a wrap there
    under `len(gpu_ids) > 1` counts with the test around the call.

    Paths are judged with the parts of a compound test (`if acc and local_rank != -1:` holds
    `local_rank != -1`; a wrap under `a and b` is ruled out where `not b`), and tests are read
    for what they mean: a one-line predicate of the project is its body, in an `if` or a
    conditional expression (`m.module if is_parallel(m) else m` with `return type(m) in (DP,
    DDP)`; `type(m) is DDP` is the isinstance test); a flag bound once to a test is that test
    (`distributed = torch.cuda.device_count() > 1`, a script global too), and so is a dict
    entry set `True` under a test and `False` in its `else` (`config["distributed"]`, followed
    through `self.config`, a parameter's only caller, a base class constructor's subclass
    calling `super().__init__(config, ...)`, and other files); a count of GPUs or
    processes is a whole number (`n_gpu >= 2` is `n_gpu > 1`; the `else` of `n_gpu == 1` is
    read as `n_gpu > 1`: a machine without any GPU is left unjudged); and a name bound per
    branch (`world_size = dist.get_world_size()` under `device_count() > 1`, `world_size = 1`
    in its `else`) tells the branch by its literal (`if world_size != 1:` is the wrapped one);
    several GPUs (`len(gpu_ids) > 1`, `device_count() > 1`; not a process count such as
    `world_size`, which CPUs run too) imply `torch.cuda.is_available()`, so a wrap under
    `torch.cuda.is_available() and len(ids) > 1` read back under `len(ids) > 1` alone is clean:
    the bare path there is a machine without CUDA given several GPU ids, a run the code does
    not support; likewise several ids imply the first is a GPU (`gpu_ids[0] >= 0` holds, the
    `-1` CPU marker is not among several ids). Across files a path keeps its tests of torch's state and its GPU counts
    spelled alike (`len(device_ids) > 1` in the helper that wraps and the one that saves). A factory of another file that wraps under a hardware test
    (`if opt.isTrain and len(opt.gpu_ids): model = DataParallel(model)`, `n_gpu > 1`,
    `torch.cuda.device_count() > 1`) counts as "wrapped on some paths" unless the read repeats
    a test of the same hardware (names are read as what the file binds them to:
    `gpus = torch.cuda.device_count()` ... `if gpus > 1:` is a `device_count` test): a CPU or
    one-GPU machine takes the bare path whatever the calling script configures.

    A wrapper is any object `dplint.wrappers.wrapper_kind` recognises, as every rule does:
    torch's two, apex's and mmcv's / mmengine's wrappers, and project classes derived from
    one (at any depth, in this file or another). A factory of another file that wraps on
    every path it returns (`def parallelize(net): return DDP(net)`) decides nothing: the
    calling file's own path that did not call it is the bare one.

    Silent when the wrapping happens in another file under any other test (a factory whose
    `if training:` the caller's configuration settles), under a test naming DeepSpeed
    (`if self.deepspeed:`: the object is then DeepSpeed's engine, which has `.module`), under
    `if dist.is_initialized():` when a path wraps in DDP (the process group that wrap needs is
    up), after an `assert` that rules the wrapped or bare path out, when the model is never wrapped in what the analysis can see (a
    class of the project may well have its own `module` attribute), when the other path holds
    an object of a project class that has `.module` itself (its `__init__` sets `self.module =
    net`, it defines `module` or `__getattr__`, or subclasses a torch wrapper; its project
    bases too), when the read sits in a `try` whose `except` catches AttributeError (bare,
    `Exception`) and falls back, and when what the bare path holds is
    unknown (a parameter that different callers fill differently).

    ## Why is this bad?
    Only the wrappers have a `module` attribute. On the path that skips the wrapper (one GPU,
    a CPU run, `--no-distributed`) torch 2.13 raises
    `AttributeError: 'ResNet' object has no attribute 'module'`, often at the very end of a
    long run, when the checkpoint is saved.

    ## Example
    ```python
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    ...
    torch.save(model.module.state_dict(), "last.pt")
    ```

    Use instead:
    ```python
    torch.save(getattr(model, "module", model).state_dict(), "last.pt")
    ```

    ## Fix safety
    The fix rewrites `model.module` as `getattr(model, "module", model)`: on the wrapped path
    it is the same object, and on the bare path the original raises. It is safe.
    """

    code = "DPL016"
    name = "module-on-bare-model"
    severity = Severity.ERROR
    summary = "`model.module` on a model that is wrapped only on some paths raises AttributeError"
    fix_applicability = Applicability.SAFE
    tokens = (("DataParallel", ".module"),)
    anchor_tokens = (".module",)  # the finding is a `.module` read of this file

    VALID = (
        # Wrapped on every path.
        "import torch.nn as nn\n"
        "model = nn.DataParallel(net)\n"
        "sd = model.module.state_dict()\n",
        # The same test decides both.
        "import torch.nn as nn\n"
        "if multi_gpu:\n"
        "    model = nn.DataParallel(model)\n"
        "if multi_gpu:\n"
        "    sd = model.module.state_dict()\n"
        "else:\n"
        "    sd = model.state_dict()\n",
        # A test of the object itself.
        "import torch.nn as nn\n"
        "model = nn.DataParallel(net) if n > 1 else net\n"
        "core = model.module if hasattr(model, 'module') else model\n",
    )
    INVALID = (
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "model = Net()\n"
            "if torch.cuda.device_count() > 1:\n"
            "    model = nn.DataParallel(model)\n"
            "torch.save(model.module.state_dict(), 'last.pt')\n",
            expected=(
                "import torch\n"
                "import torch.nn as nn\n"
                "model = Net()\n"
                "if torch.cuda.device_count() > 1:\n"
                "    model = nn.DataParallel(model)\n"
                "torch.save(getattr(model, \"module\", model).state_dict(), 'last.pt')\n"
            ),
        ),
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def setup(net, distributed):\n"
            "    if distributed:\n"
            "        net = DDP(net)\n"
            "    return net\n"
            "model = setup(Net(), args.distributed)\n"
            "head = model.module.head\n",
            expected=(
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def setup(net, distributed):\n"
                "    if distributed:\n"
                "        net = DDP(net)\n"
                "    return net\n"
                "model = setup(Net(), args.distributed)\n"
                "head = getattr(model, \"module\", model).head\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        if not wrappers_built(model):
            return  # no wrapper built here or returned by a helper the file calls: nothing to follow
        for node in model.nodes_of(cst.Attribute):
            if node.attr.value != "module" or is_store(model, node):
                continue
            base = node.value
            if model.binding_key(base, node) is None:
                continue
            wrappings, wrapped, _ = wrapper_paths(model, base, node)
            if not wrappings or narrowed_to_wrapper(model, base, node) is not None:
                continue
            if known_bare_paths(model, base, node, wrappings) == 0:
                continue
            if attribute_error_handled(model, node):
                continue  # `try: m.module ... except AttributeError: <fallback>`
            if not any(wrapping_model(model, w) is model or wrapped_on_some_machines(model, w, node)
                       or made_by_a_wrapping_factory(model, w) for w in wrappings):
                continue  # wrapped in another file under its own configuration test: can't tell
            if any(c.holds and _DEEPSPEED.search(c.test) for c in conditions_at(model, node)):
                continue  # under DeepSpeed the object is its engine, which has `.module` too
            if any(w.kind == "DDP" for w in wrappings) and any(
                c.holds and c.tests_process_group for c in conditions_at(model, node)
            ):
                continue  # `if dist.is_initialized(): m.module`: the process group the DDP wrap needs is up
            target = model.code(base)
            yield Violation(
                node=node,
                message=(
                    f"`{target}` is a {_kind(wrappings)} wrapper only on some paths: where it is not wrapped, "
                    f"`{target}.module` raises `AttributeError: '...' object has no attribute 'module'`; "
                    f"use `getattr({target}, \"module\", {target})`"
                ),
                fix=Fix(
                    Applicability.SAFE,
                    f"Use `getattr({target}, \"module\", {target})`",
                    (Edit(node, f'getattr({target}, "module", {target})'),),
                ),
            )


def _kind(wrappings) -> str:
    return "DataParallel" if all(w.kind == "DP" for w in wrappings) else "DistributedDataParallel" if all(
        w.kind == "DDP" for w in wrappings) else "DataParallel/DDP"
