"""Flow: what several GPUs imply about CUDA, what a path keeps across files, and methods an
instance calls on itself (`self.cuda()` in `__init__`), looked up on the most-derived class."""

from __future__ import annotations

import textwrap

import libcst as cst

from dplint.flow import Condition, _portable, consistent, self_consistent
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(textwrap.dedent(code)), "<string>")


def attribute_read(model: SemanticModel, text: str, nth: int = 0) -> cst.Attribute:
    found = [n for n in model.nodes() if isinstance(n, cst.Attribute) and model.code(n) == text]
    return found[nth]


def test_several_gpus_imply_cuda_and_a_gpu_id_first():
    several = Condition("len(gpu_ids)>1", True)
    assert not consistent((several,), (Condition("torch.cuda.is_available()", False),))
    assert not consistent((several,), (Condition("gpu_ids[0]<0", True),))
    # one GPU or none says nothing about CUDA
    assert consistent((Condition("len(gpu_ids)>1", False),), (Condition("torch.cuda.is_available()", False),))
    # `n_gpu == 1` failing is read as several GPUs
    assert not self_consistent((Condition("n_gpu==1", False), Condition("torch.cuda.is_available()", False)))


def test_a_process_count_implies_nothing_about_cuda():
    assert consistent((Condition("world_size>1", True),), (Condition("torch.cuda.is_available()", False),))
    assert consistent((Condition("len(ranks)>1", True),), (Condition("torch.cuda.is_available()", False),))


def test_conditions_kept_across_files():
    kept = _portable((
        Condition("torch.cuda.is_available()", False),
        Condition("len(device_ids)>1", True),
        Condition("args.distributed", True, 12345),
        Condition("world_size>1", True),
    ))
    assert [(c.test, c.holds) for c in kept] == [("torch.cuda.is_available()", False), ("len(device_ids)>1", True)]


def test_a_comparison_on_a_stored_parameter_is_the_attribute_test():
    model = model_of(
        """
        class Learner:
            def __init__(self, config):
                self.config = config
                if config["gpu"][0] >= 0:
                    pass

            def step(self):
                if self.config["gpu"][0] >= 0:
                    pass
        """
    )
    tests = [n.test for n in model.nodes() if isinstance(n, cst.If)]
    first, second = (model.flow.condition(t) for t in tests)
    assert (first.test, first.holds) == (second.test, second.holds) == ('self.config["gpu"][0]<0', False)


def test_a_method_called_by_the_constructor_leaves_its_wrap_under_the_call_test():
    model = model_of(
        """
        import torch.nn as nn

        class Learner:
            def __init__(self, ids):
                self.ids = ids
                self.net = Net()
                if ids[0] >= 0:
                    self.to_gpu()

            def to_gpu(self):
                self.net = self.net.cuda()
                if len(self.ids) > 1:
                    self.net = nn.DataParallel(self.net)
                return self

            def head(self):
                return self.net.module
        """
    )
    read = attribute_read(model, "self.net.module").value
    shown = [
        (model.code(v.expr) if v.known else None, tuple(sorted((c.test, c.holds) for c in v.conditions)))
        for v in model.flow.values_at(read, read) if self_consistent(v.conditions)
    ]
    # the bare `Net()` of the constructor survives where no GPU id was given, and (moved by
    # `.cuda()`) where one id was; never where several were
    assert ("Net()", (("self.ids[0]<0", True),)) in shown
    assert ("Net()", (("len(self.ids)>1", False), ("self.ids[0]<0", False))) in shown
    assert not any(expr == "Net()" and ("len(self.ids)>1", True) in conds for expr, conds in shown)
    assert any(expr == "nn.DataParallel(self.net)" and ("len(self.ids)>1", True) in conds for expr, conds in shown)
