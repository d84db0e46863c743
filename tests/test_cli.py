"""The command line contract: exit codes, `check --fix` == `fix`, `--diff`, `--show-fixes`,
`--exit-non-zero-on-fix`, `--statistics`, standard input, `--force-exclude`, `-o`,
DPLINT_OUTPUT_FORMAT, `rules` and `explain`."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from dplint.registry import all_rules

# Two findings, both with safe fixes: DPL007 (line 4) and DPL100 (line 5).
SCRIPT = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
    "steps = 10  # noqa: DPL999\n"
)
FIXED = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n"
    "steps = 10\n"
)
CLEAN = "import torch\n\nprint(torch.__version__)\n"
SELECT = ("--select", "DPL007,DPL100")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


# ---------------------------------------------------------------------------- exit codes
def test_exit_0_when_clean(cli, project):
    result = cli("check", "--no-cache", "clean.py", cwd=project)
    assert (result.returncode, out(result)) == (0, "All checks passed!\n")


def test_exit_1_with_findings_and_0_with_exit_zero(cli, project):
    assert cli("check", "--no-cache", *SELECT, "train.py", cwd=project).returncode == 1
    result = cli("check", "--no-cache", *SELECT, "--exit-zero", "train.py", cwd=project)
    assert result.returncode == 0 and "Found 2 problems." in out(result)


def test_exit_1_for_a_file_that_does_not_parse(cli, project):
    (project / "broken.py").write_text("def f(:\n    model = DataParallel(net)\n    model.train()\n")  # DPL001's tokens: parsed
    result = cli("check", "--no-cache", "--output-format", "concise", "broken.py", cwd=project)
    assert result.returncode == 1
    assert re.fullmatch(r"broken\.py:\d+:\d+: DPL000 error cannot parse: .+\n", out(result)), out(result)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (("--select", "DPL999"), "dplint: error: unknown rule selector 'DPL999'"),
        (("--ignore", "no-such-rule"), "dplint: error: unknown rule selector 'no-such-rule'"),
        (("--extend-select", "XYZ"), "dplint: error: unknown rule selector 'XYZ'"),
        (("--output-format", "yaml"), "dplint: error: unknown output format 'yaml'"),
        (("--no-such-option",), "No such option"),
    ],
)
def test_exit_2_for_usage_errors(cli, project, arguments, message):
    result = cli("check", "--no-cache", *arguments, "train.py", cwd=project)
    assert result.returncode == 2
    assert message in err(result)
    assert out(result) == ""


def test_fix_with_an_unknown_rule_is_a_usage_error(cli, project):
    result = cli("fix", "--rule", "DPL999", "train.py", cwd=project)
    assert result.returncode == 2 and "unknown rule selector 'DPL999'" in err(result)
    assert (project / "train.py").read_text() == SCRIPT


# ---------------------------------------------------------------------------- fixing
def test_check_fix_is_fix(cli, tmp_path):
    results = {}
    for command in (("check", "--fix"), ("fix",)):
        folder = tmp_path / command[0]
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
        results[command] = cli(*command, *SELECT, "train.py", cwd=folder)
        assert (folder / "train.py").read_text() == FIXED
    by_check, by_fix = results.values()
    assert (by_check.returncode, by_check.stdout, by_check.stderr) == (by_fix.returncode, by_fix.stdout, by_fix.stderr)
    assert by_fix.returncode == 0  # nothing left
    assert out(by_fix) == "All checks passed!\n"
    assert err(by_fix) == "Fixed 2 problems in 1 file.\n"


def test_fix_exits_1_while_findings_remain(cli, project):
    result = cli("fix", *SELECT, "--rule", "unused-suppression", "train.py", cwd=project)
    assert result.returncode == 1
    assert (project / "train.py").read_text() == SCRIPT.replace("  # noqa: DPL999", "")
    assert out(result).splitlines()[0].startswith("train.py:4:44: DPL007 error [*] ")


def test_exit_non_zero_on_fix(cli, project):
    result = cli("fix", *SELECT, "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert result.returncode == 1
    assert (project / "train.py").read_text() == FIXED
    again = cli("fix", *SELECT, "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert again.returncode == 0  # nothing to fix this time


def test_diff_writes_nothing_and_exits_1_when_there_is_a_diff(cli, project):
    for command in (("fix", "--diff"), ("check", "--diff")):
        result = cli(*command, *SELECT, "train.py", cwd=project)
        assert result.returncode == 1
        assert out(result) == (
            "--- train.py\n+++ train.py\n@@ -1,5 +1,5 @@\n"
            " from torch.utils.data import DataLoader, DistributedSampler\n \n"
            " sampler = DistributedSampler(dataset)\n"
            "-loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
            "-steps = 10  # noqa: DPL999\n"
            "+loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n"
            "+steps = 10\n"
        )
        assert err(result) == "Would fix 2 problems in 1 file.\n"
        assert (project / "train.py").read_text() == SCRIPT


def test_diff_exits_0_when_there_is_nothing_to_fix(cli, project):
    result = cli("fix", "--diff", "clean.py", cwd=project)
    assert (result.returncode, out(result), err(result)) == (0, "", "Would fix 0 problems in 0 files.\n")


def test_show_fixes_lists_what_was_fixed_per_file_and_rule(cli, project):
    result = cli("fix", *SELECT, "--show-fixes", ".", cwd=project)
    assert err(result).splitlines() == [
        "Fixed 2 problems in 1 file.",
        "- train.py:",
        "    DPL007 (sampler-shuffle) Remove the `shuffle=` argument",
        "    DPL100 (unused-suppression) Remove the unused suppression",
    ]


# ---------------------------------------------------------------------------- statistics
def test_statistics_replaces_the_findings(cli, project):
    shutil.copy(project / "train.py", project / "train2.py")
    result = cli("check", "--no-cache", "--statistics", "--select", "DPL007", ".", cwd=project)
    assert out(result) == "    2\tDPL007\t[*] sampler-shuffle\nFound 2 problems.\n"
    assert result.returncode == 1


# ---------------------------------------------------------------------------- standard input
def test_stdin_check_names_the_stdin_filename(cli, project):
    result = cli("check", *SELECT, "--output-format", "concise", "--stdin-filename", "pkg/train.py", "-", input=SCRIPT.encode(), cwd=project)
    assert result.returncode == 1
    assert [line.split(" [*]")[0] for line in out(result).splitlines()] == [
        "pkg/train.py:4:44: DPL007 error",
        "pkg/train.py:5:13: DPL100 info",
    ]


def test_stdin_fix_writes_the_fixed_code_to_stdout(cli, project):
    result = cli("fix", *SELECT, "--stdin-filename", "train.py", "-", input=SCRIPT.encode(), cwd=project)
    assert result.returncode == 0
    assert out(result) == FIXED
    assert "Fixed 2 problems" in err(result)
    unchanged = cli("fix", "-", input=CLEAN.encode(), cwd=project)
    assert (unchanged.returncode, out(unchanged)) == (0, CLEAN)


def test_stdin_filename_picks_the_configuration(cli, project):
    (project / "tests").mkdir()
    (project / "tests" / "dplint.toml").write_text('ignore = ["sampler-shuffle"]\n')
    result = cli("check", "--output-format", "concise", "--stdin-filename", "tests/test_x.py", input=SCRIPT.encode(), cwd=project)
    assert [line.split(":")[3].split()[0] for line in out(result).splitlines()] == ["DPL100"]


def test_force_exclude_with_stdin(cli, project):
    (project / "pyproject.toml").write_text('[tool.dplint]\nexclude = ["generated/*"]\n')
    args = ("--stdin-filename", "generated/train.py", "-")
    checked = cli("check", *SELECT, "--output-format", "concise", *args, input=SCRIPT.encode(), cwd=project)
    assert checked.returncode == 1 and out(checked).count("generated/train.py") == 2
    skipped = cli("check", *SELECT, "--output-format", "concise", "--force-exclude", *args, input=SCRIPT.encode(), cwd=project)
    assert (skipped.returncode, out(skipped)) == (0, "")
    echoed = cli("fix", *SELECT, "--force-exclude", *args, input=SCRIPT.encode(), cwd=project)
    assert (echoed.returncode, out(echoed)) == (0, SCRIPT)


# ---------------------------------------------------------------------------- excludes and paths
def test_force_exclude_applies_excludes_to_named_files(cli, project):
    (project / "pyproject.toml").write_text('[tool.dplint]\nexclude = ["train.py"]\n')
    assert cli("check", "--no-cache", *SELECT, ".", cwd=project).returncode == 0  # walked: excluded
    assert cli("check", "--no-cache", *SELECT, "train.py", cwd=project).returncode == 1  # named: checked
    forced = cli("check", "--no-cache", *SELECT, "--force-exclude", "train.py", cwd=project)
    assert forced.returncode == 0


def test_output_file(cli, project):
    (project / "taken").write_text("a file, not a folder")
    result = cli("check", "--no-cache", *SELECT, "-o", "taken/report.txt", "train.py", cwd=project)
    assert result.returncode == 2 and err(result).startswith("dplint: error: cannot write taken/report.txt: ")
    result = cli("check", "--no-cache", *SELECT, "--output-format", "json", "-o", "out/report.json", "train.py", cwd=project)
    assert (result.returncode, out(result)) == (1, "")  # the folder is made
    assert [f["code"] for f in json.loads((project / "out" / "report.json").read_text())] == ["DPL007", "DPL100"]


def test_output_format_from_the_environment(cli, project, monkeypatch):
    monkeypatch.setenv("DPLINT_OUTPUT_FORMAT", "json-lines")
    result = cli("check", "--no-cache", *SELECT, "train.py", cwd=project)
    assert [json.loads(line)["code"] for line in out(result).splitlines()] == ["DPL007", "DPL100"]
    result = cli("check", "--no-cache", *SELECT, "--output-format", "concise", "train.py", cwd=project)
    assert out(result).startswith("train.py:4:44: DPL007")  # the flag wins over the environment


# ---------------------------------------------------------------------------- rules and explain
def test_rules_lists_every_rule(cli):
    lines = out(cli("rules")).splitlines()
    assert [line.split()[0] for line in lines] == [rule.code for rule in all_rules()]
    assert "DPL100  unused-suppression           info     fix: safe     a suppression comment that suppresses nothing" in lines
    assert any(line.startswith("DPL007  sampler-shuffle ") for line in lines)


@pytest.mark.parametrize("name", ["DPL100", "unused-suppression", "dpl100"])
def test_explain(cli, name):
    result = cli("explain", name)
    assert result.returncode == 0
    text = out(result)
    assert text.startswith("# unused-suppression (DPL100)\n\nSeverity: info. Fix: safe.\n")
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Fix safety"):
        assert section in text


def test_explain_unknown_rule(cli):
    result = cli("explain", "DPL999")
    assert result.returncode == 2 and "unknown rule selector 'DPL999'" in err(result)


def test_version(cli):
    from dplint import __version__

    assert out(cli("--version")) == f"dplint, version {__version__}\n"
