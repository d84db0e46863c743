"""`dplint verify` as a command: options, output formats, exit codes, the timeout, no
process left behind, scripts hard-wired to CUDA, and the one-line error without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from .support import ROOT, RUNTIME_FIXTURES, needs_torch, uses
from dplint.runtime_check.runner import visible_gpus

pytestmark = [pytest.mark.runtime, needs_torch]
NO_GPU = pytest.mark.skipif(needs_torch.args[0] or visible_gpus() > 0, reason="checks the CPU-only path")


def run(*args: str, env=None, timeout: float = 400):
    return subprocess.run(
        [sys.executable, "-m", "dplint", "verify", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=timeout, env=env,
    )


def test_json_output_and_progress(verified):
    job = verified.submit(
        "cli strip_module json",
        lambda: run("--output-format", "json", "--timeout", "240", "fixtures/runtime/strip_module.py"),
    )
    done = job.result()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["distributed"] is False and report["exit_code"] == 0
    assert report["budget"] == {"batches": 3, "epochs": 2, "timeout": 240.0}
    (finding,) = report["findings"]
    assert (finding["code"], finding["verdict"], finding["location"]) == ("DPL004", "confirmed", {"row": 48, "column": 5})
    assert finding["evidence"]["original"].startswith('line 48: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight"')
    assert report["runs"]["original"]["recovered"][0]["line"] == 48
    # progress goes to stderr while the runs go: version, rank, elapsed seconds
    assert "] original: started (1 process)" in done.stderr
    assert "] original rank 0: running the script" in done.stderr
    assert "] fixed rank 0: epoch 2 of the loop at line " in done.stderr


@uses("all_misuses")
def test_text_report_of_all_misuses(verified):
    from dplint.runtime_check.cli import render_text

    report = verified("all_misuses")
    text = render_text(report)
    lines = text.splitlines()
    assert lines[0] == f"dplint verify {report.script}"
    assert lines[1] == (
        "runs: 2 ranks (torchrun --standalone --nproc-per-node 2), backend gloo, CPU only (no CUDA); "
        "budget 3 batches x 2 epochs, timeout 240 s"
    )
    assert lines[2].startswith("original: finished (")
    assert lines[2].endswith(
        "verify recorded and went past 4 errors (ValueError at line 65, AttributeError at line 82, "
        "RuntimeError at line 94, RuntimeError at line 99)"
    )
    blocks = text.split("\n\n")[1:-1]
    assert len(blocks) == len(report.results)
    for block, result in zip(blocks, report.results):
        header, original, fixed = block.splitlines()
        assert header.endswith(f"{result.finding.code} {result.finding.name}: {result.verdict.value}")
        assert original == f"  original: {result.original}"
        assert fixed == f"  fixed:    {result.fixed}"
    assert lines[-1].startswith(f"{len(report.results)} findings: ")
    assert "fix-failed" not in lines[-1] and "not-reached" not in lines[-1]


@uses("missing_set_epoch --epochs 5")
def test_budget_stops_every_rank_cleanly(verified):
    """Five epochs asked, two run, two batches each; then every rank stops and exits 0."""
    report = verified("missing_set_epoch --epochs 5")
    for label in ("original", "fixed"):
        run_view = report.runs[label]
        assert run_view.stop_reason() == "stopped by the budget"
        assert [end["status"] for end in run_view.ends] == ["budget", "budget"]
        assert run_view.returncode == 0
        for rank in run_view.ranks:
            kinds = [e["kind"] for e in run_view.events[rank]]
            assert [e["epoch"] for e in run_view.events[rank] if e["kind"] == "epoch"] == [0, 1]
            assert kinds.count("step") == 4
            assert kinds.count("budget") == 1
    (result,) = report.results
    assert (result.finding.code, result.verdict.value) == ("DPL008", "confirmed")


def test_nothing_to_verify_without_findings():
    done = run("fixtures/clean/dp_train.py")
    assert (done.returncode, done.stdout) == (0, "dplint verify fixtures/clean/dp_train.py\nno findings: nothing to verify\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["fixtures/runtime/missing.py"], "dplint: error: cannot read fixtures/runtime/missing.py"),
        (["fixtures/runtime/strip_module.py", "--epochs", "0"], "must be positive"),
        (["fixtures/runtime/strip_module.py", "--bogus"], "unrecognized arguments: --bogus"),
        (["fixtures/runtime/strip_module.py", "extra.py"], "unrecognized arguments: extra.py"),
    ],
)
def test_usage_errors_exit_2(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr


def test_unparsable_script_exits_2(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("def (:\n")
    done = run(str(script))
    assert done.returncode == 2
    assert done.stderr.startswith(f"dplint: error: {script}: cannot parse")


def test_script_arguments_after_double_dash(verified, tmp_path):
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "show_argv.py"
    out = tmp_path / "argv.json"
    script.write_text("import json, sys\njson.dump(sys.argv[1:], open(sys.argv[2], 'w'))\n")
    args = ["--out", str(out), "--epochs", "3", "--", "x"]
    job = verified.submit("argv", lambda: verify(str(script), args, VerifyOptions(always_run=True, timeout=240)))
    report = job.result()
    assert json.loads(out.read_text()) == args
    assert report.runs["original"].stop_reason() == "finished"


def test_timeout_kills_every_process(verified):
    """A hanging distributed script: the timeout stops it, and nothing it started survives,
    not even a helper that left the process group for a session of its own."""
    from dplint.runtime_check.runner import VerifyOptions, verify

    marker = f"dplint-hang-{uuid.uuid4().hex}"
    script = str(RUNTIME_FIXTURES / "hang.py")
    job = verified.submit(
        "hang", lambda: verify(script, ["--marker", marker], VerifyOptions(always_run=True, timeout=40))
    )
    report = job.result()
    run_view = report.runs["original"]
    assert run_view.timed_out and run_view.stop_reason() == "killed after the timeout (40 s)"
    assert run_view.executed([22]), "the ranks never reached their helper: the machine is too slow for this test"
    assert not processes_mentioning(marker)


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@NO_GPU
@uses("cuda_only")
def test_cuda_only_script_needs_a_gpu(verified):
    report = verified("cuda_only")
    (result,) = report.results
    assert result.verdict.value == "needs-gpu"
    assert result.original == (
        "line 35 never ran: rank 0 raised AssertionError: Torch not compiled with CUDA enabled at line 24; "
        "rerun on a GPU or with --cpu-remap"
    )
    assert report.exit_code == 0


@NO_GPU
@uses("cuda_only --cpu-remap")
def test_cpu_remap_runs_a_cuda_only_script(verified):
    from dplint.runtime_check.cli import describe_setup

    report = verified("cuda_only --cpu-remap")
    (result,) = report.results
    assert result.verdict.value == "confirmed"
    assert result.original == (
        'line 35: torch.save wrote 4 state-dict keys, all starting with "module." ("module.encoder.weight", "module.encoder.bias")'
    )
    assert "cuda->cpu and nccl->gloo remapped (--cpu-remap)" in describe_setup(report)


def test_exit_codes():
    from dplint.rule import Finding, Position, Severity
    from dplint.runtime_check.runner import FindingResult, Report
    from dplint.runtime_check.verdicts import Verdict

    finding = Finding("DPL006", "save-wrapped-state-dict", "m", Severity.WARNING, "x.py", Position(1, 1), Position(1, 2))
    report = Report("x.py", distributed=False)
    report.results = [FindingResult(finding, verdict, "o", "f", True) for verdict in (Verdict.CONFIRMED, Verdict.NEEDS_GPU)]
    assert report.exit_code == 0
    report.results.append(FindingResult(finding, Verdict.FIX_FAILED, "o", "f", True))
    assert report.exit_code == 1
    report.errors.append("the fixed run did not start")
    assert report.exit_code == 2


@pytest.mark.parametrize(
    "command",
    [
        "from dplint.cli import main; main(['verify', 'x.py'])",
        "import runpy; sys.argv = ['x', 'x.py']; runpy.run_module('dplint.runtime_check', run_name='__main__')",
    ],
)
def test_without_torch_one_line_error(command):
    hide_torch = "import sys; sys.modules['torch'] = None; "  # find_spec('torch') is then None
    done = subprocess.run([sys.executable, "-c", hide_torch + command], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("dplint: error: verify needs the runtime extra: pip install 'dplint[runtime]'")
