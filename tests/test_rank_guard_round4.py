"""Rank-guard shapes from the fourth held-out round (DPL011 / DPL017): one-process branches,
flags set under a rank test, the rank compared with the world size, memoised routes."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import lint
from dplint.distributed import _one_process_answer


def rows(code: str, select: str) -> list[int]:
    return [finding.location.row for finding in lint(code, select=[select])]


@pytest.mark.parametrize("test, answer", [
    ("dist.get_world_size() == 1", True),
    ("world_size <= 1", True),
    ("get_world_size() < 2", True),
    ("1 == args.world_size", True),
    ("not world_size() > 1", True),
    ("dist.get_world_size() > 1", False),
    ("world_size != 1", False),
    ("int(os.environ['WORLD_SIZE']) >= 2", False),
    ("world_size >= 1", None),
    ("num_gpus == 1", None),
    ("rank == 1", None),
])
def test_one_process_answer(test, answer):
    assert _one_process_answer(cst.parse_expression(test)) is answer


SAVE_HEAD = "import torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"


def test_world_size_one_branch_is_not_flagged_but_its_else_is():
    code = SAVE_HEAD + (
        "if dist.get_world_size() > 1:\n"
        "    torch.save(state, 'a.pt')\n"
        "else:\n"
        "    torch.save(state, 'b.pt')\n"
    )
    assert rows(code, "DPL011") == [4]


def test_flag_cleared_only_on_other_ranks_guards():
    code = SAVE_HEAD + (
        "writes = True\n"
        "if dist.get_rank() != 0:\n"
        "    writes = False\n"
        "if writes:\n"
        "    torch.save(state, 'a.pt')\n"
    )
    assert rows(code, "DPL011") == []


def test_flag_cleared_by_a_setting_too_is_no_guard():
    code = SAVE_HEAD + (
        "writes = True\n"
        "if dist.get_rank() != 0:\n"
        "    writes = False\n"
        "if args.dry_run:\n"
        "    writes = True\n"
        "if writes:\n"
        "    torch.save(state, 'a.pt')\n"
    )
    assert rows(code, "DPL011") == []  # False is still set only under the rank test
    code = SAVE_HEAD + (
        "writes = True\n"
        "if args.dry_run:\n"
        "    writes = False\n"
        "if writes:\n"
        "    torch.save(state, 'a.pt')\n"
    )
    assert rows(code, "DPL011") == [7]


COLLECTIVE = (
    "import torch.distributed as dist\n"
    "def run(rank, bound, x):\n"
    "    if rank >= bound:\n"
    "        return\n"
    "    dist.all_reduce(x)\n"
    "def main(x):\n"
    "    dist.init_process_group('gloo')\n"
    "    run(dist.get_rank(), {bound}, x)\n"
)


def test_rank_past_world_size_excludes_no_rank():
    assert rows(COLLECTIVE.format(bound="dist.get_world_size()"), "DPL017") == []


def test_rank_past_a_smaller_bound_is_a_guard():
    assert rows(COLLECTIVE.format(bound="2"), "DPL017") == [5]


MEMO = (
    "import functools\n"
    "import torch.distributed as dist\n"
    "@functools.lru_cache(maxsize=None)\n"
    "def total(k):\n"
    "    dist.all_reduce(k)\n"
    "    return k\n"
    "def main(k):\n"
    "    dist.init_process_group('gloo')\n"
    "{every}"
    "    if dist.get_rank() == 0:\n"
    "        print(total(k))\n"
)


def test_memoised_route_shared_with_every_rank_is_not_followed():
    assert rows(MEMO.format(every="    total(k)\n"), "DPL017") == []
    assert rows(MEMO.format(every=""), "DPL017") == [5]
