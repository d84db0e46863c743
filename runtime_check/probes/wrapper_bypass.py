"""DPL002 wrapper-bypass: whether training forwards went through the wrapper, and (DDP)
whether the ranks' parameters stayed equal after each optimizer step."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL002"
NAME = "wrapper-bypass"


def install(context) -> None:
    observe_wrappers(context)


def drift(run: RunView):
    """(step, checksums per rank, differ?) at the last step every rank reported, or None."""
    by_step: dict[int, dict[int, list]] = {}
    for event in run.all("step"):
        if event["checksums"]:
            by_step.setdefault(event["n"], {})[event["rank"]] = next(iter(event["checksums"].values()))
    common = [n for n, ranks in by_step.items() if len(ranks) == len(run.ranks)]
    if not common or len(run.ranks) < 2:
        return None
    step = max(common)
    values = by_step[step]
    first = values[run.ranks[0]]
    differ = any(
        abs(v[0] - first[0]) > 1e-9 * max(1.0, abs(first[0])) or abs(v[1] - first[1]) > 1e-9 * max(1.0, abs(first[1]))
        for v in values.values()
    )
    return step, values, differ


def summary(case: Case, run: RunView) -> tuple[bool, str, str]:
    """(bypassed?, wrapper kind, evidence) for one run."""
    forwards = [e for e in (case.near(run, "forward") or run.all("forward")) if e["grad"] and e["rank"] == run.ranks[0]]
    if not forwards:
        return False, "", "no training forward of a wrapped model ran"
    direct = [e for e in forwards if not e["via_wrapper"]]
    kind = (direct or forwards)[0]["wrapper"]
    name = "DDP" if kind == "DDP" else "DataParallel"
    if direct:
        text = f"{len(direct)} of {len(forwards)} training forwards called the inner model directly (line {direct[0]['line']})"
        if kind == "DDP":
            text += ": DDP's reducer never ran"
    else:
        text = f"all {len(forwards)} training forwards went through {name}"
    if kind == "DDP":
        found = drift(run)
        if found is None:
            text += "; one rank: parameters cannot drift apart"
        else:
            step, values, differ = found
            if differ:
                shown = " vs ".join(f"{v[0]:.6f}" for v in values.values())
                text += f"; after step {step} the parameters differ across ranks (sums {shown})"
            else:
                text += f"; after step {step} the parameters are identical on all {len(values)} ranks"
    return bool(direct), kind, text


def judge(case: Case) -> Judgement:
    bad_original, kind, original = summary(case, case.original)
    bad_fixed, _, fixed = summary(case, case.fixed)
    if not kind:
        return Judgement(Verdict.NOT_REACHED, original, fixed)
    if kind == "DP" and case.gpus < 2:
        return Judgement(
            Verdict.NEEDS_GPU,
            original + f"; with {case.gpus or 'no'} GPU{'s' if case.gpus != 1 else ''} DataParallel runs the module "
            "directly anyway, so this needs 2 GPUs to show",
            fixed,
        )
    return decide(case, bad_original, bad_fixed, original, fixed)
