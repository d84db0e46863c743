"""Judging a finding whose misbehaviour is an exception raised at the flagged line
(DPL015, DPL016: the AttributeError of an attribute the object does not have)."""

from __future__ import annotations

from typing import Optional

from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide


def error_at(case: Case, run: RunView, needle: str) -> Optional[dict]:
    """The end event of a rank that raised an error containing `needle` at the flagged lines."""
    lines = set(case.lines(run))
    for end in run.ends:
        if end.get("status") == "error" and needle in str(end.get("error", "")) and (
            end.get("line") in lines or not lines
        ):
            return end
    return None


def judge_raised(case: Case, needle: str, wrapped_here: bool) -> Judgement:
    """CONFIRMED when the original raised `needle` at the flagged line and the fixed copy did
    not; NEEDS_GPU when no wrapper was built on this machine (a `device_count() > 1` branch)."""
    raised = error_at(case, case.original, needle)
    if raised is None:
        if not case.original.executed(case.original_lines):
            return Judgement(Verdict.NOT_REACHED, f"line {case.finding.location.row} did not run ({case.original.stop_reason()})", "")
        if not wrapped_here:
            return Judgement(
                Verdict.NEEDS_GPU,
                f"no DataParallel/DDP wrapper was built on this machine ({case.gpus} CUDA devices), so the wrapped path did not run",
                "",
            )
        return Judgement(Verdict.NOT_REPRODUCED, f"line {case.finding.location.row} ran without an error", "")
    original = f"rank {raised['rank']} raised {raised['error']} at line {raised.get('line')}"
    again = error_at(case, case.fixed, needle)
    if again is not None:
        fixed = f"rank {again['rank']} still raised {again['error']} at line {again.get('line')}"
    elif case.fixed.executed(case.fixed_lines):
        fixed = f"the same code ran without an error ({case.fixed.stop_reason()})"
    else:
        fixed = f"the fixed line did not run ({case.fixed.stop_reason()})"
    return decide(case, True, again is not None, original, fixed)
