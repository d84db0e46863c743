"""DPL013 hand-rolled-strip: the load that follows a hand-written prefix strip."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import describe_load, observe_loads
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL013"
NAME = "hand-rolled-strip"


def install(context) -> None:
    observe_loads(context)


def next_load(case: Case, run: RunView):
    found = case.near(run, "load") or case.after(run, "load")
    return found[0] if found else None


def is_bad(event: dict) -> bool:
    return bool(event.get("error") or event["missing_count"] or event["unexpected_count"])


def judge(case: Case) -> Judgement:
    original, fixed = next_load(case, case.original), next_load(case, case.fixed)
    if original is None:
        return Judgement(Verdict.NOT_REACHED, "no load_state_dict ran after the strip",
                         describe_load(fixed) if fixed else "no load_state_dict ran")
    fixed_text = describe_load(fixed) if fixed else "no load_state_dict ran after the fixed strip"
    if not is_bad(original):
        if fixed is not None and not is_bad(fixed):
            return Judgement(Verdict.NO_RUNTIME_EFFECT, describe_load(original) + ": the strip worked on these keys",
                             fixed_text + ": the same keys")
        return Judgement(Verdict.NOT_REPRODUCED, describe_load(original), fixed_text)
    return decide(case, True, fixed is None or is_bad(fixed), describe_load(original), fixed_text)
