"""Bad input never crashes a run: each bad file gets one clear line, the other files are still
checked, and the exit code says that something went wrong.

Most cases run the real command once over a project holding every bad input at the same time;
the cases that need a fault injected (permission denied, a file deleted mid-run) call the
runner in-process with the fault monkeypatched in. Tests run as root here, and root ignores
file modes, so `chmod 000` cannot make a file unreadable: those cases are simulated, and the
real-permission variants skip themselves when running as root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import libcst as cst
import pytest

from conftest import AS_ROOT, MISUSE, MISUSE_FIXED, fix, lint
from dplint import runner
from dplint.config import Settings
from dplint.runner import FixOptions, run
from dplint.source import SourceError, call_with_deep_stack, decode, python_syntax_error, read_source

DPL007 = (
    "DPL007 error [*] DataLoader gets a sampler and a true `shuffle`: it raises `ValueError: sampler option "
    "is mutually exclusive with shuffle`; the DistributedSampler already shuffles, so drop `shuffle=`"
)


def out(result) -> list[str]:
    return result.stdout.decode(errors="replace").splitlines()


def finding_lines(result) -> list[str]:
    return [line for line in out(result) if ": DPL" in line]


def run_in_process(paths, fix_options=None):
    return run([str(p) for p in paths], Settings(), fix=fix_options, jobs=1, cache_dir=None)


def lines_of(report) -> list[str]:
    return [f"{f.filename}:{f.location.row}:{f.location.column}: {f.code} {f.message}" for f in report.findings]


# ------------------------------------------------------------------ every bad input, one run
@pytest.fixture
def bad_project(tmp_path):
    """A folder with every kind of bad input next to one script that must still be flagged."""
    (tmp_path / "good.py").write_text(MISUSE)
    (tmp_path / "syntax_error.py").write_text("import torch.nn as nn\n\nmodel = nn.DataParallel(net\nprint(model)\nmodel.train()\n")
    (tmp_path / "python2.py").write_text("import torch\nmodel = torch.nn.DataParallel(net)\nprint \"epoch\", epoch\nmodel.train()\n")
    (tmp_path / "bad_bytes.py").write_bytes(b"import torch\nx = 1\n# caf\xff\n")
    (tmp_path / "latin1_no_cookie.py").write_bytes(b"# caf\xe9\nimport torch\n")
    (tmp_path / "unknown_cookie.py").write_bytes(b"# -*- coding: klingon -*-\nimport torch\n")
    (tmp_path / "wrong_cookie.py").write_bytes("# coding: ascii\nimport torch\nname = 'café'\n".encode())
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + MISUSE.encode())
    (tmp_path / "crlf.py").write_bytes(MISUSE.replace("\n", "\r\n").encode())
    (tmp_path / "mixed_endings.py").write_bytes(MISUSE.replace("\n", "\r\n", 2).encode())
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "dir.py").mkdir()  # a folder named like a script: walked, not read
    (tmp_path / "dir.py" / "inner.py").write_text(MISUSE)
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    os.symlink("gone.py", tmp_path / "dangling.py")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.py")  # opening it for reading would wait for a writer forever
    return tmp_path


def test_every_bad_input_gets_one_line_and_the_run_goes_on(cli, bad_project):
    # good.py is named three times (twice directly, once through the folder): one finding.
    result = cli("check", "--no-cache", ".", "missing.py", "good.py", "./good.py", cwd=bad_project)
    lines = finding_lines(result)
    syntax = [line for line in lines if line.startswith(("syntax_error.py:", "python2.py:"))]
    assert [line.split(":")[0] for line in syntax] == ["python2.py", "syntax_error.py"]
    assert all(": DPL000 error cannot parse: " in line for line in syntax), syntax
    assert [line for line in lines if line not in syntax] == [
        "bad_bytes.py:1:1: DPL000 error cannot decode as utf-8: invalid byte 0xff at line 3, byte 6 of the line",
        f"bom.py:4:44: {DPL007}",
        f"crlf.py:4:44: {DPL007}",
        "dangling.py:1:1: DPL000 error cannot read: broken symbolic link (its target does not exist)",
        f"dir.py/inner.py:4:44: {DPL007}",
        *(["fifo.py:1:1: DPL000 error cannot read: not a regular file (a pipe, socket or device)"] if hasattr(os, "mkfifo") else []),
        f"good.py:4:44: {DPL007}",
        "latin1_no_cookie.py:1:1: DPL000 error cannot decode as utf-8: invalid byte 0xe9 at line 1, byte 6 of the line",
        "loop_a.py:1:1: DPL000 error cannot read: symbolic link loop",
        "loop_b.py:1:1: DPL000 error cannot read: symbolic link loop",
        "missing.py:1:1: DPL000 error cannot read: No such file or directory",
        f"mixed_endings.py:4:44: {DPL007}",
        "unknown_cookie.py:1:1: DPL000 error cannot decode: the coding cookie names an unknown encoding 'klingon'",
        "wrong_cookie.py:1:1: DPL000 error cannot decode as ascii (the encoding its coding cookie declares): "
        "invalid byte 0xc3 at line 3, byte 12 of the line",
    ]
    assert result.returncode == 1
    assert result.stderr == b""  # no traceback, no internal error


def test_fix_over_every_bad_input_touches_only_what_it_fixes(cli, bad_project):
    before = {path: path.read_bytes() for path in bad_project.rglob("*.py") if path.is_file() and not path.is_symlink()}
    result = cli("fix", ".", "missing.py", cwd=bad_project)
    assert result.returncode == 1, result.stderr  # the DPL000 findings remain
    fixed = {"good.py", "bom.py", "crlf.py", "mixed_endings.py", "dir.py/inner.py"}
    for path, data in before.items():
        name = path.relative_to(bad_project).as_posix()
        if name not in fixed:
            assert path.read_bytes() == data, name
    assert (bad_project / "good.py").read_text() == MISUSE_FIXED
    assert (bad_project / "dir.py" / "inner.py").read_text() == MISUSE_FIXED
    assert not list(bad_project.rglob(".dplint-*"))  # no temp file left behind


# ---------------------------------------------------------------------------- line endings, BOM
def test_bom_is_kept_by_fix(cli, tmp_path):
    script = tmp_path / "bom.py"
    script.write_bytes(b"\xef\xbb\xbf" + MISUSE.encode())
    assert cli("fix", "--no-cache", str(script)).returncode == 0
    assert script.read_bytes() == b"\xef\xbb\xbf" + MISUSE_FIXED.encode()
    assert read_source(str(script)).encoding == "utf-8-sig"


def test_crlf_is_kept_by_fix(cli, tmp_path):
    script = tmp_path / "crlf.py"
    script.write_bytes(MISUSE.replace("\n", "\r\n").encode())
    assert cli("fix", str(script)).returncode == 0
    assert script.read_bytes() == MISUSE_FIXED.replace("\n", "\r\n").encode()


def test_mixed_line_endings_are_each_kept_by_fix(cli, tmp_path):
    script = tmp_path / "mixed.py"
    original = MISUSE.replace("\n", "\r\n", 2) + "x = 1\r"  # CRLF, CRLF, LF, LF, then an old-Mac CR
    script.write_bytes(original.encode())
    assert cli("fix", str(script)).returncode == 0
    assert script.read_bytes() == original.replace("shuffle=True, ", "").encode()


def test_old_mac_line_endings_are_kept_by_fix():
    text = MISUSE.replace("\n", "\r")
    assert [(f.code, f.location.row, f.location.column) for f in lint(text)] == [("DPL007", 4, 44)]
    assert fix(text) == MISUSE_FIXED.replace("\n", "\r")


def test_a_coding_cookie_round_trips_bytes_it_does_not_understand(cli, tmp_path):
    """latin-1 decodes any byte: UTF-8 text under a latin-1 cookie is linted, and written back as it was."""
    script = tmp_path / "latin1.py"
    original = ("# -*- coding: latin-1 -*-\n# café, naïve\n" + MISUSE).encode("utf-8")
    script.write_bytes(original)
    assert cli("fix", str(script)).returncode == 0
    assert script.read_bytes() == original.replace(b"shuffle=True, ", b"")


# ------------------------------------------------------------------------------ empty, huge
EMPTY_FILES = {"empty.py": b"", "bom_only.py": b"\xef\xbb\xbf", "blank_lines.py": b"\n\n", "spaces.py": b"   ",
               "comment.py": b"# only a comment", "crlf.py": b"\r\n", "shuffle.py": b""}  # (named like a token)


def test_empty_files_are_clean_and_left_alone(cli, tmp_path):
    for name, content in EMPTY_FILES.items():
        (tmp_path / name).write_bytes(content)
    result = cli("fix", ".", cwd=tmp_path)
    assert (result.returncode, out(result), result.stderr) == (0, ["All checks passed!"], b"")
    assert {name: (tmp_path / name).read_bytes() for name in EMPTY_FILES} == EMPTY_FILES


def test_empty_file_through_the_engine_too():
    assert lint("") == [] and fix("") == ""


def generated_5mb_script() -> str:
    """A generator's output: 5 MB of embedded data, then the misuse on the last lines."""
    import base64

    blob = base64.b64encode(bytes(range(256)) * 15_000).decode()
    rows = [blob[i : i + 76] for i in range(0, len(blob), 76)]
    head = '"""Weights embedded by export.py; do not edit."""\nWEIGHTS = """\n'
    return head + "\n".join(rows) + '\n"""\n' + MISUSE


def test_a_5_mb_generated_file(cli, tmp_path):
    text = generated_5mb_script()
    assert len(text.encode()) > 5_000_000
    script = tmp_path / "weights.py"
    script.write_text(text)
    last_line = text.count("\n")
    started = time.monotonic()
    result = cli("check", "--no-cache", str(script))
    assert finding_lines(result) == [f"{script}:{last_line}:44: {DPL007}"]
    assert result.returncode == 1
    assert cli("fix", str(script)).returncode == 0
    assert script.read_text() == text.replace("shuffle=True, ", "")
    assert time.monotonic() - started < 60


@pytest.mark.skipif(not os.environ.get("DPLINT_LONG_PROPERTIES"), reason="long run: set DPLINT_LONG_PROPERTIES=1")
def test_a_5_mb_generated_table_of_code(tmp_path):
    """5 MB of real syntax (77,000 tuple rows) for the parser and the semantic model: about
    two minutes of CPU, so only in the long run."""
    rows = "".join(f"    ({i}, {i * 0.5!r}, 'token_{i:07d}', {{'id': {i}, 'bucket': {i % 97}}}),\n" for i in range(78_000))
    text = "TABLE = [\n" + rows + "]\n" + MISUSE
    assert len(text) > 5_000_000
    script = tmp_path / "table.py"
    script.write_text(text)
    report = run_in_process([script], FixOptions())
    assert not report.errors and [f.code for f in report.applied] == ["DPL007"]
    assert script.read_text() == text.replace("shuffle=True, ", "")


# --------------------------------------------------------------------------------- paths
def test_a_folder_named_like_a_script_is_walked_not_read(cli, tmp_path):
    (tmp_path / "model.py").mkdir()
    (tmp_path / "model.py" / "train.py").write_text(MISUSE)
    result = cli("check", "--no-cache", "model.py", cwd=tmp_path)
    assert finding_lines(result) == [f"model.py/train.py:4:44: {DPL007}"]
    assert result.returncode == 1


def test_reading_a_folder_directly_is_one_clear_error(tmp_path):
    (tmp_path / "x.py").mkdir()
    with pytest.raises(SourceError, match="^cannot read: is a directory$"):
        read_source(str(tmp_path / "x.py"))


def test_symlink_loops_of_folders_are_not_followed(cli, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(MISUSE)
    os.symlink("..", tmp_path / "pkg" / "up")  # pkg/up/pkg/up/... forever, if followed
    os.symlink("self", tmp_path / "self")  # a link to itself, given on the command line
    result = cli("check", "--no-cache", ".", "self", cwd=tmp_path)
    assert finding_lines(result) == [
        f"pkg/train.py:4:44: {DPL007}",
        "self:1:1: DPL000 error cannot read: symbolic link loop",
    ]
    assert result.returncode == 1


def test_a_symlinked_script_is_checked_once_and_fixed_through_its_link(cli, tmp_path):
    (tmp_path / "real.py").write_text(MISUSE)
    os.symlink("real.py", tmp_path / "link.py")
    result = cli("check", "--no-cache", ".", cwd=tmp_path)
    assert len(finding_lines(result)) == 1
    assert cli("fix", "link.py", cwd=tmp_path).returncode == 0
    assert os.readlink(tmp_path / "link.py") == "real.py"  # still a link
    assert (tmp_path / "real.py").read_text() == MISUSE_FIXED


def test_a_path_given_twice_is_fixed_once(cli, tmp_path):
    (tmp_path / "train.py").write_text(MISUSE)
    result = cli("fix", "train.py", "train.py", "./train.py", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.decode().splitlines() == ["Fixed 1 problem in 1 file."]
    assert (tmp_path / "train.py").read_text() == MISUSE_FIXED


def test_a_missing_path_given_twice_is_reported_once(cli, tmp_path):
    result = cli("check", "--no-cache", "missing.py", "missing.py", "./missing.py", cwd=tmp_path)
    assert finding_lines(result) == ["missing.py:1:1: DPL000 error cannot read: No such file or directory"]
    assert result.returncode == 1


def test_a_file_name_that_is_not_utf8(cli, tmp_path):
    if sys.platform == "darwin":
        pytest.skip("macOS file systems refuse names that are not UTF-8")
    os.makedirs(tmp_path / "project")
    name = os.fsdecode(b"caf\xe9.py")
    (tmp_path / "project" / name).write_text(MISUSE)
    subprocess.run(["git", "init", "-q", str(tmp_path / "project")], capture_output=True)  # discovery asks git
    result = cli("check", "--no-cache", "project", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert len(finding_lines(result)) == 1 and result.stderr == b""


# ------------------------------------------------------------------ faults injected in-process
def test_unreadable_file_simulated(monkeypatch, tmp_path):
    (tmp_path / "secret.py").write_text(MISUSE)
    (tmp_path / "train.py").write_text(MISUSE)
    real_open = os.open

    def no_permission(path, *args, **kwargs):
        if os.path.basename(path) == "secret.py":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("dplint.source.os.open", no_permission)
    for fix_options in (None, FixOptions()):
        report = run_in_process([tmp_path], fix_options)
        assert lines_of(report)[0] == f"{tmp_path}/secret.py:1:1: DPL000 cannot read: Permission denied"
        assert [(f.filename, f.code) for f in report.findings[1:]] == ([(f"{tmp_path}/train.py", "DPL007")] if fix_options is None else [])
    assert (tmp_path / "secret.py").read_text() == MISUSE


@pytest.mark.skipif(AS_ROOT, reason="root reads files whatever their mode; simulated in test_unreadable_file_simulated")
def test_unreadable_file_for_real(cli, tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text(MISUSE)
    secret.chmod(0)
    try:
        result = cli("check", "--no-cache", "secret.py", cwd=tmp_path)
    finally:
        secret.chmod(0o644)
    assert finding_lines(result) == ["secret.py:1:1: DPL000 error cannot read: Permission denied"]
    assert result.returncode == 1


def test_unreadable_folder_simulated(monkeypatch, tmp_path):
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "a.py").write_text(MISUSE)
    (tmp_path / "train.py").write_text(MISUSE)
    real_scandir = os.scandir

    def no_permission(path="."):
        if os.path.basename(os.fspath(path)) == "private":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", no_permission)
    report = run_in_process([tmp_path])
    assert lines_of(report)[0] == f"{tmp_path}/private:1:1: DPL000 cannot read: Permission denied"
    assert [(f.filename, f.code) for f in report.findings[1:]] == [(f"{tmp_path}/train.py", "DPL007")]


@pytest.mark.parametrize("mode", ["check", "fix"])
def test_a_file_deleted_between_discovery_and_read(monkeypatch, tmp_path, mode):
    (tmp_path / "gone.py").write_text(MISUSE)
    (tmp_path / "train.py").write_text(MISUSE)
    real_discover = runner.discover

    def discover_then_delete(paths):
        found = real_discover(paths)
        os.unlink(tmp_path / "gone.py")
        return found

    monkeypatch.setattr(runner, "discover", discover_then_delete)
    report = run_in_process([tmp_path], FixOptions() if mode == "fix" else None)
    assert lines_of(report)[0] == f"{tmp_path}/gone.py:1:1: DPL000 cannot read: No such file or directory"
    if mode == "check":
        assert [f.code for f in report.findings] == ["DPL000", "DPL007"]
    else:
        assert (tmp_path / "train.py").read_text() == MISUSE_FIXED
    assert not report.errors


def test_a_file_deleted_while_being_fixed(monkeypatch, tmp_path):
    (tmp_path / "train.py").write_text(MISUSE)
    real_process_text = runner.process_text

    def delete_meanwhile(text, path, settings, fix_options, *project):
        result = real_process_text(text, path, settings, fix_options)
        os.unlink(path)
        return result

    monkeypatch.setattr(runner, "process_text", delete_meanwhile)
    report = run_in_process([tmp_path / "train.py"], FixOptions())
    assert report.errors == [
        f"{tmp_path}/train.py: changed while being fixed (cannot read: No such file or directory); the fix was not written"
    ]
    assert not (tmp_path / "train.py").exists()  # not resurrected by the fix


def test_a_crashing_analysis_costs_one_file_in_fix_mode(monkeypatch, tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    (tmp_path / "b.py").write_text(MISUSE)
    real_process_text = runner.process_text

    def crash_on_a(text, path, settings, fix_options, *project):
        if path.endswith("a.py"):
            raise KeyError("boom")
        return real_process_text(text, path, settings, fix_options)

    monkeypatch.setattr(runner, "process_text", crash_on_a)
    report = run_in_process([tmp_path], FixOptions())
    assert report.errors == [f"{tmp_path}/a.py: internal error: KeyError: 'boom'; the file is unchanged"]
    assert (tmp_path / "a.py").read_text() == MISUSE
    assert (tmp_path / "b.py").read_text() == MISUSE_FIXED


def test_an_internal_error_exits_2(cli, tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    code = (
        "import sys, dplint.runner as r\n"
        "def crash(*a): raise KeyError('boom')\n"
        "r.process_text = crash\n"
        "from dplint.cli import main\n"
        "sys.argv = ['dplint', 'fix', 'a.py']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines()[0] == "dplint: error: a.py: internal error: KeyError: 'boom'; the file is unchanged"


# ------------------------------------------------------------------------- decoding, one line
@pytest.mark.parametrize(
    "raw, message",
    [
        (b"x = 1\n\xff\n", "cannot decode as utf-8: invalid byte 0xff at line 2, byte 1 of the line"),
        (b"x = 1\ny = 2\nz = '\xc3'\n", "cannot decode as utf-8: invalid byte 0xc3 at line 3, byte 6 of the line"),
        (b"# coding: nope\n", "cannot decode: the coding cookie names an unknown encoding 'nope'"),
        (b"\xef\xbb\xbf# coding: latin-1\n", "cannot decode: the file starts with a UTF-8 BOM but its coding cookie declares another encoding"),
        (b"# coding: rot13\nx = 1\n", "cannot decode: the coding cookie names an unusable encoding ('rot13' is not a text encoding; use codecs.decode() to handle arbitrary codecs)"),
        (b"# coding: utf-16\nx = 1\n", "cannot decode as utf-16 (the encoding its coding cookie declares): invalid byte 0x0a at line 2, byte 6 of the line"),
    ],
)
def test_decode_errors_are_one_line(raw, message):
    with pytest.raises(SourceError) as caught:
        decode(raw)
    assert str(caught.value) == message


def test_null_bytes_do_not_crash_and_survive_a_fix():
    """Python refuses a NUL anywhere in source; LibCST accepts one inside a string, so the file is
    analysed, and the fix keeps the byte."""
    text = MISUSE + "x = '\x00'\n"
    assert [f.code for f in lint(text)] == ["DPL007"]
    assert fix(text) == MISUSE_FIXED + "x = '\x00'\n"
    assert [f.code for f in lint("\x00" + MISUSE)] == ["DPL000"]


# --------------------------------------------------------------------- deep nesting, no crash
def deep_and_chain(terms: int) -> str:
    return MISUSE + "ok = " + " and ".join(["flag"] * terms) + "\n"


def long_sum(terms: int) -> str:
    return MISUSE + "total = " + " + ".join(["x"] * terms) + "\n"


def test_deep_stack_runs_the_parser_past_the_c_stack(tmp_path):
    """20,000 chained `and`s is valid Python; LibCST's parser needs more than 8 MiB of stack for it
    (without the deep stack this subprocess dies of SIGSEGV)."""
    (tmp_path / "deep.py").write_text(deep_and_chain(20_000))
    code = (
        "import sys, libcst\n"
        "from dplint.source import call_with_deep_stack\n"
        "text = open(sys.argv[1]).read()\n"
        "print(call_with_deep_stack(lambda: libcst.parse_module(text).code == text))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "deep.py")], capture_output=True, timeout=300)
    assert (result.returncode, result.stdout) == (0, b"True\n"), result.stderr[-500:]


def test_deep_stack_restores_the_recursion_limit_and_reraises():
    limit = sys.getrecursionlimit()
    with pytest.raises(ValueError, match="invalid literal"):
        call_with_deep_stack(int, "x")
    assert call_with_deep_stack(call_with_deep_stack, len, "abc") == 3  # nested: no deadlock
    assert call_with_deep_stack(sys.getrecursionlimit) > limit
    assert sys.getrecursionlimit() == limit


def test_deep_stack_falls_back_to_the_plain_stack(monkeypatch):
    """Where no thread can get such a stack (`ulimit -v`), the call runs as it is."""
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setattr("dplint.source._idle_deep_threads", [])  # no deep thread kept from earlier calls
    limit = sys.getrecursionlimit()
    assert call_with_deep_stack(sys.getrecursionlimit) == limit
    assert sys.getrecursionlimit() == limit


def test_deep_stack_threads_are_kept_for_the_next_call():
    """One deep thread serves call after call (starting one per file cost as much as a
    small file's analysis); a call made inside one runs there directly."""
    import threading

    from dplint import source

    first = call_with_deep_stack(threading.get_ident)
    assert call_with_deep_stack(threading.get_ident) == first != threading.get_ident()
    assert call_with_deep_stack(lambda: call_with_deep_stack(threading.get_ident)) == first
    assert len(source._idle_deep_threads) >= 1
    with pytest.raises(ValueError, match="from the deep thread"):
        call_with_deep_stack(lambda: int("from the deep thread"))
    assert call_with_deep_stack(threading.get_ident) == first  # still serving after an error


def test_a_long_expression_is_fixed_without_crashing(cli, tmp_path):
    """2,000 terms: past Python's default recursion limit for LibCST's visitors."""
    (tmp_path / "sum.py").write_text(long_sum(2_000))
    result = cli("fix", ".", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, b"Fixed 1 problem in 1 file.\n")
    assert (tmp_path / "sum.py").read_text() == long_sum(2_000).replace("shuffle=True, ", "")


def test_deeply_nested_code_is_checked_without_crashing(cli, tmp_path):
    (tmp_path / "deep.py").write_text(deep_and_chain(10_000))
    result = cli("check", "--no-cache", "deep.py", cwd=tmp_path)
    assert finding_lines(result) == [f"deep.py:4:44: {DPL007}"]


def test_deeply_nested_code_on_standard_input_is_checked_without_crashing(cli):
    result = cli("check", "-", input=deep_and_chain(10_000).encode())
    assert finding_lines(result) == [f"-:4:44: {DPL007}"]


def test_lint_source_never_raises_on_a_long_expression():
    assert [f.code for f in lint(long_sum(1_000))] == ["DPL007"]


# ---------------------------------------------------------------------------- syntax errors
def test_python_syntax_error_gives_pythons_words_and_position():
    assert python_syntax_error('import torch\nprint "epoch", epoch\n') == (
        "Missing parentheses in call to 'print'. Did you mean print(...)?", 2, 1,
    )
    assert python_syntax_error("model = nn.DataParallel(net\nprint(model)\n") == ("'(' was never closed", 1, 24)
    assert python_syntax_error("x = (1,\n") == ("'(' was never closed", 1, 5)
    assert python_syntax_error("x = 1\x00\n") == ("source code string cannot contain null bytes", 1, 1)
    assert python_syntax_error("x = 1\n") is None


def test_python2_code_is_reported_in_pythons_words():
    [finding] = lint('import torch\nmodel = torch.nn.DataParallel(net)\nprint "epoch", epoch\nmodel.train()\n')
    assert (finding.code, finding.location.row, finding.location.column, finding.message) == (
        "DPL000", 3, 1, "cannot parse: Missing parentheses in call to 'print'. Did you mean print(...)?",
    )


def test_valid_python_that_libcst_refuses_is_not_called_a_syntax_error():
    text = MISUSE + "DOC = (\n" + '    "line"\n' * 5_000 + ")\n"
    cst_refuses = False
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError:
        cst_refuses = True
    assert cst_refuses and python_syntax_error(text) is None  # the premise
    assert not [f for f in lint(text) if f.message.startswith("cannot parse")]
