"""DPL003 loss-on-cpu: the device of the loss, the device copies in its graph and the
parameters' devices at every backward(). On CPU the copies do not exist: needs a GPU."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import observe_backward
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL003"
NAME = "loss-on-cpu"


def install(context) -> None:
    observe_backward(context)


def backwards(case: Case, run: RunView) -> list[dict]:
    first = run.ranks[0] if run.ranks else 0
    found = case.near(run, "backward") or [e for e in run.all("backward") if e["rank"] == first]
    return [e for e in found if e["rank"] == first]


def describe(events: list[dict]) -> str:
    e = events[0]
    values = ", ".join(f"{v['value']:.4f}" for v in events[:3] if v["value"] is not None)
    params = "/".join(e["param_devices"]) or "?"
    copies = f"{e['copies']} device cop{'y' if e['copies'] == 1 else 'ies'} in its graph"
    return f"loss on {e['device']} (backward() at line {e['line']}), parameters on {params}, {copies}; first losses {values}"


def judge(case: Case) -> Judgement:
    original_events, fixed_events = backwards(case, case.original), backwards(case, case.fixed)
    if not original_events:
        return Judgement(Verdict.NOT_REACHED, "no backward() ran", describe(fixed_events) if fixed_events else "no backward() ran")
    original = describe(original_events)
    fixed = describe(fixed_events) if fixed_events else "no backward() ran"
    if not case.original.cuda:
        same = fixed_events and [e["value"] for e in original_events[:3]] == [e["value"] for e in fixed_events[:3]]
        return Judgement(
            Verdict.NEEDS_GPU,
            original + ": without CUDA `.cpu()` copies nothing",
            fixed + ("; the same losses: results are identical, the cost exists only on a GPU" if same else ""),
        )
    bad_original = any(e["copies"] and e["device"] == "cpu" for e in original_events)
    bad_fixed = any(e["copies"] and e["device"] == "cpu" for e in fixed_events)
    if bad_original:
        original += ": each step blocks on the device-to-host copies and backward copies the gradients back"
    return decide(case, bad_original, bad_fixed, original, fixed)
