"""dplint/save_paths.py: a path is per rank when its value is built from a rank, not when a
word in a string or a name says so; a test guards a save only when some rank cannot pass it
(issue 28)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from conftest import lint

from dplint.save_paths import differs_per_process
from dplint.flow import analysed

SPAWNED = """\
import os
import uuid

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, keep_all=False):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    {body}


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2, args=(2,))
"""


def _rows(body: str) -> list[int]:
    code = SPAWNED.format(body=textwrap.indent(textwrap.dedent(body), "    ").lstrip())
    return [f.location.row for f in lint(code) if f.code == "DPL011"]


@pytest.mark.parametrize("body", [
    'torch.save({}, "every_rank.pt")',
    'rank_ckpt_path = "ckpt.pt"\ntorch.save({}, rank_ckpt_path)',
    'master_file = os.path.join("out", "model.pt")\ntorch.save({}, master_file)',
    'torch.save({}, f"ckpt_{world_size}.pt")',
])
def test_a_path_the_same_on_every_rank_is_flagged(body):
    assert _rows(body) != []


@pytest.mark.parametrize("body", [
    'torch.save({}, f"ckpt_{rank}.pt")',
    'rank_ckpt_path = f"out/{rank}.pt"\ntorch.save({}, rank_ckpt_path)',
    'torch.save({}, "ckpt%d.pt" % dist.get_rank())',
    'torch.save({}, "ckpt" + os.environ["LOCAL_RANK"] + ".pt")',
    'torch.save({}, f"dump-{uuid.uuid4().hex}.pt")',
    'torch.save({}, "dump-%d.pt" % os.getpid())',
])
def test_a_path_built_from_a_per_process_value_is_not_flagged(body):
    assert _rows(body) == []


def _differs(code: str) -> bool:
    model = analysed(cst.parse_module(textwrap.dedent(code)))
    return differs_per_process(model, model.module.body[-1].body[0].value)


@pytest.mark.parametrize(("code", "expected"), [
    ('path = "every_rank.pt"', False),
    ('rank_path = "a.pt"\npath = rank_path', False),
    ('path = f"{args.rank}.pt"', True),  # set where this file can't see: its name is all we have
    ('import os\npath = os.getenv("LOCAL_RANK")', True),
    ('path = getattr(args, "local_rank")', True),
    ('import torch.distributed as dist\npath = str(dist.get_rank())', True),
])
def test_what_a_value_depends_on(code, expected):
    assert _differs(code) is expected


@pytest.mark.parametrize(("body", "flagged"), [
    # a guard on one statement does not cover another in the same loop
    ("for epoch in range(3):\n    if rank == 0:\n        print(epoch)\n    torch.save({}, 'c.pt')", True),
    ("for epoch in range(3):\n    if rank != 0:\n        continue\n    torch.save({}, 'c.pt')", False),
    # an early return on `not a and not is_rank0` is not a pure rank guard
    ("is_rank0 = rank == 0\nif not keep_all and not is_rank0:\n    return\ntorch.save({}, 'c.pt')", True),
    ("is_rank0 = rank == 0\nif not keep_all or not is_rank0:\n    return\ntorch.save({}, 'c.pt')", False),
    ("if keep_all or rank == 0:\n    torch.save({}, 'c.pt')", True),
    ("if keep_all and rank == 0:\n    torch.save({}, 'c.pt')", False),
    ("if dist.is_initialized() and dist.get_rank() != 0:\n    return\ntorch.save({}, 'c.pt')", False),
    # a guard's meaning comes from what it tests, not from a word in its name
    ("save_on_master = keep_all\nif save_on_master:\n    torch.save({}, 'c.pt')", True),
    ("is_writer = rank == 0\nif is_writer:\n    torch.save({}, 'c.pt')", False),
    ("writes = False\nif rank == 0:\n    writes = True\nif writes:\n    torch.save({}, 'c.pt')", False),
])
def test_a_test_guards_only_when_some_rank_cannot_pass_it(body, flagged):
    assert bool(_rows(body)) is flagged
