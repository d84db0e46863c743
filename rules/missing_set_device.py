"""DPL014 missing-set-device: NCCL ranks that put their work on the bare `cuda` device."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.distributed import (
    INIT_PROCESS_GROUP,
    called_functions,
    callers_of,
    is_group_of_one,
    on_exclusive_branches,
)
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument, literal_value

SET_DEVICE = "torch.cuda.set_device"
TORCH_DEVICE = "torch.device"
# Calls into the project followed when looking for a `set_device` made on the script's behalf
# (`utils.init_distributed_mode(args)` in many repositories).
SEARCH_DEPTH = 3


class MissingSetDevice(Rule):
    """
    ## What it does
    Flags `init_process_group` with the `nccl` backend (a literal; a name that holds `"nccl"`
    on one path and another literal backend on the others, `"nccl" if use_gpu else "gloo"`,
    since `cuda` placements only run on the GPU path; `args.<name>` whose
    `add_argument("--<name>", default="nccl")` is in the file) in a file that places work on
    the bare `cuda` device (`x.cuda()`,
    `x.to("cuda")`, `torch.device("cuda")`) and never selects a GPU per process:
    no `torch.cuda.set_device(...)` in the file or in the project functions it calls
    (followed three calls deep, across files), none in the files of every caller of a
    helper that starts the group for other files, no `device_id=` given to
    `init_process_group`, and no `CUDA_VISIBLE_DEVICES` written by the script. Where a file
    starts several process groups (a training and a prediction worker, each an `mp.spawn`
    target), each is judged by the placements of its own process: the functions reached
    from its function's outermost callers in the file.

    A placement that sits on the other branch of a test than the `init_process_group` (in the
    same function: `if local_rank == -1: device = torch.device("cuda")` / `else: ...
    init_process_group("nccl")`, or `if rank != -1:` ... `if rank == -1:`) belongs to the
    one-process run and does not count.

    Silent when the backend is not known to be NCCL on any path (`args.dist_backend` without a
    default in the file, a value from a config file), when every
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
    tokens = (("init_process_group", "nccl", "cuda"),)

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
        inits = [site for site in model.calls if site.qualified_name == INIT_PROCESS_GROUP and _is_nccl(model, site.node)]
        if not inits or _selects_a_device(model):
            return
        placements = _bare_placements(model)
        if not placements:
            return
        # Several process groups in one file (a training and a prediction worker): each is
        # judged by the placements its own process runs, when the file shows them.
        own = {id(site.node): _placements_of_process(model, site.node, placements) for site in inits}
        narrowed = len(inits) > 1 and any(own.values())
        for site in inits:
            if argument(site.node, None, "device_id") is not None or is_group_of_one(site.node):
                continue  # a device chosen by the group, or one process: nobody shares GPU 0
            if _callers_select_a_device(model, site.node):
                continue
            mine = own[id(site.node)] if narrowed else placements
            # `if local_rank == -1: device = torch.device("cuda")` / `else: ...
            # init_process_group(...)`: that `cuda` is the one-process path's.
            mine = [placement for placement in mine if not on_exclusive_branches(model, placement, site.node)]
            if not mine:
                continue
            line = model.position(mine[0])[0].line
            yield Violation(
                node=site.node,
                message=(
                    f"NCCL process group, but nothing selects a GPU per process: `cuda` (line {line}) means the "
                    f"current device, which is GPU 0 in every process, so all ranks share GPU 0; call "
                    f"`torch.cuda.set_device(local_rank)` after `init_process_group`"
                ),
                fix=_fix(model, site.node),
            )


def _is_nccl(model: SemanticModel, call: cst.Call) -> bool:
    """NCCL on at least one path the code shows, every other path naming another backend:
    `"nccl"`, `backend = "nccl" if use_gpu else "gloo"` (the GPU path is the one that places
    work on `cuda`), `args.backend` whose command-line option defaults to `"nccl"`."""
    backend = argument(call, 0, "backend")
    if backend is None:
        return False
    # Collect the file's call sites first, outside this question's step budget: collecting
    # them asks about parameters again, which would use up the budget and answer "unknown".
    model.flow.call_sites(call)
    values = model.flow.values_at(backend, call)
    names = []
    for value in values:
        if not value.known:
            return False
        text = _backend_name(value.model, value.expr)
        if text is None:
            return False
        names.append(text)
    return any("nccl" in name for name in names)


def _backend_name(model: SemanticModel, expr: cst.BaseExpression) -> Optional[str]:
    """The backend a literal names, or the default of the command-line option an
    `args.<name>` reads (`parser.add_argument("--dist-backend", default="nccl")` in this file)."""
    try:
        text = literal_value(expr)
    except ValueError:
        text = _option_default(model, expr)
    return text.lower() if isinstance(text, str) else None


def _option_default(model: SemanticModel, expr: cst.BaseExpression) -> Optional[str]:
    if not isinstance(expr, cst.Attribute):
        return None
    wanted = expr.attr.value
    for site in model.calls:
        call = site.node
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
            continue
        dest = argument(call, None, "dest")
        try:
            names = [literal_value(dest)] if dest is not None else [
                literal_value(arg.value) for arg in call.args if arg.keyword is None]
        except ValueError:
            continue
        options = {str(name).lstrip("-").replace("-", "_") for name in names}
        if wanted not in options or (dest is None and not any(str(n).startswith("--") or not str(n).startswith("-") for n in names)):
            continue
        default = argument(call, None, "default")
        try:
            value = literal_value(default) if default is not None else None
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return None


def _selects_a_device(model: SemanticModel, depth: int = SEARCH_DEPTH, seen: Optional[set] = None) -> bool:
    """`set_device` here or in a project function this file calls; a CUDA_VISIBLE_DEVICES write."""
    seen = set() if seen is None else seen
    if id(model) in seen:
        return False
    seen.add(id(model))
    for site in model.calls:
        if site.qualified_name == SET_DEVICE:
            return True
    if "CUDA_VISIBLE_DEVICES" in model.text:
        return True
    if depth <= 0:
        return False
    for site in model.calls:
        if site.qualified_name is not None and site.qualified_name.startswith("torch"):
            continue
        callee = model.flow.callee(site.node)
        if callee is not None and callee.model is not model and _selects_a_device(callee.model, depth - 1, seen):
            return True
    return False


def _callers_select_a_device(model: SemanticModel, init: cst.Call) -> bool:
    """A helper that starts the group for other files (`distributed.multi_init(device_id, ...)`
    called from each training script): the process is the caller's, and every caller's file
    selects a GPU itself (`torch.cuda.set_device(device_id)` after the call)."""
    function = _owner_def(model, init)
    if function is None:
        return False
    sites = model.flow.all_call_sites(function)
    return bool(sites) and all(
        caller is not model and _selects_a_device(caller) for caller, _, _ in sites)


def _bare_placements(model: SemanticModel) -> list[cst.Call]:
    """Every `x.cuda()`, `x.to("cuda")` and `torch.device("cuda")` of the file, in order."""
    found = []
    for site in model.calls:
        call = site.node
        if site.qualified_name == TORCH_DEVICE and len(call.args) == 1 and _is_bare_cuda(call.args[0].value):
            found.append(call)
            continue
        if not isinstance(call.func, cst.Attribute) or site.qualified_name is not None:
            continue  # torch.cuda.* and other module functions
        method = call.func.attr.value
        if method == "cuda" and not call.args:
            found.append(call)
        elif method == "to" and call.args and call.args[0].keyword is None and _is_bare_cuda(call.args[0].value):
            found.append(call)
    return found


def _placements_of_process(model: SemanticModel, init: cst.Call, placements: list[cst.Call]) -> list[cst.Call]:
    """The placements that run in the process making `init`: in the functions reached from
    the outermost callers of its function (an `mp.spawn` target has none), or all of them when
    that climb reaches module level."""
    start = _owner_def(model, init)
    if start is None:
        return placements
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
            outer = _owner_def(model, call)
            if outer is None:
                return placements
            stack.append(outer)
    callees: dict = {}
    for site in model.calls:
        owner = _owner_def(model, site.node)
        if owner is not None:
            callees.setdefault(owner, set()).update(_called_defs(model, site.node, owner))
    reached, stack = set(), list(roots)
    while stack:
        function = stack.pop()
        if function not in reached:
            reached.add(function)
            stack.extend(callees.get(function, ()))
    return [p for p in placements if _owner_def(model, p) in reached or _owner_def(model, p) is None]


def _owner_def(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
    return None


def _called_defs(model: SemanticModel, call: cst.Call, owner: cst.FunctionDef) -> list[cst.FunctionDef]:
    """The defs a call of this file may run: by name, `self.m()`, or `x.m()` for a method `m`
    of the caller's own class (a static worker handed the instance as `self`)."""
    found = list(called_functions(model, call.func, call))
    if isinstance(call.func, cst.Attribute) and not found:
        owner_class = model.parent(model.parent(owner))
        if isinstance(owner_class, cst.ClassDef):
            found = [s for s in owner_class.body.body if isinstance(s, cst.FunctionDef) and s.name.value == call.func.attr.value]
    return found


def _is_bare_cuda(expr: cst.BaseExpression) -> bool:
    """`"cuda"`, or `"cuda" if torch.cuda.is_available() else "cpu"`: bare `cuda` on the GPU path."""
    if isinstance(expr, cst.IfExp):
        branches = (expr.body, expr.orelse)
        return any(_is_bare_cuda(b) for b in branches) and all(_is_bare_cuda(b) or _is_cpu(b) for b in branches)
    try:
        return literal_value(expr) == "cuda"
    except ValueError:
        return False


def _is_cpu(expr: cst.BaseExpression) -> bool:
    try:
        return literal_value(expr) == "cpu"
    except ValueError:
        return False


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
