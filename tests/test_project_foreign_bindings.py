"""A subclass's walk of `self.x` takes up what a project base class's method leaves there
(`self.resume()` running base.py's `self.net = make_net()`): that binding belongs to the base
file's model, and its value is read in that file's flow, never looked up in the subclass's
(which once raised KeyError in `SemanticModel.binding_at`, an internal error in five rules).

`fixtures/collective-under-rank-guard/project_base_method_rebinds_attribute/` is the shape:
trainer.py imports `make_net` too, so the base's call resolves by name in either file.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES
from dplint.config import Settings
from dplint.project import Project
from dplint.runner import run
from dplint.flow import analysed

PROJECT = FIXTURES / "collective-under-rank-guard" / "project_base_method_rebinds_attribute"
PROJECTS = sorted(p for p in FIXTURES.glob("*/project_*") if (p / "expected.txt").exists())


def test_a_base_method_binding_reached_from_a_subclass_is_no_internal_error():
    report = run([str(PROJECT)], Settings(root=str(PROJECT)), jobs=1)
    assert report.errors == []
    assert report.findings == []


def test_its_value_is_followed_from_the_base_file():
    project = Project((str(PROJECT),))
    path = PROJECT / "trainer.py"
    model = analysed(cst.parse_module(path.read_text()), str(path))
    project.register(model)
    read = next(site.node.func.value for site in model.calls
                if isinstance(site.node.func, cst.Attribute) and site.node.func.attr.value == "train")
    values = model.flow.values_at(read)
    made = [(os.path.basename(v.model.path), cst.Module([]).code_for_node(v.expr)) for v in values
            if isinstance(v.expr, cst.Call)]
    assert ("helpers.py", "nn.Linear(4, 2)") in made  # base.py's make_net() followed into helpers.py


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_project_fixture_raises_an_internal_error(folder: Path):
    assert run([str(folder)], Settings(root=str(folder)), jobs=1).errors == []
