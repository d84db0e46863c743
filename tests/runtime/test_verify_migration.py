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

from dplint.runtime_check.migration import DataStubError, judge, parse_data_stub, render_html, render_text, run_migration

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


CRASH_AT_EXIT = """

class _AbortsAtInterpreterExit:  # like gloo's threads on a loaded machine: a C++ abort during teardown
    def __del__(self):
        os.abort()


_teardown = _AbortsAtInterpreterExit()
"""


@needs_torch
@pytest.mark.runtime
def test_an_abort_after_the_script_returned_is_a_note_not_a_failed_run(tmp_path, capsys):
    # the probe's record is written by the last exit hook; a signal after it is the interpreter's
    # teardown, not the training: the comparison stands and the output says what happened
    migrated = tmp_path / "tutorial_ddp.py"
    migrated.write_text((SHAPES / "tutorial_loop.py.migrated").read_text() + CRASH_AT_EXIT)
    status = run_migration(str(SHAPES / "tutorial_loop.py"), str(migrated), [], quiet=True)
    out = capsys.readouterr().out
    assert status == 0, out
    for rank in (0, 1):
        assert (f"note: the migrated script, rank {rank} was stopped by SIGABRT after the script had returned and "
                "its record was written (at interpreter exit)\n") in out
    assert "loss per step: ok" in out and out.endswith("result: the migrated script trains the same model\n")


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
def test_an_abort_before_the_script_returned_is_a_failed_run(tmp_path, capsys):
    migrated = tmp_path / "tutorial_ddp.py"
    text = (SHAPES / "tutorial_loop.py.migrated").read_text()
    migrated.write_text(text.replace("dist.destroy_process_group()\n", "dist.destroy_process_group()\nos.abort()\n"))
    status = run_migration(str(SHAPES / "tutorial_loop.py"), str(migrated), [], quiet=True)
    out = capsys.readouterr().out
    assert status == 1 and "runs: FAILED\n  the migrated script, rank 0 exited with status -6:" in out
    assert "note:" not in out


# Shapes whose data is not in the fixture: the item structure --data-stub gives them.
DATA_STUBS = {"bare_cuda_file_dataset": "8,int:2@64"}


@needs_torch
@pytest.mark.runtime
def test_a_script_whose_data_is_not_here_is_proven_on_stub_data(capsys):
    # its Dataset lists files that do not exist; --data-stub gives both runs the same 64
    # synthetic items instead, and its `.cuda()` calls run mapped to the CPU
    shape = "bare_cuda_file_dataset"
    status = run_migration(str(SHAPES / f"{shape}.py"), str(SHAPES / f"{shape}.py.migrated"), [],
                           quiet=True, data_stub=DATA_STUBS[shape])
    out = capsys.readouterr().out
    assert status == 0, out
    assert ("both runs: every data set class defined by the script or a library replaced by 64 synthetic items "
            "of (8,int:2), the same in both (--data-stub); DataLoader workers off\n") in out
    assert "both runs: `.cuda()` and CUDA devices mapped to the CPU (no GPU in these runs)\n" in out
    assert "loss per step: ok\n  8 steps;" in out  # 64 items, global batch 16, 2 epochs: each step once
    assert "sampler 1 (in order, 64 samples) epoch 1: every sample once across the ranks (rank 0: 32, rank 1: 32)" in out
    assert "checkpoint: ok\n  last.pt: loads strictly into the bare Sequential (4 keys)" in out


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
def test_without_the_stub_the_missing_data_is_a_failed_run(capsys):
    shape = "bare_cuda_file_dataset"
    status = run_migration(str(SHAPES / f"{shape}.py"), str(SHAPES / f"{shape}.py.migrated"), [], quiet=True)
    out = capsys.readouterr().out
    assert status == 1 and "runs: FAILED\n  the original exited with status 1:" in out and "FileNotFoundError" in out


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
def test_no_dropout_makes_a_model_with_dropout_comparable(tmp_path, capsys):
    original, migrated = tmp_path / "dropout.py", tmp_path / "dropout_ddp.py"
    for source, target in ((SHAPES / "tutorial_loop.py", original), (SHAPES / "tutorial_loop.py.migrated", migrated)):
        text = source.read_text().replace("nn.ReLU(), ", "nn.ReLU(), nn.Dropout(0.5), ")
        assert "nn.Dropout(0.5)" in text
        target.write_text(text)
    assert run_migration(str(original), str(migrated), [], quiet=True) == 1  # per-process masks
    assert "loss per step: FAILED" in capsys.readouterr().out
    assert run_migration(str(original), str(migrated), [], quiet=True, no_dropout=True) == 0
    out = capsys.readouterr().out
    assert "both runs: dropout off: every unit kept (--no-dropout)\n" in out and "loss per step: ok" in out


@needs_torch
@pytest.mark.runtime
@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(p.stem for p in SHAPES.glob("*.py")))
def test_every_shape_migration_is_proven(shape, capsys):
    status = run_migration(str(SHAPES / f"{shape}.py"), str(SHAPES / f"{shape}.py.migrated"), [], quiet=True,
                           data_stub=DATA_STUBS.get(shape))
    out = capsys.readouterr().out
    assert status == 0, out
    assert "loss per step: ok" in out and "parameters at the end: ok" in out and "samples per epoch: ok" in out
    if shape in ("checkpoint_resume", "argparse_functions", "trainer_class", "one_device", "bare_cuda_file_dataset"):
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


def test_a_checkpoint_the_script_removed_is_no_failure():
    removed = {"file": "epoch_0.pt", "key": None, "loaded": False, "error": None, "keys": 0, "model": "Net", "removed": True}
    kept = {"file": "epoch_1.pt", "key": None, "loaded": True, "error": None, "keys": 2, "model": "Net"}
    runs = {"failures": [], "original": [record([1.0], [0.5])],
            "migrated": [record([1.0], [0.5], [shard(0, [0, 2])], [removed, kept]), record([1.0], [0.5], [shard(1, [1, 3])])]}
    proof = judge("a.py", "b.py", runs)
    assert proof.ok
    assert "checkpoint: ok\n  epoch_0.pt: saved, then removed by the script\n  epoch_1.pt: loads strictly" in render_text(proof)


def test_the_data_stub_reads_shapes_labels_and_a_size():
    assert parse_data_stub("3x32x32,int:10") == {"size": 64, "fields": [
        {"kind": "float", "shape": [3, 32, 32]}, {"kind": "int", "high": 10, "shape": []}]}
    assert parse_data_stub("float:8, int:5:4x4@12") == {"size": 12, "fields": [
        {"kind": "float", "shape": [8]}, {"kind": "int", "high": 5, "shape": [4, 4]}]}


@pytest.mark.parametrize("spec", ["3x0", "int:", "int:0", "3x32@many", "@8", "float:3:4", "8@0"])
def test_a_data_stub_it_cannot_read_is_a_usage_error(spec):
    with pytest.raises(DataStubError, match="--data-stub"):
        parse_data_stub(spec)


def test_a_data_stub_it_cannot_read_stops_before_any_run(capsys):
    status = run_migration(str(SHAPES / "tutorial_loop.py"), str(SHAPES / "tutorial_loop.py.migrated"), [],
                           quiet=True, data_stub="3xtwo")
    assert status == 2
    assert "dplint: error: --data-stub: cannot read the field '3xtwo'" in capsys.readouterr().err
