"""The formats ruff has and dplint gained: `grouped` (findings under their file's name),
`pylint` (`path:line: [CODE(slug)] message`) and `gitlab` (GitLab Code Quality JSON)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES
from test_reporters import DPL007_MESSAGE, DPL100_MESSAGE, SCRIPT  # the same script and messages
from dplint.reporters import REPORTERS, gitlab, grouped, pylint
from dplint.rule import Finding, Position, Severity

NOTEBOOK = "bad_sampler_across_cells.ipynb"


@pytest.fixture
def project(tmp_path):
    """A git repository with two flagged scripts in a subfolder and a notebook."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    (tmp_path / "src" / "other.py").write_text(SCRIPT.replace("sampler)\n", "sampler)\n\n\n\n\n\n"))  # DPL100 on line 10
    shutil.copy(FIXTURES / "notebooks" / NOTEBOOK, tmp_path / "src" / NOTEBOOK)
    return tmp_path


def run(cli, project, output_format, path="src", cwd=None):
    result = cli("check", "--no-cache", "--select", "DPL007,DPL100", "--output-format", output_format, path,
                 cwd=cwd or project)
    assert result.returncode == 1, result.stderr
    return result.stdout.decode()


def test_formats_are_registered():
    assert {"grouped", "pylint", "gitlab"} <= set(REPORTERS)


def test_grouped(cli, project):
    assert run(cli, project, "grouped").splitlines() == [
        f"src/{NOTEBOOK}:",
        f"  cell 5:2:44 DPL007 error [*] {DPL007_MESSAGE}",
        "",
        "src/other.py:",
        f"   4:44 DPL007 error [*] {DPL007_MESSAGE}",
        f"  10:13 DPL100 info [*] {DPL100_MESSAGE}",
        "",
        "src/train.py:",
        f"  4:44 DPL007 error [*] {DPL007_MESSAGE}",
        f"  5:13 DPL100 info [*] {DPL100_MESSAGE}",
        "",
        "Found 5 problems.",
        "[*] 5 fixable with dplint fix.",
    ]


def test_grouped_aligns_rows_right_and_columns_left():
    def at(row, column):
        return Finding("DPL007", "sampler-shuffle", "m", Severity.ERROR, "a.py", Position(row, column), Position(row, column))

    assert grouped([at(9, 5), at(10, 13), at(100, 1)], summary=False).splitlines() == [
        "a.py:",
        "    9:5  DPL007 error m",
        "   10:13 DPL007 error m",
        "  100:1  DPL007 error m",
    ]
    assert grouped([]) == "All checks passed!\n"


def test_pylint(cli, project):
    assert run(cli, project, "pylint").splitlines() == [
        # a notebook: the line of its JSON, where an editor opens the file; the cell in the message
        f"src/{NOTEBOOK}:79: [DPL007(sampler-shuffle)] cell 5, line 2: {DPL007_MESSAGE}",
        f"src/other.py:4: [DPL007(sampler-shuffle)] {DPL007_MESSAGE}",
        f"src/other.py:10: [DPL100(unused-suppression)] {DPL100_MESSAGE}",
        f"src/train.py:4: [DPL007(sampler-shuffle)] {DPL007_MESSAGE}",
        f"src/train.py:5: [DPL100(unused-suppression)] {DPL100_MESSAGE}",
    ]
    assert pylint([]) == ""


def test_gitlab_code_quality(cli, project):
    report = json.loads(run(cli, project, "gitlab"))
    assert [(issue["check_name"], issue["severity"], issue["location"]) for issue in report] == [
        ("DPL007", "major", {"path": f"src/{NOTEBOOK}", "lines": {"begin": 79, "end": 79}}),
        ("DPL007", "major", {"path": "src/other.py", "lines": {"begin": 4, "end": 4}}),
        ("DPL100", "info", {"path": "src/other.py", "lines": {"begin": 10, "end": 10}}),
        ("DPL007", "major", {"path": "src/train.py", "lines": {"begin": 4, "end": 4}}),
        ("DPL100", "info", {"path": "src/train.py", "lines": {"begin": 5, "end": 5}}),
    ]
    assert report[0]["description"] == f"DPL007 (sampler-shuffle) cell 5, line 2: {DPL007_MESSAGE}"
    assert report[3]["description"] == f"DPL007 (sampler-shuffle) {DPL007_MESSAGE}"
    fingerprints = [issue["fingerprint"] for issue in report]
    assert len(set(fingerprints)) == len(fingerprints) and all(len(f) == 32 for f in fingerprints)
    # stable: the same from a subfolder (paths are the repository's), and when lines move
    from_sub = json.loads(run(cli, project, "gitlab", path=".", cwd=project / "src"))
    assert [issue["location"]["path"] for issue in from_sub] == [issue["location"]["path"] for issue in report]
    assert [issue["fingerprint"] for issue in from_sub] == fingerprints
    (project / "src" / "train.py").write_text("\n\n" + SCRIPT)
    moved = json.loads(run(cli, project, "gitlab"))
    assert [issue["fingerprint"] for issue in moved] == fingerprints
    assert moved[3]["location"]["lines"]["begin"] == 6


def test_gitlab_fingerprints_tell_equal_findings_apart_and_paths_follow_ci_project_dir(tmp_path, monkeypatch):
    here = Finding("DPL007", "sampler-shuffle", "m", Severity.WARNING, str(tmp_path / "a" / "x.py"),
                   Position(1, 1), Position(1, 2))
    twice = json.loads(gitlab([here, here], root=str(tmp_path)))
    assert twice[0]["fingerprint"] != twice[1]["fingerprint"] and twice[0]["severity"] == "minor"
    assert twice[0]["location"]["path"] == "a/x.py"
    monkeypatch.setenv("CI_PROJECT_DIR", str(tmp_path / "a"))
    assert json.loads(gitlab([here]))[0]["location"]["path"] == "x.py"
    assert gitlab([]) == "[]\n"
