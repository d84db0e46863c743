"""Names bound by `from module import *`, and local aliases of a class (`Exp = Experiment`): a project module's star import binds what Python
would (its literal `__all__`, else its public names), resolved to that module's definitions;
a star import of a module outside the project cannot be read and names nothing (an explicit
import before it keeps resolving).

`fixtures/save-wrapped-state-dict/project_star_imported_save_helper/` is the project shape.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import libcst as cst

from dplint.project import Project
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def model_of(path: Path, project: Project) -> SemanticModel:
    model = analysed(cst.parse_module(path.read_text()), str(path))
    project.register(model)
    return model


def callee_of(model: SemanticModel, name: str):
    call = next(site.node for site in model.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == name)
    found = model.flow.callee(call)
    return None if found is None else (os.path.basename(found.model.path), found.node.name.value)


HELPERS = {
    "tools.py": """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def keep(state, path):
            torch.save(state, path)

        def _hidden(state):
            return state

        class Saver:
            pass
    """,
    "listed.py": """\
        __all__ = ("announce",)

        def announce(text):
            print(text)

        def keep(state, path):
            pass
    """,
}


def test_a_project_star_import_binds_the_modules_public_names(tmp_path):
    write(tmp_path, {**HELPERS, "train.py": "from tools import *\nkeep({}, 'a.pt')\n_hidden({})\nSaver()\n"})
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert callee_of(train, "keep") == ("tools.py", "keep")
    assert callee_of(train, "Saver") == ("tools.py", "Saver")
    assert callee_of(train, "_hidden") is None  # a leading underscore: not bound by `*`


def test_a_literal_dunder_all_decides_what_is_bound(tmp_path):
    write(tmp_path, {**HELPERS, "train.py": "from tools import *\nfrom listed import *\nkeep({}, 'a.pt')\nannounce('x')\n"})
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert callee_of(train, "announce") == ("listed.py", "announce")
    assert callee_of(train, "keep") == ("tools.py", "keep")  # listed.py defines one too, but does not export it


def test_the_last_star_import_that_exports_a_name_wins(tmp_path):
    write(tmp_path, {**HELPERS, "other.py": "def keep(state, path):\n    pass\n",
                     "train.py": "from tools import *\nfrom other import *\nkeep({}, 'a.pt')\n"})
    project = Project((str(tmp_path),))
    assert callee_of(model_of(tmp_path / "train.py", project), "keep") == ("other.py", "keep")


def test_a_foreign_star_import_neither_names_nor_hides_anything(tmp_path):
    write(tmp_path, {**HELPERS, "train.py": "from tools import keep\nfrom apex.fp16_utils import *\nkeep({}, 'a.pt')\nnetwork_to_half(1)\n"})
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert callee_of(train, "keep") == ("tools.py", "keep")
    assert callee_of(train, "network_to_half") is None
    assert project.star_imported("network_to_half", train) is None


def test_a_name_the_file_binds_itself_is_not_taken_from_a_star_import(tmp_path):
    write(tmp_path, {**HELPERS, "train.py": "from tools import *\ndef keep(state, path):\n    pass\nkeep({}, 'a.pt')\n"})
    project = Project((str(tmp_path),))
    train = model_of(tmp_path / "train.py", project)
    assert callee_of(train, "keep") == ("train.py", "keep")
    assert project.star_imported("keep", train) is None


def test_relative_and_package_star_imports(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "from .tools import *\n",
        "pkg/tools.py": HELPERS["tools.py"],
        "pkg/run.py": "from . import tools\nfrom .tools import *\nkeep({}, 'a.pt')\n",
        "main.py": "from pkg import *\nkeep({}, 'b.pt')\n",
    })
    project = Project((str(tmp_path),))
    assert callee_of(model_of(tmp_path / "pkg" / "run.py", project), "keep") == ("tools.py", "keep")
    assert callee_of(model_of(tmp_path / "main.py", project), "keep") == ("tools.py", "keep")


# ------------------------------------------------------------------ local class aliases
def test_a_local_alias_of_a_class_is_called_as_the_class(tmp_path):
    write(tmp_path, {**HELPERS, "run.py": "from tools import Saver\nMaker = Saver\nmade = Maker()\n"})
    project = Project((str(tmp_path),))
    assert callee_of(model_of(tmp_path / "run.py", project), "Maker") == ("tools.py", "Saver")


def test_an_alias_chosen_down_an_if_chain_has_one_callee_per_arm(tmp_path):
    write(tmp_path, {**HELPERS, "run.py": """\
        import sys
        import tools
        from listed import announce
        if sys.argv[1] == "a":
            Maker = tools.Saver
        else:
            Maker = announce
        Maker()
    """})
    project = Project((str(tmp_path),))
    run = model_of(tmp_path / "run.py", project)
    call = next(site.node for site in run.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == "Maker")
    assert run.flow.callee(call) is None  # not one definition
    assert sorted((os.path.basename(c.model.path), c.node.name.value) for c in run.flow.callees(call)) == [
        ("listed.py", "announce"), ("tools.py", "Saver")]


def test_an_alias_that_may_hold_anything_else_has_no_callee(tmp_path):
    write(tmp_path, {**HELPERS, "run.py": "import sys\nfrom tools import Saver\nMaker = Saver\nif sys.argv:\n    Maker = sys.argv[0]\nMaker()\n"})
    project = Project((str(tmp_path),))
    run = model_of(tmp_path / "run.py", project)
    call = next(site.node for site in run.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == "Maker")
    assert run.flow.callee(call) is None and run.flow.callees(call) == []


def test_the_callers_of_a_constructor_include_the_calls_of_its_aliases(tmp_path):
    write(tmp_path, {**HELPERS, "run.py": "from tools import Saver\nMaker = Saver\nMaker()\nMaker()\n"})
    project = Project((str(tmp_path),))
    assert len(project._find_callers(str(tmp_path / "tools.py"), ("Saver", "__init__"))) == 2
    write(tmp_path, {"serve.py": "from tools import Saver\nMaker = Saver\nregistry = {'s': Maker}\n"})
    assert Project((str(tmp_path),))._find_callers(str(tmp_path / "tools.py"), ("Saver", "__init__")) is None
