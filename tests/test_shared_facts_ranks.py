"""A guard's meaning comes from what it tests, and a path is per rank only when its value
depends on a rank (issue 28, "Facts, once"): a configured GPU count is the same on every rank,
a constant file name is the same path on every rank whatever its letters say."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from conftest import lint
from dplint.distributed import mentions_rank
from dplint.flow import analysed

SPAWNED = """\
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu, cfg):
    dist.init_process_group("nccl", rank=gpu, world_size=cfg.world_size)
    torch.cuda.set_device(gpu)
    {setup}
    if {test}:
        dist.barrier()


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2, args=(None,))
"""


def _codes(code: str, rule: str) -> list[int]:
    return [f.location.row for f in lint(code) if f.code == rule]


@pytest.mark.parametrize(("setup", "test"), [
    ("pass", "cfg.dist.gpus != 0"),  # a configured count: the same on every rank
    ("gpu_total = torch.cuda.device_count()", "gpu_total != 0"),  # the machine's count
    ("n_gpu = cfg.n_gpu", "n_gpu > 0"),
    ("world = cfg.world_size", "world != 0"),
])
def test_a_count_guards_nothing(setup, test):
    assert _codes(SPAWNED.format(setup=setup, test=test), "DPL017") == []


@pytest.mark.parametrize(("setup", "test"), [
    ("cfg.gpu = gpu", "cfg.gpu == 0"),  # the index mp.spawn passes
    ("local = int(os.environ['LOCAL_RANK'])", "local == 0"),
    ("gpu_id = int(os.environ['LOCAL_RANK'])", "gpu_id == 0"),
    ("pass", "gpu == 0"),  # the spawned function's own index
    ("pass", "dist.get_rank() != 0"),
])
def test_a_rank_value_guards(setup, test):
    assert _codes(SPAWNED.format(setup=setup, test=test), "DPL017") == [13]


SAVE = """\
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.save({{}}, {path})


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2, args=(2,))
"""


@pytest.mark.parametrize("path", ['"every_rank.pt"', '"ckpt_rank0.pt"', 'f"{os.getcwd()}/master.pt"', '"local_rank.pth"'])
def test_a_constant_path_is_shared_by_every_rank(path):
    assert _codes(SAVE.format(path=path), "DPL011") == [11]


@pytest.mark.parametrize("path", ['f"ckpt_{rank}.pt"', '"shard_%d.pt" % local', '"rank" + str(rank) + ".pt"'])
def test_a_path_built_from_a_rank_is_per_rank(path):
    assert _codes(SAVE.format(path=path), "DPL011") == []


def _mentions(code: str) -> bool:
    model = analysed(cst.parse_module(textwrap.dedent(code)))
    return mentions_rank(model, model.module.body[-1].body[0].value)


@pytest.mark.parametrize(("code", "expected"), [
    ('x = "every_rank.pt"', False),
    ('x = f"rank{step}.pt"', False),
    ('import os\nx = os.environ["LOCAL_RANK"]', True),
    ('import os\nx = int(os.getenv("RANK"))', True),
    ('x = cfg.get("local_rank")', True),
    ('x = getattr(args, "rank")', True),
    ('x = cfg["rank"]', True),
])
def test_a_string_is_a_rank_only_as_the_key_of_a_read(code, expected):
    assert _mentions(code) is expected
