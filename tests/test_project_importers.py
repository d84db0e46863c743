"""The reverse closure: a file is read with the blocks of the files that import it, so a
helper that never names a wrapper is linted when a caller hands it one, and its cached
result is recomputed when that caller changes."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from conftest import FIXTURES
from dplint.config import Settings
from dplint.project import Project
from dplint.runner import run

PROJECT = FIXTURES / "scalar-gather" / "project_wrapper_from_importer"
BARE = FIXTURES / "scalar-gather" / "project_importer_hands_over_bare_model"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_an_importer_gives_the_statements_that_pass_values_to_what_it_imports(tmp_path):
    write(tmp_path, {
        "helpers.py": "def store(net, path):\n    torch.save(net.module.state_dict(), path)\n",
        "train.py": """\
            from helpers import store
            import torch

            def unrelated():
                return torch.nn.DataParallel(torch.nn.Linear(2, 2))

            def fit(net, epochs):
                viewer = torch.nn.DataParallel(net)
                store(net,
                      "w.pt")

            def main():
                net = torch.nn.Linear(2, 2)
                fit(net, 3)
            """,
    })
    pieces = Project((str(tmp_path),)).importer_pieces(str(tmp_path / "helpers.py"))
    assert list(pieces) == [str(tmp_path / "train.py")]
    piece = pieces[str(tmp_path / "train.py")]
    # the call (to its closing bracket), the caller of its function, what that caller passes,
    # then the import lines naming what those use
    assert piece.split("\n") == ["    store(net,", '          "w.pt")', "    fit(net, 3)", "    net = torch.nn.Linear(2, 2)",
                                  "from helpers import store", "import torch", ""]


def test_an_importer_piece_keeps_the_import_that_names_an_aliased_wrapper(tmp_path):
    write(tmp_path, {
        "engine.py": "def run(model, x):\n    model.module(x).sum().backward()\n",
        "main.py": """\
            import os
            from torch.nn.parallel import DistributedDataParallel as DDP
            from engine import run

            def main(net):
                run(DDP(net), 1)
            """,
    })
    piece = Project((str(tmp_path),)).importer_pieces(str(tmp_path / "engine.py"))[str(tmp_path / "main.py")]
    assert "DistributedDataParallel as DDP" in piece and "import os" not in piece


def test_a_package_re_export_leads_to_the_script_importing_the_package(tmp_path):
    write(tmp_path, {
        "tools/__init__.py": "from .steps import run_epoch\n",
        "tools/steps.py": "def run_epoch(model):\n    model(1).backward()\n",
        "main.py": "import torch\nfrom tools import run_epoch\nnet = torch.nn.DataParallel(Net())\nrun_epoch(net)\n",
        "other.py": "from tools import something_else\nprint(torch.nn.DataParallel)\n",
    })
    project = Project((str(tmp_path),))
    pieces = project.importer_pieces(str(tmp_path / "tools/steps.py"))
    assert str(tmp_path / "main.py") in pieces and str(tmp_path / "other.py") not in pieces
    assert "DataParallel" in pieces[str(tmp_path / "main.py")]
    closure = project.import_closure(str(tmp_path / "tools/steps.py"), (tmp_path / "tools/steps.py").read_text())
    assert "DataParallel" in closure[str(tmp_path / "main.py")]


def test_a_file_nobody_imports_has_no_importer_pieces(tmp_path):
    write(tmp_path, {"alone.py": "x = 1\n", "main.py": "import os\n"})
    assert Project((str(tmp_path),)).importer_pieces(str(tmp_path / "alone.py")) == {}


def findings(folder: Path, cache: Path) -> list[tuple[str, int, str]]:
    report = run([str(folder)], Settings(root=str(folder)), jobs=1, cache_dir=str(cache))
    return sorted((os.path.relpath(f.filename, folder), f.location.row, f.code) for f in report.findings)


def test_editing_the_importer_rechecks_the_helper_on_a_warm_run(tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(BARE, folder)
    (folder / "expected.txt").unlink()
    cache = tmp_path / "cache"
    assert findings(folder, cache) == []
    assert findings(folder, cache) == []  # warm
    shutil.copy(PROJECT / "fit.py", folder / "fit.py")  # now the caller hands over a DataParallel
    assert findings(folder, cache) == [("loops/epoch.py", 7, "DPL012")]
    shutil.copy(BARE / "fit.py", folder / "fit.py")
    assert findings(folder, cache) == []



def test_a_run_on_single_files_finds_the_same_importers_as_a_folder_run(tmp_path):
    """Without a folder to index, only the files naming a module are read for its importers:
    the same pairs, in the same order, as the whole-project index gives."""
    write(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "from .engine import fit\nfrom . import data\n",
        "pkg/engine.py": "from .data import make_loader\ndef fit(m):\n    return make_loader()\n",
        "pkg/data.py": "def make_loader():\n    return None\n",
        "train.py": "import pkg.engine as eng\nfrom pkg import fit, data\nfrom pkg.data import *\neng.fit(1)\n",
        "tools/run.py": "from pkg.engine import fit\nimport data  # another module of that name, not the project's\n",
        "unrelated.py": "import os\nengine = None\n",
    })
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    folder_run, single_files = Project((str(tmp_path),)), Project(())
    for own in files:
        for target in (own, os.path.join(os.path.dirname(own), "__init__.py")):
            assert single_files._importers_of(own, target) == folder_run._importers_of(own, target), (own, target)
    engine = str(tmp_path / "pkg" / "engine.py")
    assert {os.path.basename(path) for path, _ in single_files._importers_of(engine, engine)} == {"__init__.py", "train.py", "run.py"}


def test_the_forward_closure_reads_multi_line_re_exports_and_the_imports_a_definition_uses(tmp_path):
    # `from .parallel import (\n a, b\n)` is one statement; of a package `__init__` that
    # re-exports many names, only the one imported goes on; the definition comes with the
    # import that gives `DDP` its meaning.
    write(tmp_path, {
        "pkg/__init__.py": ("from .utils import (\n" + "".join(f"    helper_{i},\n" for i in range(60)) + ")\n"
                            "from .parallel import (\n    build_loader, build_model\n)\n"),
        "pkg/utils.py": "".join(f"def helper_{i}():\n    return {i}\n" for i in range(60)),
        "pkg/parallel/__init__.py": "from .model import build_model\nfrom .loader import build_loader\n",
        "pkg/parallel/model.py": ("from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
                                  "def build_model(model, rank):\n    return DDP(model, device_ids=[rank])\n"),
        "pkg/parallel/loader.py": "def build_loader(ds):\n    return ds\n",
        "main.py": "from pkg import helper_0, helper_1, build_model\nnet = build_model(Net(), 0)\n",
    })
    main = tmp_path / "main.py"
    closure = Project((str(tmp_path),)).import_closure(str(main), main.read_text(), importers=False)
    model_file = str(tmp_path / "pkg/parallel/model.py")
    assert model_file in closure and "DistributedDataParallel as DDP" in closure[model_file]
    assert str(tmp_path / "pkg/parallel/loader.py") not in closure
