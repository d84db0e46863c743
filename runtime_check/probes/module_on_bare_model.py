"""DPL016 module-on-bare-model: `model.module` on the path where the model was not wrapped
raises AttributeError; on a CPU machine the `device_count() > 1` branch is that path."""

from __future__ import annotations

from dplint.runtime_check.probes._raised_at_line import judge_raised
from dplint.runtime_check.probes.shared import observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement

CODE = "DPL016"
NAME = "module-on-bare-model"


def install(context) -> None:
    observe_wrappers(context)


def judge(case: Case) -> Judgement:
    # The bug shows where no wrapper was built: the bare path is the one this machine takes.
    return judge_raised(case, "has no attribute 'module'", wrapped_here=True)
