"""Inputs dplint must take as Python does and give back as they came: `python -m dplint` inside a
tree that has its own `click.py`, the editor filter (`dplint fix -`) on a file with a BOM or a
latin-1 coding cookie, and files whose lines end in a bare CR."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import FIXTURES, MISUSE, MISUSE_FIXED, run_cli


def test_python_m_dplint_never_imports_the_checked_trees_modules(tmp_path):
    for name in ("click", "json", "libcst", "re"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the tree s {name}.py was imported')\n")
    (tmp_path / "train.py").write_text(MISUSE)
    result = run_cli("check", "-n", "--output-format", "concise", ".", cwd=tmp_path)
    output = result.stdout.decode() + result.stderr.decode()
    assert "was imported" not in output
    assert result.returncode == 1 and "train.py:4:44: DPL007" in output


def test_the_editor_filter_keeps_a_bom():
    result = run_cli("fix", "-", input=b"\xef\xbb\xbf" + MISUSE.encode())
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"\xef\xbb\xbf" + MISUSE_FIXED.encode()


def test_the_editor_filter_writes_in_the_coding_cookies_encoding():
    header = '# -*- coding: latin-1 -*-\nname = "caf\xe9"\n'
    result = run_cli("fix", "-", input=(header + MISUSE).encode("latin-1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (header + MISUSE_FIXED).encode("latin-1")


def test_the_editor_filter_gives_the_code_back_when_the_fix_cannot_be_encoded(tmp_path):
    # The code as it came, and the reason on stderr, never a half-encoded text.
    from dplint.config import Settings
    from dplint.runner import FixOptions, process_stdin

    data = ("# -*- coding: ascii -*-\n" + MISUSE).encode("ascii")
    report = process_stdin(data, "t.py", Settings(), FixOptions())
    assert report.fixed_bytes == ("# -*- coding: ascii -*-\n" + MISUSE_FIXED).encode("ascii")


def _as_bare_cr(folder):
    for path in folder.rglob("*.py"):
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))


def _findings(folder) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "dplint", "check", "-n", "--output-format", "concise", "."],
                            cwd=folder, capture_output=True, text=True, timeout=600)
    return sorted(line for line in result.stdout.splitlines() if ": DPL" in line)


def test_bare_cr_line_ends_give_the_findings_of_lf(tmp_path):
    """Every fixture folder, with `\\r` line ends: the same findings at the same lines."""
    picked = ["cross-file", "missing-set-epoch", "late-cuda-visible-devices", "strip-module", "unguarded-rank-save"]
    for name in picked:
        shutil.copytree(FIXTURES / name, tmp_path / "lf" / name)
        shutil.copytree(FIXTURES / name, tmp_path / "cr" / name)
    _as_bare_cr(tmp_path / "cr")
    expected = _findings(tmp_path / "lf")
    assert len(expected) > 50
    assert _findings(tmp_path / "cr") == expected


def test_a_fix_keeps_bare_cr_line_ends(tmp_path):
    path = tmp_path / "t.py"
    path.write_bytes(("# keep\n" + MISUSE).replace("\n", "\r").encode())
    result = run_cli("fix", "-n", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_bytes() == ("# keep\n" + MISUSE_FIXED).replace("\n", "\r").encode()
