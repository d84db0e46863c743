"""When things go wrong around a run: a dplint bug exits 2 with one line (never a traceback,
whose exit 1 would read as "findings"), a path that cannot be read is a DPL000 finding and the
run goes on, and Ctrl-C exits 130 without `Aborted!` or a traceback, the pool's workers too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import AS_ROOT, MISUSE, ctrl_c_as_in_a_terminal

# A driver standing in for the `dplint` command, with one of dplint's functions replaced:
# `python DRIVER <how> <dplint arguments>`.
DRIVER = """
import os, runpy, sys, time
import dplint.runner

how = sys.argv.pop(1)
if how == "raise":
    def broken(*args, **kwargs):
        raise RuntimeError("a bug\\nover two lines")
    dplint.runner.run = broken
elif how == "sleep":  # each file takes a minute, in the pool's workers as well
    def slow(item):
        print("linting", flush=True)
        time.sleep(60)
    dplint.runner._lint_one = slow
    dplint.runner._fix_one = slow
if os.environ.get("AS_MODULE"):
    sys.argv[0] = "dplint"
    runpy.run_module("dplint", run_name="__main__")
else:
    import dplint.cli
    sys.argv[0] = "dplint"
    dplint.cli.entry_point()
"""


@pytest.fixture
def driver(tmp_path):
    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    return str(path)


# ---------------------------------------------------------------------------- internal errors
@pytest.mark.parametrize("as_module", [False, True], ids=["entry_point", "python -m dplint"])
def test_an_internal_error_exits_2_with_one_line(tmp_path, driver, as_module):
    (tmp_path / "train.py").write_text(MISUSE)
    env = {**os.environ, "AS_MODULE": "1" if as_module else ""}
    result = subprocess.run(
        [sys.executable, driver, "raise", "check", "-n", "train.py"], cwd=tmp_path, capture_output=True, env=env, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr.decode()) == (
        2, b"", "dplint: internal error: RuntimeError: a bug over two lines\n"
    )


# ---------------------------------------------------------------------------- unreadable paths
def _unprivileged() -> list[str]:
    """A command prefix that drops root's right to read anything (nobody), or [] when not root."""
    if not AS_ROOT:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes would not stop the read")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_unreadable_paths_on_the_command_line_are_findings_and_the_run_goes_on():
    prefix = _unprivileged()
    folder = tempfile.mkdtemp(prefix="dplint-unreadable-")  # under /tmp: nobody may enter it
    try:
        os.chmod(folder, 0o755)
        with open(os.path.join(folder, "train.py"), "w") as handle:
            handle.write(MISUSE)
        with open(os.path.join(folder, "locked.py"), "w") as handle:
            handle.write(MISUSE)
        os.chmod(os.path.join(folder, "locked.py"), 0)
        os.mkdir(os.path.join(folder, "closed"))
        with open(os.path.join(folder, "closed", "inner.py"), "w") as handle:
            handle.write(MISUSE)
        os.chmod(os.path.join(folder, "closed"), 0)
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "dplint", "check", "-n", "--select", "DPL007",
             "--output-format", "concise", "locked.py", "closed", "train.py"],
            cwd=folder, capture_output=True, timeout=60,
        )
    finally:
        os.chmod(os.path.join(folder, "closed"), 0o755)
        shutil.rmtree(folder)
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert lines[:2] == [
        "closed:1:1: DPL000 error cannot read: Permission denied",
        "locked.py:1:1: DPL000 error cannot read: Permission denied",
    ]
    assert len(lines) == 3 and lines[2].startswith("train.py:4:44: DPL007 error")
    assert result.returncode == 1


def test_paths_click_would_refuse_as_unreadable_reach_the_run(tmp_path, monkeypatch):
    """In-process, as root too: click's `readable` check (os.access) no longer stops the run."""
    from click.testing import CliRunner

    import dplint.cli

    (tmp_path / "train.py").write_text(MISUSE)
    (tmp_path / "other.py").write_text(MISUSE)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path).endswith("other.py") else real_access(path, mode, **kw))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(dplint.cli.main, ["check", "-n", "--select", "DPL007", "--output-format", "concise", "other.py", "train.py"])
    assert result.exit_code == 1, result.output
    assert [line.split(":")[0] for line in result.output.splitlines() if "DPL007" in line] == ["other.py", "train.py"]


# ---------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("command", ["check", "fix"])
@pytest.mark.parametrize("jobs", ["1", "2"], ids=["one process", "a pool"])
def test_ctrl_c_exits_130_quietly(tmp_path, driver, command, jobs):
    for index in range(10):  # enough files for a pool
        (tmp_path / f"train_{index}.py").write_text(MISUSE)
    process = subprocess.Popen(
        [sys.executable, driver, "sleep", command, "-n", "-j", jobs, "."],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        assert process.stdout.read(len(b"linting")) == b"linting"  # a file is being linted now
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    assert b"Traceback" not in stderr and b"Aborted" not in stderr, stderr
    assert stderr == b""
    assert time.monotonic() - started < 20  # the workers did not finish their minute-long files
