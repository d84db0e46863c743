"""Wrappers recognised the same way by every rule (issue 28, "Facts, once"): one recogniser,
`dplint.wrappers.wrapper_kind` (from `dplint.wrapper_classes`), asked by the flow model and by
every rule. A call builds a wrapper when its class is torch's, a package's (apex, mmcv,
mmengine, PyG), or a project class derived from one at any depth, in this file or another;
never because of the class's name."""

from __future__ import annotations

import re
import textwrap

import libcst as cst
import pytest

from conftest import lint
from dplint.project import Project
from dplint.registry import all_rules
from dplint.semantic import SemanticModel
from dplint.wrappers import wrapper_kind, wrapping_built_by
from dplint.flow import analysed

# The same classes under other names: a project subclass two levels below torch's, or a
# package's wrapper. The header has the same length for every variant, so lines compare.
PROJECT_SUBCLASSES = (
    "import torch.nn as _torch_nn\n"
    "class _ProjectParallelBase(_torch_nn.DataParallel):\n    pass\n"
    "class ProjectDP(_ProjectParallelBase):\n    pass\n"
    "class _ProjectDistributedBase(_torch_nn.parallel.DistributedDataParallel):\n    pass\n"
    "class ProjectDDP(_ProjectDistributedBase):\n    pass\n"
)
PACKAGE_WRAPPERS = (
    "from mmcv.parallel import MMDataParallel as ProjectDP\n"
    "from apex.parallel import DistributedDataParallel as ProjectDDP\n"
)


def _swapped(code: str) -> str:
    """Each construction of torch's wrappers replaced by `ProjectDP(` / `ProjectDDP(`."""
    code = re.sub(r"\b(?:torch\.)?(?:nn\.)?DataParallel\(", "ProjectDP(", code)
    return re.sub(r"\b(?:torch\.nn\.parallel\.|nn\.parallel\.)?(?:DistributedDataParallel|DDP)\(", "ProjectDDP(", code)


EXAMPLES = [
    pytest.param(rule.code, kind, example, id=f"{rule.code}-{kind}-{index}")
    for rule in all_rules()
    for kind, examples in (("invalid", [e.code for e in getattr(rule, "INVALID", ())]), ("valid", list(getattr(rule, "VALID", ()))))
    for index, example in enumerate(examples)
    if isinstance(example, str) and "__future__" not in example and ("DataParallel(" in example or "DDP(" in example)
    and not re.search(r"from (?!torch)\S+ import [^\n]*DataParallel", example)  # another library's class
]


def _found(code: str) -> list[tuple[int, str]]:
    return sorted((f.location.row, f.code) for f in lint(code))


@pytest.mark.parametrize("header", [PROJECT_SUBCLASSES, PACKAGE_WRAPPERS], ids=["project-subclass", "package-wrapper"])
@pytest.mark.parametrize(("code", "kind", "example"), EXAMPLES)
def test_every_rule_finds_the_same_with_any_wrapper_class(header, code, kind, example):
    """Every rule's own examples: what it reports with `nn.DataParallel` / DDP it reports with
    a project subclass of them (two levels deep) and with apex's / mmcv's wrappers."""
    assert _found(header + _swapped(example)) == _found(header + example)


def _model(code: str) -> SemanticModel:
    return analysed(cst.parse_module(textwrap.dedent(code)))


def _kinds(code: str) -> dict[str, object]:
    model = _model(code)
    return {model.code(site.node.func): wrapper_kind(model, site.node.func) for site in model.calls
            if site.scope.kind == "module"}


def test_project_subclasses_aliases_and_packages_are_wrappers():
    kinds = _kinds("""
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as Base
        from apex.parallel import DistributedDataParallel as ApexDDP
        from mmcv.parallel import MMDataParallel, MMDistributedDataParallel
        import mmengine.model
        class Tracked(Base):
            pass
        class Fast(Tracked):
            pass
        Wrapper = nn.DataParallel
        Fast(a); Wrapper(b); ApexDDP(c); MMDataParallel(d); MMDistributedDataParallel(e)
        mmengine.model.MMDistributedDataParallel(f)
    """)
    assert kinds == {"Fast": "DDP", "Wrapper": "DP", "ApexDDP": "DDP", "MMDataParallel": "DP",
                     "MMDistributedDataParallel": "DDP", "mmengine.model.MMDistributedDataParallel": "DDP"}


def test_a_class_named_like_a_wrapper_is_not_one():
    """What the class derives from decides, not its name."""
    kinds = _kinds("""
        import torch.nn as nn
        class DataParallel(nn.Module):
            def __init__(self, net):
                super().__init__()
                self.net = net
        class Runner(DataParallel):
            pass
        class DistributedDataParallel:
            pass
        DataParallel(a); Runner(b); DistributedDataParallel(c)
        from encoding.parallel import DataParallelModel
        DataParallelModel(d)
    """)
    assert kinds == {"DataParallel": None, "Runner": None, "DistributedDataParallel": None, "DataParallelModel": None}


def test_a_subclass_two_files_away_is_a_wrapper(tmp_path):
    (tmp_path / "parallel").mkdir()
    (tmp_path / "parallel" / "__init__.py").write_text("")
    (tmp_path / "parallel" / "base.py").write_text(
        "from torch.nn.parallel import DistributedDataParallel\n\n\nclass TrackedDDP(DistributedDataParallel):\n    pass\n")
    (tmp_path / "parallel" / "fast.py").write_text(
        "from parallel.base import TrackedDDP\n\n\nclass FastDDP(TrackedDDP):\n    pass\n")
    (tmp_path / "parallel" / "plain.py").write_text("import torch.nn as nn\n\n\nclass Plain(nn.Module):\n    pass\n")
    train = tmp_path / "train.py"
    train.write_text("from parallel.fast import FastDDP\nfrom parallel.plain import Plain\n"
                     "model = FastDDP(net)\nother = Plain()\n")
    project = Project((str(tmp_path),))
    model = analysed(cst.parse_module(train.read_text()), str(train))
    project.register(model)
    calls = {model.code(site.node.func): site.node for site in model.calls}
    assert wrapper_kind(model, calls["FastDDP"].func) == "DDP"
    assert wrapper_kind(model, calls["Plain"].func) is None
    built = wrapping_built_by(model, calls["FastDDP"])
    assert built is not None and built.kind == "DDP" and model.code(built.inner) == "net"
    # The flow model answers with the same recogniser: `model` holds the wrapper where `other` is built.
    read = model.module.body[2].body[0].targets[0].target
    assert [w.kind for w, _ in model.flow.wrappings_at(read, calls["Plain"])] == ["DDP"]
    assert model.flow.wrapped_on_every_path(read, calls["Plain"])


def test_the_rules_agree_on_a_project_subclass():
    """The issue's example: a project subclass of DataParallel was a wrapper for
    scalar-gather but not for module-on-bare-model."""
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class MyDataParallel(nn.DataParallel):
            pass


        net = nn.Linear(2, 2)
        if torch.cuda.device_count() > 1:
            net = MyDataParallel(net)
        head = net.module
    """)
    assert [(f.location.row, f.code) for f in lint(code)] == [(12, "DPL016")]
