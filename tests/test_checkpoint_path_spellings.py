"""Matching checkpoint paths written two ways (dplint/checkpoints.py): a computed path held in a
name and spelled inline (`path_spelling`), path shapes with computed folders
(`shapes_may_match`), and models built from a class held in a name or wrapped afterwards."""

from __future__ import annotations

import libcst as cst
import pytest

from dplint.checkpoints import checkpoint_facts, shapes_may_match
from dplint.flow import analysed


def facts(code: str):
    model = analysed(cst.parse_module(code))
    return model, checkpoint_facts(model)


RESUME = (
    "import os, torch, torch.nn as nn\n"
    "def run(out, other):\n"
    "    net = nn.DataParallel(nn.Linear(2, 2))\n"
    "    last = os.path.join(out, 'last.pt')\n"
    "    net.load_state_dict(torch.load(last)['net'])\n"
    "    torch.save({'net': net.state_dict()}, {saved})\n"
)


@pytest.mark.parametrize("saved, same", [
    ("os.path.join(out, 'last.pt')", True),
    ("f'./{out}/last.pt'", True),
    ("out + '/last.pt'", True),
    ("os.path.join(other, 'last.pt')", False),  # another parameter: another folder
    ("os.path.join(out, 'best.pt')", False),
])
def test_a_computed_path_in_a_name_and_inline_is_one_file(saved, same):
    model, found = facts(RESUME.replace("{saved}", saved))
    (load,) = found.loads
    assert bool(found.wrapper_saves_of(load.loaded)) is same


def test_a_rebound_folder_is_another_file():
    code = RESUME.replace("{saved}", "os.path.join(out, 'last.pt')").replace(
        "    torch.save(", "    out = out + '_next'\n    torch.save(")
    _, found = facts(code)
    (load,) = found.loads
    assert found.wrapper_saves_of(load.loaded) == []


@pytest.mark.parametrize("saved, loaded, match", [
    ("*/best(*).th", "runs/best(*).th", True),
    ("*/best(*).th", "run_*_ckpts/best(*).th", True),
    ("*/latest.pth", "*/checkpoints/latest.pth", True),
    ("runs/best(*).th", "logs/best(*).th", False),
    ("*/best(*).th", "*/best_*.th", False),  # file names differ
    ("*/snap(*).pt", "*/export(*).pt", False),
])
def test_shapes_with_computed_folders(saved, loaded, match):
    assert shapes_may_match(saved, loaded) is match


def test_a_class_held_in_a_name_builds_a_bare_model():
    code = (
        "import sys, torch.nn as nn\n"
        "from zoo import ResNet, VGGNet\n"
        "if sys.argv[1] == 'r':\n"
        "    Arch = ResNet\n"
        "else:\n"
        "    Arch = VGGNet\n"
        "net = Arch()\n"
        "net.load_state_dict({})\n"
    )
    _, found = facts(code)
    assert found.loads[0].bare_class == ""


def test_a_factory_model_wrapped_afterwards_is_bare_at_the_load():
    code = (
        "import torch, torch.nn as nn\n"
        "from zoo import make\n"
        "net = make()\n"
        "net.load_state_dict(torch.load('a.pt'))\n"
        "net = nn.DataParallel(net)\n"
        "other = make()\n"
        "other.load_state_dict(torch.load('b.pt'))\n"
    )
    _, found = facts(code)
    assert [load.bare_class for load in found.loads] == ["", None]


@pytest.mark.parametrize("between, bare", [
    ("net = nn.SyncBatchNorm.convert_sync_batchnorm(net)\n", ""),
    ("net, opt = amp.initialize(net, opt)\n", ""),
    ("net = make()\n", None),  # another model: the loaded one is never wrapped
])
def test_a_conversion_between_the_load_and_the_wrap_keeps_the_model(between, bare):
    code = (
        "import torch, torch.nn as nn\n"
        "from apex import amp\n"
        "from zoo import make\n"
        "net = make()\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "net.load_state_dict(torch.load('a.pt'))\n"
        + between +
        "net = nn.DataParallel(net)\n"
    )
    _, found = facts(code)
    assert found.loads[0].bare_class == bare
