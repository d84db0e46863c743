"""`dplint verify`: lint, fix a copy, run both under the probe harness, judge each finding.

This side never imports torch: the runs are subprocesses (torch's own launcher for
distributed scripts), each in its own session, killed as a whole at the timeout; every
process they start carries a token in its environment, and whatever still carries it when
a run ends is killed, so nothing outlives `verify`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

from dplint.rule import Finding
from dplint.runtime_check.lines import LineMap, statement_lines
from dplint.runtime_check.probes import probe_modules
from dplint.runtime_check.record import Tail, read_events
from dplint.runtime_check.verdicts import NO_FIX, Case, Judgement, RunView, Verdict

TOKEN_VARIABLE = "DPLINT_VERIFY_TOKEN"
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# A script that starts its own ranks is run as one process, not under torchrun.
SELF_SPAWNING = {
    "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
    "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes",
}


class VerifyError(Exception):
    """verify cannot do its job (unreadable script, no torch ...); one line for the user."""


@dataclass
class VerifyOptions:
    nproc: Optional[int] = None  # ranks for a distributed script (default: 2, or the GPUs up to 2)
    batches: int = 3  # per DataLoader iteration
    epochs: int = 2  # iterations started from one script line
    timeout: float = 120.0  # seconds per run
    cpu_remap: bool = False  # map cuda->cpu and nccl->gloo when there is no CUDA
    keep: bool = False  # keep the temporary folder (fixed copy, records, logs)
    always_run: bool = False  # run even when there is no finding (tests use the observations)


@dataclass
class FindingResult:
    finding: Finding
    verdict: Verdict
    original: str
    fixed: str
    fix_applied: bool


@dataclass
class Report:
    script: str
    distributed: bool
    nproc: int = 1
    gpus: int = 0
    options: VerifyOptions = field(default_factory=VerifyOptions)
    results: list[FindingResult] = field(default_factory=list)
    runs: dict[str, RunView] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    fixed_text: str = ""
    workdir: Optional[str] = None  # kept only with --keep

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        if any(result.verdict is Verdict.FIX_FAILED for result in self.results):
            return 1
        return 0


Progress = Callable[[str], None]


def verify(script: str, script_args: list[str], options: VerifyOptions, progress: Optional[Progress] = None) -> Report:
    import libcst as cst

    from dplint.engine import fix_source, lint_source, rules_for
    from dplint.registry import selected_codes
    from dplint.source import SourceError, read_source

    progress = progress or (lambda line: None)
    try:
        text = read_source(script).text
    except (OSError, SourceError) as error:
        raise VerifyError(f"cannot read {script}: {error}") from None
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        raise VerifyError(f"{script}: cannot parse: {' '.join(error.message.split())}") from None
    rules = rules_for(selected_codes())
    linted = lint_source(text, script, rules)
    fixed = fix_source(text, script, rules, unsafe=True)
    report = Report(script, is_distributed(text), options=options, fixed_text=fixed.text)
    report.errors.extend(dict.fromkeys([*linted.errors, *fixed.errors]))
    if not linted.findings and not options.always_run:
        return report

    report.gpus = visible_gpus()
    if report.distributed:
        report.nproc = options.nproc or (min(2, report.gpus) if report.gpus else 2)
    workdir = tempfile.mkdtemp(prefix="dplint-verify-")
    try:
        versions = {"original": text}
        if fixed.text != text:
            versions["fixed"] = fixed.text
        runs = run_versions(script, script_args, versions, report, workdir, progress)
        report.runs = {"original": runs["original"], "fixed": runs.get("fixed", runs["original"])}
        for label, run in runs.items():
            if not run.events:
                report.errors.append(f"the {label} run did not start: {run.log_tail or 'no output'}")
        report.results = judge_all(text, fixed.text, linted.findings, fixed.remaining.findings, report)
    finally:
        if options.keep:
            report.workdir = workdir
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


def is_distributed(text: str) -> bool:
    """Whether the script starts a process group or builds a DDP (torchrun must launch it)."""
    import libcst as cst

    from dplint.semantic import SemanticModel

    try:
        model = SemanticModel(cst.parse_module(text))
    except Exception:
        return False
    if any(site.qualified_name in SELF_SPAWNING for site in model.calls):
        return False
    if any(site.qualified_name == INIT_PROCESS_GROUP for site in model.calls):
        return True
    return any(wrapping.kind == "DDP" for wrapping in model.wrappings)


@functools.lru_cache(maxsize=None)
def visible_gpus() -> int:
    """CUDA devices here. A CPU build of torch says so in its version.py: no import needed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise VerifyError("verify needs torch: pip install 'dplint[runtime]'")
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as handle:
            if re.search(r"^cuda\s*(:[^=]*)?=\s*None\s*$", handle.read(), re.M):
                return 0
    except OSError:
        pass
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return 0


# ------------------------------------------------------------------------------ runs
@dataclass
class _Run:
    label: str
    command: list[str]
    cwd: str
    records: str
    log: str
    token: str
    process: Optional[subprocess.Popen] = None
    started: float = 0.0
    ended: Optional[float] = None
    timed_out: bool = False


def run_versions(script: str, script_args: list[str], versions: dict[str, str], report: Report,
                 workdir: str, progress: Progress) -> dict[str, RunView]:
    options = report.options
    name = os.path.basename(script)
    runs: list[_Run] = []
    for label, text in versions.items():
        folder = os.path.join(workdir, label)
        records, cwd = os.path.join(folder, "records"), os.path.join(folder, "cwd")
        os.makedirs(records)
        os.makedirs(cwd)
        if label == "original":
            path = os.path.abspath(script)
        else:
            path = os.path.join(folder, name)
            with open(path, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        harness = [
            "-m", "dplint.runtime_check.harness", "--records", records,
            "--batches", str(options.batches), "--epochs", str(options.epochs),
            "--path-entry", os.path.dirname(os.path.abspath(script)),
            *(["--cpu-remap"] if options.cpu_remap else []),
            path, "--", *script_args,
        ]
        if report.distributed:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc-per-node", str(report.nproc), *harness]
        else:
            command = [sys.executable, *harness]
        runs.append(_Run(label, command, cwd, records, os.path.join(folder, "output.log"), uuid.uuid4().hex))

    begin = time.monotonic()
    tails = {run.label: Tail(run.records) for run in runs}
    said: set = set()  # progress said once per run, rank and subject
    try:
        for run in runs:
            start(run)
            ranks = f"{report.nproc} ranks via torchrun" if report.distributed else "1 process"
            progress(f"[{time.monotonic() - begin:5.1f}s] {run.label}: started ({ranks})")
        while any(run.ended is None for run in runs):
            time.sleep(0.2)
            now = time.monotonic()
            for run in runs:
                for rank, event in tails[run.label].new_events():
                    where = None if event["kind"] == "line" else (event.get("line"), event.get("epoch"))
                    subject = (run.label, rank, event["kind"], where)
                    line = describe_progress(event)
                    if line and subject not in said:
                        said.add(subject)
                        progress(f"[{now - begin:5.1f}s] {run.label} rank {rank}: {line}")
                if run.ended is not None:
                    continue
                if run.process.poll() is not None:
                    run.ended = now
                    kill(run)  # whatever it left behind
                elif now - run.started > options.timeout:
                    run.timed_out, run.ended = True, now
                    kill(run)
                    progress(f"[{now - begin:5.1f}s] {run.label}: killed after the {options.timeout:.0f} s timeout")
    finally:
        for run in runs:
            kill(run)
    views = {}
    for run in runs:
        views[run.label] = RunView(
            run.label, read_events(run.records), wall=(run.ended or time.monotonic()) - run.started,
            timed_out=run.timed_out, returncode=run.process.returncode if run.process else None,
            log_tail=log_tail(run.log),
        )
        progress(f"[{time.monotonic() - begin:5.1f}s] {run.label}: {views[run.label].stop_reason()}")
    return views


def start(run: _Run) -> None:
    env = dict(os.environ)
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(variable, None)  # verify itself may run under a launcher; the runs must not inherit it
    env[TOKEN_VARIABLE] = run.token
    env["PYTHONUNBUFFERED"] = "1"
    with open(run.log, "wb") as log:
        run.process = subprocess.Popen(
            run.command, cwd=run.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    run.started = time.monotonic()


def kill(run: _Run) -> None:
    """Kill the run's process group, the groups its ranks made (torchrun starts each rank in
    its own session), and any process still carrying the run's token."""
    if run.process is not None:
        _kill_group(run.process.pid)
        try:
            run.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    if not os.path.isdir("/proc"):  # without /proc the ranks' own sessions are the fallback
        for events in read_events(run.records).values():
            for event in events:
                if event["kind"] == "start":
                    _kill_group(event["pgid"])
    marker = f"{TOKEN_VARIABLE}={run.token}".encode()
    for _ in range(50):
        pids = tagged_processes(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _kill_group(pgid: int) -> None:
    if pgid in (os.getpgid(0), 0, 1):
        return  # never our own group
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def tagged_processes(marker: bytes) -> list[int]:
    """Live processes whose environment holds the marker (Linux /proc; empty elsewhere)."""
    found = []
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def describe_progress(event: dict) -> Optional[str]:
    kind = event["kind"]
    if kind == "line":
        return "running the script"
    if kind == "process-group":
        return f"process group up ({event['backend']}, {event['world_size']} ranks)"
    if kind == "epoch":
        return f"epoch {event['epoch'] + 1} of the loop at line {event['line']}"
    if kind == "start":
        return None
    if kind == "recovered":
        where = f" at line {event['line']}" if event.get("line") else ""
        return f"recorded {event['error'][:120]}{where} and went on"
    if kind == "budget":
        return f"budget reached ({event['epochs']} epochs at line {event['line']}): stopping"
    if kind == "end":
        return {"finished": "finished", "budget": "stopped by the budget", "exit": "exited"}.get(
            event["status"], f"raised {event.get('error')}"
        )
    return None


def log_tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            kept = [line.rstrip() for line in handle if line.strip() and "NumPy" not in line and "_conversion_method" not in line]
    except OSError:
        return ""
    return " | ".join(kept[-lines:])


# ---------------------------------------------------------------------------- judging
def judge_all(text: str, fixed_text: str, findings: list[Finding], remaining: list[Finding], report: Report) -> list[FindingResult]:
    line_map = LineMap(text, fixed_text)
    original, fixed = report.runs["original"], report.runs["fixed"]
    results = []
    for finding in findings:
        original_lines = statement_lines(text, finding.location.row, finding.end_location.row)
        fixed_lines = line_map.lines(original_lines)
        fix_applied = fixed_text != text and not any(
            other.code == finding.code and other.location.row in fixed_lines for other in remaining
        )
        case = Case(finding, original, fixed, original_lines, fixed_lines, fix_applied, report.gpus)
        judgement = judge_one(case)
        if not fix_applied and not judgement.fixed.startswith(NO_FIX):
            judgement.fixed = f"{NO_FIX}; {judgement.fixed}"
        results.append(FindingResult(finding, judgement.verdict, judgement.original, judgement.fixed, fix_applied))
    return results


def judge_one(case: Case) -> Judgement:
    original, fixed = case.original, case.fixed
    first = case.original_lines.start
    if not original.executed(case.original_lines):
        fixed_text = _reach(fixed, case.fixed_lines)
        if original.needs_cuda:
            return Judgement(
                Verdict.NEEDS_GPU,
                f"line {first} never ran: {original.stop_reason()}; rerun on a GPU or with --cpu-remap",
                fixed_text,
            )
        return Judgement(Verdict.NOT_REACHED, f"line {first} never ran: {original.stop_reason()}", fixed_text)
    new_crash = fixed.error is not None and (original.error is None or original.error["error"] != fixed.error["error"])
    if case.fix_applied and case.fixed_lines and not fixed.executed(case.fixed_lines) and new_crash:
        return Judgement(Verdict.FIX_FAILED, f"line {first} ran", _reach(fixed, case.fixed_lines))
    probe = probe_modules().get(case.finding.code)
    if probe is None:
        return Judgement(
            Verdict.NOT_REPRODUCED,
            f"line {first} ran; dplint has no runtime probe for {case.finding.code} yet",
            _reach(fixed, case.fixed_lines),
        )
    return probe.judge(case)


def _reach(run: RunView, lines: range) -> str:
    if not lines:
        return "the fix removed this code"
    if run.executed(lines):
        return f"line {lines.start} ran"
    return f"line {lines.start} never ran: {run.stop_reason()}"
