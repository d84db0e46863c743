"""DPL009 late-cuda-visible-devices: CUDA_VISIBLE_DEVICES set after torch, or after CUDA started."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.cuda import (
    IMPORT,
    INIT,
    MAY_INIT,
    CudaEvent,
    CudaTimeline,
    VisibleDevicesWrite,
    conditional_process_start_after,
    events_before_callers,
    is_torch_import,
    starts_process_after,
    visible_devices_writes,
)
from dplint.flow import consistent
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel

# How serious what ran before the write is: CUDA certainly initialised first, then on some
# paths, then "may initialise" (torch.load without map_location), then a mere import.
RANK = {(INIT, True): 5, (INIT, False): 4, (MAY_INIT, True): 3, (MAY_INIT, False): 2, (IMPORT, True): 1, (IMPORT, False): 1}


class LateCudaVisibleDevices(Rule):
    """
    ## What it does
    Flags a write of `CUDA_VISIBLE_DEVICES` (`os.environ[...] = ...`, `os.environ.update`,
    `os.environ.setdefault`, `os.putenv`) that runs after something touched torch:

    - an error after a call that initialises CUDA: `torch.cuda.is_available()`,
      `set_device`, `current_device`, `get_device_name/properties/capability`,
      `synchronize`, `mem_get_info`, `is_bf16_supported`, any `.cuda()`, `.to("cuda")`,
      a torch call with `device="cuda"`, `torch.load(..., map_location="cuda")`, the
      `nn.DataParallel(...)` constructor, a `GradScaler` or `autocast` built enabled for
      CUDA (a warning when `enabled=` is not a literal);
    - a warning after `torch.load(f)` without `map_location` (a checkpoint saved from a GPU
      is restored onto it, which initialises CUDA);
    - a warning when the call that initialises CUDA runs before the write on some paths only
      (in a branch, a loop body, a `try`, or before an early `return`): on those paths the
      value is ignored.

    Silent after a mere `import torch`: it does not initialise CUDA, so the value takes effect.
    Silent after `torch.cuda.device_count()` alone: it counts through NVML without initialising
    CUDA (wherever NVML works, i.e. wherever the NVIDIA driver is installed) and re-reads the
    variable on every call, so a later write still takes effect.

    "Before" is run order: the file's top level, and the body of each function where that
    order calls it -- a function of the file (`main()` under `if __name__ == "__main__":`),
    a method (`self.build()`, `runner.build()` with `runner = Runner(...)` of this file), a
    class's `__init__`, and, through the project, a function or class of another file (what
    it does before it returns, reported at the call) -- and each function body from its
    start, after what ran before its `def`. A decorated or async function's body is not
    followed (a decorator may skip it). A write in a function that other files of the project
    call (`def use_gpus(ids):` in utils.py, or a function of utils.py that calls it, up to
    three calls up) is judged also by what each calling file certainly did before its call
    (`use_gpus(args.gpus)` in train.py after `torch.cuda.is_available()`); a call through a
    base class or a name the caller rebinds is not seen. `torch.device("cuda:1")`, `torch.manual_seed` and
    `torch.cuda.manual_seed_all` do not initialise CUDA and are not counted, nor is a call
    on the right of `and`/`or` or in a lambda or comprehension. A write followed, in the same function and on
    every path, by a call that starts a process (`subprocess.*`, `os.system`,
    `multiprocessing`, `torch.multiprocessing.spawn`) is left alone: the child gets the new
    value. When that start runs only on some paths (`if len(gpus) > 1: mp.spawn(...)` `else:
    worker(0, args)`), the write is a warning: on the other paths this process uses it.

    A file that only parses with a pre-3.7 grammar (`x.cuda(async=True)`, `async` as a name)
    is still analysed, with `async` read as a name; such files get no automatic fix.

    ## Why is this bad?
    The CUDA driver reads `CUDA_VISIBLE_DEVICES` once, when CUDA initialises. After that
    the new value is ignored without a message: the process keeps every GPU it saw, so
    "use GPU 1" runs on GPU 0, next to another job.

    `import torch` itself does not initialise CUDA (torch 2.13: `torch.cuda.is_initialized()`
    stays False), so a write after it works and is not flagged. Neither does
    `torch.cuda.device_count()` where NVML works. Once CUDA is initialised the two disagree:
    `device_count()` follows the new value while the runtime keeps the devices it saw (seen on
    an H200 with torch 2.11: `CUDA_VISIBLE_DEVICES='-1'` after `is_available()` made
    `device_count()` 0, so `nn.DataParallel` found no device, while tensors still went to the GPU).

    ## Example
    ```python
    import os
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"  # ignored: is_available() initialised CUDA
    ```

    Use instead:
    ```python
    import os
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ```

    ## Fix safety
    The fix moves the statement (with an `import os` when `os` is imported only later) to
    just above the file's first `import torch`. It is safe, and offered only when the
    statement is at the module's top level and moving it changes nothing else: its value is
    a literal or uses only names already bound above that import, it calls nothing, and no
    code between the two places reads the environment. A write inside a function or under
    `if __name__ == "__main__":` is not moved: that would run it on import too.
    """

    code = "DPL009"
    name = "late-cuda-visible-devices"
    severity = Severity.ERROR
    summary = "CUDA_VISIBLE_DEVICES set after CUDA was initialised: the value is ignored"
    fix_applicability = Applicability.SAFE
    fix_safety = "safe when movable"
    tokens = ("CUDA_VISIBLE_DEVICES",)

    VALID = (
        # Set before torch is imported.
        "import os\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\n"
        "import torch\n"
        "print(torch.cuda.device_count())\n",
        # A child process's environment, not this process's.
        "import os, subprocess\n"
        "import torch\n"
        "if torch.cuda.is_available():\n"
        "    env = dict(os.environ, CUDA_VISIBLE_DEVICES='1')\n"
        "    subprocess.run(['python', 'train.py'], env=env)\n",
        # Set for the processes that `mp.spawn` starts, on every path.
        "import os\n"
        "import torch\n"
        "import torch.multiprocessing as mp\n"
        "def main(gpus):\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = gpus\n"
        "    mp.spawn(work, nprocs=len(gpus.split(',')))\n",
        # After `import torch` only: importing torch does not initialise CUDA.
        "import os\n"
        "import torch\n"
        "\n"
        "os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"0,1\"  # the two free GPUs\n"
        "model = torch.nn.Linear(4, 4)\n",
        # The checkpoint is mapped to the CPU: loading it touches no GPU.
        "import os\n"
        "import torch\n"
        "def main(args):\n"
        "    if args.resume:\n"
        "        state = torch.load(args.resume, map_location='cpu')\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = args.gpus\n",
        # Only read.
        "import os\n"
        "import torch\n"
        "torch.cuda.set_device(0)\n"
        "print(os.environ.get('CUDA_VISIBLE_DEVICES'))\n",
    )
    INVALID = (
        # After torch.load() without map_location: a GPU checkpoint initialises CUDA.
        Example(
            "import os\n"
            "import torch\n"
            "state = torch.load('init.pt')\n"
            "os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
            expected=(
                "import os\n"
                "os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
                "import torch\n"
                "state = torch.load('init.pt')\n"
            ),
        ),
        Example(
            "import torch\n"
            "import os\n"
            "GPUS = '1'\n"
            "print(torch.cuda.is_available())\n"
            "os.environ.setdefault('CUDA_VISIBLE_DEVICES', '1')\n",
            expected=(
                "import os\n"
                "os.environ.setdefault('CUDA_VISIBLE_DEVICES', '1')\n"
                "import torch\n"
                "import os\n"
                "GPUS = '1'\n"
                "print(torch.cuda.is_available())\n"
            ),
        ),
        # On resume, a GPU checkpoint is restored onto the GPU first (no `map_location`).
        Example(
            "import os\n"
            "import torch\n"
            "def main(args):\n"
            "    if args.resume:\n"
            "        state = torch.load(args.resume)\n"
            "    os.environ['CUDA_VISIBLE_DEVICES'] = args.gpus\n",
        ),
        # A method that moves the model to the GPU runs first.
        Example(
            "import os\n"
            "import torch\n"
            "class Runner:\n"
            "    def build(self):\n"
            "        self.net = torch.nn.Linear(2, 2).cuda()\n"
            "    def pick(self, gpus):\n"
            "        os.environ['CUDA_VISIBLE_DEVICES'] = gpus\n"
            "runner = Runner()\n"
            "runner.build()\n"
            "runner.pick('1')\n",
        ),
        # Inside main(), after CUDA initialised at module level: flagged, not moved.
        Example(
            "import os\n"
            "import torch\n"
            "import torch.nn as nn\n"
            "net = nn.DataParallel(nn.Linear(2, 2))\n"
            "def main(gpus):\n"
            "    os.environ.update({'CUDA_VISIBLE_DEVICES': gpus})\n"
            "if __name__ == '__main__':\n"
            "    main('0')\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        writes = visible_devices_writes(model)
        if not writes:
            return
        timeline = CudaTimeline(model)
        for write in writes:
            event = self._latest_fact(model, timeline, write)
            if event is None or event.kind == IMPORT or starts_process_after(model, write.node):
                # Only `import torch` before the write: torch 2.13 does not initialise CUDA on
                # import, so the value takes effect. Real code does this everywhere; say nothing.
                continue
            line = model.position(event.node)[0].line
            some = "" if event.certain else " on the paths that run it"
            if event.kind == INIT:
                message = (
                    f"`CUDA_VISIBLE_DEVICES` is set after {event.description} ({event.via}line {line}) initialised CUDA{some}: "
                    "the CUDA driver reads it once, at initialisation, so this value is ignored and the "
                    "process keeps the GPUs it saw; set it before `import torch`"
                )
            else:
                message = (
                    f"`CUDA_VISIBLE_DEVICES` is set after {event.description} ({event.via}line {line}), which {event.why}"
                    f"{some}; then this value is ignored; set it before `import torch`"
                )
            severity = Severity.ERROR if event.kind == INIT and event.certain else Severity.WARNING
            spawn = conditional_process_start_after(model, write.node)
            if spawn is not None:
                severity = Severity.WARNING  # right for the children, wrong for this process
                message += (
                    f" (the processes that `{model.code(spawn.func)}()` on line {model.position(spawn)[0].line} "
                    "starts get the value, but it runs only on some paths; on the others this process uses it)"
                )
            yield Violation(node=write.node, message=message, fix=self._fix(model, write), severity=severity)

    @staticmethod
    def _latest_fact(model: SemanticModel, timeline: CudaTimeline, write: VisibleDevicesWrite) -> Optional[CudaEvent]:
        """The most serious thing certainly done before the write, in any run order reaching it."""
        # What the write's own statement computes first: `... = str(torch.cuda.device_count())`.
        inputs = timeline.events_in(next(a for a in model.ancestors(write.node) if isinstance(a, cst.BaseSmallStatement)))
        found = None
        # Other files that call the write's function (or a function of this file that does)
        # after they initialised CUDA.
        callers = tuple(events_before_callers(model, write.node))
        write_path = model.flow.branch_conditions(write.node)
        for state in timeline.states(model.statement_of(write.node)) or [()]:
            for event in state + inputs + callers:
                if not event.certain and not consistent(model.flow.branch_conditions(event.node), write_path):
                    continue  # `if len(ids) > 1: DataParallel(...)` then `if len(ids) == 1:` write
                if found is None or RANK[event.kind, event.certain] > RANK[found.kind, found.certain]:
                    found = event
        return found

    @staticmethod
    def _fix(model: SemanticModel, write: VisibleDevicesWrite) -> Optional[Fix]:
        statement = model.statement_of(write.node)
        body = list(model.module.body)
        if not isinstance(statement, cst.SimpleStatementLine) or statement not in body or len(statement.body) != 1:
            return None  # inside a block or a function: moving it would change when it runs
        if any(isinstance(a, cst.Lambda) for a in model.ancestors(write.node)):
            return None  # defining the lambda earlier would not run the write earlier
        first_import = next((s for s in body if _imports_torch(s)), None)
        if first_import is None or body.index(first_import) > body.index(statement):
            return None
        if not isinstance(first_import, cst.SimpleStatementLine):
            return None
        between = body[body.index(first_import) : body.index(statement)]
        if any(_may_read_environment(model, s) for s in between):
            return None
        if not _movable(model, write, first_import, statement):
            return None
        # The comment lines right above the statement describe it: they move with it. Blank
        # lines above it go too when blank lines follow it, so no gap doubles up.
        leading = list(statement.leading_lines)
        comments = []
        while leading and leading[-1].comment is not None:
            comments.insert(0, leading.pop())
        after = body[body.index(statement) + 1] if statement is not body[-1] else None
        blank_after = after is None or bool(after.leading_lines and after.leading_lines[0].comment is None)
        removed = comments + (leading if blank_after and all(line.comment is None for line in leading) else [])
        lines = [line.comment.value for line in comments]
        lines.append(model.code(statement.with_changes(leading_lines=())).rstrip("\r\n"))
        root = write.root.value
        here, there = model.binding_at(root, statement), model.binding_at(root, first_import)
        same_module = here is there or (
            root == "os" and isinstance(getattr(here, "node", None), cst.Import) and isinstance(getattr(there, "node", None), cst.Import)
        )
        if not same_module:
            if root != "os" or there is not None or not isinstance(getattr(here, "node", None), cst.Import):
                return None
            lines.insert(0, "import os")
        return Fix(
            Applicability.SAFE,
            "Move it above the first `import torch`",
            (
                Edit(first_import, "\n".join(lines), EditKind.INSERT_BEFORE_STATEMENT),
                *(Edit(line, "", EditKind.REPLACE) for line in removed),
                Edit(statement, "", EditKind.DELETE_STATEMENT),
            ),
        )


def _imports_torch(statement: cst.CSTNode) -> bool:
    """A top-level statement that imports torch (in any block that is not a def or class)."""
    stack = [statement]
    while stack:
        current = stack.pop()
        if is_torch_import(current):
            return True
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression)):
            stack.extend(current.children)
    return False


def _may_read_environment(model: SemanticModel, statement: cst.CSTNode) -> bool:
    """Whether running the statement may read or write the environment. A `def` runs nothing;
    anything else that names the environment or the variable counts (deliberately coarse)."""
    if isinstance(statement, cst.FunctionDef):
        return False
    text = model.code(statement)
    return any(word in text for word in ("environ", "getenv", "putenv", "CUDA_VISIBLE_DEVICES"))


def _movable(model: SemanticModel, write: VisibleDevicesWrite, destination: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """The write's key and value mean the same above `destination`: no calls, and every name
    they read is bound there to what it is bound to at the write."""
    for expr in write.inputs:
        stack = [expr]
        while stack:
            current = stack.pop()
            if isinstance(current, (cst.Call, cst.Lambda, cst.Await, cst.Yield, cst.NamedExpr)):
                return False
            if isinstance(current, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                return False
            if isinstance(current, cst.Name):
                if current.value in ("True", "False", "None"):
                    continue
                binding = model.binding_at(current.value, statement)
                if binding is None or model.binding_at(current.value, destination) is not binding:
                    return False
                continue
            if isinstance(current, cst.Attribute):
                stack.append(current.value)  # `config.GPUS`: only the name matters
                continue
            stack.extend(current.children)
    return True
