"""`dplint verify` as a command: options, output formats, exit codes, loop truncation, the
timeout and signals (no process, no temporary folder left behind), scripts hard-wired to
CUDA, and the one-line error without torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from .support import ROOT, needs_torch, uses
from dplint.runtime_check.runner import visible_gpus

pytestmark = [pytest.mark.runtime, needs_torch]
NO_GPU = pytest.mark.skipif(needs_torch.args[0] or visible_gpus() > 0, reason="checks the CPU-only path")


def run(*args: str, env=None, timeout: float = 400, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "dplint", "verify", *args], capture_output=True, text=True, cwd=cwd,
        timeout=timeout, env=env,
    )


def test_help_in_click_style():
    done = run("--help")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0].endswith("dplint verify [OPTIONS] SCRIPT [-- SCRIPT_ARGS...]")
    for option in ("--select TEXT", "--cwd DIRECTORY", "--cpu-remap", "--epochs E", "--timeout S", "-h, --help"):
        assert option in done.stdout
    assert "Exit status: 0 every finding got a verdict" in " ".join(done.stdout.split())
    same = subprocess.run([sys.executable, "-m", "dplint.runtime_check", "-h"], capture_output=True, text=True, cwd=ROOT)
    assert same.stdout.startswith("Usage: python -m dplint.runtime_check [OPTIONS] SCRIPT [-- SCRIPT_ARGS...]")


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
    assert finding["before_run"] == "original"
    assert finding["evidence"]["original"].startswith('line 48: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight"')
    assert report["runs"]["original"]["recovered"][0]["line"] == 48
    # progress goes to stderr while the runs go: run, rank, elapsed seconds
    assert "] started (1 process): original, fixed" in done.stderr
    assert "] original rank 0: running the script" in done.stderr
    assert "] fixed rank 0: epoch 2 of the loop at line " in done.stderr
    assert "] original rank 0: budget reached: ended the loop at line 38 and went on after it" in done.stderr


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
    (original,) = [line for line in lines if line.startswith("original: ")]
    assert original.endswith(
        "verify recorded and went past 4 errors (ValueError at line 65, AttributeError at line 82, "
        "RuntimeError at line 94, RuntimeError at line 99)"
    )
    # one run per finding with a fix (only its bug left), the original and the fixed copy
    assert "only DPL007 line 65: finished" in text and "only DPL013 line 97: finished" in text
    blocks = text.split("\n\n")[1:-1]
    assert len(blocks) == len(report.results)
    for block, result in zip(blocks, report.results):
        header, original_line, fixed_line = block.splitlines()
        assert f"{result.finding.code} {result.finding.name}: {result.verdict.value}" in header
        assert original_line == f"  original: {result.original}"
        assert fixed_line == f"  fixed:    {result.fixed}"
    assert lines[-1].startswith(f"{len(report.results)} findings: ")
    assert "fix-failed" not in lines[-1] and "not-reached" not in lines[-1]
    assert report.exit_code == 0


@pytest.mark.slow
@uses("missing_set_epoch --epochs 5")
def test_budget_cuts_the_loops_on_every_rank(verified):
    """Five epochs asked, two run, two batches each; then the loop ends and the script goes on."""
    report = verified("missing_set_epoch --epochs 5")
    for label in ("original", "fixed"):
        run_view = report.runs[label]
        assert run_view.stop_reason().startswith("finished")  # (a rank may hang in teardown after)
        assert [end["status"] for end in run_view.ends] == ["finished", "finished"]
        for rank in run_view.ranks:
            kinds = [e["kind"] for e in run_view.events[rank]]
            assert [e["epoch"] for e in run_view.events[rank] if e["kind"] == "epoch"] == [0, 1]
            assert kinds.count("step") == 4
            assert {e["by"] for e in run_view.events[rank] if e["kind"] == "loop-cut"} == {"epochs", "batches"}
    (result,) = report.results
    assert (result.finding.code, result.verdict.value) == ("DPL008", "confirmed")


def test_nothing_to_verify_without_findings():
    done = run("fixtures/clean/dp_train.py")
    assert (done.returncode, done.stdout) == (0, "dplint verify fixtures/clean/dp_train.py\nno findings: nothing to verify\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["fixtures/runtime/missing.py"], "dplint: error: cannot read fixtures/runtime/missing.py"),
        (["fixtures/runtime/strip_module.py", "--epochs", "0"], "Invalid value for '--epochs': 0 is not in the range x>=1"),
        (["fixtures/runtime/strip_module.py", "--bogus"], "No such option '--bogus'"),
        (["fixtures/runtime/strip_module.py", "extra.py"], "Got unexpected extra argument (extra.py)"),
        (["fixtures/runtime/strip_module.py", "--select", "DPL999"], "dplint: error:"),
        (["fixtures/runtime/strip_module.py", "--cwd", "/"], "share no folder but the file system's root"),
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


LATE_SAVE = """\
import json
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

json.dump(sys.argv[1:], open(sys.argv[2], "w"))  # the arguments after `--`, as the script got them
model = nn.DataParallel(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
for epoch in range(20):
    for (x,) in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    if epoch == 10:
        torch.save(model.state_dict(), "epoch10.pt")
"""


def test_not_reached_says_why_and_exits_1(verified, tmp_path):
    """A save only the 11th epoch makes: the budget's two epochs never reach it; verify says
    so, names the option that would, and exits 1 (--select: only that rule's findings).
    The script gets the arguments after `--` untouched."""
    project = tmp_path / "project"
    project.mkdir()
    script = project / "late_save.py"
    script.write_text(LATE_SAVE)
    out = tmp_path / "argv.json"  # outside the script's folder: written as in a normal run
    args = ["--out", str(out), "--epochs", "3", "--", "x"]
    job = verified.submit(
        "late save", lambda: run("--select", "save-wrapped-state-dict", "--output-format", "json", str(script), "--", *args)
    )
    done = job.result()
    assert done.returncode == 1, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert (finding["code"], finding["verdict"]) == ("DPL006", "not-reached")
    assert finding["evidence"]["original"] == (
        "line 18 never ran: the budget ended the loop at line 12 after 2 epochs, and this line runs only in a later "
        "iteration: a larger --epochs would reach it"
    )
    assert json.loads(out.read_text()) == args
    assert sorted(os.listdir(project)) == ["late_save.py"]  # nothing written next to the script


@uses("teardown_hang")
def test_a_rank_hung_after_its_last_line_is_stopped_and_the_runs_go_on(verified):
    """torch's teardown hang: rank 0 ended, rank 1 went silent after its last line (here an object
    that blocks when `main()` releases it). Each variant is stopped after the grace and the next
    one starts afresh; both are judged, and the report says what happened."""
    report = verified("teardown_hang")
    for label in ("original", "fixed"):
        run_view = report.runs[label]
        # where it hung comes from the stack the silent rank wrote when verify sent it SIGUSR1
        assert run_view.stop_reason() == (
            "finished; rank 1 then hung after its last line, in __del__ (teardown_hang.py:26) (verify stopped it)")
        assert [end["status"] for end in run_view.ends] == ["finished", "finished"]
        assert [end.get("stuck", False) for end in run_view.ends] == [False, True]
    (result,) = report.results
    assert (result.finding.code, result.verdict.value) == ("DPL008", "confirmed")


# ------------------------------------------------------------- timeout and signals
HANG = "fixtures/runtime/hang.py"
STOPS = ["SIGTERM", "SIGHUP", "SIGINT", "SIGKILL", "timeout"]


def processes_mentioning(marker: str) -> list[int]:
    """The hang script's helpers (their last argument is the marker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    arguments = handle.read().rstrip(b"\0").split(b"\0")
            except OSError:
                continue
            if arguments[-1] == marker.encode() and b"-c" in arguments:
                found.append(int(entry))
    return found


def _signals_as_in_a_terminal() -> None:
    """SIGHUP and SIGINT delivered to verify, as from a terminal: pytest run under `nohup` or
    as a background job of a script passes them on ignored, and verify rightly keeps an
    ignored SIGHUP or SIGINT ignored (the signal then never stops it)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A real `verify` of a hanging 2-rank script per way to stop it, all at once: each signal
    once both ranks run (their helper processes left the process group), and the timeout."""
    runs = {}
    for stop in STOPS:
        folder = tmp_path_factory.mktemp(stop)
        (folder / "tmp").mkdir()
        marker = f"dplint-hang-{uuid.uuid4().hex}"
        timeout = "25" if stop == "timeout" else "400"
        with open(folder / "out", "w") as out, open(folder / "err", "w") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "dplint", "verify", "--timeout", timeout, HANG, "--", "--marker", marker],
                cwd=ROOT, env=dict(os.environ, TMPDIR=str(folder / "tmp")), stdout=out, stderr=err,
                preexec_fn=_signals_as_in_a_terminal,
            )
        runs[stop] = dict(process=process, marker=marker, folder=folder, helpers=None, ended=None)
    deadline = time.monotonic() + 400
    try:
        while time.monotonic() < deadline and any(run["ended"] is None for run in runs.values()):
            time.sleep(0.5)
            for stop, run in runs.items():
                if run["ended"] is not None:
                    continue
                if run["process"].poll() is not None:
                    run["ended"] = time.monotonic()
                elif stop != "timeout" and run["helpers"] is None:
                    helpers = processes_mentioning(run["marker"])
                    if len(helpers) >= 2:  # both ranks started their helper: send the signal
                        run["helpers"] = len(helpers)
                        run["process"].send_signal(getattr(signal, stop))
        time.sleep(3)  # what a dead verify's children need to notice (the reaper, PR_SET_PDEATHSIG)
    finally:
        for run in runs.values():
            if run["process"].poll() is None:
                run["process"].kill()
    results = {}
    for stop, run in runs.items():
        results[stop] = dict(
            returncode=run["process"].returncode, helpers=run["helpers"],
            stdout=(run["folder"] / "out").read_text(), stderr=(run["folder"] / "err").read_text(),
            left=processes_mentioning(run["marker"]), folders=os.listdir(run["folder"] / "tmp"),
        )
    return results


@pytest.mark.parametrize("stop", STOPS)
def test_stopping_verify_leaves_no_process_and_no_folder(stopped, stop):
    result = stopped[stop]
    assert stop == "timeout" or result["helpers"] == 2, f"verify ended before {stop} was sent: {result['stderr'][-800:]}"
    assert result["left"] == [], f"{stop} left processes behind"
    assert result["folders"] == [], f"{stop} left {result['folders']}"
    if stop == "timeout":
        assert "fixed:    no fix changes this script: the fixed copy is the original" in result["stdout"]
        assert "original: killed after the timeout (25 s)" in result["stdout"]
        # 0 when the ranks saved before the timeout (a slow machine may not get there: 1, not-reached)
        assert result["returncode"] in (0, 1)
    elif stop == "SIGKILL":
        assert result["returncode"] == -signal.SIGKILL
    else:
        assert result["returncode"] == 2
        assert result["stderr"].endswith(
            f"dplint: error: verify stopped by {stop}: every run it started was killed and its temporary folder removed\n"
        )


# --------------------------------------------------------------------- CUDA-only scripts
@NO_GPU
@uses("cuda_only")
def test_cuda_only_script_needs_a_gpu(verified):
    report = verified("cuda_only")
    (result,) = report.results
    assert result.verdict.value == "needs-gpu"
    assert result.original == (
        "line 37 never ran: rank 0 raised RuntimeError: Cannot access accelerator device when none is available. "
        "at line 25; rerun with --cpu-remap (or on a GPU)"
    )
    assert report.exit_code == 0


@NO_GPU
@uses("cuda_only --cpu-remap")
def test_cpu_remap_runs_a_cuda_only_script(verified):
    from dplint.runtime_check.cli import describe_remapped, describe_setup

    report = verified("cuda_only --cpu-remap")
    (result,) = report.results
    assert result.verdict.value == "confirmed"
    assert result.original == (
        'line 37: torch.save wrote 4 state-dict keys, all starting with "module." ("module.encoder.weight", "module.encoder.bias")'
    )
    assert "cuda->cpu and nccl->gloo remapped (--cpu-remap)" in describe_setup(report)
    assert describe_remapped(report) == (
        "line 25 torch.device -> cpu; line 26 .cuda() -> cpu; line 26 torch.cuda.device_count() -> 2; "
        "line 28 .cuda() -> cpu; line 32 .cuda() -> cpu"
    )


def test_exit_codes():
    from dplint.rule import Finding, Position, Severity
    from dplint.runtime_check.runner import FindingResult, Report
    from dplint.runtime_check.verdicts import Verdict

    finding = Finding("DPL006", "save-wrapped-state-dict", "m", Severity.WARNING, "x.py", Position(1, 1), Position(1, 2))
    report = Report("x.py", distributed=False)
    report.results = [FindingResult(finding, verdict, "o", "f", True) for verdict in (Verdict.CONFIRMED, Verdict.NEEDS_GPU)]
    assert report.exit_code == 0
    report.results.append(FindingResult(finding, Verdict.NOT_REACHED, "o", "f", True))
    assert report.exit_code == 1
    report.results[-1] = FindingResult(finding, Verdict.FIX_FAILED, "o", "f", True)
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
    assert done.stderr.startswith("dplint: error: verify needs the runtime extra: pip install '.[runtime]' in a clone of dplint")


CWD_SCRIPT = """\
import csv
import torch
import torch.nn as nn

with open("data/points.csv") as handle:  # relative to the working directory, not the script
    rows = [[float(v) for v in row] for row in csv.reader(handle)]
model = nn.DataParallel(nn.Linear(2, 1))
model(torch.tensor(rows)).sum().backward()
torch.save(model.state_dict(), "out/model.pt")
"""


def test_cwd_runs_where_asked_and_changes_nothing(verified, tmp_path):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "out").mkdir()
    (project / "data" / "points.csv").write_text("1,2\n3,4\n")
    (project / "scripts" / "export.py").write_text(CWD_SCRIPT)
    job = verified.submit("cwd", lambda: run("--cwd", str(project), "--output-format", "json", "scripts/export.py",
                                             cwd=project))
    done = job.result()
    assert done.returncode == 0, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert (finding["code"], finding["verdict"]) == ("DPL006", "confirmed")
    assert finding["evidence"]["original"].startswith("line 9: torch.save wrote 2 state-dict keys, all starting with")
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == [
        "data", "data/points.csv", "out", "scripts", "scripts/export.py",
    ]
