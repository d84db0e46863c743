"""DPL012 scalar-gather: a DataParallel forward returning a 0-d loss. With 2+ GPUs it warns
and gathers a vector, and backward() raises; on one device nothing shows."""

from __future__ import annotations

import warnings

from dplint.runtime_check.probes.shared import observe_backward, observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL012"
NAME = "scalar-gather"
WARNING = "Was asked to gather along dimension 0"


def install(context) -> None:
    observe_wrappers(context)
    observe_backward(context)
    if not context.once("gather-warning"):
        return
    recorder = context.recorder
    warnings.filterwarnings("always", message=WARNING)
    original = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if WARNING in str(message):
            recorder.emit("gather-warning", line=recorder.script_line(), message=str(message))
        return original(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def describe(case: Case, run: RunView) -> tuple[bool, bool, str]:
    """(a 0-d loss went through DataParallel?, did backward() break?, evidence)."""
    outputs = [e for e in (case.near(run, "dp-output") or run.all("dp-output")) if e["grad"]]
    if not outputs:
        return False, False, "no DataParallel training forward ran"
    scalar = [e for e in outputs if e["ndim"] == 0]
    gathered = [e for e in outputs if e["ndim"] == 1 and run.all("gather-warning")]
    errors = case.after(run, "backward-error") or run.all("backward-error")
    if gathered:
        text = f"DataParallel gathered the 0-d losses into a vector of {gathered[0]['shape'][0]} (line {gathered[0]['line']})"
        if errors:
            return True, True, text + f"; backward() raised {errors[0]['error']}"
        return True, False, text + "; backward() ran without error"
    if scalar:
        return True, False, f"the forward returned a 0-d loss through DataParallel (line {scalar[0]['line']}) on one device"
    return False, False, f"the DataParallel forward returned a {outputs[0]['ndim']}-d tensor (line {outputs[0]['line']})"


def judge(case: Case) -> Judgement:
    scalar, broke, original = describe(case, case.original)
    _, fixed_broke, fixed = describe(case, case.fixed)
    if not scalar:
        verdict = Verdict.NOT_REACHED if "no DataParallel" in original else Verdict.NOT_REPRODUCED
        return Judgement(verdict, original, fixed)
    if not broke:
        if case.gpus < 2:
            return Judgement(Verdict.NEEDS_GPU, original + f": nothing shows with {case.gpus} GPU(s); this needs 2", fixed)
        return Judgement(Verdict.NOT_REPRODUCED, original, fixed)
    return decide(case, True, fixed_broke, original, fixed)
