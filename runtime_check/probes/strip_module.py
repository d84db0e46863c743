"""DPL004 strip-module: every load_state_dict's missing / unexpected keys."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import describe_load, observe_loads, observe_saves
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL004"
NAME = "strip-module"


def install(context) -> None:
    observe_loads(context)
    observe_saves(context)


def first_load(case: Case, run: RunView):
    found = case.near(run, "load") or case.after(run, "load")
    return found[0] if found else None


def is_bad(event: dict) -> bool:
    return bool(event.get("error") or (event["prefixed"] and event["missing_count"]))


def judge(case: Case) -> Judgement:
    original, fixed = first_load(case, case.original), first_load(case, case.fixed)
    if original is None:
        return Judgement(Verdict.NOT_REACHED, "no load_state_dict ran at or after the flagged line",
                         describe_load(fixed) if fixed else "no load_state_dict ran")
    fixed_text = describe_load(fixed) if fixed else "no load_state_dict ran at or after the fixed line"
    return decide(case, is_bad(original), fixed is None or is_bad(fixed), describe_load(original), fixed_text)
