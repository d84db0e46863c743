"""More of what a ruff user types: `--add-noqa`, `--extend-ignore`, `--per-file-ignores` on the
command line, `--watch`, `--analysis-timeout`; and the progress counter of a long run."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import MISUSE, ctrl_c_as_in_a_terminal

# DPL007 (sampler-shuffle) on line 4, behind a comment of the user's own.
COMMENTED = MISUSE.replace("sampler=sampler)\n", "sampler=sampler)  # the old loader\n")


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


# ---------------------------------------------------------------------------- --add-noqa
def test_add_noqa_silences_each_finding_keeping_comments_and_other_codes(cli, tmp_path):
    (tmp_path / "a.py").write_text(COMMENTED)
    (tmp_path / "b.py").write_text(MISUSE.replace("sampler=sampler)\n", "sampler=sampler)  # noqa: E501\n"))
    (tmp_path / "c.py").write_text(MISUSE)
    result = cli("check", "-n", "--select", "DPL007", "--add-noqa", ".", cwd=tmp_path)
    assert (result.returncode, out(result), err(result)) == (0, "", "Added 3 noqa directives.\n")
    assert (tmp_path / "a.py").read_text().splitlines()[3].endswith("sampler=sampler)  # the old loader  # noqa: DPL007")
    assert (tmp_path / "b.py").read_text().splitlines()[3].endswith("sampler=sampler)  # noqa: E501, DPL007")
    assert (tmp_path / "c.py").read_text() == MISUSE.replace("sampler=sampler)\n", "sampler=sampler)  # noqa: DPL007\n")
    # Now clean, with the unused-suppression rule on too; a second --add-noqa adds nothing.
    assert cli("check", "-n", "--select", "DPL007,DPL100", ".", cwd=tmp_path).returncode == 0
    again = cli("check", "-n", "--select", "DPL007", "--add-noqa", ".", cwd=tmp_path)
    assert (again.returncode, err(again)) == (0, "Added 0 noqa directives.\n")


def test_add_noqa_merges_codes_on_one_line_and_leaves_lines_that_cannot_take_a_comment():
    from dplint.suppressions import add_noqa

    text = (
        "a = f(x)   \n"                       # 1: trailing blanks give way to the comment
        "b = g('''one\n"                      # 2: ends inside a string: no comment can go here
        "two''') + h(y)\n"                    # 3
        "c = (1,\n"                           # 4: inside brackets a comment may end the line
        "     2)  # noqa: E501\n"              # 5
        "d = 1 + \\\n"                        # 6: a backslash continues the line
        "    2\n"
        "e = k(z)"                            # 8: no line break at the end
    )
    rows = {1: {"DPL007", "DPL001"}, 2: {"DPL002"}, 4: {"DPL003"}, 5: {"DPL004"}, 6: {"DPL005"}, 8: {"DPL006"}}
    fixed, added, cannot = add_noqa(text, rows)
    assert fixed == (
        "a = f(x)  # noqa: DPL001, DPL007\n"
        "b = g('''one\n"
        "two''') + h(y)\n"
        "c = (1,  # noqa: DPL003\n"
        "     2)  # noqa: E501, DPL004\n"
        "d = 1 + \\\n"
        "    2\n"
        "e = k(z)  # noqa: DPL006"
    )
    assert (added, cannot) == (4, 2)
    assert add_noqa(fixed, {1: {"DPL007"}, 5: {"DPL004"}}) == (fixed, 0, 0)  # already there: idempotent


def test_add_noqa_refuses_fix_diff_and_stdin(cli, tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    for arguments in (("--fix", "a.py"), ("--diff", "a.py"), ("-",)):
        result = cli("check", "-n", "--add-noqa", *arguments, input=MISUSE.encode(), cwd=tmp_path)
        assert result.returncode == 2 and "--add-noqa cannot be combined" in err(result)
    assert (tmp_path / "a.py").read_text() == MISUSE


# ---------------------------------------------------------------------------- ignores
def test_extend_ignore_is_ignore(cli, tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    (tmp_path / "dplint.toml").write_text('ignore = ["DPL100"]\n')
    result = cli("check", "-n", "--extend-ignore", "sampler-shuffle", "a.py", cwd=tmp_path)
    assert (result.returncode, out(result)) == (0, "All checks passed!\n")
    assert "extend-ignore" in out(cli("check", "--help"))


def test_per_file_ignores_on_the_command_line_add_to_the_configuration(cli, tmp_path):
    for name in ("tests/test_a.py", "scripts/b.py", "train.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(MISUSE)
    (tmp_path / "dplint.toml").write_text('[per-file-ignores]\n"tests/*" = ["DPL007"]\n')
    result = cli("check", "-n", "--select", "DPL007", "--output-format", "concise",
                 "--per-file-ignores", "scripts/*:DPL001,sampler-shuffle", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in out(result).splitlines()] == ["train.py"]
    shown = out(cli("check", "--per-file-ignores", "scripts/*:DPL007", "--show-settings", "train.py", cwd=tmp_path))
    assert 'per-file-ignores = {"tests/*": ["DPL007"], "scripts/*": ["DPL007"]}' in shown


@pytest.mark.parametrize(
    "value, message",
    [
        ("scripts", "--per-file-ignores 'scripts': expected GLOB:RULE[,RULE...]"),
        ("scripts/*:", "expected GLOB:RULE[,RULE...]"),
        ("scripts/*:DPL999", "--per-file-ignores: `'scripts/*'`: unknown rule selector 'DPL999'"),
    ],
)
def test_bad_per_file_ignores_is_a_usage_error(cli, tmp_path, value, message):
    (tmp_path / "a.py").write_text(MISUSE)
    result = cli("check", "-n", "--per-file-ignores", value, "a.py", cwd=tmp_path)
    assert result.returncode == 2 and message in err(result), err(result)


# ---------------------------------------------------------------------------- --analysis-timeout
def test_analysis_timeout_on_the_command_line_and_in_the_configuration(cli, tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    assert "analysis-timeout = 10.0\n" in out(cli("check", "--show-settings", "a.py", cwd=tmp_path))
    (tmp_path / "dplint.toml").write_text("analysis-timeout = 3\n")
    assert "analysis-timeout = 3.0\n" in out(cli("check", "--show-settings", "a.py", cwd=tmp_path))
    shown = out(cli("fix", "--analysis-timeout", "0.5", "--show-settings", "a.py", cwd=tmp_path))
    assert "analysis-timeout = 0.5\n" in shown
    refused = cli("check", "--analysis-timeout", "0", "a.py", cwd=tmp_path)
    assert refused.returncode == 2 and "'--analysis-timeout': 0.0 is not in the range x>0" in err(refused)


def test_the_settings_carry_the_timeout(tmp_path):
    from dplint.config import load_settings

    (tmp_path / "dplint.toml").write_text("analysis-timeout = 2.5\n")
    assert load_settings(str(tmp_path)).analysis_timeout == 2.5
    assert load_settings(str(tmp_path), {"analysis_timeout": 7.0}).analysis_timeout == 7.0


# ---------------------------------------------------------------------------- --watch
def _read_until(process, wanted: bytes, seconds: float = 60) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {wanted!r} in {seen!r}"
        ready, _, _ = select.select([process.stdout], [], [], left)
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"the watcher ended (no {wanted!r} in {seen!r})"
            seen += chunk
    return seen


def test_watch_checks_again_on_a_change_and_ctrl_c_exits_130(tmp_path):
    (tmp_path / "a.py").write_text(MISUSE)
    process = subprocess.Popen(
        [sys.executable, "-m", "dplint", "check", "-n", "--select", "DPL007", "--watch", "."],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        first = _read_until(process, b"Watching for file changes.")
        assert b"Starting dplint in watch mode..." in first and b"a.py:4:44: DPL007" in first
        (tmp_path / "a.py").write_text(MISUSE.replace("shuffle=True, ", ""))
        second = _read_until(process, b"Watching for file changes.")
        assert b"File change detected..." in second and b"All checks passed!" in second
        (tmp_path / "b.py").write_text(MISUSE)  # a new file in a watched folder
        third = _read_until(process, b"Watching for file changes.")
        assert b"b.py:4:44: DPL007" in third and b"a.py" not in third
        os.killpg(process.pid, signal.SIGINT)
        rest = process.communicate(timeout=30)[0]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    assert b"Traceback" not in rest and b"Aborted" not in rest


def test_watch_refuses_standard_input(cli, tmp_path):
    result = cli("check", "--watch", "-", input=MISUSE.encode(), cwd=tmp_path)
    assert result.returncode == 2 and "--watch needs files to watch" in err(result)


# ---------------------------------------------------------------------------- progress
@pytest.mark.parametrize(
    "files, output, quiet, stdout_tty, stderr_tty, to_file, shown",
    [
        (3809, "text", False, True, True, False, True),
        (3809, "full", False, True, True, False, True),
        (200, "concise", False, True, True, False, True),
        (199, "text", False, True, True, False, False),  # short: over before it is read
        (3809, "json", False, True, True, False, False),
        (3809, "sarif", False, True, True, False, False),
        (3809, "text", True, True, True, False, False),  # -q, -s
        (3809, "text", False, True, False, False, False),  # stderr piped or logged
        (3809, "text", False, False, True, False, False),  # `dplint check . | less`
        (3809, "text", False, False, True, True, True),  # -o report.txt on a terminal
    ],
)
def test_when_progress_is_shown(files, output, quiet, stdout_tty, stderr_tty, to_file, shown):
    from dplint.cli import shows_progress

    assert shows_progress(files, output, quiet, stdout_tty, stderr_tty, to_file) is shown


def test_the_runner_reports_each_finished_file(tmp_path):
    from dplint.config import Settings
    from dplint.runner import run

    for index in range(3):
        (tmp_path / f"train_{index}.py").write_text(MISUSE)
    (tmp_path / "clean.py").write_text("print('no torch here')\n")  # the pre-filter answers: done at once
    calls = []
    run([str(tmp_path)], Settings(root=str(tmp_path)), jobs=1, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(2, 4), (3, 4), (4, 4)]


def test_progress_on_a_terminal(tmp_path):
    """A real terminal (a pty) on stdout and stderr: the counter is drawn in place, then erased."""
    pty = pytest.importorskip("pty")
    for index in range(3):
        (tmp_path / f"train_{index}.py").write_text(MISUSE)
    script = (
        "import sys, dplint.cli\n"
        "dplint.cli.PROGRESS_MIN_FILES = 3\n"
        "dplint.cli._Progress.INTERVAL_SECONDS = 0\n"
        "sys.argv = ['dplint', 'check', '-n', '-j', '1', '--select', 'DPL007', '--output-format', 'concise', '.']\n"
        "dplint.cli.entry_point()\n"
    )
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        process.wait(timeout=60)
    assert process.returncode == 1
    assert b"\r[1/3] files\r[2/3] files\r[3/3] files\r           \r" in seen, seen
    assert seen.count(b"DPL007") == 3
