"""Discovery resolves each folder once (not each file's every component), with the same
answer as `os.path.realpath` for links to files, links to folders and `..` spellings."""

from __future__ import annotations

import os

from dplint.discovery import _RealPaths, discover


def test_resolved_like_realpath(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.py").write_text("x = 1\n")
    os.symlink("real", tmp_path / "linked")  # a folder link
    os.symlink("a.py", tmp_path / "real" / "b.py")  # a file link beside its target
    os.symlink("../real/a.py", tmp_path / "real" / "c.py")
    os.symlink("missing.py", tmp_path / "real" / "gone.py")
    resolve = _RealPaths()
    spellings = [
        "real/a.py", "real/b.py", "real/c.py", "real/gone.py", "linked/a.py", "linked/b.py",
        "linked/../real/a.py", "./real/./a.py", "real/a.py/", "real", ".", "..", "",
    ]
    for spelling in spellings:
        path = str(tmp_path / spelling) if spelling else spelling
        assert resolve(path) == os.path.realpath(path), spelling
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        for spelling in spellings:
            assert _RealPaths()(spelling) == os.path.realpath(spelling), spelling
    finally:
        os.chdir(cwd)


def test_a_file_reached_twice_is_checked_once(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.py").write_text("x = 1\n")
    os.symlink("a.py", tmp_path / "real" / "b.py")
    files, problems = discover([str(tmp_path / "real"), str(tmp_path / "real" / "a.py")])
    assert files == [str(tmp_path / "real" / "a.py")] and problems == []
