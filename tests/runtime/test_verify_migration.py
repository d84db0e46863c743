"""`dplint verify --migration ORIGINAL MIGRATED`: the original in one process, the migrated
script as 2 gloo ranks on the CPU; losses per step, parameters, samples per epoch and the
checkpoint compared. One real run by default (10 to 15 s on 2 cores: three processes import
torch), a broken migration and every fixture shape with DPLINT_SLOW_TESTS=1; the judging itself is
tested on hand-written records, without torch."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dplint.runtime_check.migration import judge, render_html, render_text, run_migration

from .support import needs_torch

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "fixtures" / "migrate"


def run_cli(*args: str, cwd=None):
    import subprocess

    return subprocess.run([sys.executable, "-m", "dplint", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@needs_torch
@pytest.mark.runtime
def test_tutorial_migration_trains_the_same_model_and_writes_the_report(tmp_path):
    report = tmp_path / "proof.html"
    done = run_cli("verify", "--migration", str(SHAPES / "tutorial_loop.py"), str(SHAPES / "tutorial_loop.py.migrated"),
                   "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "loss per step: ok\n  8 steps; max |original - mean of ranks| = " in out
    assert "parameters at the end: ok\n  4 tensors, 178 values;" in out and "ranks identical: yes" in out
    assert ("sampler 0 (shuffled, 64 samples) epoch 1: every sample once across the ranks (rank 0: 32, rank 1: 32)") in out
    assert out.endswith("result: the migrated script trains the same model\n")
    page = report.read_text()
    assert page.count("<polyline") == 2 and page.count("<svg") == 2
    assert page.count("fill='#4c72b0'/>") == 64 and page.count("fill='#dd8452'/>") == 64  # 2 epochs x 32 per rank
    assert not re.search(r"<script|<link|src=|href=", page)  # self-contained: nothing to fetch


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
def test_a_migration_without_a_sampler_is_shown_wrong(tmp_path):
    # each rank trains on the whole data set: the coverage check and the losses say so
    broken = tmp_path / "broken.py"
    broken.write_text((SHAPES / "one_device.py.migrated").read_text().replace(
        "sampler=DistributedSampler(dataset, shuffle=True)", "shuffle=True").replace(
        "        loader.sampler.set_epoch(epoch)\n", ""))
    done = run_cli("verify", "--migration", str(SHAPES / "one_device.py"), str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "samples per epoch: FAILED\n  no DistributedSampler was iterated" in done.stdout
    assert "loss per step: FAILED" in done.stdout
    assert done.stdout.endswith("result: the migration is NOT shown to be equivalent\n")


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(p.stem for p in SHAPES.glob("*.py")))
def test_every_shape_migration_is_proven(shape, capsys):
    status = run_migration(str(SHAPES / f"{shape}.py"), str(SHAPES / f"{shape}.py.migrated"), [], quiet=True)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "loss per step: ok" in out and "parameters at the end: ok" in out and "samples per epoch: ok" in out
    if shape in ("checkpoint_resume", "argparse_functions", "trainer_class", "one_device"):
        assert re.search(r"checkpoint: ok\n  \S+: loads strictly into the bare \w+ \(\d+ keys\)", out), out


def record(losses, parameters, samplers=(), checkpoints=()):
    return {"losses": losses, "parameters": parameters, "tensors": 1, "samplers": list(samplers),
            "checkpoints": list(checkpoints), "finished": True}


def shard(rank, indices, epoch=0):
    return {"sampler": 0, "kind": "distributed", "size": 4, "epoch": epoch, "pass": epoch, "shuffle": True, "indices": indices}


def test_judging_agreeing_records():
    runs = {"failures": [], "original": [record([1.0, 0.5], [0.25, 0.5])],
            "migrated": [record([1.1, 0.4], [0.25, 0.5], [shard(0, [0, 2])], [{"file": "m.pt", "key": None, "loaded": True,
                                                                            "error": None, "keys": 2, "model": "Net"}]),
                         record([0.9, 0.6], [0.25, 0.5], [shard(1, [1, 3])])]}
    proof = judge("a.py", "b.py", runs)
    assert proof.ok
    text = render_text(proof)
    assert "     1  0.500000    0.500000         0.400000  0.600000\n" in text
    assert "every sample once across the ranks (rank 0: 2, rank 1: 2)" in text
    assert "m.pt: loads strictly into the bare Net (2 keys)" in text
    assert "<polyline" in render_html(proof)


def test_judging_finds_each_kind_of_difference():
    runs = {"failures": [], "original": [record([1.0, 0.5], [0.25, 0.5])],
            "migrated": [record([1.0, 0.5], [0.25, 0.6], [shard(0, [0, 1])],
                                [{"file": "m.pt", "key": "model", "loaded": False, "keys": 2, "model": "Net",
                                  "error": 'RuntimeError: Unexpected key(s) in state_dict: "module.w"'}]),
                         record([1.0, 0.7], [0.25, 0.6], [shard(1, [1, 3])])]}
    proof = judge("a.py", "b.py", runs)
    verdicts = {check.name: check.ok for check in proof.checks}
    assert verdicts == {"loss per step": False, "parameters at the end": False, "samples per epoch": False,
                        "checkpoint": False}
    text = render_text(proof)
    assert "     1  0.500000    0.600000         0.500000  0.700000   <- differs" in text
    assert "epoch 0: 1 never seen, 1 seen more than once (rank 0: 2, rank 1: 2)" in text
    assert "m.pt['model']: does not load into the bare model: RuntimeError: Unexpected key(s)" in text


def test_a_failed_run_is_reported_with_its_output():
    proof = judge("a.py", "b.py", {"failures": ["the migrated script, rank 1 exited with status 1:\nboom"],
                                   "original": [{}], "migrated": [{}, {}]})
    assert not proof.ok
    assert "runs: FAILED\n  the migrated script, rank 1 exited with status 1:\n  boom\n" in render_text(proof)


def test_a_missing_script_is_a_usage_error(tmp_path):
    done = run_cli("verify", "--migration", str(tmp_path / "absent.py"), str(SHAPES / "tutorial_loop.py.migrated"))
    assert done.returncode == 2 and f"dplint: error: no such script: {tmp_path / 'absent.py'}" in done.stderr
