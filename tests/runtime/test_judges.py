"""Probe judgements from recorded observations, including the CUDA branches this CPU
machine cannot run (no torch, no runs: the observations are written here by hand)."""

from __future__ import annotations

from dplint.rule import Finding, Position, Severity
from dplint.runtime_check.probes import probe_modules
from dplint.runtime_check.probes.late_cuda_visible_devices import requested
from dplint.runtime_check.verdicts import Case, RunView, Verdict

ALL_CODES = {f"DPL{n:03d}" for n in range(1, 14)}


def run(label: str, *events_by_rank: list[dict], cuda: bool = False, devices: int = 0, runtime_devices=None) -> RunView:
    view = RunView(label)
    for rank, events in enumerate(events_by_rank):
        numbered = [dict(event, seq=seq) for seq, event in enumerate(events, 1)]
        numbered.append({"kind": "end", "status": "finished", "seq": len(numbered) + 1, "cuda_available": cuda,
                         "device_count": devices, "runtime_device_count": devices if runtime_devices is None else runtime_devices})
        view.events[rank] = numbered
    return view


def case(code: str, row: int, original: RunView, fixed: RunView, fix_applied: bool = True, gpus: int = 0) -> Case:
    finding = Finding(code, "slug", "message", Severity.ERROR, "train.py", Position(row, 5), Position(row, 20))
    return Case(finding, original, fixed, range(row, row + 1), range(row, row + 1), fix_applied, gpus)


def test_a_probe_for_every_rule():
    from dplint.registry import all_rules

    assert ALL_CODES <= set(probe_modules())
    assert {rule.code for rule in all_rules()} <= set(probe_modules()), "a rule without a runtime probe"
    for code, module in probe_modules().items():
        assert module.CODE == code and callable(module.install) and callable(module.judge)


def test_loss_on_cpu_confirmed_on_cuda():
    copied = {"kind": "backward", "line": 40, "device": "cpu", "ndim": 0, "value": 1.25, "copies": 2, "param_devices": ["cuda:0"]}
    on_gpu = dict(copied, device="cuda:0", copies=0)
    judgement = probe_modules()["DPL003"].judge(
        case("DPL003", 40, run("original", [copied], cuda=True, devices=1), run("fixed", [on_gpu], cuda=True, devices=1), gpus=1)
    )
    assert judgement.verdict is Verdict.CONFIRMED
    assert judgement.original == (
        "loss on cpu (backward() at line 40), parameters on cuda:0, 2 device copies in its graph; first losses 1.2500: "
        "each step blocks on the device-to-host copies and backward copies the gradients back"
    )
    assert judgement.fixed == "loss on cuda:0 (backward() at line 40), parameters on cuda:0, 0 device copies in its graph; first losses 1.2500"


def test_late_cuda_visible_devices_confirmed_by_device_count():
    query = {"kind": "cuda-query", "line": 10, "function": "is_available"}
    write = {"kind": "env", "line": 12, "key": "CUDA_VISIBLE_DEVICES", "value": "-1"}
    original = run("original", [query, write], cuda=True, devices=1)
    fixed = run("fixed", [write, query], cuda=False, devices=0)
    judgement = probe_modules()["DPL009"].judge(case("DPL009", 12, original, fixed, gpus=1))
    assert judgement.verdict is Verdict.CONFIRMED
    assert judgement.original == (
        "torch.cuda.is_available() (line 10) ran before CUDA_VISIBLE_DEVICES='-1' was written (line 12); "
        "CUDA serves 1 device(s) where the variable asks for 0"
    )
    assert judgement.fixed == "CUDA_VISIBLE_DEVICES='-1' was written (line 12) before any CUDA query; CUDA serves 0 device(s)"


def test_late_cuda_visible_devices_confirmed_when_device_count_follows_the_late_value():
    # Seen on an H200 (torch 2.11): is_available() initialised the driver with the GPU visible;
    # device_count() then re-read CUDA_VISIBLE_DEVICES='-1' through NVML and said 0, so
    # nn.DataParallel got no device ids, while the runtime still served the GPU.
    query = {"kind": "cuda-query", "line": 10, "function": "is_available"}
    write = {"kind": "env", "line": 12, "key": "CUDA_VISIBLE_DEVICES", "value": "-1"}
    original = run("original", [query, write], cuda=True, devices=0, runtime_devices=1)
    judgement = probe_modules()["DPL009"].judge(case("DPL009", 12, original, original, fix_applied=False, gpus=1))
    assert judgement.verdict is Verdict.CONFIRMED
    assert judgement.original.endswith(
        "CUDA serves 1 device(s) where the variable asks for 0 (torch.cuda.device_count() says 0: it re-reads the variable)"
    )


def test_late_cuda_visible_devices_same_count_is_not_reproduced():
    query = {"kind": "cuda-query", "line": 10, "function": "is_available"}
    write = {"kind": "env", "line": 12, "key": "CUDA_VISIBLE_DEVICES", "value": "0"}
    original = run("original", [query, write], cuda=True, devices=1)
    judgement = probe_modules()["DPL009"].judge(case("DPL009", 12, original, original, fix_applied=False, gpus=1))
    assert judgement.verdict is Verdict.NOT_REPRODUCED


def test_requested_devices():
    assert [requested(v) for v in ("0", "0,1", "", "-1", "1,-1,2", "GPU-5f3c")] == [1, 2, 0, 0, 1, 1]
    assert [requested(v, available=1) for v in ("0", "0,1", "1", "GPU-5f3c")] == [1, 1, 0, 1]


def test_scalar_gather_confirmed_with_two_gpus():
    forward = {"kind": "dp-output", "line": 53, "ndim": 1, "shape": [2], "grad": True}
    warning = {"kind": "gather-warning", "line": 53, "message": "Was asked to gather along dimension 0"}
    error = {"kind": "backward-error", "line": 54, "error": "RuntimeError: grad can be implicitly created only for scalar outputs", "shape": [2]}
    # the fix takes `.mean()` of the gathered vector: the warning stays, backward() works
    judgement = probe_modules()["DPL012"].judge(
        case("DPL012", 53, run("original", [forward, warning, error], cuda=True, devices=2),
             run("fixed", [forward, warning], cuda=True, devices=2), gpus=2)
    )
    assert judgement.verdict is Verdict.CONFIRMED
    assert judgement.original == (
        "DataParallel gathered the 0-d losses into a vector of 2 (line 53); "
        "backward() raised RuntimeError: grad can be implicitly created only for scalar outputs"
    )
    assert judgement.fixed == "DataParallel gathered the 0-d losses into a vector of 2 (line 53); backward() ran without error"


def test_dataparallel_bypass_needs_two_gpus():
    direct = {"kind": "forward", "line": 30, "wrapper": "DP", "number": 0, "via_wrapper": False, "grad": True,
              "wrapper_training": True, "inner_training": True, "submodules": 2, "submodules_training": 2}
    judgement = probe_modules()["DPL002"].judge(case("DPL002", 30, run("original", [direct]), run("fixed", [dict(direct, via_wrapper=True)])))
    assert judgement.verdict is Verdict.NEEDS_GPU
    assert judgement.original == (
        "1 of 1 training forwards called the inner model directly (line 30); with no GPUs DataParallel runs "
        "the module directly anyway, so this needs 2 GPUs to show"
    )
    two_gpus = probe_modules()["DPL002"].judge(
        case("DPL002", 30, run("original", [direct], cuda=True, devices=2),
             run("fixed", [dict(direct, via_wrapper=True)], cuda=True, devices=2), gpus=2)
    )
    assert two_gpus.verdict is Verdict.CONFIRMED and two_gpus.fixed == "all 1 training forwards went through DataParallel"


def test_a_fix_that_leaves_the_misbehaviour_fails():
    load = {"kind": "load", "line": 9, "module": "Net", "strict": False, "given": 4, "expected": 4, "missing": ["a"],
            "missing_count": 4, "unexpected": ["module.a"], "unexpected_count": 4, "loaded": 0, "prefixed": 4, "error": None}
    judgement = probe_modules()["DPL005"].judge(case("DPL005", 9, run("original", [load]), run("fixed", [load])))
    assert judgement.verdict is Verdict.FIX_FAILED


def test_unguarded_save_with_one_rank_needs_two():
    save = {"kind": "save", "line": 59, "path": "/tmp/x/last.pt", "keys": 4, "prefixed": 0, "sample": []}
    judgement = probe_modules()["DPL011"].judge(case("DPL011", 59, run("original", [save]), run("fixed", [save])))
    assert judgement.verdict is Verdict.NEEDS_GPU
    assert judgement.original == "only rank 0 of 1 wrote last.pt (line 59); one rank ran: this needs 2 ranks (2 GPUs with nccl)"


def test_ddp_drift_evidence_shows_the_checksum_that_differs():
    """The printed numbers are the ones decided on, with the digits that make them differ."""
    from dplint.runtime_check.probes.wrapper_bypass import drift, shown_difference

    def step(rank_sum, rank_squares):
        return {"kind": "step", "line": 30, "n": 6, "checksums": {"0": [rank_sum, rank_squares]}}

    same_sums = run("original", [step(-0.58338912, 10.0)], [step(-0.58338947, 10.0)])
    found = drift(same_sums)
    assert found is not None and found[2]
    assert shown_difference(found[1]) == "sums -0.5833891 vs -0.5833895"  # not "-0.583389 vs -0.583389"
    squares = run("original", [step(1.5, 10.00000001)], [step(1.5, 10.00000201)])
    assert shown_difference(drift(squares)[1]) == "sums of squares 10.000000 vs 10.000002"
    rounding = run("original", [step(1.5, 10.0)], [step(1.5 + 1e-12, 10.0)])
    assert drift(rounding)[2] is False


def test_not_reached_says_what_would_reach_it():
    from dplint.runtime_check.runner import Report, VerifyOptions, not_reached_reason

    report = Report("train.py", distributed=False, options=VerifyOptions(epochs=2, timeout=30))
    missing = run("original", [{"kind": "line", "line": 3}])
    missing.events[0][-1].update(status="error", error="FileNotFoundError: [Errno 2] No such file: 'data/x.csv'", line=3)
    assert not_reached_reason(missing, 9, report).endswith(
        "a path the script reads is missing where it ran: pass the script's arguments after --, "
        "or run it from the folder it expects (--cwd DIR)"
    )
    unimportable = run("original", [{"kind": "line", "line": 5}])
    unimportable.events[0][-1].update(status="error", error="ModuleNotFoundError: No module named 'torchvision'", line=5)
    assert not_reached_reason(unimportable, 9, report).endswith(
        "the script imports 'torchvision', which the Python that runs verify lacks: install it there"
    )
    slow = run("original", [{"kind": "line", "line": 3}])
    slow.timed_out, slow.wall = True, 30
    assert not_reached_reason(slow, 9, report) == (
        "killed after the timeout (30 s); a longer --timeout (now 30 s) would reach it"
    )
    branch = run("original", [{"kind": "line", "line": 3}])
    assert not_reached_reason(branch, 9, report) == (
        "finished without taking the branch that holds it; the script's arguments (after --) may select it"
    )


def test_where_a_silent_rank_hung_comes_from_its_stack(tmp_path):
    from dplint.runtime_check.runner import hung_in

    stacks = tmp_path / "batch0-stacks-rank1.txt"
    stacks.write_text(
        "Current thread 0x00007f3c (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2171 in destroy_process_group\n'
        '  File "/tmp/dplint-verify-x/v1/train.py", line 88 in main\n'
    )
    assert hung_in(str(stacks), "/tmp/dplint-verify-x/v1/train.py") == (
        "destroy_process_group (torch/distributed/distributed_c10d.py:2171)")
    assert hung_in(str(tmp_path / "none.txt"), "train.py") is None  # no stack written: nothing claimed
    native = tmp_path / "batch0-stacks-rank0.txt"
    native.write_text('Current thread 0x00007f3c (most recent call first):\n  File "/tmp/v1/train.py", line 64 in <module>\n')
    assert hung_in(str(native), "/tmp/v1/train.py") == "native code (no Python frame) under <module> (train.py:64)"
    ended = run("original", [{"kind": "line", "line": 3}], [{"kind": "line", "line": 3}])
    ended.events[1][-1].update(stuck=True, hung_in="destroy_process_group (torch/distributed/distributed_c10d.py:2171)")
    assert ended.stop_reason() == ("finished; rank 1 then hung in torch's teardown, in destroy_process_group "
                                   "(torch/distributed/distributed_c10d.py:2171) (verify stopped it)")
