"""What a ruff user types first: severity and code frames, `--fail-on`, `rule`, `-e -n -q -s`,
`--exclude`, `--show-files`, `--show-settings`, `--config "key = value"`, `clean`, `version`,
the "No Python files found" warning, `--statistics` in every format, did-you-mean."""

from __future__ import annotations

from dplint.registry import all_rules

import json
import os
import sys

import pytest

from conftest import ROOT
from dplint.reporters import REPORTERS, message_parts
from dplint.rule import Finding, Position, Severity

# DPL007 (error, line 4) and DPL100 (info, line 5), both with safe fixes.
SCRIPT = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
    "steps = 10  # noqa: DPL999\n"
)
SELECT = ("--select", "DPL007,DPL100")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_text(SCRIPT)
    return tmp_path


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


# ---------------------------------------------------------------------------- severity and full
def test_full_shows_the_line_a_caret_a_note_and_the_help(cli, project):
    result = cli("check", "-n", *SELECT, "--output-format", "full", "train.py", cwd=project)
    assert result.returncode == 1
    assert out(result) == (
        "train.py:4:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`\n"
        "  |\n"
        "4 | loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
        "  |                                            ^^^^^^^^^^^^ DPL007\n"
        "  |\n"
        "  = note: it raises `ValueError: sampler option is mutually exclusive with shuffle`\n"
        "  = help: The DistributedSampler already shuffles, so drop `shuffle=`\n"
        "\n"
        "train.py:5:13: DPL100 info [*] Unused suppression `# noqa: DPL999`\n"
        "  |\n"
        "5 | steps = 10  # noqa: DPL999\n"
        "  |             ^^^^^^^^^^^^^^ DPL100\n"
        "  |\n"
        "  = note: no rule named `DPL999`\n"
        "  = help: Remove the unused suppression\n"
        "\n"
        "Found 2 problems.\n"
        "[*] 2 fixable with dplint fix.\n"
    )


def test_full_expands_tabs_under_the_caret_and_survives_a_missing_file():
    finding = Finding("DPL007", "sampler-shuffle", "x: y", Severity.ERROR, "/no/such/file.py", Position(1, 1), Position(1, 2))
    assert REPORTERS["full"]([finding]).splitlines()[:3] == [
        "/no/such/file.py:1:1: DPL007 error x", "  = note: y", ""
    ]


def test_text_lines_carry_the_severity(cli, project):
    lines = out(cli("check", "-n", *SELECT, "--output-format", "text", "train.py", cwd=project)).splitlines()
    assert [line.split(" [*] ")[0] for line in lines[:2]] == ["train.py:4:44: DPL007 error", "train.py:5:13: DPL100 info"]


def test_full_on_a_terminal_and_text_in_a_pipe(project):
    """As ruff: code frames when a person reads the output, one line per finding otherwise."""
    import pty
    import subprocess

    piped = subprocess.run([sys.executable, "-m", "dplint", "check", "-n", *SELECT, "train.py"], cwd=project, capture_output=True)
    assert out(piped).startswith("train.py:4:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`: it raises")
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "dplint", "check", "-n", *SELECT, "train.py"], cwd=project, stdout=follower, stderr=subprocess.PIPE
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=60) == 1
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    assert shown.startswith("train.py:4:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`\n  |\n4 | ")


@pytest.mark.parametrize(
    "message, fix, parts",
    [
        ("A `b: c` thing: what happens; do this", None, ("A `b: c` thing", "what happens", "Do this")),
        ("A thing: x (a; b). Reduce it", None, ("A thing", "x (a; b)", "Reduce it")),
        ("A thing: nothing to advise", "Remove it", ("A thing", "nothing to advise", "Remove it")),
        ("no colon at all; use `y`", None, ("no colon at all", "", "Use `y`")),
        ("plain", None, ("plain", "", "")),
    ],
)
def test_message_parts(message, fix, parts):
    finding = Finding("DPL007", "x", message, Severity.ERROR, "a.py", Position(1, 1), Position(1, 1), fix_message=fix)
    assert message_parts(finding) == parts


# ---------------------------------------------------------------------------- --fail-on
def test_fail_on_decides_which_severities_exit_1(cli, project):
    info_only = ("--select", "DPL100", "train.py")
    assert cli("check", "-n", *info_only, cwd=project).returncode == 1  # default: any finding
    assert cli("check", "-n", "--fail-on", "warning", *info_only, cwd=project).returncode == 0
    assert cli("check", "-n", "--fail-on", "error", *SELECT, "train.py", cwd=project).returncode == 1
    (project / "pyproject.toml").write_text('[tool.dplint]\nfail-on = "error"\n')
    result = cli("check", "-n", *info_only, cwd=project)
    assert result.returncode == 0 and "DPL100 info" in out(result)  # reported, not failing
    assert cli("check", "-n", "--fail-on", "info", *info_only, cwd=project).returncode == 1  # the flag wins
    (project / "pyproject.toml").write_text('[tool.dplint]\nfail-on = "fatal"\n')
    bad = cli("check", "-n", *info_only, cwd=project)
    assert bad.returncode == 2 and "`fail-on` must be one of error, warning, info" in err(bad)


def test_the_hooks_document_fail_on():
    assert "--fail-on" in (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "--fail-on" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------------------- ruff's flags
def test_exit_zero_short_flag_and_no_cache(cli, project):
    result = cli("check", "-e", "-n", *SELECT, "train.py", cwd=project)
    assert result.returncode == 0 and "Found 2 problems." in out(result)
    assert not (project / ".dplint_cache").exists()


def test_quiet_prints_the_findings_only_and_silent_nothing(cli, project):
    quiet = cli("check", "-n", "-q", *SELECT, "--output-format", "text", "train.py", cwd=project)
    assert quiet.returncode == 1 and len(out(quiet).splitlines()) == 2 and "Found" not in out(quiet)
    silent = cli("check", "-n", "-s", *SELECT, "train.py", cwd=project)
    assert (silent.returncode, out(silent), err(silent)) == (1, "", "")
    fixed = cli("fix", "-n", "-s", *SELECT, "train.py", cwd=project)
    assert (fixed.returncode, out(fixed), err(fixed)) == (0, "", "")


def test_exclude_and_extend_exclude_on_the_command_line(cli, project):
    (project / "pyproject.toml").write_text('[tool.dplint]\nexclude = ["train.py"]\n')
    listed = lambda *args: out(cli("check", "--show-files", *args, ".", cwd=project)).splitlines()  # noqa: E731
    assert listed() == ["legacy/old.py"]
    assert listed("--exclude", "legacy") == ["train.py"]  # replaces the file's exclude
    assert listed("--extend-exclude", "legacy") == []  # adds to it


def test_show_files_and_no_python_files(cli, project, tmp_path):
    result = cli("check", "--show-files", ".", cwd=project)
    assert (result.returncode, out(result)) == (0, "legacy/old.py\ntrain.py\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (("check",), ("check", "--show-files"), ("fix",)):
        result = cli(*command, ".", cwd=empty)
        assert result.returncode == 0
        assert err(result) == "dplint: warning: No Python files found under the given path(s)\n"
    assert out(cli("check", ".", cwd=empty)) == "All checks passed!\n"


def test_show_settings(cli, project):
    (project / "legacy" / "dplint.toml").write_text('ignore = ["DPL100"]\n')
    result = cli("check", "--show-settings", "--fail-on", "error", "legacy", cwd=project)
    assert result.returncode == 0
    lines = out(result).splitlines()
    assert lines[:2] == ["Resolved settings for: legacy/old.py", f"Settings path: {project / 'legacy' / 'dplint.toml'}"]
    assert 'ignore = ["DPL100"]' in lines and 'fail-on = "error"' in lines
    assert [line for line in lines if line.startswith("enabled rules")][0].count("DPL") == len(all_rules()) - 1  # DPL100 is off


def test_config_key_value_overrides(cli, project):
    (project / "ci.toml").write_text('select = ["DPL007", "DPL100"]\n')
    args = ("--config", "ci.toml", "--config", "fail-on = 'error'", "--config", 'ignore = ["DPL007"]', "train.py")
    result = cli("check", "-n", *args, cwd=project)
    assert result.returncode == 0 and "DPL100 info" in out(result) and "DPL007" not in out(result)
    bad = cli("check", "-n", "--config", "fail_on = 'error'", "train.py", cwd=project)
    assert bad.returncode == 2 and "unknown key `fail_on`" in err(bad) and "did you mean `fail-on`?" in err(bad)
    garbage = cli("check", "-n", "--config", "select = [", "train.py", cwd=project)
    assert garbage.returncode == 2 and "neither a configuration file nor a TOML `key = value` pair" in err(garbage)


def test_clean_removes_the_caches(cli, project):
    assert cli("check", "-s", ".", cwd=project).returncode == 1
    assert cli("check", "-s", "--cache-dir", "legacy/.dplint_cache", ".", cwd=project).returncode == 1
    assert (project / ".dplint_cache").is_dir() and (project / "legacy" / ".dplint_cache").is_dir()
    result = cli("clean", cwd=project)
    assert result.returncode == 0 and "Removing cache at: " in err(result)
    assert not (project / ".dplint_cache").exists() and not (project / "legacy" / ".dplint_cache").exists()


def test_version_command(cli):
    from dplint import __version__

    assert out(cli("version")) == f"dplint {__version__}\n"
    assert json.loads(out(cli("version", "--output-format", "json"))) == {"version": __version__}


# ---------------------------------------------------------------------------- rule, rules
def test_rule_is_explain(cli):
    assert out(cli("rule", "DPL004")) == out(cli("explain", "strip-module"))
    assert out(cli("rule", "DPL004")).startswith("# strip-module (DPL004)\n")


def test_rule_all_and_json(cli):
    from dplint.registry import all_rules

    codes = [rule.code for rule in all_rules()]
    text = out(cli("rule", "--all"))
    assert [line.split("(")[1].rstrip(")") for line in text.splitlines() if line.startswith("# ")] == codes
    one = json.loads(out(cli("rule", "DPL007", "--output-format", "json")))
    assert {key: one[key] for key in ("code", "name", "linter", "severity", "fix")} == {
        "code": "DPL007", "name": "sampler-shuffle", "linter": "dplint", "severity": "error", "fix": "safe"
    }
    assert "## What it does" in one["explanation"]
    assert [entry["code"] for entry in json.loads(out(cli("rule", "--all", "--output-format", "json")))] == codes
    assert cli("rule").returncode == 2


def test_rules_as_json(cli):
    from dplint.registry import all_rules

    listed = json.loads(out(cli("rules", "--output-format", "json")))
    assert [(entry["code"], entry["name"], entry["summary"]) for entry in listed] == [
        (rule.code, rule.name, rule.summary) for rule in all_rules()
    ]


@pytest.mark.parametrize(
    "command, expected",
    [
        (("explain", "strip_module"), "unknown rule selector 'strip_module' (did you mean 'strip-module'?)"),
        (("rule", "sampler_shufle"), "(did you mean 'sampler-shuffle'?)"),
        (("check", "--select", "strip-modul", "."), "(did you mean 'strip-module'?)"),
        (("check", "--ignore", "DPL0004", "."), "(did you mean 'DPL004'?)"),
    ],
)
def test_did_you_mean_for_rule_selectors(cli, project, command, expected):
    result = cli(*command, cwd=project)
    assert result.returncode == 2 and expected in err(result)


def test_rule_and_exclude_are_no_longer_misread(cli, project):
    """Once click suggested `rules` for `rule`, and `--force-exclude` for `--exclude`."""
    assert cli("rule", "DPL004").returncode == 0
    assert cli("check", "-n", "--exclude", "legacy", "--show-files", ".", cwd=project).returncode == 0


# ---------------------------------------------------------------------------- --statistics
@pytest.mark.parametrize("name", sorted(REPORTERS))
def test_statistics_honours_or_refuses_every_format(cli, project, name):
    result = cli("check", "-n", *SELECT, "--statistics", "--output-format", name, "train.py", cwd=project)
    shown = out(result)
    if name in ("json", "json-lines"):
        rows = json.loads(shown) if name == "json" else [json.loads(line) for line in shown.splitlines()]
        assert [row["code"] for row in rows] == ["DPL007", "DPL100"]
    elif name in ("text", "full", "concise"):
        assert shown.splitlines()[:2] == ["    1\tDPL007\t[*] sampler-shuffle", "    1\tDPL100\t[*] unused-suppression"]
    else:
        assert (result.returncode, shown) == (2, "")
        assert f"--statistics cannot be shown as {name}" in err(result)
        return
    assert result.returncode == 1
