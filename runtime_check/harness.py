"""The probe harness: installs the probes, the budget and the write guard, then runs each
variant of a script as `__main__`, one after another, in this one process.

    python -m dplint.runtime_check.harness PLAN.json

Run once per process (under torchrun: once per rank). PLAN.json (written by the runner) holds
the budget and the variants: for each, its records folder, its script (in its own scratch
overlay of the user's folder), working directory and arguments. For each variant it records,
as JSON lines in ``<records>/rank<R>.jsonl``: its start (pid and wall-clock time), every script
line the first time it runs, the probes' observations, the loops the budget cut, and how the
variant ended. Between variants every rank tears its process group down and waits for the
others (a barrier on torchrun's own store), so the next variant starts together.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import sys
import time
import types

from dplint.runtime_check.record import Recorder, stacks_path
from dplint.runtime_check.supervise import die_with_parent

EXIT_SCRIPT_ERROR = 3

# Errors that mean "this script needs a CUDA device" rather than a bug the probes look at.
NEEDS_CUDA_MESSAGES = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "only supported with GPUs",
    "doesn't have NCCL built in",
    "NCCL is not available",
    "CUDA driver version is insufficient",
    "no CUDA-capable device",
    "Cannot access accelerator device when none is available",
    "Attempting to deserialize object on a CUDA device",
    "Invalid device, must be cuda device",
)


class LineTracer:
    """Records each line of the script the first time it runs (to tell "not reached")."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.seen: set[int] = set()

    def global_trace(self, frame, event, arg):
        if frame.f_code.co_filename != self.recorder.script:
            return None  # torch's own frames are not traced line by line
        return self.local_trace

    def local_trace(self, frame, event, arg):
        if event == "line" and frame.f_lineno not in self.seen:
            self.seen.add(frame.f_lineno)
            self.recorder.emit("line", line=frame.f_lineno)
        return self.local_trace


def error_line(recorder: Recorder, error: BaseException):
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == recorder.script:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


def describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def observe_process_group(recorder: Recorder) -> None:
    """Records the backend the script's process group uses (for the report's header)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        recorder.emit("process-group", backend=str(dist.get_backend()), world_size=dist.get_world_size())
        return result

    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group


class Barrier:
    """All ranks meet between variants, on the store torchrun's agent serves to its workers."""

    def __init__(self, world_size: int) -> None:
        from datetime import timedelta

        import torch.distributed as dist

        self.world_size = world_size
        self.store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
            is_master=False, timeout=timedelta(hours=1),
        )

    def wait(self, index: int) -> None:
        key = f"dplint-verify/variant-{index}"
        self.store.add(key, 1)
        while self.store.add(key, 0) < self.world_size:
            time.sleep(0.02)


class StderrTail:
    """sys.stderr while a script runs: writes go through, and the last lines are kept, so that
    verify can show why a script stopped (an argparse usage error, a message before `sys.exit(1)`)."""

    LINES = 10

    def __init__(self, stream) -> None:
        self._stream = stream
        self._lines: list[str] = []
        self._partial = ""

    def write(self, text) -> int:
        written = self._stream.write(text)
        if isinstance(text, str):
            *complete, self._partial = (self._partial + text).split("\n")
            self._lines = (self._lines + [line.rstrip()[:300] for line in complete])[-self.LINES:]
        return written

    def lines(self) -> list[str]:
        return [line for line in [*self._lines, self._partial.rstrip()] if line.strip()][-self.LINES:]

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run_variant(variant: dict, recorder: Recorder, finder) -> tuple[str, int, str | None, int | None]:
    """Runs one variant's script as `__main__`; returns (status, exit code, error, line).
    `variant["stderr"]` gets the last lines the script wrote to sys.stderr."""
    from dplint.runtime_check.budget import BudgetReached, compile_with_budget

    script = variant["script"]
    os.chdir(variant["cwd"])
    sys.argv = [script, *variant["args"]]
    finder.root = os.path.join(variant["root"], "")
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = __builtins__
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = module  # pickle finds the script's classes here
    sys.path.insert(0, variant["path_entry"])
    tracer = LineTracer(recorder)
    status, code, error, line = "finished", 0, None, None
    saved_stderr = sys.stderr
    sys.stderr = tail = StderrTail(saved_stderr)
    try:
        with open(script, "rb") as handle:
            compiled = compile_with_budget(handle.read(), script)
        sys.settrace(tracer.global_trace)
        exec(compiled, module.__dict__)
    except BudgetReached:
        status = "budget"
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)  # as Python does for `sys.exit("message")`
        status = "finished" if code == 0 else "exit"
    except BaseException as caught:  # the script's own failure is an observation, not ours
        status, code, error, line = "error", EXIT_SCRIPT_ERROR, describe(caught), error_line(recorder, caught)
    finally:
        sys.settrace(None)
        if sys.stderr is tail:
            sys.stderr = saved_stderr
        variant["stderr"] = tail.lines()
        sys.modules["__main__"] = saved_main
        if variant["path_entry"] in sys.path:
            sys.path.remove(variant["path_entry"])
    return status, code, error, line


def forget_project_modules(root: str) -> None:
    """The next variant imports the user's modules afresh, from its own overlay."""
    prefix = os.path.join(root, "")
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(prefix):
            del sys.modules[name]


def finish(recorder: Recorder, status: str, error, line, code: int = 0, stderr: list | None = None) -> None:
    import torch

    recorder.muted = True  # these queries are verify's, not the script's
    facts = {}
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        # The devices the CUDA runtime serves: fixed when the driver initialised, whatever the
        # variable says now. device_count() re-reads CUDA_VISIBLE_DEVICES through NVML until torch
        # initialises CUDA, so after a late write the two can disagree.
        runtime_count = getattr(torch._C, "_cuda_getDeviceCount", None)
        facts["runtime_device_count"] = runtime_count() if facts["cuda_available"] and runtime_count else facts["device_count"]
    except Exception:  # a broken CUDA setup must not hide the run's result
        facts["cuda_available"], facts["device_count"] = False, 0
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    recorder.muted = False
    needs_cuda = error is not None and any(message in error for message in NEEDS_CUDA_MESSAGES)
    recorder.emit("end", status=status, error=error, line=line, needs_cuda=needs_cuda, wall=time.time(), code=code,
                  stderr=stderr or [], **facts)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            # the clean stop; after a crash it also closes the links a peer waits on, so that
            # peer's collective fails instead of hanging and every rank reaches the barrier
            dist.destroy_process_group()
    except Exception:
        pass


def warm_up() -> None:
    """torch imports much lazily (the first optimizer pulls in torch._dynamo, seconds); done
    here, before the line tracer is on, it costs the run a third of the time."""
    import torch

    try:
        parameter = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.SGD([parameter], lr=0.1)
        parameter.sum().backward()
        optimizer.step()
    except Exception:
        pass


def fresh_group_names(variant: int) -> None:
    """The next variant's default process group gets a name of its own: torch names it by a
    counter that its destruction resets, and the same name would meet the previous group's
    keys (and addresses) still in torchrun's store."""
    try:
        from torch.distributed import distributed_c10d

        distributed_c10d._world.group_count = 1000 * variant
    except (ImportError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # the launcher (or verify) died: so does this rank
    plan_path = (sys.argv[1:] if argv is None else argv)[0]
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # `-m` put the launch folder there; a script's run has its own folder instead
    rank = int(os.environ.get("RANK", "0"))
    if hasattr(faulthandler, "register"):
        # `kill -USR1 PID` writes where this rank is now; verify asks a rank that went silent
        stacks = open(stacks_path(plan_path, rank), "w", encoding="utf-8")  # noqa: SIM115 (open until exit)
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    variants = plan["variants"]
    recorder = Recorder(variants[0]["records"], rank, variants[0]["script"])
    recorder.emit("start", pid=os.getpid(), pgid=os.getpgid(0), wall=time.time(), world_size=world_size,
                  local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    try:
        import torch  # noqa: F401  (the probes patch it)
    except ImportError as error:
        recorder.emit("end", status="error", error=describe(error), line=None, needs_cuda=False, wall=time.time())
        return 2

    from dplint.runtime_check import overlay
    from dplint.runtime_check.budget import Budget, ProjectFinder
    from dplint.runtime_check.probes import ProbeContext, install_all

    warm_up()
    context = ProbeContext(recorder)
    budget = Budget(recorder, plan["batches"], plan["epochs"])
    budget.install()
    observe_process_group(recorder)
    install_all(context)
    if plan["cpu_remap"]:
        from dplint.runtime_check import remap

        remap.install(recorder, plan.get("nproc") or 1)
    finder = ProjectFinder(variants[0]["root"])
    sys.meta_path.insert(0, finder)
    guard = overlay.WriteGuard(recorder)
    guard.install()
    barrier = Barrier(world_size) if world_size > 1 and "MASTER_PORT" in os.environ else None
    environ = dict(os.environ)
    for index, variant in enumerate(variants):
        if index:
            if barrier is not None:
                barrier.wait(index)
            recorder.switch(variant["records"], variant["script"])
            recorder.emit("start", pid=os.getpid(), pgid=os.getpgid(0), wall=time.time(), world_size=world_size,
                          local_rank=int(os.environ.get("LOCAL_RANK", "0")))
            if dict(os.environ) != environ:  # a variant's CUDA_VISIBLE_DEVICES is not the next one's
                recorder.muted = True
                os.environ.clear()
                os.environ.update(environ)
                recorder.muted = False
            forget_project_modules(variants[index - 1]["root"])
            context.reset()
            budget.next_variant()
        guard.root, guard.real_root, guard.workdir = variant["root"], plan["real_root"], plan["workdir"]
        status, code, error, line = run_variant(variant, recorder, finder)
        # What the script left in reference cycles (a DDP, its process group's connections) goes
        # now, as at the end of a real run: a peer's teardown may wait for exactly that.
        gc.collect()
        finish(recorder, status, error, line, code, variant.get("stderr"))
        fresh_group_names(index + 1)
    recorder.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()  # lets DataLoader iterators shut their worker processes down
    # os._exit: the script's non-daemon threads and atexit hooks must not keep the run alive.
    os._exit(code)
