"""`dplint verify`: lint, build one variant of the script per finding, run them under the
probe harness, judge each finding.

One finding at a time: the "before" variant of a finding has only that bug (every other fix
applied), the "after" variant has every fix. Identical variants run once (a finding without
an automatic fix has the fixed copy as its "before"), and all variants run one after another
in one process (one torchrun launch for a distributed script: torch is imported once), each
in its own scratch overlay of the user's folder (`overlay.py`) and with its own timeout; when a
variant kills its process, the ones not run yet go on in a new one.

This side never imports torch. Nothing outlives `verify` (see `supervise.py`): every run
carries the session's token, the launcher and the ranks die with their parent, and a reaper
kills what is left and removes the temporary folder however `verify` ends.
"""

from __future__ import annotations

import functools
import importlib.util
import json
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
from dplint.runtime_check import supervise
from dplint.runtime_check.lines import LineMap, statement_lines
from dplint.runtime_check.overlay import Snapshot, mirror
from dplint.runtime_check.probes import probe_modules
from dplint.runtime_check.record import Tail, read_events, stacks_path
from dplint.runtime_check.unflagged import unflagged_errors
from dplint.runtime_check.verdicts import NO_FIX, Case, Judgement, RunView, Verdict

TOKEN_VARIABLE = supervise.TOKEN_VARIABLE
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# A script that starts its own ranks is run as one process, not under torchrun.
SELF_SPAWNING = {
    "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
    "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes",
}
ORIGINAL, FIXED = "original", "fixed"


class VerifyError(Exception):
    """verify cannot do its job (unreadable script, no torch ...); one line for the user."""


class Interrupted(BaseException):
    """verify got SIGTERM, SIGHUP or SIGINT: its `finally` blocks stop the runs and clean up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


QUICK_LOOK = 3.0  # seconds of silence after the others ended before a silent rank's stack is read
LOOK_EVERY = 2.0  # seconds between two looks at the stacks of ranks that all went silent


@dataclass
class VerifyOptions:
    nproc: Optional[int] = None  # ranks for a distributed script (default: 2, or the GPUs up to 2)
    batches: int = 3  # batches per loop iteration budget
    epochs: int = 2  # epoch iterations per loop
    timeout: float = 120.0  # seconds per variant
    cpu_remap: bool = False  # map cuda->cpu and nccl->gloo when there is no CUDA
    keep: bool = False  # keep the temporary folder (variants, records, logs)
    always_run: bool = False  # run even when there is no finding (tests use the observations)
    cwd: Optional[str] = None  # working directory of the runs (default: the script's folder)
    select: Optional[frozenset] = None  # verify only these codes (every fix is still applied)
    # seconds a rank may stay silent after the others ended the same variant (then it is taken as
    # hung in torch's process-group teardown: stopped, and the remaining variants run afresh)
    straggler_grace: float = 30.0
    # seconds every rank may sit, unchanged, in a collective or a barrier with no rank ending the
    # variant (then it is a deadlock: stopped, reported with each rank's line, the rest run afresh)
    deadlock_grace: float = 10.0


@dataclass
class FindingResult:
    finding: Finding
    verdict: Verdict
    original: str
    fixed: str
    fix_applied: bool
    before: str = ORIGINAL  # the label of the run the "original" evidence comes from


@dataclass
class Report:
    script: str
    distributed: bool
    nproc: int = 1
    gpus: int = 0
    options: VerifyOptions = field(default_factory=VerifyOptions)
    results: list[FindingResult] = field(default_factory=list)
    runs: dict[str, RunView] = field(default_factory=dict)  # label -> run ("fixed": every fix)
    errors: list[str] = field(default_factory=list)
    fixed_text: str = ""
    texts: dict[str, str] = field(default_factory=dict)  # label -> the variant's source
    workdir: Optional[str] = None  # kept only with --keep
    unflagged: list = field(default_factory=list)  # torch's errors for known misuses no finding covers (unflagged.py)

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        if any(result.verdict in (Verdict.FIX_FAILED, Verdict.NOT_REACHED) for result in self.results):
            return 1
        return 0

    def remapped(self) -> list[tuple[int, str]]:
        """(line, what) the CPU remap changed in the original script, in line order."""
        found = set()
        for label, run in self.runs.items():
            if label == FIXED and any(other != FIXED for other in self.runs):
                continue  # the fixed copy repeats the original's remaps (a line only a fix added has none of its own)
            found.update((event["line"], event["what"]) for event in run.all("remapped"))
        return sorted(found)


Progress = Callable[[str], None]


@dataclass
class Variant:
    label: str
    text: str
    index: int = 0
    folder: str = ""
    view: Optional[RunView] = None


def verify(script: str, script_args: list[str], options: VerifyOptions, progress: Optional[Progress] = None) -> Report:
    import libcst as cst

    from dplint.engine import fix_is_wanted, fix_source, lint_source, rules_for
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
    cwd = os.path.abspath(options.cwd or os.path.dirname(os.path.abspath(script)))
    if not os.path.isdir(cwd):
        raise VerifyError(f"--cwd {options.cwd}: not a folder")
    rules = rules_for(selected_codes())
    linted = lint_source(text, script, rules)
    fixed = fix_source(text, script, rules, unsafe=True)
    report = Report(script, is_distributed(text), options=options, fixed_text=fixed.text)
    report.errors.extend(dict.fromkeys([*linted.errors, *fixed.errors]))
    chosen = [f for f in linted.findings if options.select is None or f.code in options.select]
    if not chosen and not options.always_run:
        return report

    wanted = [f for f in linted.findings if fix_is_wanted(f, unsafe=True)]
    variants, before = plan_variants(text, fixed.text, chosen, wanted)

    report.gpus = visible_gpus()
    if report.distributed:
        report.nproc = options.nproc or (min(2, report.gpus) if report.gpus else 2)
    root = project_root(script, cwd)
    session = uuid.uuid4().hex
    reaper = None
    workdir = tempfile.mkdtemp(prefix="dplint-verify-")
    try:
        # the reaper first: from here on the folder goes and the runs die however verify ends
        reaper = supervise.start_reaper(session, "" if options.keep else workdir)
        snapshot = Snapshot(root, skip=workdir)
        run_variants(script, script_args, list(variants.values()), report, workdir, root, cwd, session, progress)
        report.texts = {v.label: v.text for v in variants.values()}
        # every run in the original's line numbers, the fixed one too: each line the report
        # quotes is the user's line, not one of verify's modified copies
        report.runs = {v.label: renumbered(v.view, v.text, text) for v in variants.values()}
        if FIXED not in report.runs:
            report.runs[FIXED] = report.runs[ORIGINAL]
        for variant in variants.values():
            if not variant.view.events:
                report.errors.append(f"the {variant.label} run did not start: {variant.view.log_tail or 'no output'}")
        changed = snapshot.changes()
        if changed:
            report.errors.append(
                f"the script's folder changed during verify (not by verify's overlay): {', '.join(changed[:5])}"
                + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            )
        report.results = judge_all(text, fixed.text, chosen, fixed.remaining.findings, report, before)
        report.unflagged = unflagged_errors(text, linted.findings, report.runs)
    finally:
        if options.keep:
            report.workdir = workdir
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if reaper is not None:
            reaper.stdin.close()  # the reaper checks once more, then exits
            try:
                reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    return report


def plan_variants(text: str, fixed_text: str, chosen: list[Finding], wanted: list[Finding]) -> tuple[dict[str, Variant], dict[int, str]]:
    """The scripts to run, by label, and each chosen finding's "before" run: only its bug left,
    every other fix applied. Equal texts run once, under the first label: the fixed copy's
    label comes first, because the judges read the fixed run under FIXED (two findings whose
    fixes edit the same call leave, each without its own fix, the whole fixed copy)."""
    import libcst as cst

    from dplint.engine import apply_edits

    variants: dict[str, Variant] = {}

    def variant_for(variant_text: str, label: str) -> str:
        for existing in variants.values():
            if existing.text == variant_text:
                return existing.label
        while label in variants:  # two findings of one rule on one line
            label += "'"
        variants[label] = Variant(label, variant_text, len(variants))
        return label

    fixed_label = FIXED if fixed_text != text else ORIGINAL
    before: dict[int, str] = {}
    for finding in chosen:
        if not any(f is finding for f in wanted):
            before[id(finding)] = variant_for(fixed_text, fixed_label)
            continue
        only, _ = apply_edits(text, [f for f in wanted if f is not finding])
        try:
            cst.parse_module(only)
        except Exception:
            only = text  # the other fixes do not apply without this one: all the bugs stay
        label = ORIGINAL if only == text else fixed_label if only == fixed_text else f"only {finding.code} line {finding.location.row}"
        before[id(finding)] = variant_for(only, label)
    variant_for(text, ORIGINAL)  # every bug: for findings that show only with another's bug
    variant_for(fixed_text, fixed_label)
    return variants, before


def project_root(script: str, cwd: str) -> str:
    """The folder the overlay mirrors: the script's folder and the working directory share it."""
    root = os.path.commonpath([os.path.dirname(os.path.abspath(script)), cwd])
    if root == os.path.dirname(root):
        raise VerifyError(f"--cwd {cwd} and {script} share no folder but the file system's root")
    return root


def is_distributed(text: str) -> bool:
    """Whether the script starts a process group or builds a DDP (torchrun must launch it)."""
    import libcst as cst

    from dplint.flow import analysed

    try:
        model = analysed(cst.parse_module(text))
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
        raise VerifyError("verify needs torch: pip install '.[runtime]' in a clone of dplint, or pip install torch")
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
def prepare(variant: Variant, script: str, root: str, cwd: str, workdir: str) -> dict:
    """The variant's overlay, records folder and plan entry."""
    variant.folder = os.path.join(workdir, f"v{variant.index}")
    overlay_root = os.path.join(variant.folder, "root")
    mirror(root, overlay_root, skip=workdir)
    path = os.path.join(overlay_root, os.path.relpath(os.path.abspath(script), root))
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(variant.text)
    records = os.path.join(variant.folder, "records")
    os.makedirs(records)
    return {
        "label": variant.label, "records": records, "script": path, "root": overlay_root,
        "cwd": os.path.join(overlay_root, os.path.relpath(cwd, root)), "path_entry": os.path.dirname(path),
    }


def forget_events(records: str) -> None:
    """Empties a variant's records folder, so that its next run starts a record of its own."""
    for name in os.listdir(records):
        os.remove(os.path.join(records, name))


def run_variants(script: str, script_args: list[str], variants: list[Variant], report: Report, workdir: str,
                 root: str, cwd: str, session: str, progress: Progress) -> None:
    """Runs every variant (in as few processes as they allow) and sets each one's view."""
    entries = {v.label: dict(prepare(v, script, root, cwd, workdir), args=list(script_args)) for v in variants}
    pending = list(variants)
    begin = time.monotonic()
    batch_number = 0
    while pending:
        batch_number += 1
        batch = Batch(batch_number, pending, entries, report, workdir, session, root)
        finished = batch.run(begin, progress)
        started = [v for v in pending if v.view is not None]
        pending = [v for v in pending if v.view is None]
        if not started or finished:
            for variant in pending:  # the process died before they could start
                variant.view = RunView(variant.label, {}, log_tail=batch.log_tail, returncode=batch.returncode)
            pending = []


class Batch:
    """One process (or one torchrun launch) running variants in turn."""

    def __init__(self, number: int, variants: list[Variant], entries: dict, report: Report, workdir: str,
                 session: str, real_root: str) -> None:
        self.variants = variants
        self.report = report
        self.options = report.options
        self.token = f"{session}-{number}"
        self.log = os.path.join(workdir, f"batch{number}.log")
        self.tmp = os.path.join(workdir, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        plan_path = self.plan_path = os.path.join(workdir, f"batch{number}.json")
        plan = {
            "real_root": real_root, "workdir": workdir,
            "batches": self.options.batches, "epochs": self.options.epochs, "cpu_remap": self.options.cpu_remap,
            "nproc": report.nproc if report.distributed else (self.options.nproc or 2),
            "variants": [entries[v.label] for v in variants],
        }
        with open(plan_path, "w", encoding="utf-8") as handle:
            json.dump(plan, handle)
        harness = ["-m", "dplint.runtime_check.harness", plan_path]
        if report.distributed:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc-per-node", str(report.nproc), *harness]
        else:
            command = [sys.executable, *harness]
        self.command = supervise.guarded(command)
        self.cwd = entries[variants[0].label]["cwd"]
        self.records = [entries[v.label]["records"] for v in variants]
        self.scripts = [entries[v.label]["script"] for v in variants]
        self.process: Optional[subprocess.Popen] = None
        self.returncode: Optional[int] = None
        self.log_tail = ""

    def start(self) -> None:
        env = dict(os.environ)
        for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(variable, None)  # verify itself may run under a launcher; the runs must not inherit it
        env[TOKEN_VARIABLE] = self.token
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the user's folders
        # torchrun's torchelastic_* folders, torch's caches, the script's own temporary files:
        # in verify's folder, so that they go with it even when a run is killed
        env["TMPDIR"] = self.tmp
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )

    def run(self, begin: float, progress: Progress) -> bool:
        """Runs until every variant ended or the process died; True when it ran them all."""
        tails = [Tail(records) for records in self.records]
        said: set = set()
        ranks = f"{self.report.nproc} ranks via torchrun" if self.report.distributed else "1 process"
        timed_out_at: Optional[int] = None
        current, current_since = 0, time.monotonic()
        expected = self.report.nproc if self.report.distributed else 1
        ends = [set() for _ in self.variants]  # ranks that ended each variant
        last_event = [time.monotonic()] * len(self.variants)
        all_ended = False
        straggled_at: Optional[int] = None
        asked_at: Optional[int] = None  # the variant whose silent ranks were asked for their stacks
        deadlocked_at: Optional[int] = None
        blocked: Optional[dict] = None  # rank -> where it is blocked, while every rank is (see `blocked_ranks`)
        blocked_since = looked_at = blocked_for = 0.0
        try:
            self.start()
            names = ", ".join(v.label for v in self.variants)
            progress(f"[{time.monotonic() - begin:5.1f}s] started ({ranks}): {names}")
            while self.process.poll() is None:
                time.sleep(0.1)
                now = time.monotonic()
                for index, tail in enumerate(tails):
                    for rank, event in tail.new_events():
                        last_event[index] = now
                        if event["kind"] == "end":
                            ends[index].add(rank)
                        if index > current:
                            current, current_since = index, now
                        where = None if event["kind"] == "line" else (event.get("line"), event.get("epoch"))
                        subject = (index, rank, event["kind"], where)
                        line = describe_progress(event)
                        if line and subject not in said:
                            said.add(subject)
                            progress(f"[{now - begin:5.1f}s] {self.variants[index].label} rank {rank}: {line}")
                if all(len(ended) >= expected for ended in ends):
                    all_ended = True
                    break  # every variant ended on every rank: what is left is the process's exit
                silent = sorted(set(range(expected)) - ends[current])
                if ends[current] and silent:
                    silent_for = now - last_event[current]
                    returned = False
                    if silent_for > QUICK_LOOK and asked_at != current:
                        # a first look: a rank whose stack is only the script's `main()` call, in
                        # native code, has returned from it and waits in a destructor: it will not go on
                        asked_at = current
                        self.ask_for_stacks(current, silent)
                        returned = all(self.returned_from_main(current, rank) for rank in silent)
                    if returned or silent_for > self.options.straggler_grace:
                        # the others ended this variant and the rest went silent: torch's teardown
                        # of what the script's main freed (a DDP, a destroyed process group) can
                        # wait forever on a peer that is waiting for the next variant
                        straggled_at = current
                        if not returned:  # the stack of the first look is old by now
                            self.ask_for_stacks(current, silent)
                        progress(f"[{now - begin:5.1f}s] {self.variants[current].label}: rank(s) "
                                 f"{silent} stuck after the others ended: restarting")
                        break
                if expected > 1 and not ends[current] and now - last_event[current] > QUICK_LOOK:
                    if now - looked_at >= LOOK_EVERY:
                        # every rank silent and none ended: blocked in collectives that cannot
                        # complete (a barrier only some ranks reach, mismatched calls)? Their stacks say
                        looked_at = now
                        seen = self.blocked_ranks(current, expected)
                        if seen is None or seen != blocked:
                            blocked, blocked_since = seen, now
                        elif now - blocked_since >= self.options.deadlock_grace:
                            deadlocked_at, blocked_for = current, now - last_event[current]
                            progress(f"[{now - begin:5.1f}s] {self.variants[current].label}: every rank blocked "
                                     f"in a collective for {blocked_for:.0f} s: stopped as a deadlock")
                            break
                else:
                    blocked = None
                if now - current_since > self.options.timeout:
                    timed_out_at = current
                    progress(f"[{now - begin:5.1f}s] {self.variants[current].label}: "
                             f"killed after the {self.options.timeout:.0f} s timeout")
                    break
        finally:
            self.kill()
        self.returncode = 0 if all_ended else (self.process.returncode if self.process else None)
        self.log_tail = log_tail(self.log)
        all_ran = True
        for index, variant in enumerate(self.variants):
            events = read_events(self.records[index])
            if index == timed_out_at and index > 0:
                # It ran after another variant in this process, and what that one left behind
                # (a process group made again in one process, a module it patched) may be what
                # hangs it: it runs again, first in a fresh launch, and only that run counts.
                forget_events(self.records[index])
                events = {}
            if not events:
                all_ran = False
                continue  # not started: the next batch runs it
            if index == straggled_at:
                stuck = sorted(set(range(self.report.nproc)) - {r for r, evs in events.items()
                                                               if any(e["kind"] == "end" for e in evs)})
                for rank in stuck:  # its script's lines all ran; only its exit hung
                    last = events.get(rank, [{}])[-1]
                    events.setdefault(rank, []).append(dict(
                        kind="end", status="finished", error=None, line=None, needs_cuda=False,
                        seq=last.get("seq", 0) + 1, stuck=True,
                        hung_in=hung_in(stacks_path(self.plan_path, rank), self.scripts[index]),
                    ))
            if index == deadlocked_at:
                for rank, (call, line, _) in sorted(blocked.items()):
                    last = events.get(rank, [{}])[-1]
                    events.setdefault(rank, []).append(dict(
                        kind="end", status="deadlock", error=None, line=line, call=call, needs_cuda=False,
                        seq=last.get("seq", 0) + 1, wall=time.time(), blocked_for=round(blocked_for),
                    ))
            view = RunView(variant.label, events, timed_out=index == timed_out_at,
                           returncode=self.returncode, log_tail=self.log_tail)
            starts = [e["wall"] for evs in events.values() for e in evs if e["kind"] == "start" and "wall" in e]
            ends = [e["wall"] for evs in events.values() for e in evs if e["kind"] == "end" and "wall" in e]
            if index == timed_out_at:
                view.wall = self.options.timeout
            elif starts:
                view.wall = (max(ends) if ends else time.time()) - min(starts)
            variant.view = view
            progress(f"[{time.monotonic() - begin:5.1f}s] {variant.label}: {view.stop_reason()}")
        return all_ran

    def ask_for_stacks(self, index: int, ranks: list[int]) -> None:
        """SIGUSR1 to ranks that went silent: each writes its stack (the harness's faulthandler)."""
        for rank, events in read_events(self.records[index]).items():
            pids = {event["pid"] for event in events if event["kind"] == "start" and "pid" in event}
            for pid in pids if rank in ranks else ():
                try:
                    os.kill(pid, signal.SIGUSR1)
                except OSError:
                    pass
        time.sleep(0.5)  # faulthandler writes from its signal handler, at once

    def blocked_ranks(self, index: int, expected: int) -> Optional[dict]:
        """rank -> (call, script line, stack) when every rank of the variant is blocked in a
        collective or a barrier (their stacks, read now); None when one is not."""
        if len(read_events(self.records[index])) < expected:
            return None  # a rank has not started this variant: its stack file is not about it
        self.ask_for_stacks(index, list(range(expected)))
        found = {}
        for rank in range(expected):
            frames = latest_frames(stacks_path(self.plan_path, rank))
            where = blocked_in_collective(frames, self.scripts[index])
            if where is None:
                return None
            stack = tuple((frame["path"], frame["line"], frame["function"]) for frame in frames)
            found[rank] = (*where, stack)
        return found

    def returned_from_main(self, index: int, rank: int) -> bool:
        """Only the script's module-level frame is left: the function it called has returned
        and the rank waits in native code (the destructors of what that function freed)."""
        frames = latest_frames(stacks_path(self.plan_path, rank))
        return bool(frames) and _is_script(frames[0], self.scripts[index]) and frames[0]["function"] == "<module>"

    def kill(self) -> None:
        """Kill the batch's process group, the groups its ranks made (torchrun starts each rank
        in its own session), and any process still carrying the batch's token."""
        if self.process is not None:
            _kill_group(self.process.pid)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if not os.path.isdir("/proc"):  # without /proc the ranks' own sessions are the fallback
            for records in self.records:
                for events in read_events(records).values():
                    for event in events:
                        if event["kind"] == "start":
                            _kill_group(event["pgid"])
        supervise.kill_tagged(self.token)


FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>.+)$')


def latest_frames(stacks: str) -> list:
    """The frames (most recent call first) of the last stack a rank wrote on SIGUSR1."""
    try:
        with open(stacks, encoding="utf-8", errors="replace") as handle:
            dumps = handle.read().split("(most recent call first):")
    except OSError:
        return []
    return [match for match in map(FRAME.match, dumps[-1].splitlines()) if match]


def _is_script(frame, script: str) -> bool:
    return os.path.basename(frame["path"]) == os.path.basename(script)


COMMUNICATION = ("/torch/distributed/", "/torch/nn/parallel/distributed.py")


def blocked_in_collective(frames: list, script: str) -> Optional[tuple[str, int]]:
    """(the torch call, the script's line) when a stack (most recent call first) waits in torch's
    distributed code called from the script: `barrier` at line 30 from
    `barrier (distributed_c10d.py) <- wrapper (c10d_logger.py) <- <module> (train.py:30)`."""
    inside = 0  # torch's frames at the top of the stack
    while inside < len(frames) and "/torch/" in frames[inside]["path"]:
        inside += 1
    torch_frames = frames[:inside]
    if not any(part in frame["path"] for frame in torch_frames for part in COMMUNICATION):
        return None
    line = next((int(frame["line"]) for frame in frames if _is_script(frame, script)), None)
    if line is None:
        return None
    called = torch_frames[-1]["function"]
    if called == "wrapper" and inside > 1:  # torch's logging decorator around every collective
        called = torch_frames[-2]["function"]
    return called, line


def hung_in(stacks: str, script: str) -> Optional[str]:
    """Where a rank was stuck, from the stack it wrote on SIGUSR1: the innermost frame of the
    script or of torch ("__del__ (train.py:25)", "destroy_process_group (torch/distributed/...)")."""
    for depth, frame in enumerate(latest_frames(stacks)):  # most recent call first
        path = frame["path"]
        if _is_script(frame, script):
            where = f"{frame['function']} ({os.path.basename(path)}:{frame['line']})"
            # nothing above the script's frame: its line is waiting in native code (a C++
            # destructor of what a returning function freed, say), not in Python
            return f"native code (no Python frame) under {where}" if depth == 0 else where
        if "/torch/" in path:
            return f"{frame['function']} (torch/{path.split('/torch/', 1)[1]}:{frame['line']})"
    return None


def _kill_group(pgid: int) -> None:
    if pgid in (os.getpgid(0), 0, 1):
        return  # never our own group
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def describe_progress(event: dict) -> Optional[str]:
    kind = event["kind"]
    if kind == "line":
        return "running the script"
    if kind == "process-group":
        return f"process group up ({event['backend']}, {event['world_size']} ranks)"
    if kind == "epoch":
        return f"epoch {event['epoch'] + 1} of the loop at line {event['line']}"
    if kind == "recovered":
        where = f" at line {event['line']}" if event.get("line") else ""
        return f"recorded {event['error'][:120]}{where} and went on"
    if kind == "loop-cut":
        return f"budget reached: ended the loop at line {event['line']} and went on after it"
    if kind == "budget":
        return f"budget reached ({event['epochs']} passes from line {event['line']}): stopping"
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
def judge_all(text: str, fixed_text: str, findings: list[Finding], remaining: list[Finding], report: Report,
              before: Optional[dict[int, str]] = None) -> list[FindingResult]:
    """A verdict per finding, from its "before" run (only its bug) and the fixed run. A finding
    whose effect needs another finding's bug (a load of the `module.` checkpoint that the
    save's fix no longer writes) does not show alone: it is judged on the run with every bug."""
    line_map = LineMap(text, fixed_text)
    fixed = report.runs[FIXED]  # like every run, in the original's line numbers (see `renumbered`)
    results = []
    for finding in findings:
        flagged = statement_lines(text, finding.location.row, finding.end_location.row)
        lines_in_copy = line_map.lines(flagged)
        fix_applied = fixed_text != text and not any(
            other.code == finding.code and other.location.row in lines_in_copy for other in remaining
        )
        fixed_lines = line_map.back_lines(lines_in_copy)  # empty: the fix removed the code
        label = (before or {}).get(id(finding), ORIGINAL)
        labels = [label] + ([ORIGINAL] if label != ORIGINAL and ORIGINAL in report.runs else [])
        for attempt, run_label in enumerate(labels):
            case = Case(finding, report.runs[run_label], fixed, flagged, fixed_lines, fix_applied, report.gpus)
            judgement = judge_one(case, report)
            if attempt == 0:
                alone = judgement
            elif judgement.verdict in (Verdict.CONFIRMED, Verdict.FIX_FAILED):
                judgement.original += f"; alone (every other fix applied) it does not show: {alone.original}"
                label = ORIGINAL
                break
            if judgement.verdict not in (Verdict.NOT_REPRODUCED, Verdict.NOT_REACHED):
                break
        else:
            judgement = alone
        if not fix_applied and not judgement.fixed.startswith(NO_FIX):
            judgement.fixed = f"{NO_FIX}; {judgement.fixed}"
        results.append(FindingResult(finding, judgement.verdict, judgement.original, judgement.fixed, fix_applied, label))
    return results


LINE_FIELDS = ("line", "end_line", "created_at")
# where a stuck rank hung, as `hung_in` says it: "__del__ (train.py:26)" (torch's own frames are not the script's)
HUNG_AT_SCRIPT_LINE = re.compile(r"\((?!torch/)([^():]+\.py):(\d+)\)")


def renumbered(run: RunView, run_text: str, text: str) -> RunView:
    """The run with its events' line numbers in the original script's numbering (a variant's
    other fixes may add or remove lines above the finding). Each line maps through the same
    line map that places the finding in the copy, inverted: a line only a fix added takes the
    number of the user's line it was inserted before, never its own number in the copy."""
    if run_text == text:
        return run
    line_map = LineMap(text, run_text)

    def line(row):
        return line_map.back(row) if isinstance(row, int) and not isinstance(row, bool) else row

    def hung_in(where):
        if not isinstance(where, str):
            return where
        return HUNG_AT_SCRIPT_LINE.sub(lambda m: f"({m.group(1)}:{line(int(m.group(2)))})", where)

    def renumber(event: dict) -> dict:
        event = dict(event, **{key: line(event[key]) for key in LINE_FIELDS if key in event})
        if "hung_in" in event:
            event["hung_in"] = hung_in(event["hung_in"])
        return event

    events = {rank: [renumber(event) for event in evs] for rank, evs in run.events.items()}
    return RunView(run.label, events, wall=run.wall, timed_out=run.timed_out, returncode=run.returncode,
                   log_tail=run.log_tail)


def judge_one(case: Case, report: Optional[Report] = None) -> Judgement:
    original, fixed = case.original, case.fixed
    first = case.original_lines.start
    cpu_remap = bool(report and report.options.cpu_remap)
    if not original.executed(case.original_lines):
        fixed_text = _reach(fixed, case.fixed_lines)
        if original.needs_cuda:
            hint = "rerun on a GPU" if cpu_remap else "rerun with --cpu-remap (or on a GPU)"
            return Judgement(Verdict.NEEDS_GPU, f"line {first} never ran: {original.stop_reason()}; {hint}", fixed_text)
        return Judgement(Verdict.NOT_REACHED, f"line {first} never ran: {not_reached_reason(original, first, report)}",
                         fixed_text)
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
    judgement = probe.judge(case)
    if judgement.verdict is Verdict.NOT_REACHED:
        judgement.original += f" ({hint_after_loops(original, first, report) or original.stop_reason()})"
    return judgement


def not_reached_reason(run: RunView, line: int, report: Optional[Report]) -> str:
    """Why the run did not reach a line, and what would reach it."""
    reason = run.stop_reason()
    options = report.options if report else VerifyOptions()
    if run.timed_out:
        return f"{reason}; a longer --timeout (now {options.timeout:.0f} s) would reach it"
    if run.deadlocked:
        return f"{reason}: the script cannot get past it, so a longer --timeout would not reach this line either"
    error = run.error
    exited = any(end["status"] == "exit" for end in run.ends)
    stderr = run.stderr_tail()
    if stderr and (error is not None or exited):  # what the script said about why it stopped
        reason += f"; its stderr ended with: \"{' | '.join(stderr)}\""
    if error is None and exited:
        return f"{reason}; the script stopped itself before this line (the arguments it expects go after --)"
    if error is not None:
        message = error["error"] or ""
        if message.startswith(("FileNotFoundError", "IsADirectoryError", "NotADirectoryError")):
            return (f"{reason}; a path the script reads is missing where it ran: pass the script's arguments "
                    "after --, or run it from the folder it expects (--cwd DIR)")
        if "CUDA" in message or "cuda" in message or "nccl" in message.lower():
            return f"{reason}; rerun with --cpu-remap (or on a GPU)"
        missing = re.match(r"ModuleNotFoundError: No module named '([^']+)'", message)
        if missing:
            return (f"{reason}; the script imports {missing.group(1)!r}, which the Python that runs verify "
                    "lacks: install it there")
        return f"{reason}; the script's own error stops it before this line (its arguments after -- may avoid it)"
    return hint_after_loops(run, line, report) or (
        f"{reason} without taking the branch that holds it; the script's arguments (after --) may select it"
    )


def hint_after_loops(run: RunView, line: int, report: Optional[Report]) -> Optional[str]:
    options = report.options if report else VerifyOptions()
    for cut in run.all("loop-cut"):
        if cut["line"] <= line <= cut.get("end_line", cut["line"]):
            flag = "--epochs" if cut["by"] == "epochs" else "--batches"
            count = options.epochs if cut["by"] == "epochs" else options.batches
            return (f"the budget ended the loop at line {cut['line']} after {count} {cut['by']}, and this line runs "
                    f"only in a later iteration: a larger {flag} would reach it")
    return None


def _reach(run: RunView, lines: range) -> str:
    if not lines:
        return "the fix removed this code"
    if run.executed(lines):
        return f"line {lines.start} ran"
    return f"line {lines.start} never ran: {run.stop_reason()}"
