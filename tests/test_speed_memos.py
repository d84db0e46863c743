"""The per-run and per-file memos added for speed answer exactly what the work they replace
answers: the helpers' call index, a call argument's state-dict pre-test, the text-only
`mentions`, and each project file's import list."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from dplint import checkpoints
from dplint.project import Project
from dplint.flow import analysed

HELPERS = """\
import torch

def save_all(model, path):
    state = {"model": model.state_dict()}
    torch.save(state, path)
    keep = lambda m: torch.save(m, path)
    return keep

class Saver:
    def dump(self, weights, step):
        torch.save({"weights": weights, "step": step}, "w.pt")
        helper(weights.state_dict(), step)

print(len([1, 2]))
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_calls_by_enclosing_def_are_the_file_calls_each_def_holds():
    model = analysed(cst.parse_module(HELPERS), "helpers.py")
    defs = {checkpoints.enclosing_def(model, site.node) for site in model.calls}
    assert len(defs) >= 4  # module level (None), two functions, a lambda
    for function in defs:
        expected = [site for site in model.calls if checkpoints.enclosing_def(model, site.node) is function]
        assert checkpoints._calls_in(model, function) == expected
    assert checkpoints._calls_in(model, cst.parse_module("def f(): pass").body[0]) == []


def test_the_state_dict_pre_test_of_an_argument_is_the_uncached_answer():
    model = analysed(cst.parse_module(HELPERS), "helpers.py")
    answers = []
    for site in model.calls:
        for arg in site.node.args:
            expected = checkpoints._may_hold_state_dict(model, arg.value, site.node, 2)
            assert checkpoints._may_hold_state_dict_at_call(model, arg.value, site.node) == expected
            assert checkpoints._may_hold_state_dict_at_call(model, arg.value, site.node) == expected  # memoised
            answers.append(expected)
    assert True in answers and False in answers


def test_mentions_is_memoised_per_importer_folder_with_the_same_answers(tmp_path):
    write(tmp_path, {
        "a/helpers.py": "import torch\ndef wrap(net):\n    return torch.nn.DataParallel(net)\ndef plain(x):\n    return x\n",
        "b/helpers.py": "def wrap(net):\n    return net\n",
        "a/train.py": "from helpers import wrap, plain\n",
        "b/train.py": "from helpers import wrap\n",
    })
    project = Project((str(tmp_path),))
    a = analysed(cst.parse_module("from helpers import wrap, plain\n"), str(tmp_path / "a" / "train.py"))
    b = analysed(cst.parse_module("from helpers import wrap\n"), str(tmp_path / "b" / "train.py"))
    words = ("DataParallel",)
    for _ in range(2):  # the second round is answered from the memo
        assert project.mentions("helpers.wrap", a, words) is True
        assert project.mentions("helpers.plain", a, words) is False
        assert project.mentions("helpers.wrap", b, words) is False  # another folder, another file
        assert project.mentions("helpers.wrap", a, ("torch.save",)) is False


def test_a_file_import_list_is_its_imported_definitions_once_each(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/models.py": "def build():\n    pass\nclass Net:\n    pass\n",
        "main.py": "from pkg.models import build, Net\nfrom pkg.models import build\nimport pkg.models as m\nm.build()\n",
    })
    project = Project((str(tmp_path),))
    path = str(tmp_path / "main.py")
    text = (tmp_path / "main.py").read_text()
    expected = list(dict.fromkeys(project.imported_definitions(path, text)))
    assert len(expected) == 2 and len(list(project.imported_definitions(path, text))) > 2
    assert project._imports_of_file(path, text) == expected
    assert project._imports_of_file(path, text + "\n") == expected  # a new text is read again
