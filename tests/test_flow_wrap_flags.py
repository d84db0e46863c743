"""Flags and options that stand for a wrap's own test (`dplint.flow`): a flag bound to
opposite constants beside the wrap, and an option the constructor copies from its caller."""

from __future__ import annotations

import textwrap

import libcst as cst

from dplint.flow import self_consistent
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(textwrap.dedent(code)), "<string>")


def branch_tests(model: SemanticModel, text: str) -> list[cst.BaseExpression]:
    """The `if` / conditional-expression tests spelled `text`, in file order."""
    found = []
    stack = [model.module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.If, cst.IfExp)) and model.code(node.test).strip() == text:
            found.append(node.test)
        stack.extend(reversed(node.children))
    return found


def wrap_test(model: SemanticModel, text: str, holds: bool = True):
    return model.flow.condition(branch_tests(model, text)[0], holds)


def test_flag_bound_in_both_arms_is_the_arms_test():
    model = model_of(
        """
        def build(net, rank=None):
            if rank is not None:
                spread = True
                net = DDP(net)
            else:
                spread = False
            return net.module if spread else net
        """
    )
    flag = model.flow.condition(branch_tests(model, "spread")[0], True)
    around_wrap = wrap_test(model, "rank is not None")
    assert not self_consistent((flag, around_wrap.negated()))
    assert self_consistent((flag, around_wrap))
    assert not self_consistent((flag.negated(), around_wrap))


def test_attribute_flag_set_then_reset_beside_the_wrap():
    model = model_of(
        """
        class Loop:
            def __init__(self, net, world):
                self.multi = False
                if world > 1:
                    self.multi = True
                    self.net = DDP(net)

            def weights(self):
                if self.multi:
                    return self.net.module
        """
    )
    flag = model.flow.condition(branch_tests(model, "self.multi")[0], True)
    assert not self_consistent((flag, wrap_test(model, "world > 1", False)))
    # set True exactly where the test held: where it is still False, the test failed
    assert not self_consistent((flag.negated(), wrap_test(model, "world > 1")))
    assert self_consistent((flag.negated(), wrap_test(model, "world > 1", False)))


def test_flag_with_a_third_binding_says_nothing():
    model = model_of(
        """
        def build(net, rank, swap):
            if rank is not None:
                spread = True
                net = DDP(net)
            else:
                spread = False
            if swap:
                spread = not spread
            return net.module if spread else net
        """
    )
    flag = model.flow.condition(branch_tests(model, "spread")[0], True)
    assert self_consistent((flag, wrap_test(model, "rank is not None", False)))


def test_flag_set_in_another_if_says_nothing_about_the_wrap():
    model = model_of(
        """
        def build(net, half, rank):
            if half:
                low = True
            else:
                low = False
            if rank is not None:
                net = DDP(net)
            return net.module if low else net
        """
    )
    flag = model.flow.condition(branch_tests(model, "low")[0], True)
    assert self_consistent((flag, wrap_test(model, "rank is not None", False)))


def test_option_copied_by_the_constructor_is_the_callers_test():
    model = model_of(
        """
        class Runner:
            def __init__(self, net, opts):
                self.net = net
                self.procs = opts.procs

            def export(self):
                return self.net.module if self.procs > 1 else self.net

        def launch(opts):
            net = make()
            if opts.procs > 1:
                net = DDP(net)
            Runner(net, opts).export()
        """
    )
    read = model.flow.condition(branch_tests(model, "self.procs > 1")[0], True)
    assert read == wrap_test(model, "opts.procs > 1")


def test_option_of_a_class_built_twice_keeps_its_own_spelling():
    model = model_of(
        """
        class Runner:
            def __init__(self, net, opts):
                self.net = net
                self.procs = opts.procs

            def export(self):
                return self.net.module if self.procs > 1 else self.net

        def launch(opts, other):
            net = make()
            if opts.procs > 1:
                net = DDP(net)
            Runner(net, opts).export()
            Runner(net, other).export()
        """
    )
    read = model.flow.condition(branch_tests(model, "self.procs > 1")[0], True)
    assert read.test == "self.procs>1"


def test_copied_option_is_spelled_as_the_constructing_function_spells_it():
    model = model_of(
        """
        class Runner:
            def __init__(self, net, opts):
                self.net = net
                self.procs = opts.procs

            def export(self):
                return self.net.module if self.procs > 1 else self.net

        def launch(opts):
            net = make()
            if opts.procs > 1:
                net = DDP(net)
            Runner(net, opts).export()

        def main(args):
            launch(args)
        """
    )
    read = model.flow.condition(branch_tests(model, "self.procs > 1")[0], True)
    assert read == wrap_test(model, "opts.procs > 1")
