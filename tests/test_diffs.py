"""`dplint fix --diff` prints patches that `git apply` and `patch` apply, for every file shape:
no final newline, CRLF, a BOM, a form feed inside a line, a file in another encoding than
UTF-8, names that need quoting, a notebook, several files in one patch."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import FIXTURES, MISUSE
from dplint.diffs import NO_NEWLINE, quote_path, unified_diff

NO_FINAL_NEWLINE = MISUSE.rstrip("\n")  # the fixed line is the last one, without "\n"
SHAPES = {
    "plain.py": MISUSE.encode(),
    "no_final_newline.py": NO_FINAL_NEWLINE.encode(),
    "trailing_line_no_newline.py": (MISUSE + "x = 1").encode(),  # the unchanged context ends the file
    "crlf.py": MISUSE.replace("\n", "\r\n").encode(),
    "crlf_no_final_newline.py": NO_FINAL_NEWLINE.replace("\n", "\r\n").encode(),
    "bom.py": b"\xef\xbb\xbf" + MISUSE.encode(),
    "bom_one_line.py": b"\xef\xbb\xbf" + MISUSE.replace("\n\n", "\n").replace("\n", "; ", 2).encode(),
    "form_feed.py": ("# page one\x0c page two\n" + MISUSE).encode(),
    # latin-1: the hunk's lines must be the file's own bytes, not their UTF-8 spelling
    "latin1.py": ("# -*- coding: latin-1 -*-\n# Entraînement\n" + MISUSE.replace("sampler)\n", "sampler)  # équipe\n")).encode("latin-1"),
    "my train.py": MISUSE.encode(),  # a space: git ends the name with a tab, or patch stops at the space
    "tab\tname.py": MISUSE.encode(),  # a tab and a newline: quoted as git does
    "new\nline.py": MISUSE.encode(),
    "caf\u00e9.py": MISUSE.encode(),  # UTF-8, quoted as git does by default (core.quotePath)
    "bad\udcff.py": MISUSE.encode(),  # the byte 0xff: not UTF-8 (os.fsdecode makes it a lone surrogate)
    # a notebook: the patch is the diff of its JSON text, as stored
    "nb.ipynb": (FIXTURES / "notebooks" / "bad_sampler_across_cells.ipynb").read_bytes(),
}


@pytest.fixture
def tree(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name, data in SHAPES.items():
        (project / name).write_bytes(data)
    return project


def fixed_tree(cli, tree, tmp_path):
    fixed = tmp_path / "fixed"
    shutil.copytree(tree, fixed)
    assert cli("fix", "--no-cache", "--select", "DPL007", ".", cwd=fixed).returncode == 0
    return {path.name: path.read_bytes() for path in fixed.iterdir()}


@pytest.mark.parametrize("tool", [["git", "apply", "-p0", "-"], ["patch", "-p0", "--batch", "--no-backup-if-mismatch"]])
def test_the_diff_of_every_shape_applies(cli, tree, tmp_path, tool):
    if shutil.which(tool[0]) is None:
        pytest.skip(f"{tool[0]} is not installed")
    expected = fixed_tree(cli, tree, tmp_path)
    assert all(expected[name] != data for name, data in SHAPES.items())  # every file has a fix
    result = cli("fix", "--no-cache", "--diff", "--select", "DPL007", ".", cwd=tree)
    assert result.returncode == 1, result.stderr
    patch = result.stdout
    assert patch.count(b"\n--- ") + patch.startswith(b"--- ") == len(SHAPES)
    check = ["git", "apply", "--check", "-p0", "-"] if tool[0] == "git" else tool + ["--dry-run"]
    checked = subprocess.run(check, input=patch, cwd=tree, capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    target = tmp_path / "target"
    shutil.copytree(tree, target)
    if tool[0] == "git":
        subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    applied = subprocess.run(tool, input=patch, cwd=target, capture_output=True, timeout=60)
    assert applied.returncode == 0, applied.stdout + applied.stderr + patch
    assert {name: (target / name).read_bytes() for name in SHAPES} == expected


def test_no_newline_marker():
    diff = unified_diff("a = 1\nb = 2", "a = 1\nb = 3", "x.py")
    assert diff == f"--- x.py\n+++ x.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n{NO_NEWLINE}+b = 3\n{NO_NEWLINE}"
    assert unified_diff("a\n", "a\n", "x.py") == ""


def test_bom_is_part_of_the_first_line():
    diff = unified_diff("a = 1\n", "a = 2\n", "x.py", bom=True)
    assert diff.splitlines()[3:] == ["-\ufeffa = 1", "+\ufeffa = 2"]


def test_names_are_quoted_as_git_quotes_them():
    assert quote_path("train.py") == "train.py"
    assert quote_path("my train.py") == "my train.py\t"  # git: a tab after a name with a space
    assert quote_path("tab\tname.py") == '"tab\\tname.py"'
    assert quote_path("new\nline.py") == '"new\\nline.py"'
    assert quote_path('say"hi".py') == '"say\\"hi\\".py"'
    assert quote_path("back\\slash.py") == '"back\\\\slash.py"'
    assert quote_path("caf\u00e9.py") == '"caf\\303\\251.py"'
    assert quote_path("bad\udcff.py") == '"bad\\377.py"'
    assert quote_path("my caf\u00e9.py") == '"my caf\\303\\251.py"\t'
    diff = unified_diff("a\n", "b\n", "tab\tname.py")
    assert diff.splitlines()[:2] == ['--- "tab\\tname.py"', '+++ "tab\\tname.py"']


def test_hunks_carry_the_files_own_bytes():
    old = "# -*- coding: latin-1 -*-\nname = 'équipe'\n"
    diff = unified_diff(old, old.replace("name", "team"), "x.py")
    assert diff.encode("utf-8", "surrogateescape").splitlines()[-2:] == [b"-name = '\xe9quipe'", b"+team = '\xe9quipe'"]
    assert unified_diff("é = 1\n", "é = 2\n", "x.py").splitlines()[-1] == "+é = 2"  # UTF-8 stays as it is
