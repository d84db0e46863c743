"""DPL014 missing-set-device: on CUDA, which GPU each rank's bare `cuda` placements used.
It needs two GPUs or more: on one device (or on CPU) every rank may well share it."""

from __future__ import annotations

from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL014"
NAME = "missing-set-device"


def install(context) -> None:
    if not context.once("bare-cuda-device"):
        return
    import glob

    # Only where two GPUs or more can exist, and without a CUDA query: asking `is_available()`
    # before the script runs would initialise CUDA early (and hide a late CUDA_VISIBLE_DEVICES,
    # DPL009); patching `.cuda()` on a CPU machine would only get in `--cpu-remap`'s way.
    if len(glob.glob("/dev/nvidia[0-9]*")) < 2:
        return
    import torch

    recorder = context.recorder
    original = torch.Tensor.cuda

    def cuda(self, device=None, *args, **kwargs):
        result = original(self, device, *args, **kwargs)
        if device is None and "bare-cuda" not in context.state:
            context.state["bare-cuda"] = True
            recorder.emit("bare-cuda", line=recorder.script_line(), device=result.device.index)
        return result

    torch.Tensor.cuda = cuda


def devices(run: RunView) -> dict[int, int]:
    return {event["rank"]: event["device"] for event in run.all("bare-cuda")}


def judge(case: Case) -> Judgement:
    if case.gpus < 2:
        return Judgement(
            Verdict.NEEDS_GPU,
            f"with {case.gpus} CUDA device(s) every rank shares one GPU anyway: the finding needs two GPUs or more",
            "",
        )
    original, fixed = devices(case.original), devices(case.fixed)
    if not original:
        return Judgement(Verdict.NOT_REACHED, "no bare `.cuda()` ran", "")
    shared = len(set(original.values())) < len(original)
    describe = lambda found: ", ".join(f"rank {r} on cuda:{d}" for r, d in sorted(found.items())) or "no bare placement ran"
    return decide(case, shared, len(set(fixed.values())) < len(fixed), describe(original), describe(fixed))
