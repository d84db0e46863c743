"""DPL011 unguarded-rank-save: every DDP rank `torch.save`s the same file at the same time."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.checkpoints import TORCH_SAVE
from dplint.distributed import Route, enclosing_function, is_multi_process
from dplint.rule import Example, Rule, Severity, Violation
from dplint.save_paths import (
    every_rank_runs,
    on_one_process_path,
    project_method_calls,
    project_save_helpers,
    unguarded_helper_saves,
    unguarded_method_saves,
    writes_own_file,
)
from dplint.semantic import SemanticModel

WRITE = "all processes write the same file at once, in place,"
MIX = "the checkpoint can silently mix tensors of different ranks or fail to load"


class UnguardedRankSave(Rule):
    """
    ## What it does
    In a script that runs as several processes (see `dplint.distributed.is_multi_process`: it
    starts a process group, `deepspeed.init_distributed()`, `Accelerator()`, `hvd.init()` or a
    helper named like `init_distributed_mode`, builds a `DistributedDataParallel` or a
    `DistributedSampler`, or uses the `LOCAL_RANK` / `--local_rank` a launcher passes), flags a
    `torch.save(...)` of a file that every rank runs. Every rank runs module-level code, a
    function started by `mp.spawn`, a function that starts the process group itself or wraps a
    model in `DistributedDataParallel` (a collective every process joins), a public method that
    nothing in the project calls of a class one of whose methods builds such a wrapper, when it
    calls on to the save (each rank has the object and its driver runs it: `Trainer.fit()`
    calling `self.save()`; a `save()` nobody calls is left to its caller), and a function
    called from such code without a guard.

    A save is guarded, and not flagged, where only some ranks get to it: under an `if` whose
    test involves the rank (`if dist.get_rank() == 0:`, `if args.local_rank in (-1, 0):`,
    `if accelerator.is_main_process:`, a flag the file sets to such a test), after an early
    exit (`if not is_master: return`), in a `@rank_zero_only` function, or in a function called
    only under a guard. A machine's index (`node_rank == 0`) guards nothing; a save in a
    one-process job (`if dist.get_world_size() == 1:`, or the other side of the one test every
    sign of several processes in the file needs) has no other writer. A test guards only when
    some rank cannot pass it, judged by what it tests, not by a word in its name: `if a or
    rank == 0:` and an early return on `not a and not is_rank0` let every rank through when the
    setting `a` is on, and `save_on_master = cfg.save` ... `if save_on_master:` tests a setting;
    those saves are flagged. A guard on one statement does not cover another in the same loop.

    Not flagged either: a save whose path differs per rank because its value is built from a
    rank (`f"ckpt_{rank}.pt"`, `"final{}.pth".format(gpu)` with `gpu` the index `mp.spawn`
    passes, `"shard_%d.pt" % int(os.environ["LOCAL_RANK"])`, or a name bound to one), or from a
    value each process draws for itself (`uuid.uuid4()`, `os.getpid()`); a save to an in-memory
    buffer; a save in a function this file never calls (it can't tell who runs it). A constant
    path is one file for every rank whatever its letters say: `"every_rank.pt"` and
    `rank_ckpt_path = "ckpt.pt"` are flagged. The facts are written out in
    `dplint/save_paths.py`.

    When dplint checks a project, a plain function of another project file that this file
    calls on every rank (`checkpoint.save_checkpoint(model, ...)`) and a method of a project
    class called through an instance (`stopper(loss, model, path)` runs `__call__`) are
    followed too, and so are the functions of its own file it calls (`misc.save_model(...)`
    calling `save_on_master(state, path)`): a save in them that no guard of theirs covers is
    reported there (`save_on_master(...)` is silent when its body guards the save). A test in the helper of a
    parameter the call fills with a literal is decided by the call (`if local_rank > -1:` with
    the default -1 guards nothing): such a finding is on the call, where the rank is missing.
    So is a test every process of a distributed job answers alike (`if local_rank > -1:`
    given the rank itself: it tells a distributed run from one without a launcher, and every
    rank passes it).
    A rank handed to the object (`Fitter(model, device=rank)`) guards a save whose test or path
    reads it.

    ## Why is this bad?
    Every rank opens the same path and writes it at once. `torch.save` writes the file in
    place (torch 2.13 `torch/serialization.py` `_open_zipfile_writer_file` hands the path to
    `PyTorchFileWriter`: no temporary file, no rename), so the writers interleave. Re-checked on
    torch 2.13 (CPU): two processes saving a 48 MiB state dict of different values to one path
    produced, in 12 of 12 trials, a file that loads without error but mixes tensors of both
    processes; an earlier 40-trial run also got `RuntimeError: ... record size ... does not
    match` up to 14 times, and `EOFError` for a reader racing a writer. Ranks' states do
    differ (BatchNorm running statistics are per rank), so the mix is a checkpoint no rank
    ever had.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = DDP(Net().to(rank), device_ids=[rank])
    ...
    torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    Use instead:
    ```python
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "checkpoint.pt")
    dist.barrier()  # before any rank loads it
    ```

    ## Fix safety
    No fix: which rank should write, and whether the others must wait for the file
    (`dist.barrier()`), depends on the script.
    """

    code = "DPL011"
    name = "unguarded-rank-save"
    severity = Severity.WARNING
    summary = "every DDP rank torch.save()s the same file at once"
    fix_applicability = None
    # A torch.save, spelled as torch's (`torch.save`, `th.save` beside `import torch as th`,
    # `save` from `from torch import ...`: the spellings its qualified name resolves from),
    # in a file that shows it runs as several processes (see is_multi_process). A plain
    # `save` is too common a word (`accelerator.save_state`) to make a file worth parsing.
    # (a literal: dplint/registry.py reads it without importing the rule)
    tokens = (
        ('torch.save', 'init_process_group'), ('torch.save', 'DistributedDataParallel'), ('torch.save', 'init_dist'),
        ('torch.save', '_dist'), ('torch.save', '_ddp'), ('torch.save', 'deepspeed'), ('torch.save', 'Accelerator'),
        ('torch.save', 'hvd'), ('torch.save', 'horovod'), ('torch.save', 'DistributedSampler'),
        ('torch.save', 'local_rank'), ('torch.save', 'LOCAL_RANK'), ('torch.save', 'local-rank'),
        ('torch as', '.save', 'init_process_group'), ('torch as', '.save', 'DistributedDataParallel'),
        ('torch as', '.save', 'init_dist'), ('torch as', '.save', '_dist'), ('torch as', '.save', '_ddp'),
        ('torch as', '.save', 'deepspeed'), ('torch as', '.save', 'Accelerator'), ('torch as', '.save', 'hvd'),
        ('torch as', '.save', 'horovod'), ('torch as', '.save', 'DistributedSampler'),
        ('torch as', '.save', 'local_rank'), ('torch as', '.save', 'LOCAL_RANK'), ('torch as', '.save', 'local-rank'),
        ('from torch import', 'save', 'init_process_group'), ('from torch import', 'save', 'DistributedDataParallel'),
        ('from torch import', 'save', 'init_dist'), ('from torch import', 'save', '_dist'),
        ('from torch import', 'save', '_ddp'), ('from torch import', 'save', 'deepspeed'),
        ('from torch import', 'save', 'Accelerator'), ('from torch import', 'save', 'hvd'),
        ('from torch import', 'save', 'horovod'), ('from torch import', 'save', 'DistributedSampler'),
        ('from torch import', 'save', 'local_rank'), ('from torch import', 'save', 'LOCAL_RANK'),
        ('from torch import', 'save', 'local-rank'),
    )

    VALID = (
        # Saved on rank 0 only.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_rank() == 0:\n"
        "    torch.save(state, 'ckpt.pt')\n",
        # An early exit for the other ranks.
        "import torch, torch.distributed as dist\n"
        "def save(state, is_master):\n"
        "    if not is_master:\n"
        "        return\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "dist.init_process_group('nccl')\n"
        "save(state, dist.get_rank() == 0)\n",
        # A helper only ever called under a guard.
        "import torch, torch.distributed as dist\n"
        "def save_checkpoint(state):\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "dist.init_process_group('nccl')\n"
        "if args.local_rank in (-1, 0):\n"
        "    save_checkpoint(state)\n",
        # One file per rank.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "torch.save(state, f'ckpt_rank{dist.get_rank()}.pt')\n",
        # A guard held in an attribute set in the constructor.
        "import torch, torch.distributed as dist\n"
        "class Fit:\n"
        "    def __init__(self):\n"
        "        dist.init_process_group('nccl')\n"
        "        self.writes = dist.get_rank() == 0\n"
        "    def end(self):\n"
        "        if self.writes:\n"
        "            torch.save(state, 'ckpt.pt')\n"
        "Fit().end()\n",
        # Not a multi-process script.
        "import torch\n"
        "torch.save(state, 'ckpt.pt')\n",
        # A one-process job, and a flag only rank 0 keeps.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_world_size() == 1:\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "chatty = True\n"
        "if dist.get_rank() != 0:\n"
        "    chatty = False\n"
        "if chatty:\n"
        "    torch.save(state, 'last.pt')\n",
    )
    INVALID = (
        # A machine's index is not a rank: all of the first machine's processes save.
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "def worker(gpu, args):\n"
            "    dist.init_process_group('nccl', rank=args.node_rank * 8 + gpu, world_size=16)\n"
            "    if args.node_rank == 0:\n"
            "        torch.save(state, 'ckpt.pt')\n",
        ),
        # Launched by DeepSpeed.
        Example(
            "import deepspeed, torch\n"
            "deepspeed.init_distributed()\n"
            "torch.save(state, 'ckpt.pt')\n",
        ),
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('nccl')\n"
            "for epoch in range(10):\n"
            "    train(epoch)\n"
            "    torch.save(model.state_dict(), 'ckpt.pt')\n",
        ),
        Example(
            "import torch\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def save_checkpoint(state, path='last.pt'):\n"
            "    torch.save(state, path)\n"
            "def main(rank):\n"
            "    model = DDP(Net().to(rank), device_ids=[rank])\n"
            "    if rank == 0:\n"
            "        print('training')\n"
            "    save_checkpoint(model.module.state_dict())\n"
            "if __name__ == '__main__':\n"
            "    main(int(os.environ['LOCAL_RANK']))\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        saves = [site.node for site in model.calls if site.qualified_name == TORCH_SAVE]
        helpers, methods = project_save_helpers(model), project_method_calls(model)
        if not (saves or helpers or methods) or not is_multi_process(model):
            return
        for call, other, function, save, decided in unguarded_helper_saves(model, helpers):
            line = other.position(save)[0].line
            if decided:  # the helper's own test would guard it: the call's arguments skip it
                message = (f"every rank runs this call, and with these arguments `{function.name.value}()` reaches "
                           f"its `torch.save` (line {line} of its file) past its rank test: {WRITE} so {MIX}; "
                           "call it on one rank (`if dist.get_rank() == 0:`) or pass the rank it tests")
                yield Violation(node=call, message=message)
                continue
            yield Violation(node=save, message=(
                f"every rank runs this `torch.save`: another file of the project calls `{function.name.value}()` on "
                f"every rank, and it reaches this save, so {WRITE} and {MIX}; save on one rank (`if dist.get_rank() "
                "== 0:`, at the call or here) and `dist.barrier()` before others read it"))
        for other, method, save in unguarded_method_saves(model, methods):
            owner = other.parent(other.parent(method))
            owner_name = f"{owner.name.value}." if isinstance(owner, cst.ClassDef) else ""
            yield Violation(node=save, message=(
                f"every rank runs this `torch.save`: another file of the project calls `{owner_name}"
                f"{method.name.value}` on an instance on every rank, so {WRITE} and {MIX}; save on one rank "
                "(`if accelerator.is_main_process:` / `if dist.get_rank() == 0:`, at the call or here) and wait "
                "for it before others read the file"))
        for save in saves:
            route = every_rank_runs(model, save)
            if route is None or on_one_process_path(model, (save, *route.calls)):
                continue
            if writes_own_file(model, save, route.calls[0] if route.calls else None):
                continue
            yield Violation(node=save, message=(
                f"every rank runs this `torch.save`{_through(model, route)}: {WRITE} so {MIX}; save on one rank "
                "(`if dist.get_rank() == 0:`) and `dist.barrier()` before others read it"))


def _through(model: SemanticModel, route: Route) -> str:
    # Name the call that brings every rank here, unless it is the script's entry point
    # (`main()` under `if __name__ == "__main__":`), which says nothing new.
    if not route.calls or enclosing_function(model, route.calls[0]) is None:
        return ""
    call = route.calls[0]
    line = model.position(call)[0].line
    return f" (through `{model.code(call.func)}()` on line {line}, called on every rank)"
