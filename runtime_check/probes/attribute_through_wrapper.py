"""DPL015 attribute-through-wrapper: the AttributeError a wrapper raises for an attribute of
the wrapped model; on CPU a `DataParallel` is still built (without GPUs it runs the module
itself), so the read fails here too unless the script wraps only with several GPUs."""

from __future__ import annotations

from dplint.runtime_check.probes._raised_at_line import judge_raised
from dplint.runtime_check.probes.shared import observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement

CODE = "DPL015"
NAME = "attribute-through-wrapper"


def install(context) -> None:
    observe_wrappers(context)


def judge(case: Case) -> Judgement:
    return judge_raised(case, "object has no attribute", bool(case.original.all("wrap")))
