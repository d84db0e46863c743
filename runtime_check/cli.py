"""`dplint verify` and `python -m dplint.runtime_check`: options, progress and the report.

    dplint verify [OPTIONS] SCRIPT [OPTIONS] [-- SCRIPT_ARGS...]

Exit status: 0 when every finding is confirmed or honestly classified, 1 when a fix failed,
2 when verify itself could not do its job.
"""

from __future__ import annotations

import importlib.util

# verify runs scripts under torch. Fail at import, as `dplint verify` expects, when it is
# missing; the runner itself never imports torch (its runs are subprocesses).
if importlib.util.find_spec("torch") is None:
    raise ImportError("No module named 'torch'")

import argparse
import json
import sys
from collections import Counter

from dplint.runtime_check.runner import Report, VerifyError, VerifyOptions, verify
from dplint.runtime_check.verdicts import RunView, Verdict

EXIT_ERROR = 2


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dplint verify",
        usage="dplint verify [OPTIONS] SCRIPT [OPTIONS] [-- SCRIPT_ARGS...]",
        description="Run SCRIPT and its fixed copy with probes; report, per finding, whether it is real.",
    )
    parser.add_argument("script")
    parser.add_argument("--output-format", choices=("text", "json"), default="text")
    parser.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                        help="ranks for a distributed script (default 2; with CUDA, the GPUs up to 2)")
    parser.add_argument("--batches", type=int, default=3, metavar="K", help="batches per DataLoader iteration (default 3)")
    parser.add_argument("--epochs", type=int, default=2, metavar="E", help="iterations of one loader loop (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per run (default 120)")
    parser.add_argument("--cpu-remap", action="store_true",
                        help="without CUDA, map cuda->cpu and nccl->gloo for scripts hard-wired to CUDA")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (fixed copy, records, logs)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def main(argv: list[str]) -> int:
    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1 :]
    try:
        options = parser().parse_args(argv)
    except SystemExit as stop:  # argparse printed the usage error
        return EXIT_ERROR if stop.code else 0
    if min(options.batches, options.epochs) < 1 or options.timeout <= 0 or (options.nproc_per_node or 1) < 1:
        print("dplint: error: --batches, --epochs, --nproc-per-node and --timeout must be positive", file=sys.stderr)
        return EXIT_ERROR
    verify_options = VerifyOptions(
        nproc=options.nproc_per_node, batches=options.batches, epochs=options.epochs,
        timeout=options.timeout, cpu_remap=options.cpu_remap, keep=options.keep,
    )

    def progress(line: str) -> None:
        if not options.quiet:
            print(f"verify: {line}", file=sys.stderr, flush=True)

    try:
        report = verify(options.script, script_args, verify_options, progress)
    except VerifyError as error:
        print(f"dplint: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    if options.output_format == "json":
        print(json.dumps(to_json(report), indent=2))
    else:
        print(render_text(report), end="")
    for error in report.errors:
        print(f"dplint: error: {error}", file=sys.stderr)
    if report.workdir:
        print(f"verify: kept {report.workdir}", file=sys.stderr)
    return report.exit_code


# --------------------------------------------------------------------------- rendering
def backend(run: RunView) -> str | None:
    groups = run.all("process-group")
    return groups[0]["backend"] if groups else None


def describe_setup(report: Report) -> str:
    run = report.runs["original"]
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
    lines.append(f"original: {describe_run(report.runs['original'])}")
    if report.runs["fixed"] is report.runs["original"]:
        lines.append("fixed:    no fix changes this script: the fixed copy is the original")
    else:
        lines.append(f"fixed:    {describe_run(report.runs['fixed'])}")
    for result in report.results:
        finding = result.finding
        lines.append("")
        lines.append(
            f"{finding.filename}:{finding.location.row}:{finding.location.column}: "
            f"{finding.code} {finding.name}: {result.verdict.value}"
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
                "evidence": {"original": result.original, "fixed": result.fixed},
            }
            for result in report.results
        ],
        "summary": dict(Counter(result.verdict.value for result in report.results)),
        "errors": report.errors,
        "exit_code": report.exit_code,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
