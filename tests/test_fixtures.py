"""The fixture scripts: exact findings (code, line, column), exact text after `fix`.

Layout: `fixtures/<rule-slug>/` holds `bad_*.py` (must be flagged), `ok_*.py` (near-misses
that must stay clean) and `expected.txt` with one `file:line:column: CODE` line per finding.
A flagged file's text after `dplint fix --unsafe-fixes` is `<name>.py.fixed`; without that
file, fixing must leave it byte-identical. `fixtures/clean/` holds correct scripts.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, fix, lint
from dplint.engine import fix_source, rules_for
from dplint.registry import all_rules, selected_codes

RULE_DIRS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and (p / "expected.txt").exists())
SCRIPTS = sorted(path for folder in RULE_DIRS for path in folder.glob("*.py"))
CLEAN = sorted((FIXTURES / "clean").glob("*.py"))


def expected_findings(script: Path) -> list[tuple[int, int, str]]:
    found = []
    for line in (script.parent / "expected.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        location, code = line.rsplit(": ", 1)
        name, row, column = location.rsplit(":", 2)
        if name == script.name:
            found.append((int(row), int(column), code.strip()))
    return sorted(found)


def actual_findings(text: str, path: str = "x.py") -> list[tuple[int, int, str]]:
    return sorted((f.location.row, f.location.column, f.code) for f in lint(text, path))


def test_every_rule_has_fixtures():
    slugs = {folder.name for folder in RULE_DIRS}
    for rule in all_rules():
        if rule.code == "DPL100":
            continue
        assert rule.name in slugs, f"no fixtures/{rule.name}/"
        folder = FIXTURES / rule.name
        assert len(list(folder.glob("bad_*.py"))) >= 2, rule.name
        assert len(list(folder.glob("ok_*.py"))) >= 3, rule.name


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_findings(script: Path):
    expected = expected_findings(script)
    if script.name.startswith("bad_"):
        assert expected, f"{script.name} is a bad_ fixture without an expected finding"
        rule_code = {rule.name: rule.code for rule in all_rules()}.get(script.parent.name)
        if rule_code is not None:
            assert rule_code in {code for *_, code in expected}, f"{script.name} is not flagged by {rule_code}"
    if script.name.startswith("ok_"):
        assert expected == [], "ok_ fixtures must stay clean"
    assert actual_findings(script.read_text(), str(script)) == expected


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_fix(script: Path):
    text = script.read_text()
    fixed_file = script.with_name(script.name + ".fixed")
    fixed = fix(text, str(script))
    if not fixed_file.exists():
        assert fixed == text, "fix changed a file that has no .fixed expectation"
        return
    assert fixed == fixed_file.read_text()
    cst.parse_module(fixed)
    assert fix(fixed, str(script)) == fixed, "fixing twice must equal fixing once"
    # The findings that were fixed are gone.
    result = fix_source(text, str(script), rules_for(selected_codes()), unsafe=True)
    fixed_codes = {f.code for f in result.applied}
    assert not [f for f in lint(fixed) if f.code in fixed_codes and f.fix_applicability is not None]


@pytest.mark.parametrize("script", CLEAN, ids=lambda p: p.name)
def test_clean_scripts_stay_clean(script: Path):
    text = script.read_text()
    assert actual_findings(text, str(script)) == []
    assert fix(text, str(script)) == text
