"""DPL009 late-cuda-visible-devices: the order of CUDA queries and CUDA_VISIBLE_DEVICES
writes; on CUDA, the devices the CUDA runtime serves at the end against the list the script
asked for."""

from __future__ import annotations

import sys

from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL009"
NAME = "late-cuda-visible-devices"
VARIABLE = "CUDA_VISIBLE_DEVICES"
# The calls that initialise CUDA in torch 2.13 (not device_count(): it counts through NVML and
# re-reads the variable each time).
QUERIES = (
    "is_available", "set_device", "current_device", "get_device_name",
    "get_device_properties", "get_device_capability", "synchronize", "mem_get_info",
    "is_bf16_supported", "init", "_lazy_init",
)


def install(context) -> None:
    if not context.once("cuda-order"):
        return
    import torch

    recorder = context.recorder
    def wrap(name, original):
        def query(*args, **kwargs):
            line = recorder.script_line()
            seen = context.state.setdefault("cuda-queries", set())
            if (name, line) not in seen:
                seen.add((name, line))
                recorder.emit("cuda-query", line=line, function=name)
            return original(*args, **kwargs)

        return query

    for name in QUERIES:
        original = getattr(torch.cuda, name, None)
        if callable(original):
            setattr(torch.cuda, name, wrap(name, original))

    def audit(event, args):
        # `os.environ[...] = v`, `.update`, `.setdefault` and `os.putenv` all raise "os.putenv".
        if event == "os.putenv" and args:
            key = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            if key == VARIABLE:
                value = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
                recorder.emit("env", line=recorder.script_line(sys._getframe()), key=key, value=value)

    sys.addaudithook(audit)


def order(run: RunView) -> tuple[bool, str, dict | None]:
    """(written late?, evidence, the write) from rank 0."""
    first = run.ranks[0] if run.ranks else 0
    events = [e for e in run.events.get(first, ()) if e["kind"] in ("cuda-query", "env")]
    writes = [e for e in events if e["kind"] == "env"]
    if not writes:
        return False, f"{VARIABLE} was never written", None
    write = writes[0]
    queries = [e for e in events if e["kind"] == "cuda-query" and e["seq"] < write["seq"]]
    if queries:
        q = queries[0]
        where = f" (line {q['line']})" if q["line"] else ""
        return True, (
            f"torch.cuda.{q['function']}(){where} ran before {VARIABLE}={write['value']!r} was written "
            f"(line {write['line']})"
        ), write
    return False, f"{VARIABLE}={write['value']!r} was written (line {write['line']}) before any CUDA query", write


def requested(value: str, available: int | None = None) -> int:
    """How many devices a CUDA_VISIBLE_DEVICES value makes visible on a machine with
    `available` devices: CUDA stops at the first entry that is not a valid device."""
    count = 0
    for part in value.split(","):
        part = part.strip()
        if not part or part.startswith("-"):
            break
        if part.isdigit() and available is not None and int(part) >= available:
            break
        count += 1
    return count


def judge(case: Case) -> Judgement:
    late, original, write = order(case.original)
    fixed_late, fixed, _ = order(case.fixed)
    if write is None:
        return Judgement(Verdict.NOT_REACHED, original, fixed)
    if not late:
        return Judgement(Verdict.NO_RUNTIME_EFFECT, original + ": the value takes effect in this run", fixed)
    if not case.original.cuda:
        return Judgement(Verdict.NEEDS_GPU, original + "; without CUDA there is nothing to hide", fixed)
    # The original run's CUDA runtime serves every device (the late value was ignored): that is
    # the machine's count. torch.cuda.device_count() may still follow the late value (it reads
    # the variable through NVML until torch initialises CUDA), so the script gets two answers.
    visible = case.original.runtime_device_count
    asked = requested(write["value"], visible)
    original += f"; CUDA serves {visible} device(s) where the variable asks for {asked}"
    if case.original.device_count != visible:
        original += f" (torch.cuda.device_count() says {case.original.device_count}: it re-reads the variable)"
    if case.fixed.ends:
        fixed += f"; CUDA serves {case.fixed.runtime_device_count} device(s)"
    if visible == asked:
        return Judgement(Verdict.NOT_REPRODUCED, original + " (this machine shows no difference)", fixed)
    return decide(case, True, fixed_late or case.fixed.runtime_device_count != asked, original, fixed)
