"""Every rule's own VALID and INVALID examples, as tests (Fixit's way)."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import fix, lint
from dplint.registry import all_rules
from dplint.rule import tokens_match

VALID = [(rule, index, code) for rule in all_rules() for index, code in enumerate(rule.VALID)]
INVALID = [(rule, index, example) for rule in all_rules() for index, example in enumerate(rule.INVALID)]


def test_every_rule_has_examples_and_docs():
    for rule in all_rules():
        assert len(rule.VALID) >= 2, rule.code
        assert len(rule.INVALID) >= 2, rule.code
        doc = rule.documentation()
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Fix safety"):
            assert section in doc, (rule.code, section)
        assert rule.tokens, f"{rule.code} declares no pre-filter tokens"


@pytest.mark.parametrize("rule, index, code", VALID, ids=lambda v: getattr(v, "code", None) if isinstance(v, type) else None)
def test_valid_example_is_clean(rule, index, code):
    assert [f for f in lint(code) if f.code == rule.code] == []


@pytest.mark.parametrize("rule, index, example", INVALID, ids=lambda v: getattr(v, "code", None) if isinstance(v, type) else None)
def test_invalid_example_is_flagged_and_fixed(rule, index, example):
    found = [f for f in lint(example.code) if f.code == rule.code]
    assert len(found) == example.count, [f"{f.location.row}:{f.location.column} {f.message}" for f in found]
    assert tokens_match(example.code, rule.tokens), "the pre-filter would skip this example"
    fixed = fix(example.code, only=frozenset({rule.code}))
    if example.expected is None:
        assert fixed == example.code
    else:
        assert fixed == example.expected
        cst.parse_module(fixed)
        assert fix(fixed, only=frozenset({rule.code})) == fixed  # idempotent
