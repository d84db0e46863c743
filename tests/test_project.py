"""The project layer: imports resolved to the project's own files, the way Python finds them,
findings placed in the file to fix, and cached results that notice an imported file changed.

Multi-file fixtures live in `fixtures/<slug>/project_*/` with an `expected.txt` of
`relative/path.py:line:column: CODE` lines; each folder is checked as a project
(`dplint check .` in it), so findings that need another file of it are counted.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES
from dplint.cache import Cache
from dplint.config import Settings
from dplint.project import Project
from dplint.runner import FileReport, run
from dplint.semantic import SemanticModel

PROJECTS = sorted(p for p in FIXTURES.glob("*/project_*") if (p / "expected.txt").exists())


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def model_of(path: Path, project: Project) -> SemanticModel:
    model = SemanticModel(cst.parse_module(path.read_text()), str(path))
    project.register(model)
    return model


def resolved_name(found) -> tuple[str, str]:
    other, node = found
    return os.path.basename(other.path), node.name.value


# ------------------------------------------------------------------------ resolution
def test_a_sibling_module_resolves_to_its_function(tmp_path):
    write(tmp_path, {
        "samplers.py": "def pick_sampler(ds):\n    return ds\n",
        "train.py": "from samplers import pick_sampler\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert resolved_name(project.resolve("samplers.pick_sampler", train)) == ("samplers.py", "pick_sampler")


def test_relative_imports_resolve_inside_the_package(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/data.py": "def build_loader():\n    pass\n",
        "pkg/engine/__init__.py": "",
        "pkg/engine/loop.py": "from ..data import build_loader\nfrom . import helpers\n",
        "pkg/engine/helpers.py": "class Saver:\n    def dump(self):\n        pass\n",
    })
    project = Project((str(tmp_path),))
    loop = model_of(tmp_path / "pkg/engine/loop.py", project)
    assert resolved_name(project.resolve("..data.build_loader", loop)) == ("data.py", "build_loader")
    assert resolved_name(project.resolve(".helpers.Saver", loop)) == ("helpers.py", "Saver")
    assert resolved_name(project.resolve(".helpers.Saver.dump", loop)) == ("helpers.py", "dump")


def test_a_package_re_export_is_followed(tmp_path):
    write(tmp_path, {
        "utils/__init__.py": "from .checkpoint import save_checkpoint\n",
        "utils/checkpoint.py": "def save_checkpoint(state, path):\n    pass\n",
        "tools/train.py": "from utils import save_checkpoint\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "tools/train.py", project)  # found in the folder above, the root
    assert resolved_name(project.resolve("utils.save_checkpoint", train)) == ("checkpoint.py", "save_checkpoint")


def test_the_importers_own_folder_wins_like_sys_path(tmp_path):
    write(tmp_path, {
        "common.py": "def build():\n    pass\n",
        "exp/common.py": "def build():\n    return 1\n",
        "exp/train.py": "from common import build\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "exp/train.py", project)
    other, _ = project.resolve("common.build", train)
    assert Path(other.path) == tmp_path / "exp/common.py"


def test_names_outside_the_project_resolve_to_nothing(tmp_path):
    write(tmp_path, {"train.py": "import torch\nfrom lightning import Trainer\n"})
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert project.resolve("torch.utils.data.DataLoader", train) is None
    assert project.resolve("lightning.Trainer", train) is None
    assert project.resolve("", train) is None


def test_resolution_stops_at_the_project_root(tmp_path):
    write(tmp_path, {
        "outside.py": "def helper():\n    pass\n",
        "repo/pyproject.toml": "",
        "repo/src/train.py": "from outside import helper\n",
    })
    project = Project()  # started on a file: only the root markers bound the search
    train = model_of(tmp_path / "repo/src/train.py", project)
    assert project.resolve("outside.helper", train) is None


def test_import_cycles_and_broken_files_end(tmp_path):
    write(tmp_path, {
        "a.py": "from b import thing\n",
        "b.py": "from a import thing\n",
        "broken.py": "def f(:\n",
        "train.py": "from a import thing\nfrom broken import f\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert project.resolve("a.thing", train) is None
    assert project.resolve("broken.f", train) is None


def test_the_linted_file_resolves_to_its_own_model(tmp_path):
    write(tmp_path, {
        "train.py": "def main():\n    pass\n",
        "other.py": "from train import main\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    other = project.model_for(str(tmp_path / "other.py"))
    found, _ = project.resolve("train.main", other)
    assert found is train


def test_dependencies_name_the_files_read_for_this_file(tmp_path):
    write(tmp_path, {
        "helpers.py": "def f():\n    pass\n",
        "train.py": "from helpers import f\n",
    })
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert project.dependencies(train.path) == {}
    project.resolve("helpers.f", train)
    assert list(project.dependencies(train.path)) == [str(tmp_path / "helpers.py")]
    model_of(tmp_path / "helpers.py", project)  # the next linted file starts a new record
    assert project.dependencies(str(tmp_path / "helpers.py")) == {}


# ----------------------------------------------------------------------------- cache
def test_a_cached_result_is_dropped_when_a_dependency_changes(tmp_path):
    helper = tmp_path / "helpers.py"
    helper.write_text("def f():\n    pass\n")
    train = tmp_path / "train.py"
    train.write_text("x = 1\n")
    project = Project((str(tmp_path),))
    model_of(train, project)
    project.resolve("helpers.f", SemanticModel(cst.parse_module("from helpers import f\n"), str(train)))
    settings = Settings(root=str(tmp_path))
    cache = Cache(str(tmp_path / "cache"), settings)
    cache.put(str(train), "hash", "rules", FileReport(str(train), dependencies=project.dependencies(str(train))))
    assert cache.get(str(train), "hash", "rules") is not None
    helper.write_text("def f():\n    return 2\n")
    assert cache.get(str(train), "hash", "rules") is None


# ------------------------------------------------------------------- project fixtures
def expected_lines(folder: Path) -> list[str]:
    lines = (folder / "expected.txt").read_text().splitlines()
    return sorted(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def findings_as_lines(folder: Path, jobs: int = 1) -> list[str]:
    report = run([str(folder)], Settings(root=str(folder)), jobs=jobs)
    return sorted(
        f"{Path(f.filename).resolve().relative_to(folder.resolve()).as_posix()}:{f.location.row}:{f.location.column}: {f.code}"
        for f in report.findings
    )


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_project_fixture_findings(folder: Path):
    assert findings_as_lines(folder) == expected_lines(folder)


@pytest.mark.parametrize("folder", PROJECTS[:1], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_project_fixture_findings_through_a_process_pool(folder: Path, monkeypatch):
    monkeypatch.setattr("dplint.runner.PARALLEL_THRESHOLD", 1)
    assert findings_as_lines(folder, jobs=2) == expected_lines(folder)


def test_every_project_fixture_is_checked_as_a_project():
    for folder in FIXTURES.glob("*/project_*"):
        assert (folder / "expected.txt").exists(), f"{folder} has no expected.txt"
        assert json.dumps(expected_lines(folder))  # parses
