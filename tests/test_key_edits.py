"""dplint/key_edits.py: the facts DPL013 hand-rolled-strip reads about hand-written edits of a
state dict's keys, asked directly and through the rule."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import lint
from dplint import key_edits
from dplint.key_edits import FIRST, LSTRIP, REPLACE, SLICE, SPLIT, key_loop, prefix_edits
from dplint.flow import analysed

HEAD = "import torch\nsd = torch.load('m.pt')\n"


def strips(code: str) -> list[tuple[int, str]]:
    return [(f.location.row, f.severity.value) for f in lint(HEAD + code, select=["DPL013"])]


def edits(code: str) -> list[tuple[str, str, str]]:
    model = analysed(cst.parse_module(HEAD + code))
    return [(model.code(edit.node), edit.key, edit.kind) for edit in prefix_edits(model)]


def test_the_edits_that_cut_the_wrapper_prefix_or_the_first_component():
    code = (
        "a = [k.lstrip('module.'), k.replace('module.', ''), k[7:], k[len('module.'):]]\n"
        "b = [k.split('module.', 1)[1], k.partition('module.')[2], k.split('.', 1)[1], '.'.join(k.split('.')[1:])]\n"
        "c = [k.replace('module.', 'm.'), k[8:], k.split('.')[1], k.strip('module.'), '-'.join(k.split('.')[1:])]\n"
    )
    assert sorted(edits(code)) == sorted([
        ("k.lstrip('module.')", "k", LSTRIP),
        ("k.replace('module.', '')", "k", REPLACE),
        ("k[7:]", "k", SLICE),
        ("k[len('module.'):]", "k", SLICE),
        ("k.split('module.', 1)[1]", "k", SPLIT),
        ("k.partition('module.')[2]", "k", SPLIT),
        ("k.split('.', 1)[1]", "k", FIRST),
        ("'.'.join(k.split('.')[1:])", "k", FIRST),
    ])


def test_a_key_loop_and_the_prefixes_it_tests():
    model = analysed(cst.parse_module(HEAD + "x = {(k[7:] if k[:7] == 'module.' else k): v for k, v in sd.items()}\n"))
    (edit,) = prefix_edits(model)
    loop = key_loop(model, edit.node, edit.key)
    assert model.code(loop.source) == "sd"
    assert key_edits.tested_prefixes(model, loop) == ["module."]


@pytest.mark.parametrize("test", ["k.find('module.') == 0", "0 == k.find('module.')", "k.index('module.') == 0"])
def test_find_at_zero_is_a_prefix_test(test):
    # `k.find(P) == 0` holds exactly when `k.startswith(P)`: a per-key guard.
    assert strips(f"x = {{(k[7:] if {test} else k): v for k, v in sd.items()}}\n") == []


def test_find_elsewhere_is_no_prefix_test():
    assert strips("x = {(k[7:] if k.find('module.') >= 0 else k): v for k, v in sd.items()}\n") == [(3, "warning")]
