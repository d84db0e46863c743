"""DPL017 collective-under-rank-guard: the ranks that skip the collective never meet the
ones inside it. The evidence: which ranks entered the collective at the flagged line, and how
they ended: stopped by verify as a deadlock (every rank blocked in a collective: those inside it
and the others in a later one), killed by verify's timeout while waiting (the hang), or, on gloo, failing inside the
collective when a peer that never entered it closed its connections (it ended the script)."""

from __future__ import annotations

import re

from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict

CODE = "DPL017"
NAME = "collective-under-rank-guard"


def install(context) -> None:
    pass  # the line events of the harness say which ranks reached the collective


def reached(case: Case, run: RunView) -> list[int]:
    return [rank for rank in run.ranks if run.first_run(rank, case.lines(run)) is not None]


def judge(case: Case) -> Judgement:
    run = case.original
    ranks = reached(case, run)
    if not ranks:
        return Judgement(Verdict.NOT_REACHED, f"line {case.finding.location.row} did not run ({run.stop_reason()})", "")
    others = [rank for rank in run.ranks if rank not in ranks]
    entered = f"only rank(s) {', '.join(map(str, ranks))} entered the collective at line {case.finding.location.row}; " \
              f"rank(s) {', '.join(map(str, others))} never did"
    if run.deadlocked and others:
        return Judgement(Verdict.CONFIRMED, f"{entered}, and the run {run.stop_reason()}",
                         "no automatic fix for this finding")
    if run.timed_out and others:
        return Judgement(Verdict.CONFIRMED, f"{entered}, and the run hung until it was {run.stop_reason()}",
                         "no automatic fix for this finding")
    lines = set(case.lines(run))
    failed = [end for end in run.ends if end["rank"] in ranks and end.get("status") == "error" and end.get("line") in lines]
    if others and failed:
        # gloo's message starts with its source file: "[.../pair.cc:537] Read error ...: Connection reset"
        error = re.sub(r"\[[^\]]*\.cc:\d+\] ", "", failed[0]["error"].split("\n")[0])[:120]
        return Judgement(
            Verdict.CONFIRMED,
            f"{entered}: it never completed; rank {failed[0]['rank']} failed inside it when a rank that "
            f"skipped it went away ({error})",
            "no automatic fix for this finding",
        )
    if len(run.ranks) < 2:
        return Judgement(Verdict.NOT_REPRODUCED, "the script ran with one rank: nobody was left waiting", "")
    return Judgement(Verdict.NOT_REPRODUCED, f"ranks {ranks} reached line {case.finding.location.row}; {run.stop_reason()}", "")
