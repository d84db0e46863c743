"""DPL100 unused-suppression: a suppression comment that suppresses nothing (as ruff's RUF100).

The work is done in `dplint/suppressions.py`, after every other rule has run; this class makes
the rule listed, selectable, ignorable and explainable like any other.
"""

from __future__ import annotations

from typing import Iterator

from dplint.rule import Applicability, Example, Rule, Severity, Violation
from dplint.semantic import SemanticModel

_SHUFFLED_LOADER = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "sampler = DistributedSampler(ds)\n"
)


class UnusedSuppression(Rule):
    """
    ## What it does
    Flags a suppression comment that suppresses nothing: a `# noqa: DPL007`, a
    `# dplint: ignore[sampler-shuffle]` or a `# dplint: file-ignore[...]` naming a rule that
    is enabled and reports nothing where the comment applies, or naming a rule that does not
    exist (a typo such as `sampler-shufle`).

    Only what dplint can tell is reported: a bare `# noqa` or `# dplint: ignore` is never
    flagged (it may be meant for another tool, or for a rule not enabled in this run), codes of
    other tools in a `# noqa` (`E501`) are left alone, and so are rules not enabled in this run
    and rules that also report across files (`strip-module`), whose findings are only known
    once every file was checked.

    ## Why is this bad?
    A stale suppression hides the next real finding on its line. Once the code it excused is
    fixed or moved, it silences whatever misuse appears there later, and a misspelled rule name
    silences nothing while looking as if it did.

    ## Example
    ```python
    loader = DataLoader(ds, sampler=sampler)  # noqa: DPL007
    ```

    Use instead:
    ```python
    loader = DataLoader(ds, sampler=sampler)
    ```

    A `# noqa` covers only its own line; to suppress a finding from the line above, use
    `# dplint: ignore[sampler-shuffle]` on a line of its own.

    ## Fix safety
    The fix removes the unused rule names from the comment, or the whole directive when none
    is left (the whole line when the comment was alone on it). Other text in the comment, such
    as `# why` after it, and other tools' codes are kept. It only edits a comment: safe.
    """

    code = "DPL100"
    name = "unused-suppression"
    severity = Severity.INFO
    summary = "a suppression comment that suppresses nothing"
    fix_applicability = Applicability.SAFE
    # Every comment this rule reports names a dplint code (`DPL004`, `# noqa: dpl004`) or is a
    # `# dplint:` one.
    tokens = ("DPL", "dpl")

    VALID = (
        # Used: DPL007 fires on that line.
        _SHUFFLED_LOADER + "loader = DataLoader(ds, shuffle=True, sampler=sampler)  # noqa: DPL007\n",
        # The dplint form on the line above, by slug.
        _SHUFFLED_LOADER
        + "# dplint: ignore[sampler-shuffle]\n"
        + "loader = DataLoader(ds, shuffle=True, sampler=sampler)\n",
        # A bare noqa and another tool's code: not dplint's to judge.
        "import os  # noqa\nimport sys  # noqa: F401\n",
        # Not a comment: a directive inside a string.
        'HELP = "write # noqa: DPL004 to silence strip-module"\n',
    )
    INVALID = (
        Example(
            "loader = make_loader(ds)  # noqa: DPL007\n",
            expected="loader = make_loader(ds)\n",
        ),
        Example(
            "import os\n"
            "# dplint: ignore[sampler-shuffle]\n"
            "os.makedirs(out, exist_ok=True)\n",
            expected="import os\nos.makedirs(out, exist_ok=True)\n",
        ),
        Example(
            "x = compute()  # noqa: E501, DPL007  # long line\n",
            expected="x = compute()  # noqa: E501  # long line\n",
        ),
        Example(
            "# dplint: file-ignore[strip-modul]\nx = 1\n",
            expected="x = 1\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        return iter(())  # reported by dplint/suppressions.py once the other rules have run
