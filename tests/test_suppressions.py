"""Suppression comments (every form) and DPL100 unused-suppression with its fix."""

from __future__ import annotations

import pytest

from conftest import fix, lint
from dplint.rule import Finding, Position, Severity
from dplint.suppressions import apply_suppressions, find_directives

HEAD = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "sampler = DistributedSampler(ds)\n"
)
FLAGGED = "loader = DataLoader(ds, shuffle=True, sampler=sampler)"  # DPL007 at column 25


def found(code: str, select=None) -> list[tuple[int, int, str]]:
    return [(f.location.row, f.location.column, f.code) for f in lint(code, select=select)]


# ---------------------------------------------------------------------------- what is silenced
def test_unsuppressed_finding_is_reported():
    assert found(HEAD + FLAGGED + "\n") == [(3, 25, "DPL007")]


@pytest.mark.parametrize(
    "comment",
    [
        "  # noqa: DPL007",
        "  # noqa:DPL007",
        "  # NOQA: dpl007",
        "  # noqa: E501, DPL007",
        "  # noqa: E501 DPL007",
        "  # noqa",
        "  # noqa - the sampler is a stub in this test",
        "  # dplint: ignore[DPL007]",
        "  # dplint: ignore[sampler-shuffle]",
        "  # dplint: ignore[strip-module, sampler-shuffle]",
        "  # dplint: ignore",
        "  # type: ignore  # noqa: DPL007",
        "  # noqa: DPL007  # the stub sampler does not shuffle",
    ],
)
def test_comment_on_the_flagged_line_silences_it(comment):
    assert found(HEAD + FLAGGED + comment + "\n") == []


@pytest.mark.parametrize(
    "comment",
    [
        "  # noqa: E501",  # another tool's code only
        "  # noqa: DPL004",  # another dplint rule
        "  # dplint: ignore[strip-module]",
        "  # dplint: file-ignore[strip-module]",
    ],
)
def test_comment_naming_other_rules_does_not_silence(comment):
    assert (3, 25, "DPL007") in found(HEAD + FLAGGED + comment + "\n")


@pytest.mark.parametrize("comment", ["  # dplint: ignore[sampler-shuffle", "  # dplint: ignore-sampler-shuffle"])
def test_malformed_dplint_comment_silences_nothing(comment):
    """Not a directive: above all it must not turn into a bare one that silences everything."""
    assert found(HEAD + FLAGGED + comment + "\n") == [(3, 25, "DPL007")]


def test_dplint_form_on_the_line_above():
    assert found(HEAD + "# dplint: ignore[sampler-shuffle]\n" + FLAGGED + "\n") == []
    assert found(HEAD + "    # dplint: ignore[DPL007]  (stub sampler)\n".lstrip() + FLAGGED + "\n") == []


def test_stacked_dplint_comments_above_apply_to_the_next_line_of_code():
    code = HEAD + "# dplint: ignore[DPL007]\n# the stub sampler does not shuffle\n" + FLAGGED + "\n"
    assert found(code) == []


def test_a_blank_line_ends_what_the_line_above_covers():
    code = HEAD + "# dplint: ignore[DPL007]\n\n" + FLAGGED + "\n"
    assert found(code) == [(3, 1, "DPL100"), (5, 25, "DPL007")]


def test_noqa_covers_only_its_own_line():
    code = HEAD + "# noqa: DPL007\n" + FLAGGED + "\n"
    assert found(code) == [(3, 1, "DPL100"), (4, 25, "DPL007")]
    (unused,) = [f for f in lint(code) if f.code == "DPL100"]
    assert "`# noqa` covers only its own line" in unused.message


def test_trailing_dplint_comment_covers_its_own_line_not_the_next():
    code = HEAD + "x = 1  # dplint: ignore[DPL007]\n" + FLAGGED + "\n"
    assert found(code) == [(3, 8, "DPL100"), (4, 25, "DPL007")]


def test_multi_line_call_is_matched_on_the_finding_line():
    code = HEAD + "loader = DataLoader(\n    ds,\n    shuffle=True,  # noqa: DPL007\n    sampler=sampler,\n)\n"
    assert found(code) == []


@pytest.mark.parametrize(
    "directive",
    ["# dplint: file-ignore[sampler-shuffle]", "# dplint: file-ignore[DPL007, DPL100]", "# dplint: file-ignore"],
)
def test_file_ignore_anywhere_silences_the_whole_file(directive):
    assert found(HEAD + FLAGGED + "\n" + directive + "\n") == []
    assert found(directive + "\n" + HEAD + FLAGGED + "\n") == []


def test_directives_inside_strings_are_not_comments():
    code = (
        '"""Training script.\n\n# dplint: file-ignore[sampler-shuffle]\n"""\n'
        + HEAD
        + FLAGGED
        + '; note = "# noqa: DPL007"\n'
    )
    assert found(code) == [(7, 25, "DPL007")]
    assert find_directives(code) == []


def test_suppressed_findings_are_not_fixed():
    code = HEAD + FLAGGED + "  # noqa: DPL007\n"
    assert fix(code) == code


# ---------------------------------------------------------------------------- DPL100
def test_unused_noqa_code_is_reported_and_removed():
    code = "steps = 10  # noqa: DPL007\n"
    (finding,) = lint(code)
    assert (finding.code, finding.name, finding.severity) == ("DPL100", "unused-suppression", Severity.INFO)
    assert (finding.location, finding.end_location) == (Position(1, 13), Position(1, 27))
    assert finding.message == "Unused suppression `# noqa: DPL007`: nothing to suppress on this line for `DPL007`"
    assert finding.fix_message == "Remove the unused suppression"
    assert fix(code) == "steps = 10\n"


def test_unknown_rule_in_a_suppression_is_reported():
    code = "steps = 10  # dplint: ignore[sampler-shufle, DPL999]\n"
    (finding,) = lint(code)
    assert finding.message == (
        "Unused suppression `# dplint: ignore[sampler-shufle, DPL999]`: no rule named `sampler-shufle`, `DPL999`"
    )
    assert fix(code) == "steps = 10\n"


def test_unused_file_ignore_is_reported():
    code = "# dplint: file-ignore[sampler-shuffle]\nsteps = 10\n"
    (finding,) = lint(code)
    assert finding.message.endswith("nothing to suppress in this file for `sampler-shuffle`")
    assert fix(code) == "steps = 10\n"


@pytest.mark.parametrize(
    "code, expected",
    [
        # Only the unused entries go; the used ones and other tools' codes stay.
        (HEAD + FLAGGED + "  # noqa: DPL007, DPL999\n", HEAD + FLAGGED + "  # noqa: DPL007\n"),
        ("x = 1  # noqa: E501, DPL007\n", "x = 1  # noqa: E501\n"),
        ("x = 1  # noqa:E501,DPL007,W291\n", "x = 1  # noqa:E501, W291\n"),
        (
            HEAD + FLAGGED + "  # dplint: ignore[strip-modul, sampler-shuffle]\n",
            HEAD + FLAGGED + "  # dplint: ignore[sampler-shuffle]\n",
        ),
        # Other comments around the directive are kept.
        ("x = 1  # noqa: DPL007  # why this is fine\n", "x = 1  # why this is fine\n"),
        ("x = 1  # why this is fine  # noqa: DPL007\n", "x = 1  # why this is fine\n"),
        ("x = 1  # type: ignore # noqa: DPL007 # why\n", "x = 1  # type: ignore # why\n"),
        # Text after the directive that is not a comment of its own explains it: it goes too.
        ("x = 1  # noqa: DPL007 stub sampler\n", "x = 1\n"),
        # A comment alone on its line goes with the line; indentation and line endings are kept.
        ("if x:\n    # dplint: ignore[DPL007]\n    y = 1\n", "if x:\n    y = 1\n"),
        ("x = 1\r\n# dplint: ignore[DPL007]\r\ny = 2\r\n", "x = 1\r\ny = 2\r\n"),
        ("x = 1\n# dplint: file-ignore[DPL007]", "x = 1"),
        ("x = 1\n# noqa: DPL007\n", "x = 1\n"),
        ("x = 1\ty = 2\n".replace("\t", "\n") + "z = 3\t# noqa: DPL007\n", "x = 1\ny = 2\nz = 3\n"),
    ],
)
def test_unused_suppression_fix(code, expected):
    assert [f.code for f in lint(code) if f.code == "DPL100"] == ["DPL100"]
    fixed = fix(code, only=frozenset({"DPL100"}))
    assert fixed == expected
    assert [f for f in lint(fixed) if f.code == "DPL100"] == []


@pytest.mark.parametrize(
    "code",
    [
        "import os  # noqa\n",  # bare: maybe for another tool
        "import os  # noqa: F401, E402\n",  # other tools' codes
        "x = 1  # dplint: ignore\n",  # bare dplint form: maybe for rules not enabled in this run
        "x = 1  # noqa: DPL007, DPL100\n",  # naming DPL100 opts the directive out
        "x = 1  # dplint: ignore[sampler-shuffle, unused-suppression]\n",
        "# dplint: file-ignore[unused-suppression]\nx = 1  # noqa: DPL007\n",
        "# dplint: file-ignore[DPL100]\n",
    ],
)
def test_never_reported(code):
    assert lint(code) == []


def test_rule_not_enabled_in_this_run_is_not_called_unused():
    code = "x = 1  # noqa: DPL007\n"
    assert found(code, select=["DPL100"]) == []
    assert found(code, select=["DPL007", "DPL100"]) == [(1, 8, "DPL100")]


def test_nothing_reported_when_dpl100_is_not_enabled():
    assert found("x = 1  # noqa: DPL007\n", select=["DPL007"]) == []


def test_used_everywhere_it_applies():
    """A finding silenced by two directives uses both: neither is called unused."""
    code = "# dplint: file-ignore[DPL007]\n" + HEAD + "# dplint: ignore[DPL007]\n" + FLAGGED + "  # noqa: DPL007\n"
    assert found(code) == []


def test_rules_with_project_wide_findings_are_never_called_unused(monkeypatch):
    """Their cross-file findings arrive after this file's suppressions ran."""
    import dplint.registry as registry
    from dplint.rule import Rule

    real = registry.all_rules()

    class CrossFile(Rule):
        code, name, severity, summary, tokens = "DPL090", "cross-file", Severity.ERROR, "", ("x",)

        def check(self, model):
            return iter(())

        @classmethod
        def check_project(cls, facts_by_path):
            return iter(())

    monkeypatch.setattr(registry, "all_rules", lambda: (*real, CrossFile))
    assert found("x = 1  # noqa: DPL090\n") == []
    assert found("x = 1  # noqa: DPL007\n") == [(1, 8, "DPL100")]


def test_text_that_does_not_tokenize_suppresses_nothing_and_claims_nothing():
    finding = Finding("DPL007", "sampler-shuffle", "m", Severity.ERROR, "x.py", Position(2, 1), Position(2, 2))
    text = "x = (\n# noqa: DPL007\n"  # EOF inside the parenthesis
    assert find_directives(text) is None
    assert apply_suppressions(text, "x.py", [finding], frozenset({"DPL007", "DPL100"})) == [finding]


def test_file_with_only_an_unused_suppression_passes_the_prefilter(tmp_path, cli):
    """No rule's tokens but DPL100's: the runner must still look at the file."""
    (tmp_path / "train.py").write_text("steps = 10  # noqa: DPL007\n")
    result = cli("check", "--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert result.stdout.decode().splitlines() == [
        "train.py:1:13: DPL100 info [*] Unused suppression `# noqa: DPL007`: nothing to suppress on this line for `DPL007`"
    ]
    assert result.returncode == 1
    fixed = cli("fix", "train.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert (tmp_path / "train.py").read_text() == "steps = 10\n"


def test_without_findings_only_a_directive_naming_dplint_is_tokenized(monkeypatch):
    """`dpl` in a word (`DeepSpeedPlugin`) beside another tool's `# noqa` is no reason to
    tokenize a file without findings; `# noqa: ... DPL` and `# dplint:` are."""
    import dplint.suppressions as suppressions

    tokenized = []
    real = suppressions.find_directives
    monkeypatch.setattr(suppressions, "find_directives", lambda text: tokenized.append(text) or real(text))
    codes = frozenset({"DPL007", "DPL100"})
    plain = "from x import DeepSpeedPlugin  # noqa: F401\n"
    assert apply_suppressions(plain, "x.py", [], codes) == []
    assert tokenized == []
    for named in ("x = 1  # noqa: E501, dpl007\n", "x = 1  # dplint: ignore[sampler-shuffle]\n"):
        assert [f.code for f in apply_suppressions(named, "x.py", [], codes)] == ["DPL100"]
    assert len(tokenized) == 2
