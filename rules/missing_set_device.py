"""DPL014 missing-set-device: NCCL ranks that put their work on the bare `cuda` device."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.cuda import (
    bare_cuda_placements,
    caller_placements,
    caller_selects_a_device,
    callee_placements,
    group_process,
    late_set_device,
    owner_def,
    selects_a_device_for,
)
from dplint.backends import DEFAULT_BACKEND, group_backend
from dplint.distributed import (
    INIT_PROCESS_GROUP,
    called_functions,
    callers_of,
    is_group_of_one,
    on_exclusive_branches,
)
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation, shown_path
from dplint.semantic import SemanticModel



class MissingSetDevice(Rule):
    """
    ## What it does
    Flags `init_process_group` with the `nccl` backend (a literal; a name that holds `"nccl"`
    on one path and another literal backend on the others, `"nccl" if use_gpu else "gloo"`,
    since `cuda` placements only run on the GPU path; `args.<name>` whose
    `add_argument("--<name>", default="nccl")` is in the file, or in the file whose parser made
    `args` (`args = get_parser().parse_args()`); no backend at all, with which
    torch uses NCCL for CUDA tensors) when its process places work on the bare `cuda` device
    (`x.cuda()`, `x.cuda(non_blocking=True)`, `x.to("cuda")`, `torch.device("cuda")`, a torch call given
    `device="cuda"`, also through a name that holds `"cuda"`, and the index
    `torch.cuda.current_device()` gives, 0 in every process until one is selected, and through an attribute every
    value of which the file sets to `"cuda"` or `"cpu"`: `args.device = "cuda"` read in
    `Trainer(args)`, a `--device` option defaulting to `"cuda"`; also in another project file
    the process runs: a function one of its calls runs, the `__init__` and `forward` of a
    module it builds, three calls deep, but not a call that only some ranks make, as a rank-0
    evaluation, where GPU 0 may be right) and never selects a GPU:
    no `torch.cuda.set_device(...)` on the process's path (the init's function, the
    functions of the file that call it, and the project functions those call, three calls
    deep, across files), none in the files of every caller of a helper that starts the
    group for other files, and no `CUDA_VISIBLE_DEVICES` written by the script with a value that can differ per process
    (from the local rank, the `mp.spawn` index, or a call the file does not show). One value
    for all (`os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus` before `mp.spawn`) shows every
    process the same GPUs, and `cuda` is the first of them in each. `device_id=` given to
    `init_process_group` does not select one: it binds the group's NCCL communicator to that
    GPU (formed at once, split for sub-groups: the two effects torch 2.13's docstring lists)
    and leaves the current device as it was, so `.cuda()` is still GPU 0 in every process.
    A `set_device` on the other branch of a
    test than the path (`if args.distributed: init_process_group(...)` / `elif args.gpu:
    set_device(args.gpu)`; a slurm launcher's function beside the torchrun one's) runs in
    another kind of run and does not count. Where a file starts several process groups (a
    training and a prediction worker, each an `mp.spawn` target), each is judged by the
    placements of its own process: the functions reached from its function's outermost
    callers in the file. A helper that starts the group for other files
    (`utils.init_distributed_mode(args)`) is judged with the placements of every caller's
    file that selects no GPU itself.

    A placement that sits on the other branch of a test than the `init_process_group` (in the
    same function: `if local_rank == -1: device = torch.device("cuda")` / `else: ...
    init_process_group("nccl")`, or `if rank != -1:` ... `if rank == -1:`) belongs to the
    one-process run and does not count.

    Also flags a `set_device` that is the process's only GPU selection and runs after a
    bare `cuda` placement of its function (`model = Net().cuda()` then `set_device(...)`):
    that tensor went to GPU 0 and stays there.

    Silent when the backend is not known to be NCCL on any path (`args.dist_backend` without a
    default in the file, a value from a config file: unknown, not absent), when every
    placement names its device (`.cuda(local_rank)`, `.to(f"cuda:{rank}")`), and where
    a launcher or library starts the processes for the script (Lightning, Accelerate,
    DeepSpeed): they set the device themselves.

    ## Why is this bad?
    The current CUDA device of every process starts at 0, and `"cuda"` means the current
    device, so every rank puts its model and batches on GPU 0: the ranks share one GPU (out of
    memory, or a very slow run), and NCCL refuses two ranks on one GPU at the first collective
    (recent NCCL versions report a "Duplicate GPU detected" error). With one process per node
    the script works, so a single-GPU test never shows it.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = Net().cuda()
    model = DDP(model)
    ```

    Use instead:
    ```python
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = Net().cuda()
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    A `set_device` that comes too late gets no fix (moving it may move code it depends on).
    Where the local rank is known in the scope of the call (a `local_rank` variable or
    `args.local_rank`), the fix inserts `torch.cuda.set_device(local_rank)` after
    `init_process_group`. It is unsafe: it changes which GPU every later `cuda` placement
    uses, and the script's own device numbering (say a `CUDA_VISIBLE_DEVICES` set by a
    launcher per process) may differ from the local rank.
    """

    code = "DPL014"
    name = "missing-set-device"
    severity = Severity.ERROR
    summary = "NCCL ranks on the bare `cuda` device without torch.cuda.set_device(): every rank uses GPU 0"
    fix_applicability = Applicability.UNSAFE
    # Neither "nccl" (torch's default backend is NCCL for CUDA tensors) nor "cuda" (a helper
    # starting the group for other files may place nothing itself) is needed.
    tokens = ("init_process_group",)

    VALID = (
        # set_device before the placement.
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "torch.cuda.set_device(local_rank)\n"
        "model = Net().cuda()\n",
        # Every placement names the device.
        "import torch.distributed as dist\n"
        "dist.init_process_group(backend='nccl')\n"
        "model = Net().to(f'cuda:{local_rank}')\n"
        "x = x.cuda(local_rank)\n",
        # The backend is not known to be NCCL.
        "import torch.distributed as dist\n"
        "dist.init_process_group(backend=args.dist_backend)\n"
        "model = Net().cuda()\n",
    )
    INVALID = (
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "def main(local_rank):\n"
            "    dist.init_process_group('nccl')\n"
            "    model = Net().cuda()\n",
            expected=(
                "import torch\n"
                "import torch.distributed as dist\n"
                "def main(local_rank):\n"
                "    dist.init_process_group('nccl')\n"
                "    torch.cuda.set_device(local_rank)\n"
                "    model = Net().cuda()\n"
            ),
        ),
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group(backend='nccl')\n"
            "device = torch.device('cuda')\n"
            "model = Net().to(device)\n",
        ),
        # The local rank is read after init_process_group: set_device goes after that line.
        Example(
            "import os\n"
            "import torch\n"
            "import torch.distributed as dist\n"
            "def main():\n"
            "    dist.init_process_group('nccl')\n"
            "    local_rank = int(os.environ['LOCAL_RANK'])\n"
            "    model = Net().cuda()\n",
            expected=(
                "import os\n"
                "import torch\n"
                "import torch.distributed as dist\n"
                "def main():\n"
                "    dist.init_process_group('nccl')\n"
                "    local_rank = int(os.environ['LOCAL_RANK'])\n"
                "    torch.cuda.set_device(local_rank)\n"
                "    model = Net().cuda()\n"
            ),
        ),
        # ...but not where a placement comes before it: no fix.
        Example(
            "import os\n"
            "import torch\n"
            "import torch.distributed as dist\n"
            "def main():\n"
            "    dist.init_process_group('nccl')\n"
            "    x = torch.zeros(1).cuda()\n"
            "    local_rank = int(os.environ['LOCAL_RANK'])\n"
            "    model = Net().cuda()\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        inits = [(site, _backend(model, site.node)) for site in model.calls if site.qualified_name == INIT_PROCESS_GROUP]
        inits = [(site, backend) for site, backend in inits if backend is not None]
        if not inits:
            return
        placements = bare_cuda_placements(model)
        # Several process groups in one file (a training and a prediction worker): each is
        # judged by the placements its own process runs, when the file shows them.
        own = {id(site.node): _placements_of_process(model, site.node, placements) for site, _ in inits}
        narrowed = len(inits) > 1 and any(own.values())
        for site, backend in inits:
            if is_group_of_one(site.node):
                continue  # one process: nobody shares GPU 0
            late = late_set_device(model, site.node)
            if late is not None:
                selection, placement = late
                yield Violation(
                    node=selection,
                    message=(
                        f"`torch.cuda.set_device` runs after `cuda` is used (line {model.position(placement)[0].line}): "
                        "that placement went to the current device then, GPU 0 in every process, and stays there; "
                        "call `set_device` before the first CUDA placement"
                    ),
                )
                continue
            if selects_a_device_for(model, site.node) or _callers_select_a_device(model, site.node):
                continue
            mine = own[id(site.node)] if narrowed else placements
            # `if local_rank == -1: device = torch.device("cuda")` / `else: ...
            # init_process_group(...)`: that `cuda` is the one-process path's.
            mine = [(model, placement) for placement in mine if not on_exclusive_branches(model, placement, site.node)]
            mine += caller_placements(model, site.node)  # the callers' files of a helper starting the group
            reached = _functions_of_process(model, site.node) if narrowed else None
            mine += callee_placements(  # other files' functions and modules this process runs
                model, lambda node, init=site.node, reached=reached: not on_exclusive_branches(model, node, init)
                and (reached is None or owner_def(model, node) in reached or owner_def(model, node) is None))
            if not mine:
                continue
            where, first = mine[0]
            line = where.position(first)[0].line
            shown = f"line {line}" if where is model else f"{shown_path(where.path)}:{line}"
            yield Violation(
                node=site.node,
                message=(
                    f"{backend}, but nothing selects a GPU per process: `cuda` ({shown}) means the "
                    f"current device, which is GPU 0 in every process, so all ranks share GPU 0; call "
                    f"`torch.cuda.set_device(local_rank)` after `init_process_group`"
                ),
                fix=_fix(model, site.node),
            )


def _backend(model: SemanticModel, call: cst.Call) -> Optional[str]:
    """How the message names a group that is NCCL on at least one path (`group_backend`)."""
    backend = group_backend(model, call)
    if backend == DEFAULT_BACKEND:
        return "Process group with torch's default backend (NCCL for CUDA tensors)"
    return "NCCL process group" if backend == "nccl" else None


def _callers_select_a_device(model: SemanticModel, init: cst.Call) -> bool:
    """A helper that starts the group for other files (`distributed.multi_init(device_id, ...)`
    called from each training script): the process is the caller's, and every caller's file
    selects a GPU itself (`torch.cuda.set_device(device_id)` after the call)."""
    function = owner_def(model, init)
    if function is None:
        return False
    sites = model.flow.all_call_sites(function)
    process = group_process(model, init)
    return bool(sites) and all(
        caller is not model and caller_selects_a_device(caller, model, process) for caller, _, _ in sites)


def _placements_of_process(model: SemanticModel, init: cst.Call, placements: list[cst.Call]) -> list[cst.Call]:
    """The placements that run in the process making `init`: in the functions reached from
    the outermost callers of its function (an `mp.spawn` target has none), or all of them when
    that climb reaches module level."""
    reached = _functions_of_process(model, init)
    if reached is None:
        return placements
    return [p for p in placements if owner_def(model, p) in reached or owner_def(model, p) is None]


def _functions_of_process(model: SemanticModel, init: cst.Call) -> Optional[set]:
    """The functions of the file reached from the outermost callers of the init's function;
    None when that climb reaches module level (then the whole file runs in the process)."""
    start = owner_def(model, init)
    if start is None:
        return None
    roots, seen, stack = [], set(), [start]
    while stack:
        function = stack.pop()
        if function in seen:
            continue
        seen.add(function)
        callers = callers_of(model, function)
        if not callers:
            roots.append(function)
        for call in callers:
            outer = owner_def(model, call)
            if outer is None:
                return None
            stack.append(outer)
    callees: dict = {}
    for site in model.calls:
        owner = owner_def(model, site.node)
        if owner is not None:
            callees.setdefault(owner, set()).update(_called_defs(model, site.node, owner))
    reached, stack = set(), list(roots)
    while stack:
        function = stack.pop()
        if function not in reached:
            reached.add(function)
            stack.extend(callees.get(function, ()))
    return reached


def _called_defs(model: SemanticModel, call: cst.Call, owner: cst.FunctionDef) -> list[cst.FunctionDef]:
    """The defs a call of this file may run: by name, `self.m()`, or `x.m()` for a method `m`
    of the caller's own class (a static worker handed the instance as `self`)."""
    found = list(called_functions(model, call.func, call))
    if isinstance(call.func, cst.Attribute) and not found:
        owner_class = model.parent(model.parent(owner))
        if isinstance(owner_class, cst.ClassDef):
            found = [s for s in owner_class.body.body if isinstance(s, cst.FunctionDef) and s.name.value == call.func.attr.value]
    return found


def _fix(model: SemanticModel, call: cst.Call) -> Optional[Fix]:
    if model.imports.get("torch") != "torch":
        return None
    statement = model.statement_of(call)
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    local_rank = None
    for candidate in ("local_rank", "args.local_rank", "opt.local_rank"):
        head = candidate.split(".")[0]
        if "." in candidate and f"{candidate}" not in model.text:
            continue  # `args` may have no `local_rank`: only where the script reads it itself
        if model.owner_scope(head, model.scope(call)) is not None:  # bound where the call runs
            local_rank = candidate
            break
    if local_rank is None:
        return None
    anchor = _after_binding(model, statement, local_rank.split(".")[0])
    if anchor is None:
        return None
    return Fix(
        Applicability.UNSAFE,
        f"Insert `torch.cuda.set_device({local_rank})` after `init_process_group`",
        (Edit(anchor, f"torch.cuda.set_device({local_rank})", EditKind.INSERT_AFTER_STATEMENT),),
    )


def _after_binding(model: SemanticModel, statement: cst.SimpleStatementLine, name: str) -> Optional[cst.CSTNode]:
    """The statement to insert after: `init_process_group`'s, or, where the block binds the
    local rank only after it (`local_rank = int(os.environ["LOCAL_RANK"])` on the next line),
    that binding, so the name is bound when set_device runs. None where a `cuda` placement
    comes between the two, or the name is bound later in a nested block only."""
    block = model.parent(statement)
    siblings = list(getattr(block, "body", ()))
    if statement not in siblings:
        return statement
    later = siblings[siblings.index(statement) + 1:]
    scope = model.scope(statement)
    holders = []  # the later statements of this block that bind the name (in a nested block too)
    for binding in model.bindings.get(name, ()):
        if binding.scope is scope:
            around = (binding.node, *model.ancestors(binding.node))
            holders.extend(s for s in later if any(node is s for node in around))
    binds = [s for s in later if any(s is h for h in holders) and isinstance(s, cst.SimpleStatementLine)]
    if not binds:
        return None if holders else statement
    between = later[: later.index(binds[0])]
    if any("cuda" in model.code(s) for s in between):
        return None
    return binds[0]
