"""DPL006 save-wrapped-state-dict: the key prefixes of every saved state dict."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import observe_saves, quoted
from dplint.runtime_check.verdicts import Case, Judgement, Verdict, decide

CODE = "DPL006"
NAME = "save-wrapped-state-dict"


def install(context) -> None:
    observe_saves(context)


def describe(event: dict) -> str:
    prefixed = "all" if event["prefixed"] == event["keys"] else str(event["prefixed"])
    if not event["prefixed"]:
        prefixed = "none"
    return (
        f"line {event['line']}: torch.save wrote {event['keys']} state-dict keys, {prefixed} starting with "
        f"\"module.\" ({quoted(event['sample'])})"
    )


def judge(case: Case) -> Judgement:
    original = [e for e in case.near(case.original, "save") if e["keys"]]
    fixed = [e for e in case.near(case.fixed, "save") if e["keys"]]
    if not original:
        return Judgement(Verdict.NOT_REACHED, "no state dict was saved at the flagged line",
                         describe(fixed[0]) if fixed else "no state dict saved")
    fixed_text = describe(fixed[0]) if fixed else "no state dict was saved at the fixed line"
    bad_fixed = not fixed or fixed[0]["prefixed"] > 0
    return decide(case, original[0]["prefixed"] > 0, bad_fixed, describe(original[0]), fixed_text)
