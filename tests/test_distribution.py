"""The sdist and the wheel carry the package, its data and the license, and nothing else
(no tests, fixtures, stray wheels or editor leftovers); the repository tracks no build artefact."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import ROOT

# Files a source distribution carries besides the package: its metadata, and what the
# metadata points to (README, license).
SDIST_METADATA = {"PKG-INFO", "pyproject.toml", "setup.cfg", "README.md", "LICENSE", "MANIFEST.in"}
PACKAGE_FOLDERS = ("dplint/", "rules/", "runtime_check/")
ARTEFACTS = (".whl", ".orig", ".rej", ".pyc", ".tar.gz", ".egg-info")


def _tracked_files() -> list[str]:
    completed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in completed.stdout.decode().split("\0") if name]


def test_repository_tracks_no_build_artefact():
    assert [name for name in _tracked_files() if name.endswith(ARTEFACTS) or "/build/" in name] == []


@pytest.fixture(scope="module")
def distributions(tmp_path_factory):
    """Build both from a copy of the tracked files (so untracked leftovers cannot leak in),
    offline: no build isolation, the installed setuptools does the work."""
    source = tmp_path_factory.mktemp("source")
    for name in _tracked_files():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    completed = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def test_wheel_holds_only_the_package_and_license(distributions):
    _, wheel = distributions
    names = zipfile.ZipFile(wheel).namelist()
    info = [name for name in names if ".dist-info/" in name]
    package = [name for name in names if name not in info]
    assert package and all(name.startswith("dplint/") and name.endswith(".py") for name in package), package
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in info), info
    assert {name.split("/", 1)[1] for name in info} == {
        "METADATA", "WHEEL", "entry_points.txt", "top_level.txt", "RECORD", "licenses/LICENSE",
    }
    for module in ("dplint/cli.py", "dplint/notebook.py", "dplint/server.py", "dplint/rules/__init__.py",
                   "dplint/runtime_check/probes/__init__.py"):
        assert module in package


def test_sdist_holds_only_the_package_metadata_and_license(distributions):
    sdist, _ = distributions
    with tarfile.open(sdist) as archive:
        names = [member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile()]
    unexpected = [
        name for name in names
        if name not in SDIST_METADATA and not name.startswith("dplint.egg-info/")
        and not (name.startswith(PACKAGE_FOLDERS) and not name.endswith(ARTEFACTS))
    ]
    assert unexpected == []
    assert "LICENSE" in names and "dplint/cli.py" in names
    assert not any(name.startswith(("tests/", "fixtures/")) for name in names)


def test_base_install_needs_no_pygls():
    """Without the lsp extra, `dplint check` works and `dplint server` says what to install."""
    code = (
        "import sys\n"
        "sys.modules['pygls'] = None  # as if not installed\n"
        "from dplint.cli import main\n"
        "try:\n"
        "    main(['server'])\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.stdout.strip() == "exit 2"
    assert "pip install '.[lsp]'" in completed.stderr
