"""The probe harness: installs the probes and the budget, then runs a script as `__main__`.

    python -m dplint.runtime_check.harness --records DIR [--batches K] [--epochs E]
        [--cpu-remap] [--path-entry DIR] SCRIPT [-- ARGS...]

Run once per process (under torchrun: once per rank). It records, as JSON lines in
``DIR/rank<R>.jsonl``: its start (pid, before torch is imported, so the runner can always
kill it), every script line the first time it runs, the probes' observations, and how the
run ended. The budget: a DataLoader yields at most K batches per iteration, and the
(E+1)-th iteration started from one script line stops the run cleanly on every rank.
"""

from __future__ import annotations

import argparse
import os
import sys

from dplint.runtime_check.record import Recorder

EXIT_SCRIPT_ERROR = 3  # the script raised; 0 means it finished or the budget stopped it

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
)


class BudgetReached(BaseException):
    """Raised from DataLoader.__iter__ when a loop has run its epochs; not an Exception, so
    the script's `except Exception:` does not swallow it."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dplint.runtime_check.harness")
    parser.add_argument("--records", required=True)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--cpu-remap", action="store_true")
    parser.add_argument("--path-entry", default=None, help="sys.path[0] for the script (its own folder)")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.script_args[:1] == ["--"]:
        options.script_args = options.script_args[1:]
    return options


class Budget:
    def __init__(self, recorder: Recorder, batches: int, epochs: int) -> None:
        self.recorder = recorder
        self.batches = batches
        self.epochs = epochs
        self.iterations: dict[object, int] = {}  # call site -> iterations started there

    def install(self) -> None:
        from torch.utils.data import DataLoader

        original_iter = DataLoader.__iter__
        budget = self

        def __iter__(self):
            caller = sys._getframe(1)
            line = budget.recorder.script_line(caller)
            # A loader iterated again from the same script line is the next epoch of one loop
            # (tqdm and enumerate wrappers are seen through: the site is the script's line).
            site = ("script", line) if line is not None else (caller.f_code.co_filename, caller.f_lineno)
            done = budget.iterations.get(site, 0)
            if done >= budget.epochs:
                budget.recorder.emit("budget", line=line, epochs=done)
                raise BudgetReached(f"{done} epochs ran from line {line}")
            budget.iterations[site] = done + 1
            budget.recorder.emit("epoch", line=line, epoch=done)
            return LimitedIterator(original_iter(self), budget.batches)

        DataLoader.__iter__ = __iter__


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


class LimitedIterator:
    """At most `limit` batches of a DataLoader iterator; everything else is the iterator's."""

    def __init__(self, inner, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._yielded = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._yielded >= self._limit:
            raise StopIteration
        batch = next(self._inner)
        self._yielded += 1
        return batch

    def __len__(self) -> int:
        return min(self._limit, len(self._inner))

    def __getattr__(self, name):
        return getattr(self._inner, name)


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


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    script = os.path.abspath(options.script)
    recorder = Recorder(options.records, int(os.environ.get("RANK", "0")), script)
    recorder.emit(
        "start",
        pid=os.getpid(),
        pgid=os.getpgid(0),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )
    try:
        import torch  # noqa: F401  (the probes patch it)
    except ImportError as error:
        recorder.emit("end", status="error", error=describe(error), line=None, needs_cuda=False)
        return 2

    from dplint.runtime_check.probes import ProbeContext, install_all

    context = ProbeContext(recorder)
    Budget(recorder, options.batches, options.epochs).install()
    observe_process_group(recorder)
    install_all(context)
    if options.cpu_remap:
        from dplint.runtime_check import remap

        remap.install(recorder)

    sys.argv = [script, *options.script_args]
    sys.path[0] = options.path_entry or os.path.dirname(script)
    tracer = LineTracer(recorder)
    status, code, error, line = "finished", 0, None, None
    sys.settrace(tracer.global_trace)
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
    except BudgetReached:
        status = "budget"
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        status = "finished" if code == 0 else "exit"
    except BaseException as caught:  # the script's own failure is an observation, not ours
        status, code, error, line = "error", EXIT_SCRIPT_ERROR, describe(caught), error_line(recorder, caught)
    finally:
        sys.settrace(None)
    finish(recorder, status, error, line, stop_process_group=status in ("finished", "budget"))
    return code


def finish(recorder: Recorder, status: str, error, line, stop_process_group: bool) -> None:
    import torch

    recorder.muted = True  # these queries are verify's, not the script's
    facts = {}
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception:  # a broken CUDA setup must not hide the run's result
        facts["cuda_available"], facts["device_count"] = False, 0
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    recorder.muted = False
    needs_cuda = error is not None and any(message in error for message in NEEDS_CUDA_MESSAGES)
    recorder.emit("end", status=status, error=error, line=line, needs_cuda=needs_cuda, **facts)
    if stop_process_group:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()  # the clean stop: every rank reaches it together
        except Exception:
            pass
    recorder.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    import gc

    gc.collect()  # lets DataLoader iterators shut their worker processes down
    # os._exit: the script's non-daemon threads and atexit hooks must not keep the run alive.
    os._exit(code)
