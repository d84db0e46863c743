"""DPL001 wrapper-train: `.training` of the wrapper, the inner module and its submodules at
every forward. Expected: only the wrapper's flag differs; the forward uses the inner's."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict

CODE = "DPL001"
NAME = "wrapper-train"


def install(context) -> None:
    observe_wrappers(context)


def training_forwards(run: RunView) -> list[dict]:
    """Rank 0's forwards with gradients on (the training steps) of one wrapper: the one
    whose flag went stale, else the one with the most forwards."""
    first = run.ranks[0] if run.ranks else 0
    by_wrapper: dict[int, list[dict]] = {}
    for event in run.all("forward"):
        if event["grad"] and event["rank"] == first:
            by_wrapper.setdefault(event["number"], []).append(event)
    if not by_wrapper:
        return []
    return max(
        by_wrapper.values(),
        key=lambda events: (any(e["wrapper_training"] != e["inner_training"] for e in events), len(events)),
    )


def flags(run: RunView) -> tuple[str, list[tuple]]:
    forwards = training_forwards(run)
    if not forwards:
        return "no training forward ran", []
    stale = [e for e in forwards if e["wrapper_training"] != e["inner_training"]]
    inner = [(e["inner_training"], e["submodules_training"]) for e in forwards]
    if stale:
        e = stale[0]
        return (
            f"at {len(stale)} of {len(forwards)} training forwards (line {e['line']}) the wrapper's .training was "
            f"{e['wrapper_training']} while the inner module was {e['inner_training']} with "
            f"{e['submodules_training']}/{e['submodules']} submodules training"
        ), inner
    e = forwards[0]
    return f"wrapper and inner module agreed (.training={e['inner_training']}) at all {len(forwards)} training forwards", inner


def judge(case: Case) -> Judgement:
    original, original_inner = flags(case.original)
    fixed, fixed_inner = flags(case.fixed)
    if not original_inner:
        return Judgement(Verdict.NOT_REACHED, original, fixed)
    if not fixed_inner:
        return Judgement(Verdict.FIX_FAILED if case.fix_applied else Verdict.NOT_REACHED, original, fixed)
    if sorted(set(original_inner)) == sorted(set(fixed_inner)):
        return Judgement(
            Verdict.NO_RUNTIME_EFFECT,
            original + ": the forward used the inner module's flags",
            fixed + "; the inner module's flags are the same as in the original: "
            "no behavioural difference, only the wrapper's flag differed",
        )
    return Judgement(Verdict.CONFIRMED, original, fixed + "; the inner module's flags differ from the original's")
