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
from dplint.reports import FileReport
from dplint.runner import run
from dplint.semantic import SemanticModel
from dplint.flow import analysed

PROJECTS = sorted(p for p in FIXTURES.glob("*/project_*") if (p / "expected.txt").exists())


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def model_of(path: Path, project: Project) -> SemanticModel:
    model = analysed(cst.parse_module(path.read_text()), str(path))
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


def test_a_module_is_no_package_so_a_farther_folder_holds_the_import(tmp_path):
    # `pkg/pkg.py` is nearer to `pkg/examples/run.py` than the root, but `pkg.examples.utils`
    # cannot be found in it: the import, which runs, found the package at the root.
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/pkg.py": "class Optimizer:\n    pass\n",
        "pkg/examples/__init__.py": "",
        "pkg/examples/utils.py": "def build():\n    pass\n",
        "pkg/examples/run.py": "from pkg.examples.utils import build\nfrom pkg.pkg import Optimizer\n",
    })
    project = Project((str(tmp_path),))
    run_py = tmp_path / "pkg/examples/run.py"
    imported = dict((name, Path(path)) for path, name in project.imported_definitions(str(run_py), run_py.read_text()))
    assert imported == {"build": tmp_path / "pkg/examples/utils.py", "Optimizer": tmp_path / "pkg/pkg.py"}


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


def test_a_name_that_is_both_a_submodule_and_its_packages_function(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/train/__init__.py": "from .train_loop import train_loop\n",
        "pkg/train/train_loop.py": "def train_loop(net, loader):\n    pass\n",
        "run.py": "import pkg\n",
    })
    project = Project((str(tmp_path),))
    run = model_of(tmp_path / "run.py", project)
    assert resolved_name(project.resolve("pkg.train.train_loop", run)) == ("train_loop.py", "train_loop")


# ------------------------------------------------------------------------- callers
def function_of(model: SemanticModel, name: str, in_class: str = ""):
    if in_class:
        return next(s for s in model.classes[in_class].body.body if isinstance(s, cst.FunctionDef) and s.name.value == name)
    return model.functions[name][-1]


def caller_lines(found) -> list[tuple[str, int, bool]]:
    return sorted((os.path.basename(m.path), m.position(call)[0].line, bound) for m, call, bound in found)


def test_callers_in_other_files_by_every_import_form(tmp_path):
    write(tmp_path, {
        "pyproject.toml": "",
        "engine.py": "def train_one_epoch(net, loader):\n    pass\n",
        "main.py": "from engine import train_one_epoch\ntrain_one_epoch(net, loader)\n",
        "tools/finetune.py": "import engine\n\ndef run():\n    engine.train_one_epoch(net, small_loader)\n",
        "unrelated.py": "def train_one_epoch(a, b):\n    pass\ntrain_one_epoch(1, 2)\n",
    })
    project = Project((str(tmp_path),))
    engine = model_of(tmp_path / "engine.py", project)
    found = project.callers(engine, function_of(engine, "train_one_epoch"))
    assert caller_lines(found) == [("finetune.py", 4, False), ("main.py", 2, False)]
    assert engine.flow.all_call_sites(function_of(engine, "train_one_epoch")) == found


def test_callers_of_a_constructor_and_of_a_method(tmp_path):
    write(tmp_path, {
        "trainer.py": (
            "class Trainer:\n"
            "    def __init__(self, net, loader):\n        self.loader = loader\n"
            "    def fit(self, epochs):\n        pass\n"
        ),
        "main.py": "from trainer import Trainer\ntrainer = Trainer(net, loader)\ntrainer.fit(10)\n",
    })
    project = Project((str(tmp_path),))
    trainer = model_of(tmp_path / "trainer.py", project)
    assert caller_lines(project.callers(trainer, function_of(trainer, "__init__", "Trainer"))) == [("main.py", 2, True)]
    assert caller_lines(project.callers(trainer, function_of(trainer, "fit", "Trainer"))) == [("main.py", 3, True)]


def test_callers_are_unknown_when_another_file_passes_the_function_or_subclasses(tmp_path):
    write(tmp_path, {
        "worker.py": "def main_worker(rank, loader):\n    pass\nclass Runner:\n    def __init__(self, loader):\n        pass\n",
        "launch.py": "import torch.multiprocessing as mp\nfrom worker import main_worker\nmp.spawn(main_worker, args=(loader,))\n",
        "custom.py": "from worker import Runner\nclass FastRunner(Runner):\n    pass\nRunner(loader)\n",
    })
    project = Project((str(tmp_path),))
    worker = model_of(tmp_path / "worker.py", project)
    assert project.callers(worker, function_of(worker, "main_worker")) is None
    assert project.callers(worker, function_of(worker, "__init__", "Runner")) is None


def test_a_parameter_filled_by_the_only_caller_in_another_file(tmp_path):
    write(tmp_path, {
        "engine.py": "def evaluate(net):\n    return net\n",
        "main.py": (
            "import torch.nn as nn\nfrom engine import evaluate\n"
            "net = nn.DataParallel(Net())\nevaluate(net)\n"
        ),
    })
    project = Project((str(tmp_path),))
    engine = model_of(tmp_path / "engine.py", project)
    returned = engine.flow.own_returns(function_of(engine, "evaluate"))[0].value
    (value,) = engine.flow.values_at(returned)
    assert os.path.basename(value.model.path) == "main.py"
    assert value.model.code(value.expr) == "nn.DataParallel(Net())"
    assert engine.flow.wrapped_on_every_path(returned)


def test_callers_that_differ_leave_the_parameter_unknown(tmp_path):
    write(tmp_path, {
        "engine.py": "def evaluate(net):\n    return net\n",
        "a.py": "import torch.nn as nn\nfrom engine import evaluate\nevaluate(nn.DataParallel(Net()))\n",
        "b.py": "from engine import evaluate\nevaluate(Net())\n",
    })
    project = Project((str(tmp_path),))
    engine = model_of(tmp_path / "engine.py", project)
    returned = engine.flow.own_returns(function_of(engine, "evaluate"))[0].value
    assert [v.known for v in engine.flow.values_at(returned)] == [False]


def test_callers_alike_in_other_files_give_their_values(tmp_path):
    # Two scripts both hand the trainer a wrapper on some path: the parameter holds their
    # values, and a wrapper is among them.
    write(tmp_path, {
        "engine.py": "def evaluate(net):\n    return net\n",
        "a.py": "import torch.nn as nn\nfrom engine import evaluate\nevaluate(nn.DataParallel(Net()))\n",
        "b.py": "import torch.nn as nn\nfrom engine import evaluate\nnet = Net()\nif gpus > 1:\n    net = nn.DataParallel(net)\nevaluate(net)\n",
    })
    project = Project((str(tmp_path),))
    engine = model_of(tmp_path / "engine.py", project)
    returned = engine.flow.own_returns(function_of(engine, "evaluate"))[0].value
    values = engine.flow.values_at(returned)
    assert len(values) == 3 and all(v.known for v in values)
    assert engine.flow.wrapped_on_some_path(returned) is not None and not engine.flow.wrapped_on_every_path(returned)


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
    project.resolve("helpers.f", analysed(cst.parse_module("from helpers import f\n"), str(train)))
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
