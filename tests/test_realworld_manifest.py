"""The real-world benchmark's manifest is well formed (the scoring itself needs checkouts)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

import pytest

from conftest import ROOT
from dplint.registry import rule_catalog

REALWORLD = ROOT / "tests" / "realworld"
MANIFESTS = [REALWORLD / "cases.jsonl"]
FIELDS = {"repo": str, "commit": str, "path": str, "rule": str, "expect": str,
          "lines": list, "note": str, "ambiguous": bool}
# Rules that can be judged on real code (unused-suppression is about dplint's own comments).
SLUGS = {entry.name for entry in rule_catalog()} - {"unused-suppression"}


def rows():
    found = []
    for manifest in MANIFESTS:
        for number, text in enumerate(manifest.read_text().splitlines(), 1):
            if text.strip():
                found.append((f"{manifest.name}:{number}", text))
    return found


def parsed():
    return [(where, json.loads(text)) for where, text in rows()]


def test_manifest_exists():
    assert (REALWORLD / "cases.jsonl").exists()
    assert rows()


@pytest.mark.parametrize("where, text", rows(), ids=[w for w, _ in rows()])
def test_row_is_well_formed(where, text):
    row = json.loads(text)
    assert set(row) == set(FIELDS), f"{where}: fields {sorted(row)}"
    for field, kind in FIELDS.items():
        assert type(row[field]) is kind, f"{where}: {field} is not {kind.__name__}"
    assert re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", row["repo"]), where
    assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]), f"{where}: commit is not 40 hex"
    assert row["path"] and not row["path"].startswith(("/", "./")) and ".." not in row["path"].split("/")
    assert row["path"].endswith(".py"), where
    assert row["rule"] in SLUGS, f"{where}: unknown rule {row['rule']}"
    assert row["expect"] in {"flag", "clean"}, where
    assert all(type(n) is int and n > 0 for n in row["lines"]), where
    assert row["lines"] or row["expect"] == "clean", f"{where}: a flag row names its lines"
    assert row["note"].strip(), f"{where}: empty note"


def test_no_duplicate_rows():
    keys = Counter((r["repo"], r["commit"], r["path"], r["rule"], tuple(r["lines"])) for _, r in parsed())
    assert [key for key, count in keys.items() if count > 1] == []


def test_no_row_is_both_flag_and_clean_on_the_same_lines():
    expects = {}
    for where, r in parsed():
        for line in r["lines"] or [0]:
            key = (r["repo"], r["commit"], r["path"], r["rule"], line)
            assert expects.setdefault(key, r["expect"]) == r["expect"], f"{where}: contradicts another row"


def test_scorer_reads_the_manifests():
    sys.path.insert(0, str(REALWORLD))
    try:
        import score
    finally:
        sys.path.remove(str(REALWORLD))
    assert len(score.load_rows(MANIFESTS)) == len(rows())
    assert score.folder_name("a/b", "0123456789abcdef") == "a__b@0123456789"


def test_flag_rows_cover_at_least_ten_rules():
    """Issue 12's bar for the finished manifest: positives for at least 10 rules."""
    flagged = {r["rule"] for _, r in parsed() if r["expect"] == "flag" and not r["ambiguous"]}
    assert len(flagged) >= 10, sorted(flagged)
