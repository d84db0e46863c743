"""The wrapper attribute tables of `dplint/wrappers.py` are torch's own: re-derived here from a
real `nn.DataParallel` and a real DistributedDataParallel (gloo, one process, in a child)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dplint.wrappers import DATA_PARALLEL_ATTRIBUTES, DDP_ATTRIBUTES, MODULE_ATTRIBUTES, wrapper_has

DERIVE = r"""
import json, os, socket
import torch.distributed as dist
import torch.nn as nn
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
base = set(dir(nn.Module()))
public = lambda obj: sorted(a for a in dir(obj) if not a.startswith("_") and a not in base)
dp = nn.DataParallel(nn.Linear(2, 2))
ddp = nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
print(json.dumps({"module": sorted(a for a in base if not a.startswith("_")), "dp": public(dp), "ddp": public(ddp)}))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def torch_tables():
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", DERIVE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_module_attributes_are_torchs(torch_tables):
    assert set(torch_tables["module"]) == MODULE_ATTRIBUTES


def test_wrapper_attributes_cover_torchs(torch_tables):
    # DataParallel sets some attributes only with GPUs (output_device, src_device_obj, dim):
    # the table may hold more than a CPU-built wrapper shows, never fewer.
    assert set(torch_tables["dp"]) <= DATA_PARALLEL_ATTRIBUTES
    assert set(torch_tables["ddp"]) == DDP_ATTRIBUTES


def test_wrapper_has():
    assert wrapper_has("DDP", "no_sync") and not wrapper_has("DP", "no_sync")
    assert wrapper_has("DP", "state_dict") and wrapper_has("DP", "_private")
    assert not wrapper_has("DDP", "features")
