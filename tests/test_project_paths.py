"""Import resolution through `sys.path` edits, and which files can call into a module."""
from __future__ import annotations

import textwrap
from pathlib import Path

from dplint.project import Project, path_edit_folders


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_folder_built_from_the_files_own_folder_is_read(tmp_path):
    write(tmp_path, {
        "tools/_init_paths.py": """
            import os.path as osp
            import sys
            this_dir = osp.dirname(__file__)
            lib_path = osp.join(this_dir, "..", "lib")
            sys.path.insert(0, lib_path)
        """,
        "lib/models/__init__.py": "",
    })
    script = tmp_path / "tools" / "_init_paths.py"
    assert path_edit_folders(str(script), script.read_text()) == [str(tmp_path / "lib")]


def test_nested_dirname_and_missing_folders(tmp_path):
    write(tmp_path, {"src/pkg/__init__.py": "", "a/b/run.py": ""})
    text = 'import os, sys\nsys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "src"))\n'
    text += 'sys.path.append(os.path.join(os.path.dirname(__file__), "not_there"))\n'
    assert path_edit_folders(str(tmp_path / "a" / "b" / "run.py"), text) == [str(tmp_path / "src")]


def test_an_import_resolves_through_a_sibling_that_edits_sys_path(tmp_path):
    write(tmp_path, {
        "tools/_init_paths.py": 'import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))\n',
        "tools/train.py": "import _init_paths\nfrom dataset import build\n",
        "lib/dataset/__init__.py": "def build():\n    return 1\n",
    })
    project = Project((str(tmp_path),))
    files = project._files_for_module("dataset", str(tmp_path / "tools" / "train.py"))
    assert files == (str(tmp_path / "lib" / "dataset" / "__init__.py"),)


def test_a_file_importing_another_module_of_the_same_name_cannot_call_into_this_one(tmp_path):
    write(tmp_path, {
        "setup.py": "",
        "first/utils/data.py": "def get_loader(ds):\n    return ds\n",
        "first/main.py": "from utils.data import get_loader\nget_loader(1)\n",
        "second/utils/data.py": "def get_loader(ds):\n    return ds\n",
        "second/main.py": "from utils.data import get_loader\nget_loader(2)\n",
        "third/main.py": "from .helpers import get_loader\nget_loader(3)\n",
    })
    project = Project((str(tmp_path),))
    own = str(tmp_path / "first" / "utils" / "data.py")
    assert project._files_naming(own, ("get_loader",)) == [str(tmp_path / "first" / "main.py")]
