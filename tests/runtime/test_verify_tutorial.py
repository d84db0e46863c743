"""The issue's acceptance run: a script in the shape of the torchrun DDP tutorial, hard-wired
to CUDA and nccl, with a post-loop `torch.save` of the wrapper into a relative `checkpoints/`
folder and its data read from a relative `data/` file, verified on a CPU machine:

    dplint verify --cpu-remap train.py -- 50 10

Every finding is confirmed with evidence, verify exits 0, the script's folder is
byte-identical afterwards and nothing is left in the temporary folder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from .support import ROOT, needs_torch
from dplint.runtime_check.runner import visible_gpus

pytestmark = [pytest.mark.runtime, needs_torch,
              pytest.mark.skipif(needs_torch.args[0] or visible_gpus() > 0, reason="checks the CPU-only path")]
TUTORIAL = ROOT / "fixtures" / "verify-tutorial"


def contents(folder) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        found[relative] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return found


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory, verified):
    temporary = tmp_path_factory.mktemp("tmp")
    before = contents(TUTORIAL)

    def verify_it():
        return subprocess.run(
            [sys.executable, "-m", "dplint", "verify", "--cpu-remap", "train.py", "--", "50", "10"],
            cwd=TUTORIAL, capture_output=True, text=True, timeout=600, env=dict(os.environ, TMPDIR=str(temporary)),
        )

    done = verified.submit("tutorial", verify_it).result()
    return done, before, contents(TUTORIAL), os.listdir(temporary)


def test_every_finding_confirmed_exit_0(tutorial):
    done, *_ = tutorial
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = done.stdout.split("\n\n")
    assert blocks[-1] == "3 findings: 3 confirmed\n"
    assert blocks[1:-1] == [
        "train.py:72:9: DPL011 unguarded-rank-save: confirmed\n"
        "  original: ranks 0 and 1 both wrote final.pt (line 72) at the same time\n"
        "  fixed:    no automatic fix for this finding; the copy misbehaves the same: "
        "ranks 0 and 1 both wrote final.pt (line 72) at the same time",
        "train.py:72:20: DPL006 save-wrapped-state-dict: confirmed\n"
        '  original: line 72: torch.save wrote 4 state-dict keys, all starting with "module." ("module.0.weight", "module.0.bias")\n'
        '  fixed:    line 72: torch.save wrote 4 state-dict keys, none starting with "module." ("0.weight", "0.bias")',
        blocks[3],
    ]
    assert blocks[3].startswith("train.py:81:84: DPL008 missing-set-epoch: confirmed\n  original: on every rank epochs 1 and 2 started alike")


def test_runs_where_it_lives_after_the_loop_with_remapped_lines(tutorial):
    done, *_ = tutorial
    header = done.stdout.split("\n\n")[0].splitlines()
    assert header[1].startswith("runs: 2 ranks (torchrun --standalone --nproc-per-node 2), backend gloo, CPU only (no CUDA); "
                                "cuda->cpu and nccl->gloo remapped (--cpu-remap)")
    assert header[2] == (
        "remapped: line 24 torch.cuda.set_device() ignored; line 25 nccl -> gloo; line 45 .to(device) -> cpu; "
        "line 45 DDP device_ids dropped; line 60 .to(device) -> cpu"
    )
    assert all(line.endswith(("finished", "s)")) for line in header[3:])
    # 50 epochs asked: the loop ended after 2 and the save after it ran
    assert "budget reached: ended the loop at line 68 and went on after it" in done.stderr


def test_leaves_the_folder_byte_identical_and_no_temporary_files(tutorial):
    _, before, after, temporary = tutorial
    assert after == before
    assert temporary == []
