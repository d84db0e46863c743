"""`dplint fix` under faults: a write that fails leaves the original intact and says so, nothing
is ever half-written (not by a crash, not by two runs at once), and what a file is (its mode,
owner, symbolic link, BOM) survives the fix.

Root ignores file modes, so a read-only file or folder cannot stop a write here: those faults are
simulated by making the system call fail (the real-permission variants skip themselves as root).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import AS_ROOT, MISUSE, MISUSE_FIXED
from dplint import runner
from dplint.config import Settings
from dplint.runner import FixOptions, run
from dplint.source import write_atomic



def fix_in_process(*paths):
    return run([str(p) for p in paths], Settings(), fix=FixOptions(), jobs=1)


@pytest.fixture
def two_scripts(tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    (tmp_path / "b.py").write_text(MISUSE)
    return tmp_path


def leftovers(folder) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".dplint-"))


def failing_for(name: str, real, error: OSError):
    """`real`, except that it raises `error` when its first argument names `name`."""

    def call(*args, **kwargs):
        if any(os.path.basename(str(arg)) == name for arg in args[:2]):
            raise error
        return real(*args, **kwargs)

    return call


# ------------------------------------------------------------------------ failing writes
@pytest.mark.parametrize(
    "target, error, message",
    [
        ("replace", OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        ("replace", OSError(errno.EROFS, "Read-only file system"), "Read-only file system"),
        ("fsync", OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        ("fsync", OSError(errno.EIO, "Input/output error"), "Input/output error"),
    ],
)
def test_a_failing_write_leaves_the_original_and_says_so(monkeypatch, two_scripts, target, error, message):
    if target == "replace":
        monkeypatch.setattr("dplint.source.os.replace", failing_for("a.py", os.replace, error))
    else:  # the data reached a temp file but not the disk: a full disk fails here (or in write)
        real_fsync = os.fsync
        files_written: list[int] = []

        def fsync(descriptor):
            files_written.append(descriptor)
            if len(files_written) == 1:  # the first file written is a.py (files go in order)
                raise error
            return real_fsync(descriptor)

        monkeypatch.setattr("dplint.source.os.fsync", fsync)
    report = fix_in_process(two_scripts)
    assert report.errors == [f"{two_scripts}/a.py: cannot write the fix: {message}; the file is unchanged"]
    assert (two_scripts / "a.py").read_text() == MISUSE
    assert (two_scripts / "b.py").read_text() == MISUSE_FIXED  # the run went on
    assert [f.filename for f in report.applied] == [f"{two_scripts}/b.py"]  # a.py's fix is not claimed
    assert leftovers(two_scripts) == []


def test_a_read_only_file_is_not_replaced(monkeypatch, two_scripts):
    """The folder allows the rename, but the user marked the file read-only: respect that."""
    real_access = os.access
    monkeypatch.setattr(
        "dplint.source.os.access",
        lambda path, mode, **kw: False if path.endswith("a.py") and mode == os.W_OK else real_access(path, mode, **kw),
    )
    report = fix_in_process(two_scripts)
    assert report.errors == [
        f"{two_scripts}/a.py: cannot write the fix: Permission denied (the file is read-only); the file is unchanged"
    ]
    assert (two_scripts / "a.py").read_text() == MISUSE
    assert (two_scripts / "b.py").read_text() == MISUSE_FIXED


@pytest.mark.skipif(AS_ROOT, reason="root writes read-only files; simulated in test_a_read_only_file_is_not_replaced")
def test_a_read_only_file_for_real(cli, two_scripts):
    (two_scripts / "a.py").chmod(0o444)
    result = cli("fix", "a.py", cwd=two_scripts)
    assert result.returncode == 2
    assert (two_scripts / "a.py").read_text() == MISUSE


def test_a_read_only_folder_cannot_take_the_temp_file(monkeypatch, two_scripts):
    import tempfile

    real_mkstemp = tempfile.mkstemp

    def mkstemp(**kwargs):
        if os.path.basename(kwargs["dir"]) == "sub":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_mkstemp(**kwargs)

    monkeypatch.setattr("dplint.source.tempfile.mkstemp", mkstemp)
    (two_scripts / "sub").mkdir()
    (two_scripts / "sub" / "c.py").write_text(MISUSE)
    report = fix_in_process(two_scripts)
    assert report.errors == [f"{two_scripts}/sub/c.py: cannot write the fix: Permission denied; the file is unchanged"]
    assert (two_scripts / "sub" / "c.py").read_text() == MISUSE
    assert (two_scripts / "a.py").read_text() == MISUSE_FIXED


def test_a_fix_the_files_encoding_cannot_hold_is_not_written(monkeypatch, tmp_path):
    script = tmp_path / "legacy.py"
    original = ("# -*- coding: latin-1 -*-\n# café\n" + MISUSE).encode("latin-1")
    script.write_bytes(original)
    real = runner.process_text

    def euro_fix(text, path, settings, fix_options, *project):
        report = real(text, path, settings, fix_options, *project)
        report.fixed_text = report.fixed_text.replace("# café", "# 5 €")
        return report

    monkeypatch.setattr(runner, "process_text", euro_fix)
    report = fix_in_process(script)
    assert report.errors == [f"{script}: cannot write the fix: '€' cannot be encoded as iso-8859-1; the file is unchanged"]
    assert script.read_bytes() == original


def test_a_failing_write_exits_2_with_one_line(tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    code = (
        "import errno, os, sys\n"
        "import dplint.source\n"
        "def full(*args): raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "dplint.source.os.fsync = full\n"
        "from dplint.cli import main\n"
        "sys.argv = ['dplint', 'fix', 'a.py']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines()[0] == (
        "dplint: error: a.py: cannot write the fix: No space left on device; the file is unchanged"
    )
    assert (tmp_path / "a.py").read_text() == MISUSE
    assert leftovers(tmp_path) == []


# -------------------------------------------------------------------- edits during the fix
def test_an_edit_made_while_fixing_wins(monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MISUSE)
    edited = MISUSE + "# the user's edit, saved while dplint was thinking\n"
    real = runner.process_text

    def user_saves_meanwhile(text, path, settings, fix_options, *project):
        report = real(text, path, settings, fix_options, *project)
        script.write_text(edited)
        return report

    monkeypatch.setattr(runner, "process_text", user_saves_meanwhile)
    report = fix_in_process(script)
    assert report.errors == [f"{script}: changed while being fixed; the fix was not written"]
    assert report.applied == []
    assert script.read_text() == edited


# ----------------------------------------------------------------- what a file is, kept
def test_mode_owner_and_link_survive_the_fix(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("#!/usr/bin/env python\n" + MISUSE)
    script.chmod(0o751)
    os.symlink("train.py", tmp_path / "run.py")
    if AS_ROOT:
        os.chown(script, 1234, 5678)
    report = fix_in_process(tmp_path / "run.py")
    assert not report.errors
    assert os.readlink(tmp_path / "run.py") == "train.py"
    assert script.read_text() == "#!/usr/bin/env python\n" + MISUSE_FIXED
    info = os.stat(script)
    assert info.st_mode & 0o7777 == 0o751
    if AS_ROOT:
        assert (info.st_uid, info.st_gid) == (1234, 5678)


# ----------------------------------------------------------------- never half a file
def test_a_killed_writer_leaves_the_old_file_whole(tmp_path):
    """SIGKILL in the middle of writing 200 MB: the file is still the old one, byte for byte."""
    target = tmp_path / "train.py"
    target.write_text(MISUSE)
    code = (
        "import sys\n"
        "from dplint.source import write_atomic\n"
        "write_atomic(sys.argv[1], b'#' * 200_000_000)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", code, str(target)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(".dplint-")]
        if temps and temps[0].stat().st_size > 1_000_000:
            break
        time.sleep(0.01)
    else:
        writer.kill()
        pytest.fail("the writer never started writing")
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert target.read_text() == MISUSE


def big_script() -> str:
    """1 MB (a long docstring, cheap to parse) with the misuse: a torn write would be visible."""
    return '"""' + ("Training notes. " * 64 + "\n") * 1000 + '"""\n' + MISUSE


def watch(path, stop: threading.Event, seen: set) -> None:
    while not stop.is_set():
        try:
            seen.add(path.read_bytes())
        except FileNotFoundError:
            seen.add(b"<missing>")


def test_the_watcher_sees_a_torn_write(tmp_path):
    """The control: a naive in-place writer is caught by the same watcher."""
    script = tmp_path / "train.py"
    original = big_script().encode()
    script.write_bytes(original)
    stop, seen = threading.Event(), set()
    watcher = threading.Thread(target=watch, args=(script, stop, seen))
    watcher.start()
    try:
        fixed = big_script().replace("shuffle=True, ", "").encode()
        for _ in range(5):
            with open(script, "wb") as handle:  # truncates, then writes in pieces
                for start in range(0, len(fixed), 65536):
                    handle.write(fixed[start : start + 65536])
                    handle.flush()
                    time.sleep(0.002)
    finally:
        stop.set()
        watcher.join()
    assert seen - {original, fixed}, "the watcher saw no partial file: it cannot catch one"


def test_concurrent_fixes_never_leave_a_half_written_file(tmp_path):
    script = tmp_path / "train.py"
    original = big_script().encode()
    fixed = big_script().replace("shuffle=True, ", "").encode()
    script.write_bytes(original)
    stop, seen = threading.Event(), set()
    watcher = threading.Thread(target=watch, args=(script, stop, seen))
    watcher.start()
    try:
        command = [sys.executable, "-m", "dplint", "fix", "train.py"]
        fixers = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
        outcomes = [(fixer.wait(timeout=300), fixer.stderr.read().decode()) for fixer in fixers]
    finally:
        stop.set()
        watcher.join()
    assert script.read_bytes() == fixed
    assert seen <= {original, fixed}, "a reader saw a file that is neither the old nor the new one"
    assert leftovers(tmp_path) == []
    for returncode, stderr in outcomes:
        # Each run either wrote the fix, found it already written, or saw the file change under it.
        assert returncode in (0, 2), stderr
        if returncode == 2:
            assert stderr.splitlines()[0] == "dplint: error: train.py: changed while being fixed; the fix was not written"


def test_write_atomic_replaces_whole_files_only(tmp_path):
    target = tmp_path / "a.py"
    target.write_bytes(b"old")
    write_atomic(str(target), b"new")
    assert target.read_bytes() == b"new" and leftovers(tmp_path) == []
