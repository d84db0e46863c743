"""`dplint verify` (the command is in `command.py`): signals, progress and the report.

Exit status: 0 when every finding got a verdict other than not-reached (confirmed,
not-reproduced, no-runtime-effect, needs-gpu); 1 on fix-failed or when a finding was not
reached (the report says why and what would reach it); 2 when verify itself could not do
its job, or was stopped by a signal.
"""

from __future__ import annotations

import importlib.util

# verify runs scripts under torch. Fail at import, as `dplint verify` expects, when it is
# missing; the runner itself never imports torch (its runs are subprocesses).
if importlib.util.find_spec("torch") is None:
    raise ImportError("No module named 'torch'")

import json
import signal
import sys
import threading
from collections import Counter

from dplint.runtime_check.runner import FIXED, ORIGINAL, Interrupted, Report, VerifyError, VerifyOptions, verify
from dplint.runtime_check.verdicts import RunView, Verdict

EXIT_ERROR = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def run_verify(script: str, script_args: list[str], *, select=None, cwd=None, cpu_remap=False, nproc_per_node=None,
               batches=3, epochs=2, timeout=120.0, output_format="text", keep=False, quiet=False) -> int:
    verify_options = VerifyOptions(
        nproc=nproc_per_node, batches=batches, epochs=epochs, timeout=timeout, cpu_remap=cpu_remap, keep=keep,
        cwd=cwd, select=select,
    )

    def progress(line: str) -> None:
        if not quiet:
            print(f"verify: {line}", file=sys.stderr, flush=True)

    previous = stop_on_signals()
    try:
        report = verify(script, list(script_args), verify_options, progress)
    except VerifyError as error:
        print(f"dplint: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except Interrupted as stop:
        print(f"dplint: error: verify stopped by {stop}: every run it started was killed and its temporary "
              "folder removed", file=sys.stderr)
        return EXIT_ERROR
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if output_format == "json":
        print(json.dumps(to_json(report), indent=2))
    else:
        print(render_text(report), end="")
    for error in report.errors:
        print(f"dplint: error: {error}", file=sys.stderr)
    if report.workdir:
        print(f"verify: kept {report.workdir}", file=sys.stderr)
    return report.exit_code


def stop_on_signals() -> dict:
    """SIGTERM, SIGHUP and SIGINT raise Interrupted in verify (its cleanup runs); a second
    signal during the cleanup is ignored. Returns the handlers to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def interrupt(number, frame):
        for other in previous:
            signal.signal(other, signal.SIG_IGN)
        raise Interrupted(number)

    previous = {}
    for number in STOP_SIGNALS:
        if signal.getsignal(number) is signal.SIG_IGN:
            continue  # `nohup dplint verify ...`: the user asked to ignore it
        previous[number] = signal.getsignal(number)
        signal.signal(number, interrupt)
    return previous


# --------------------------------------------------------------------------- rendering
def backend(run: RunView) -> str | None:
    groups = run.all("process-group")
    return groups[0]["backend"] if groups else None


def describe_setup(report: Report) -> str:
    run = report.runs[FIXED]
    device = f"CUDA ({report.gpus} GPU{'s' if report.gpus != 1 else ''})" if report.gpus else "CPU only (no CUDA)"
    if report.distributed:
        how = f"{report.nproc} ranks (torchrun --standalone --nproc-per-node {report.nproc})"
        if backend(run):
            how += f", backend {backend(run)}"
    else:
        how = "1 process"
    remap = "; cuda->cpu and nccl->gloo remapped (--cpu-remap)" if report.options.cpu_remap and not report.gpus else ""
    budget = f"budget {report.options.batches} batches x {report.options.epochs} epochs, timeout {report.options.timeout:.0f} s"
    return f"{how}, {device}{remap}; {budget}"


def describe_remapped(report: Report) -> str:
    return "; ".join(f"line {line} {what}" for line, what in report.remapped())


def describe_run(run: RunView) -> str:
    text = f"{run.stop_reason()} ({run.wall:.1f} s)"
    recovered = {}
    for event in run.recoveries():
        recovered.setdefault(event.get("line"), event["error"].split(":")[0])
    if recovered:
        where = ", ".join(f"{error} at line {line}" for line, error in recovered.items())
        text += f"; verify recorded and went past {len(recovered)} error{'s' if len(recovered) != 1 else ''} ({where})"
    return text


def summary(report: Report) -> str:
    counts = Counter(result.verdict.value for result in report.results)
    order = [verdict.value for verdict in Verdict]
    parts = [f"{counts[name]} {name}" for name in order if counts[name]]
    total = len(report.results)
    return f"{total} finding{'s' if total != 1 else ''}: {', '.join(parts)}"


def render_text(report: Report) -> str:
    lines = [f"dplint verify {report.script}"]
    if not report.results:
        lines.append("no findings: nothing to verify")
        return "\n".join(lines) + "\n"
    lines.append(f"runs: {describe_setup(report)}")
    if report.remapped():
        lines.append(f"remapped: {describe_remapped(report)}")
    for label, run in report.runs.items():
        if label == FIXED and run is report.runs.get(ORIGINAL):
            lines.append("fixed:    no fix changes this script: the fixed copy is the original")
        else:
            lines.append(f"{label + ':':<9} {describe_run(run)}")
    for missed in report.unflagged:
        lines.append(f"missed:   {missed.describe()}")
    for result in report.results:
        finding = result.finding
        lines.append("")
        before = f" (before: {result.before})" if result.before.startswith("only") else ""
        lines.append(
            f"{finding.filename}:{finding.location.row}:{finding.location.column}: "
            f"{finding.code} {finding.name}: {result.verdict.value}{before}"
        )
        lines.append(f"  original: {result.original}")
        lines.append(f"  fixed:    {result.fixed}")
    lines.append("")
    lines.append(summary(report))
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> dict:
    runs = {}
    for label, run in report.runs.items():
        runs[label] = {
            "status": run.stop_reason(),
            "wall_seconds": round(run.wall, 2),
            "ranks": len(run.ranks),
            "backend": backend(run),
            "timed_out": run.timed_out,
            "deadlocked": [{"rank": e["rank"], "call": e["call"], "line": e["line"]} for e in run.deadlocked],
            "recovered": [{"line": e.get("line"), "rank": e["rank"], "error": e["error"]} for e in run.recoveries()],
        }
    return {
        "script": report.script,
        "distributed": report.distributed,
        "nproc_per_node": report.nproc if report.distributed else None,
        "gpus": report.gpus,
        "cpu_remap": report.options.cpu_remap,
        "budget": {"batches": report.options.batches, "epochs": report.options.epochs, "timeout": report.options.timeout},
        "runs": runs,
        "remapped": [{"line": line, "what": what} for line, what in report.remapped()],
        "findings": [
            {
                "code": result.finding.code,
                "name": result.finding.name,
                "message": result.finding.message,
                "filename": result.finding.filename,
                "location": {"row": result.finding.location.row, "column": result.finding.location.column},
                "end_location": {"row": result.finding.end_location.row, "column": result.finding.end_location.column},
                "verdict": result.verdict.value,
                "fix_applied": result.fix_applied,
                "before_run": result.before,
                "evidence": {"original": result.original, "fixed": result.fixed},
            }
            for result in report.results
        ],
        "summary": dict(Counter(result.verdict.value for result in report.results)),
        "unflagged": [
            {"line": missed.line, "error": missed.error, "rule": missed.rule, "code": missed.code, "runs": list(missed.runs)}
            for missed in report.unflagged
        ],
        "errors": report.errors,
        "exit_code": report.exit_code,
    }
