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
    differ = any(apart(v[i], first[i]) for v in values.values() for i in (0, 1))
    return step, values, differ


def apart(a: float, b: float) -> bool:
    """Checksums further apart than float rounding of the same parameters could make them."""
    return abs(a - b) > 1e-9 * max(1.0, abs(b))


def shown_difference(values: dict) -> str:
    """The checksum that differs, with as many digits as it takes to see it differ."""
    ranks = list(values.values())
    for index, name in ((0, "sums"), (1, "sums of squares")):
        column = [v[index] for v in ranks]
        if any(apart(value, column[0]) for value in column):
            for digits in range(6, 18):
                shown = [f"{value:#.{digits}g}" for value in column]
                if len(set(shown)) > 1:
                    return f"{name} {' vs '.join(shown)}"
    return "checksums " + " vs ".join(repr(tuple(v)) for v in ranks)


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
                text += f"; after step {step} the parameters differ across ranks ({shown_difference(values)})"
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
