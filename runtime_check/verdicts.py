"""Verdicts, and the views of a run's observations that probes judge from (runner side, no torch)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Optional

from dplint.rule import Finding


NO_FIX = "no automatic fix for this finding"


class Verdict(str, enum.Enum):
    CONFIRMED = "confirmed"  # the original misbehaves and the fixed copy does not
    FIX_FAILED = "fix-failed"  # the fixed copy still misbehaves (or the fix broke it)
    NOT_REPRODUCED = "not-reproduced"  # the code ran and did not misbehave
    NO_RUNTIME_EFFECT = "no-runtime-effect"  # real but cosmetic: behaviour is the same
    NEEDS_GPU = "needs-gpu"  # the effect exists only on CUDA (or with more GPUs than here)
    NOT_REACHED = "not-reached"  # the flagged code did not run within the budget


@dataclass
class Judgement:
    verdict: Verdict
    original: str  # one line of evidence from the original run
    fixed: str  # one line of evidence from the fixed run


@dataclass
class RunView:
    """What one version's run recorded, all ranks together."""

    label: str  # "original" or "fixed"
    events: dict[int, list[dict]] = field(default_factory=dict)  # rank -> events in order
    wall: float = 0.0
    timed_out: bool = False
    returncode: Optional[int] = None
    log_tail: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted(self.events)

    def all(self, kind: str) -> list[dict]:
        """Events of one kind from every rank (each with its "rank"), rank by rank."""
        return [dict(event, rank=rank) for rank in self.ranks for event in self.events[rank] if event["kind"] == kind]

    def end(self, rank: int) -> Optional[dict]:
        ends = [event for event in self.events.get(rank, ()) if event["kind"] == "end"]
        return ends[-1] if ends else None

    @property
    def ends(self) -> list[dict]:
        return [dict(self.end(rank), rank=rank) for rank in self.ranks if self.end(rank) is not None]

    @property
    def cuda(self) -> bool:
        return any(end.get("cuda_available") for end in self.ends)

    @property
    def device_count(self) -> int:
        return max((end.get("device_count") or 0 for end in self.ends), default=0)

    @property
    def runtime_device_count(self) -> int:
        """The devices the CUDA runtime serves (fixed when the driver initialised)."""
        return max((end.get("runtime_device_count", end.get("device_count")) or 0 for end in self.ends), default=0)

    @property
    def needs_cuda(self) -> bool:
        return any(end.get("needs_cuda") for end in self.ends)

    @property
    def deadlocked(self) -> list[dict]:
        """The end events verify wrote for ranks it stopped in a deadlock (each with its call and line)."""
        return [end for end in self.ends if end["status"] == "deadlock"]

    @property
    def error(self) -> Optional[dict]:
        """The end event of the first rank whose script raised."""
        return next((end for end in self.ends if end["status"] == "error"), None)

    def stderr_tail(self) -> list[str]:
        """The last lines the script wrote to stderr on the rank that stopped it (raised or
        exited), else on the first rank that wrote any."""
        stopped = [end for end in self.ends if end["status"] in ("error", "exit")]
        for end in stopped + self.ends:
            if end.get("stderr"):
                return end["stderr"]
        return []

    def executed(self, lines: Iterable[int]) -> bool:
        wanted = set(lines)
        return any(event["line"] in wanted for event in self.all("line"))

    def first_run(self, rank: int, lines: Iterable[int]) -> Optional[int]:
        """The seq at which one of these lines first ran on a rank."""
        wanted = set(lines)
        seqs = [e["seq"] for e in self.events.get(rank, ()) if e["kind"] == "line" and e["line"] in wanted]
        return min(seqs) if seqs else None

    def recoveries(self) -> list[dict]:
        return self.all("recovered")

    def stop_reason(self) -> str:
        """How the run ended, in a few words."""
        if not self.events:
            return "did not start"
        if self.timed_out:
            return f"killed after the timeout ({self.wall:.0f} s)"
        deadlocked = self.deadlocked
        if deadlocked:
            where = ", ".join(f"rank {end['rank']} in {end['call']}() at line {end['line']}" for end in deadlocked)
            seconds = max(end.get("blocked_for", 0) for end in deadlocked)
            return (f"deadlocked: every rank was blocked in a collective or a barrier ({where}); "
                    f"verify stopped it after {seconds:.0f} s without progress")
        error = self.error
        if error is not None:
            where = f" at line {error['line']}" if error.get("line") else ""
            return f"rank {error['rank']} raised {error['error']}{where}"
        statuses = {end["status"] for end in self.ends}
        if len(self.ends) < len(self.ranks):
            return "a rank ended without reporting (crashed or killed)"
        if statuses == {"budget"}:
            return "stopped by the budget"
        if "exit" in statuses:
            exited = next(end for end in self.ends if end["status"] == "exit")
            return f"rank {exited['rank']} exited with status {exited.get('code', 'non-zero')}"
        stuck = [end for end in self.ends if end.get("stuck")]
        if stuck:
            ranks = ", ".join(str(end["rank"]) for end in stuck)
            where = next((end["hung_in"] for end in stuck if end.get("hung_in")), None)
            if where is None:
                return f"finished; rank {ranks} then hung on its way out (verify stopped it)"
            if "(torch/" in where:
                return f"finished; rank {ranks} then hung in torch's teardown, in {where} (verify stopped it)"
            return f"finished; rank {ranks} then hung after its last line, in {where} (verify stopped it)"
        return "finished"


@dataclass
class Case:
    """One finding with both runs: what a probe's `judge` reads."""

    finding: Finding
    original: RunView
    fixed: RunView
    original_lines: range  # the flagged statement's lines in the original
    fixed_lines: range  # the same code's lines in the fixed copy (empty: the fix removed it)
    fix_applied: bool  # the fixed copy no longer has this finding
    gpus: int = 0  # CUDA devices on this machine

    def lines(self, run: RunView) -> range:
        return self.original_lines if run is self.original else self.fixed_lines

    def near(self, run: RunView, kind: str, keys: tuple[str, ...] = ("line",)) -> list[dict]:
        """Events of a kind recorded at the flagged statement (by any of `keys`)."""
        lines = set(self.lines(run))
        return [event for event in run.all(kind) if any(event.get(key) in lines for key in keys)]

    def relevant(self, run: RunView, kind: str, keys: tuple[str, ...] = ("line",)) -> list[dict]:
        """The events at the flagged statement, or every event of that kind when none is."""
        return self.near(run, kind, keys) or run.all(kind)

    def after(self, run: RunView, kind: str) -> list[dict]:
        """Per rank, the first event of a kind after the flagged statement first ran."""
        found = []
        for rank in run.ranks:
            start = run.first_run(rank, self.lines(run))
            if start is None:
                continue
            later = [e for e in run.events[rank] if e["kind"] == kind and e["seq"] > start]
            if later:
                found.append(dict(later[0], rank=rank))
        return found


def decide(case: Case, bad_original: bool, bad_fixed: bool, original: str, fixed: str) -> Judgement:
    """The usual verdict once a probe knows whether each version misbehaved."""
    if not bad_original:
        return Judgement(Verdict.NOT_REPRODUCED, original, fixed)
    if not case.fix_applied:
        prefix = NO_FIX + "; "
        if bad_fixed:
            return Judgement(Verdict.CONFIRMED, original, prefix + "the copy misbehaves the same: " + fixed)
        return Judgement(Verdict.CONFIRMED, original, prefix + fixed)
    if bad_fixed:
        return Judgement(Verdict.FIX_FAILED, original, fixed)
    return Judgement(Verdict.CONFIRMED, original, fixed)


def sample(items: Iterable[str], limit: int = 3) -> str:
    """`"a", "b", "c", ... (7)` for evidence lines."""
    items = list(items)
    shown = ", ".join(f'"{item}"' for item in items[:limit])
    return shown + (f", ... ({len(items)})" if len(items) > limit else "")
