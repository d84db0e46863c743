"""DPL005 strict-false-load: a strict=False load whose key mismatch goes unnoticed."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import describe_load, load_is_silent_mismatch, observe_loads
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL005"
NAME = "strict-false-load"


def install(context) -> None:
    observe_loads(context)


def first_load(case: Case, run: RunView):
    found = case.near(run, "load") or case.after(run, "load")
    return found[0] if found else None


def judge(case: Case) -> Judgement:
    original, fixed = first_load(case, case.original), first_load(case, case.fixed)
    if original is None:
        return Judgement(Verdict.NOT_REACHED, "no load_state_dict ran at or after the flagged line",
                         describe_load(fixed) if fixed else "no load_state_dict ran")
    original_text = describe_load(original)
    if load_is_silent_mismatch(original) and original["loaded"] == 0:
        original_text += ": nothing was loaded"
    if not load_is_silent_mismatch(original):
        original_text += "; nothing was dropped in this run"
    fixed_text = describe_load(fixed) if fixed else "no load_state_dict ran at or after the fixed line"
    if fixed is not None and fixed.get("error"):
        fixed_text += ": the mismatch is no longer silent"
    bad_fixed = fixed is None or load_is_silent_mismatch(fixed)
    return decide(case, load_is_silent_mismatch(original), bad_fixed, original_text, fixed_text)
