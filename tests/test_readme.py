"""The README's quick start and CI must not drift apart."""

import re

from conftest import ROOT


def readme_commands():
    return re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_ci_runs_the_readme_test_command():
    test_command = readme_commands()[1].strip()
    assert "pytest" in test_command
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_quick_start_fixture_exists_and_is_flagged(cli):
    check_command = readme_commands()[0].strip()
    fixture = check_command.split("dplint check ")[1].split()[0]
    result = cli("check", "--no-cache", str(ROOT / fixture))
    assert result.returncode == 1, result.stderr
    assert b"DPL007" in result.stdout
