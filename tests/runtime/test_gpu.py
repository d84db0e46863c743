"""`verify` on CUDA with nccl: the checks a CPU cannot make. Skipped without a GPU; the
checks that need two GPUs skip with that reason. `runtime_check/gpu_suite.sh` runs them."""

from __future__ import annotations

import pytest

from .support import HAS_TORCH, RUNTIME_FIXTURES

GPUS = 0
if HAS_TORCH:
    from dplint.runtime_check.runner import visible_gpus

    GPUS = visible_gpus()

pytestmark = [pytest.mark.gpu, pytest.mark.runtime, pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")]
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")


def gpu_verify(fixture: str, *args: str):
    from dplint.runtime_check.runner import VerifyOptions, verify

    return verify(str(RUNTIME_FIXTURES / f"{fixture}.py"), list(args), VerifyOptions(always_run=True, timeout=240))


def verdicts(report) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for result in report.results:
        found.setdefault(result.finding.code, set()).add(result.verdict.value)
    return found


def test_loss_on_cpu_pays_device_copies():
    report = gpu_verify("loss_on_cpu")
    assert report.results and all(r.verdict.value == "confirmed" for r in report.results)
    result = report.results[0]
    # one copy in the graph (the output's: the targets' .cpu() needs no grad); seen on an H200
    assert "loss on cpu (backward() at line 44), parameters on cuda:0, 1 device copy in its graph" in result.original
    assert result.fixed.startswith("loss on cuda:0 (backward() at line 44), parameters on cuda:0, 0 device copies")


def test_late_cuda_visible_devices_is_ignored():
    report = gpu_verify("late_cuda_visible_devices", "--gpus", "-1")  # hide every GPU: too late
    (result,) = report.results
    assert result.verdict.value == "confirmed", result
    assert f"CUDA serves {GPUS} device(s) where the variable asks for 0" in result.original


def test_all_misuses_on_cuda():
    report = gpu_verify("all_misuses")
    assert report.runs["original"].all("process-group")[0]["backend"] == "nccl"
    assert report.nproc == min(2, GPUS)
    expected = {
        "DPL001": {"no-runtime-effect"}, "DPL002": {"confirmed"}, "DPL003": {"confirmed"}, "DPL004": {"confirmed"},
        "DPL005": {"confirmed"}, "DPL006": {"confirmed"}, "DPL007": {"confirmed"}, "DPL008": {"confirmed"},
        # CUDA_VISIBLE_DEVICES=0 changes nothing on a single GPU; with two, rank 1 still sees both
        "DPL009": {"not-reproduced"} if GPUS == 1 else {"confirmed"},
        "DPL010": {"confirmed"},
        "DPL011": {"needs-gpu"} if GPUS == 1 else {"confirmed"},  # one rank per GPU
        "DPL012": {"needs-gpu"} if GPUS == 1 else {"confirmed"},
        "DPL013": {"confirmed"},
    }
    assert verdicts(report) == expected
    assert report.exit_code == 0


@two_gpus
def test_scalar_gather_breaks_backward_on_two_gpus():
    (result,) = gpu_verify("scalar_gather").results
    assert result.verdict.value == "confirmed"
    assert "DataParallel gathered the 0-d losses into a vector of 2" in result.original
    assert "grad can be implicitly created only for scalar outputs" in result.original


@two_gpus
def test_ddp_ranks_drift_apart_without_the_wrapper():
    (result,) = gpu_verify("wrapper_bypass").results
    assert result.verdict.value == "confirmed"
    assert "parameters differ across ranks" in result.original
    assert "identical on all 2 ranks" in result.fixed


@two_gpus
def test_every_rank_writes_the_checkpoint():
    (result,) = gpu_verify("unguarded_rank_save").results
    assert result.original == "ranks 0 and 1 both wrote last.pt (line 59) at the same time"
