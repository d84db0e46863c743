"""`dplint.wrappers.indexed_values`: what `seq[k]` holds for a list or nn.ModuleList built
by a display and `append` statements, and where it cannot be told."""

from __future__ import annotations

import libcst as cst
import pytest

from dplint.wrappers import indexed_values
from dplint.flow import analysed


def held(code: str) -> list[str] | None:
    """The code of what the last line's `pick = seq[k]` subscript holds."""
    module = cst.parse_module(code)
    model = analysed(module, "x.py")
    subscript = module.body[-1].body[0].value
    assert isinstance(subscript, cst.Subscript)
    values = indexed_values(model, subscript)
    return None if values is None else [module.code_for_node(v.expr) if v.known else "?" for v in values]


HEAD = "import torch.nn as nn\n"


@pytest.mark.parametrize(
    "code, expected",
    [
        ("seq = [a, b, c]\npick = seq[1]\n", ["b"]),
        ("seq = (a, b)\npick = seq[-1]\n", ["b"]),
        (HEAD + "seq = nn.ModuleList([])\nseq.append(ce)\nseq.append(nn.DataParallel(kd))\npick = seq[1]\n",
         ["nn.DataParallel(kd)"]),
        (HEAD + "seq = nn.ModuleList([ce])\nseq.append(kd)\nseq.cuda()\npick = seq[0]\n", ["ce"]),
        ("dp = make()\nseq = []\nseq.append(dp)\npick = seq[0]\n", ["make()"]),
    ],
)
def test_an_element_built_in_order(code, expected):
    assert held(code) == expected


@pytest.mark.parametrize(
    "code",
    [
        "seq = [a, b]\npick = seq[i]\n",  # not a literal index
        "seq = [a, b]\npick = seq[5]\n",  # out of range
        "seq = [*rest, b]\npick = seq[0]\n",  # starred
        "seq = []\nfor m in mods:\n    seq.append(m)\npick = seq[0]\n",  # appended in a loop
        "seq = []\nif cond:\n    seq.append(a)\nseq.append(b)\npick = seq[0]\n",  # appended on one branch
        "seq = [a, b]\nseq.insert(0, c)\npick = seq[0]\n",  # changed otherwise
        "seq = [a, b]\nseq[0] = c\npick = seq[0]\n",
        "seq = [a, b]\nseq += [c]\npick = seq[0]\n",
        "seq = build()\npick = seq[0]\n",  # built out of sight
    ],
)
def test_cannot_tell(code):
    assert held(code) is None
