"""DPL011 unguarded-rank-save: which ranks wrote the same checkpoint path."""

from __future__ import annotations

import os

from dplint.runtime_check.probes.shared import observe_saves
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL011"
NAME = "unguarded-rank-save"


def install(context) -> None:
    observe_saves(context)


def writers(case: Case, run: RunView) -> tuple[str | None, list[int], int | None]:
    """(path, ranks that saved it, line) for the flagged save."""
    saves = [e for e in (case.near(run, "save") or run.all("save")) if e["path"]]
    if not saves:
        return None, [], None
    path = saves[0]["path"]
    ranks = sorted({e["rank"] for e in saves if e["path"] == path})
    return path, ranks, saves[0]["line"]


def describe(path, ranks, line, world: int) -> str:
    name = os.path.basename(path)
    if len(ranks) == 2:
        return f"ranks {ranks[0]} and {ranks[1]} both wrote {name} (line {line}) at the same time"
    if len(ranks) > 2:
        return f"ranks {', '.join(map(str, ranks))} all wrote {name} (line {line}) at the same time"
    return f"only rank {ranks[0]} of {world} wrote {name} (line {line})"


def judge(case: Case) -> Judgement:
    path, ranks, line = writers(case, case.original)
    world = len(case.original.ranks)
    if path is None:
        return Judgement(Verdict.NOT_REACHED, "no checkpoint was saved to a path", "")
    original = describe(path, ranks, line, world)
    fixed_path, fixed_ranks, fixed_line = writers(case, case.fixed)
    fixed = describe(fixed_path, fixed_ranks, fixed_line, len(case.fixed.ranks)) if fixed_path else "no checkpoint was saved"
    if world < 2:
        return Judgement(Verdict.NEEDS_GPU, original + "; one rank ran: this needs 2 ranks (2 GPUs with nccl)", fixed)
    return decide(case, len(ranks) > 1, len(fixed_ranks) > 1, original, fixed)
