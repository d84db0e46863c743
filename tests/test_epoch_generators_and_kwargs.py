"""missing-set-epoch on held-out shapes: a generator object drawn from elsewhere, backward
through `functools.partial`, and a sampler carried in a loader's `**kwargs` dict."""

from __future__ import annotations

import textwrap

import libcst as cst

from dplint.engine import lint_source, rules_for
from dplint.registry import selected_codes
from dplint.semantic import SemanticModel
from dplint.training import partial_callee
from dplint.flow import analysed


def findings(code: str) -> list:
    return lint_source(textwrap.dedent(code), "example.py", rules_for(selected_codes(["DPL008"]))).findings


def call_named(model: SemanticModel, name: str) -> cst.Call:
    return next(s.node for s in model.calls if model.code(s.node.func) == name)


def test_partial_callee_finds_the_bound_function_and_method():
    model = analysed(cst.parse_module(textwrap.dedent("""
        import functools
        from functools import partial

        def push(scale, loss):
            (loss * scale).backward()

        class Step:
            def _back(self, loss):
                loss.backward()
            def run(self, loss):
                self.back = functools.partial(self._back)
                self.back(loss)
                later = partial(push, 2.0)
                later(loss)
                other = partial(print, "x")
                other(loss)
        """)))
    assert partial_callee(model, call_named(model, "later")).node.name.value == "push"
    assert partial_callee(model, call_named(model, "self.back")).node.name.value == "_back"
    assert partial_callee(model, call_named(model, "other")) is None


def test_generator_object_drawn_through_iter_and_a_parameter():
    head = """
        from torch.utils.data import DataLoader, DistributedSampler

        def cycle(dl):
            while True:
                for data in dl:
                    yield data
        """
    through_iter = head + """
        def main(model, ds, steps):
            it = iter(cycle(DataLoader(ds, sampler=DistributedSampler(ds))))
            for s in range(steps):
                model(next(it)).backward()
        """
    through_parameter = head + """
        def fit(model, stream, steps):
            for s in range(steps):
                model(next(stream)).backward()

        def main(model, ds):
            fit(model, cycle(DataLoader(ds, sampler=DistributedSampler(ds))), 100)
        """
    for code in (through_iter, through_parameter):
        (finding,) = findings(code)
        assert "every pass of the generator's loop at line 5" in finding.message
        assert finding.fix_applicability is None


def test_generator_drawn_only_outside_any_loop_is_silent():
    code = """
        from torch.utils.data import DataLoader, DistributedSampler

        def cycle(dl):
            while True:
                yield from dl

        def warm_up(model, ds):
            stream = cycle(DataLoader(ds, sampler=DistributedSampler(ds)))
            model(next(stream)).backward()
        """
    assert findings(code) == []


def test_a_kwargs_entry_of_another_name_is_not_the_sampler():
    code = """
        from torch.utils.data import DataLoader, DistributedSampler

        def train(model, ds, epochs, make):
            kw = {"batch_size": 4}
            kw["generator_sampler"] = DistributedSampler(ds)
            loader = DataLoader(ds, **kw)
            for epoch in range(epochs):
                for x in loader:
                    model(x).backward()
        """
    assert findings(code) == []  # DataLoader has no such keyword: nothing it iterates
