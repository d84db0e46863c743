"""dplint/fast_cst.py: parsing without node validation, identity hashing in C. The trees must
be LibCST's own, and validation must still guard every node built outside a parse."""

from __future__ import annotations

import libcst as cst
import pytest

from dplint.fast_cst import parse_module

SOURCE = "import torch\n\n# a comment\nmodel = torch.nn.DataParallel(net)  # wrap\nif rank == 0:\n    torch.save(model.module.state_dict(), 'm.pt')\n"


def test_the_tree_is_libcsts_own():
    module = parse_module(SOURCE)
    assert module.code == SOURCE
    assert module.deep_equals(cst.parse_module(SOURCE))


def test_a_parse_does_not_validate_its_nodes(monkeypatch):
    def refuse(node):
        raise AssertionError("validated")

    monkeypatch.setattr(cst.Name, "_validate", refuse)
    assert parse_module("x = y\n").code == "x = y\n"
    with pytest.raises(AssertionError, match="validated"):
        cst.parse_module("x = y\n")  # LibCST's own parse still validates


def test_nodes_built_outside_a_parse_are_still_validated():
    parse_module(SOURCE)
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.CSTValidationError):
        cst.SimpleWhitespace("x")


def test_a_parse_that_fails_leaves_validation_on():
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def (:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_nodes_hash_and_compare_by_identity():
    first, second = cst.Name("x"), cst.Name("x")
    assert first == first and first != second
    assert len({first: 1, second: 2}) == 2
    assert type(first).__hash__ is object.__hash__
    module = parse_module(SOURCE)
    assert all(type(node).__eq__ is object.__eq__ for node in (module, *module.body))



def test_type_tests_answer_as_abcs_do_but_in_c():
    """The node classes' metaclass keeps ABCMeta (abstract classes stay abstract) but tests
    instances and subclasses with `type`'s own C methods."""
    import abc

    import libcst as cst

    import dplint.fast_cst  # noqa: F401  (the adjustment is made on import)

    name, attribute = cst.Name("x"), cst.Attribute(cst.Name("a"), cst.Name("b"))
    assert issubclass(type(cst.Name), abc.ABCMeta)
    assert type(cst.Name).__instancecheck__ is type.__instancecheck__
    assert isinstance(name, cst.BaseExpression) and isinstance(name, (cst.Call, cst.Name))
    assert not isinstance(attribute, cst.Name) and not isinstance(name, cst.BaseStatement)
    assert issubclass(cst.Name, cst.BaseAssignTargetExpression) and not issubclass(cst.Name, cst.Call)
    with pytest.raises(TypeError, match="abstract"):
        cst.BaseExpression()
