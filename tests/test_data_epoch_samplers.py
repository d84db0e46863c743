"""`dplint.data` knowledge behind missing-set-epoch: which constructions are samplers seeded
by their epoch and what their `shuffle` is, project methods found by name, and whether a
project could set a sampler's epoch anywhere."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from dplint.data import distributed_sampler_shuffles, project_methods, project_never_sets_epoch
from dplint.engine import lint_source, rules_for
from dplint.project import Project
from dplint.registry import selected_codes
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(textwrap.dedent(code)))


def shuffles_of(code: str, name: str):
    model = model_of(code)
    call = next(s.node for s in model.calls if model.code(s.node.func) == name)
    return distributed_sampler_shuffles(model, call)


OWN_SAMPLER = """
    import torch
    from torch.utils.data import Sampler

    class EpochSampler(Sampler):
        def __init__(self, data, shuffle=True):
            self.data, self.shuffle, self.epoch = data, shuffle, 0
        def __iter__(self):
            g = torch.Generator()
            g.manual_seed(self.epoch)
            return iter(torch.randperm(len(self.data), generator=g).tolist())
        def set_epoch(self, epoch):
            self.epoch = epoch
    """


def test_torch_sampler_shuffle_true_unknown_false():
    head = "from torch.utils.data.distributed import DistributedSampler\n"
    assert shuffles_of(head + "DistributedSampler(ds)\n", "DistributedSampler") is True
    assert shuffles_of(head + "DistributedSampler(ds, shuffle=opt['shuffle'])\n", "DistributedSampler") is None
    assert shuffles_of(head + "DistributedSampler(ds, None, None, False)\n", "DistributedSampler") is False
    assert shuffles_of(head + "DistributedSampler(ds, **kw)\n", "DistributedSampler") is False


def test_a_project_sampler_seeded_by_its_epoch_and_its_shuffle():
    assert shuffles_of(OWN_SAMPLER + "EpochSampler(ds)\n", "EpochSampler") is True
    assert shuffles_of(OWN_SAMPLER + "EpochSampler(ds, False)\n", "EpochSampler") is False
    assert shuffles_of(OWN_SAMPLER + "EpochSampler(ds, shuffle=cfg.shuffle)\n", "EpochSampler") is None


def test_a_sampler_whose_epoch_does_not_reach_its_order_is_not_one():
    code = OWN_SAMPLER.replace("g.manual_seed(self.epoch)", "g.manual_seed(0)")
    assert shuffles_of(code + "EpochSampler(ds)\n", "EpochSampler") is False


def test_a_subclass_of_torchs_sampler_keeps_its_shuffle_parameter():
    code = """
        from torch.utils.data.distributed import DistributedSampler
        class LoudSampler(DistributedSampler):
            def __len__(self):
                return self.num_samples
        """
    assert shuffles_of(code + "LoudSampler(ds)\n", "LoudSampler") is True
    assert shuffles_of(code + "LoudSampler(ds, shuffle=False)\n", "LoudSampler") is False


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))


def project_model(root: Path, name: str) -> SemanticModel:
    project = Project((str(root),))
    return project.model_for(str(root / name))


def test_project_methods_skip_abstract_stubs(tmp_path):
    write(tmp_path, {
        "base.py": "class Base:\n    def learn(self):\n        raise NotImplementedError\n",
        "one.py": "class One:\n    def learn(self):\n        self.loss.backward()\n",
        "train.py": "net.learn()\n",
    })
    found = project_methods(project_model(tmp_path, "train.py"), "learn")
    assert sorted(Path(model.path).name for model, _ in found) == ["one.py"]


def test_project_never_sets_epoch(tmp_path):
    write(tmp_path, {"train.py": "loader = make()\n", "hooks.py": "class Hook:\n    pass\n"})
    assert project_never_sets_epoch(project_model(tmp_path, "train.py"))
    write(tmp_path, {"hooks.py": "def again(loader, e):\n    loader.sampler.set_epoch(e)\n"})
    assert not project_never_sets_epoch(project_model(tmp_path, "train.py"))
    write(tmp_path, {"hooks.py": "from accelerate import Accelerator\n"})
    assert not project_never_sets_epoch(project_model(tmp_path, "train.py"))


def test_a_config_shuffle_is_flagged_saying_when():
    code = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds, shuffle=args.shuffle)\n"
        "loader = DataLoader(ds, batch_size=8, sampler=sampler)\n"
        "for epoch in range(3):\n"
        "    for x, y in loader:\n"
        "        loss_fn(model(x), y).backward()\n"
    )
    (finding,) = lint_source(code, "example.py", rules_for(selected_codes(["DPL008"]))).findings
    assert finding.location.row == 2
    assert "whenever `shuffle=args.shuffle` is true" in finding.message
    assert finding.edits  # set_epoch is harmless when shuffle is off: the fix stays safe
