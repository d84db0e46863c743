"""DPL100 unused-suppression: a `# dplint: ignore` comment that suppresses nothing. It is
about the linter's own comments: nothing runs differently."""

from __future__ import annotations

from dplint.runtime_check.verdicts import Case, Judgement, Verdict

CODE = "DPL100"
NAME = "unused-suppression"


def install(context) -> None:
    pass  # nothing to observe


def judge(case: Case) -> Judgement:
    return Judgement(Verdict.NO_RUNTIME_EFFECT, "a comment for dplint: Python ignores it", "nothing runs differently")
