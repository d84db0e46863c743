"""`dplint check` and `dplint fix` read code; they never import or run it. Every script here
writes a marker file when it is imported or run, and the tests assert that no marker appears,
whatever the mode (one process or a pool, files or standard input, check, fix or diff).
Configuration is TOML, read as data. (`verify`, which runs a script on purpose, is tested
with runtime_check.)
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DPLINT = Path(sys.executable).with_name("dplint")  # the console script users run
MISUSE = (
    "import torch.nn as nn\n"
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
    "model = nn.DataParallel(net)\n"
)
# Python files that Python itself (or a tool) would import or run if it looked at the folder the
# way an interpreter does, plus names that shadow dplint's own imports.
TRAPS = (
    "train.py", "__init__.py", "__main__.py", "conftest.py", "setup.py", "sitecustomize.py",
    "usercustomize.py", "click.py", "libcst.py", "torch.py", "tomllib.py", "json.py", "backend.py",
)


def trap(marker_folder: Path, name: str) -> str:
    """A script that leaves `marker_folder/name` behind when imported or run (and has a misuse)."""
    write = f"open({str(marker_folder / name)!r}, 'w').write('ran')\n"
    return write + MISUSE + "if __name__ == '__main__':\n    " + write


@pytest.fixture
def hostile(tmp_path):
    project, markers = tmp_path / "project", tmp_path / "markers"
    project.mkdir()
    markers.mkdir()
    for name in TRAPS:
        (project / name).write_text(trap(markers, name))
    for index in range(10):  # enough files for the process pool
        (project / f"worker_{index}.py").write_text(trap(markers, f"worker_{index}.py"))
    (project / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        "[tool.dplint]\n"
        # Values that look like code, in keys that hold patterns: matched as text, never run.
        f'extend-exclude = ["__import__(\'os\').system(\'touch {markers}/exclude\')", "$(touch {markers}/shell)"]\n'
        "[tool.dplint.per-file-ignores]\n"
        f'"`touch {markers}/backtick`" = ["DPL007"]\n'
    )
    return project, markers


def dplint(*args: str, cwd: Path, input: bytes | None = None):
    if not DPLINT.exists():
        pytest.skip(f"no console script at {DPLINT}")
    return subprocess.run([str(DPLINT), *args], cwd=cwd, input=input, capture_output=True, timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        ("check", "--no-cache", "-j", "1", "."),
        ("check", "-j", "2", "."),  # process pool, and the cache
        ("check", "--no-cache", "--output-format", "json", "train.py"),
        ("fix", "--diff", "-j", "2", "."),
        ("fix", "--unsafe-fixes", "-j", "2", "."),
        ("fix", "-j", "1", "."),
    ],
    ids=" ".join,
)
def test_check_and_fix_never_run_the_code_they_read(hostile, args):
    project, markers = hostile
    result = dplint(*args, cwd=project)
    assert result.returncode in (0, 1), result.stderr.decode()[-2000:]
    assert sorted(path.name for path in markers.iterdir()) == []
    if args[0] == "fix" and "--diff" not in args:
        assert "shuffle=True" not in (project / "train.py").read_text()  # it did read and fix them


def test_standard_input_is_never_run(hostile):
    project, markers = hostile
    for args in (("check", "-"), ("fix", "-"), ("check", "--stdin-filename", "setup.py", "-")):
        result = dplint(*args, cwd=project, input=trap(markers, "stdin").encode())
        assert result.returncode in (0, 1), result.stderr.decode()
    assert sorted(path.name for path in markers.iterdir()) == []


def test_the_markers_do_fire_when_the_code_is_run(hostile):
    """The control: the traps are live (importing or running the folder's code leaves markers)."""
    project, markers = hostile
    subprocess.run([sys.executable, "train.py"], cwd=project, capture_output=True, timeout=60)
    subprocess.run([sys.executable, "-c", "import click"], cwd=project, capture_output=True, timeout=60)
    assert {"click.py", "train.py"} <= {path.name for path in markers.iterdir()}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repositorys_git_config_cannot_run_commands(tmp_path):
    """dplint asks git which files are ignored; a cloned repository's `.git/config` can name an
    fsmonitor program that git would start on reading the index. dplint turns it off."""
    project, marker = tmp_path / "project", tmp_path / "fsmonitor-ran"
    project.mkdir()
    (project / "train.py").write_text(MISUSE)

    def git(*args):
        return subprocess.run(["git", *args], cwd=project, capture_output=True, timeout=60)

    git("init", "-q")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    git("config", "core.fsmonitor", f"touch {marker}; false")
    for args in (("check", "--no-cache", "."), ("fix", ".")):
        dplint(*args, cwd=project)
    assert not marker.exists()
    git("status")  # the control: git itself does run it
    assert marker.exists()


def test_configuration_values_are_data(tmp_path):
    """A selector that is Python code is an unknown rule, not something to evaluate."""
    project, marker = tmp_path / "project", tmp_path / "marker"
    project.mkdir()
    (project / "train.py").write_text(MISUSE)
    (project / "dplint.toml").write_text(f"select = [\"__import__('os').system('touch {marker}')\"]\n")
    result = dplint("check", "--no-cache", ".", cwd=project)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("dplint: error: ") and "unknown rule selector" in result.stderr.decode()
    assert not marker.exists()


# --------------------------------------------------------------------- what the code may call
# The static path (dplint/, rules/) reads and writes text. These are the calls that could run
# someone's code or load a native object, and the one place each is allowed.
FORBIDDEN = {
    re.compile(r"(eval|exec|execfile|__import__)"): set(),
    # Compiling to a code object runs nothing: `refused_by_every_python` asks Python's compiler
    # whether it would refuse the text, and drops the code object.
    re.compile(r"compile"): {"source.py"},
    re.compile(r"(runpy|marshal|shelve|code|codeop)(\..*)?"): set(),
    # The per-file budget stops a thread's analysis through the interpreter's own API
    # (PyThreadState_SetAsyncExc); no foreign library is loaded.
    re.compile(r"ctypes(\..*)?"): {"source.py"},
    # The language server's analyses run in its own child process (dplint's code, started by
    # dplint); pickle carries reports over that private pipe, never data from elsewhere.
    re.compile(r"pickle(\..*)?"): {"server.py"},
    re.compile(r"os\.(system|popen|exec\w*|spawn\w*|fork\w*|posix_spawn\w*)"): set(),
    re.compile(r"importlib(\..*)?"): {"registry.py"},  # dplint's own rules package, by name
    # `git check-ignore` (core.fsmonitor off); the language server's own analysis process.
    re.compile(r"subprocess(\..*)?"): {"discovery.py", "server.py"},
    re.compile(r"torch(\..*)?"): set(),  # the static path never imports torch
}


def dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def forbidden_calls(root: Path) -> list[str]:
    found = []
    for module in sorted([*(root / "dplint").glob("*.py"), *(root / "rules").glob("*.py")]):
        tree = ast.parse(module.read_text(), str(module))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Call):
                names.append(dotted(node.func))
            elif isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.extend(f"{node.module}.{alias.name}" for alias in node.names)
            for name in names:
                for pattern, allowed_in in FORBIDDEN.items():
                    if pattern.fullmatch(name) and module.name not in allowed_in:
                        found.append(f"{module.relative_to(root)}:{node.lineno}: {name}")
    return found


def test_the_static_path_calls_nothing_that_runs_code():
    assert forbidden_calls(ROOT) == []


def test_the_static_guard_catches_what_it_looks_for(tmp_path):
    """The control: a module that imports torch and calls eval and os.execv is caught."""
    (tmp_path / "dplint").mkdir()
    (tmp_path / "dplint" / "bad.py").write_text("import torch\nvalue = eval('1')\nimport os\nos.execv('x', [])\n")
    assert forbidden_calls(tmp_path) == ["dplint/bad.py:1: torch", "dplint/bad.py:2: eval", "dplint/bad.py:4: os.execv"]
