"""How branch tests are read (dplint/flow.py conditions): canonical spellings, what a test
implies, and the tests a flag or a dict entry stands for."""

from __future__ import annotations

import libcst as cst

from dplint.flow import Condition, consistent, self_consistent
from dplint.flow import analysed


def branch_tests(source: str) -> tuple:
    model = analysed(cst.parse_module(source))
    return model, [node.test for node in model.nodes() if isinstance(node, (cst.If, cst.IfExp))]


def test_exact_class_tests_read_as_isinstance():
    model, tests = branch_tests(
        "if type(m) is DDP: pass\n"
        "if type(m) != nn.DataParallel: pass\n"
        "if type(m) in (DP, DDP): pass\n"
        "if type(m) in kinds: pass\n"
    )
    found = [model.flow.condition(t) for t in tests]
    assert (found[0].test, found[0].holds) == ("isinstance(m,DDP)", True)
    assert (found[1].test, found[1].holds) == ("isinstance(m,nn.DataParallel)", False)
    assert (found[2].test, found[2].holds) == ("isinstance(m,(DP,DDP))", True)
    assert found[3].test == "type(m)inkinds"


def test_predicate_body_with_exact_class_test():
    model, tests = branch_tests(
        "def is_parallel(model):\n"
        "    return type(model) in (DP, DDP)\n"
        "x = net.module if is_parallel(net) else net\n"
    )
    assert model.flow.condition(tests[0]).test == "isinstance(net,(DP,DDP))"


def test_counts_are_whole_numbers():
    model, tests = branch_tests("if n_gpu >= 2: pass\nif n_gpu < 2: pass\nif x >= 2: pass\n")
    found = [model.flow.condition(t) for t in tests]
    assert [(c.test, c.holds) for c in found[:2]] == [("n_gpu>1", True), ("n_gpu>1", False)]
    assert found[2].test == "x<2"  # not a count: left as it is
    one, many = Condition("n_gpu==1", True), Condition("n_gpu>1", True)
    assert not consistent((one,), (many,))
    assert not consistent((one.negated(),), (many.negated(),))  # no GPU at all: left unjudged
    assert consistent((Condition("x==1", False),), (Condition("x>1", False),))


def test_compound_test_implies_its_parts():
    model, tests = branch_tests("if a and b: pass\nif b: pass\nif a or c: pass\nif a: pass\n")
    both, b, either, a = (model.flow.condition(t) for t in tests)
    assert not consistent((both,), (b.negated(),))
    assert consistent((both.negated(),), (b.negated(),))
    assert not self_consistent((both.negated(), a, b))  # `a and b` fails where both hold
    assert not consistent((either.negated(),), (a,))
    assert consistent((either,), (a.negated(),))


def test_literal_per_branch_implies_the_branch():
    model, tests = branch_tests(
        "def run(count):\n"
        "    if count > 1:\n"
        "        ws = get_world_size()\n"
        "    else:\n"
        "        ws = 1\n"
        "    y = a if ws == 1 else b\n"
    )
    outer, inner = tests
    implied = model.flow.value_implied(inner, False)
    assert implied == (model.flow.condition(outer, True),)
    assert model.flow.value_implied(inner, True) == ()  # get_world_size() may be 1 as well


def test_module_global_flag_and_dict_entry():
    model, tests = branch_tests(
        "import torch\n"
        "multi = torch.cuda.device_count() > 1\n"
        "cfg = {}\n"
        "if torch.cuda.device_count() > 1:\n"
        "    cfg['dist'] = True\n"
        "else:\n"
        "    cfg['dist'] = False\n"
        "a = 1 if multi else 2\n"
        "b = 1 if cfg['dist'] else 2\n"
    )
    wrap, flag, entry = (model.flow.condition(t) for t in tests)
    assert flag == wrap and entry == wrap


def test_handler_after_module_read_runs_for_a_bare_model():
    model = analysed(cst.parse_module(
        "try:\n    s = net.module.state_dict()\nexcept AttributeError:\n    s = net.state_dict()\n"
        "try:\n    s = net.module.state_dict()\nexcept KeyError:\n    pass\n"
    ))
    first, second = [n for n in model.nodes() if isinstance(n, cst.Try)]
    (guard,) = model.flow.handler_conditions(first, first.handlers[0])
    assert (guard.test, guard.holds) == ('hasattr(net,"module")', False)
    assert model.flow.handler_conditions(second, second.handlers[0]) == ()
