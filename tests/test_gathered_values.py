"""dplint/gathered_values.py: the facts DPL012 scalar-gather reads about what DataParallel
gathers and whether the wrapped forward returns a 0-d loss, asked directly."""

from __future__ import annotations

import libcst as cst
import pytest

from dplint.gathered_values import (
    BATCH, Unpacked, gathered_results, gathering_constructions, has_explicit_gradient, loss_reduction,
)
from dplint.semantic import SemanticModel, method_call
from dplint.flow import analysed

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(HEAD + code))


def backward_root(model: SemanticModel) -> tuple[cst.BaseExpression, cst.Call]:
    call = next(site.node for site in model.calls if (method_call(site.node) or (None, ""))[1] == "backward")
    return method_call(call)[0], call


@pytest.mark.parametrize("expr, expected", [
    ("F.cross_entropy(out, y)", "mean"),
    ("F.mse_loss(out, y, reduction='sum')", "sum"),
    ("F.cross_entropy(out, y, reduction='none')", BATCH),
    ("(out - y).pow(2).mean()", "mean"),
    ("torch.sum(out)", "sum"),
    ("out.mean(dim=0)", BATCH),
    ("F.nll_loss(out, y) + 0.5 * F.mse_loss(out, y)", "mean"),
    ("nn.CrossEntropyLoss(weight=w)(out, y)", "mean"),
    ("nn.MSELoss(True)(out, y)", None),  # a positional `size_average`: can't tell
    ("out", None),
])
def test_loss_reduction(expr, expected):
    model = model_of(f"value = {expr}\n")
    assign = next(node for node in model.nodes_of(cst.Assign))
    assert loss_reduction(model, assign.value, assign, 6) == expected


def test_the_gathered_results_a_backward_reaches_and_their_parts():
    model = model_of(
        "dp = nn.DataParallel(net)\n"
        "out = dp(x)\n"
        "a, b = dp(z)\n"
        "total = out['loss'] + 0.5 * b + 0 * other(x)\n"
        "total.backward()\n"
    )
    root, at = backward_root(model)
    found = [(model.code(call), part) for call, part, _ in gathered_results(model, root, at)]
    assert found == [("dp(x)", ("loss",)), ("dp(z)", (Unpacked(1, 2),))]


def test_a_reduction_on_the_way_ends_the_search():
    model = model_of("dp = nn.DataParallel(net)\nloss = dp(x)\nif n_gpu > 1:\n    loss = loss.mean()\nloss.backward()\n")
    root, at = backward_root(model)
    assert gathered_results(model, root, at) == []


@pytest.mark.parametrize("built, gathers", [
    ("nn.DataParallel(net)", True),
    ("nn.DataParallel(net, device_ids=[0])", False),
    ("nn.DataParallel(net, device_ids=[0, 1])", True),
    ("net", False),
])
def test_gathering_constructions(built, gathers):
    model = model_of(f"dp = {built}\nloss = dp(x)\n")
    call = next(site.node for site in model.calls if model.code(site.node) == "dp(x)")
    assert bool(gathering_constructions(model, call)) is gathers


def test_an_explicit_gradient():
    model = model_of("loss.backward(torch.ones_like(loss))\nloss.backward()\n")
    calls = [site for site in model.calls if (method_call(site.node) or (None, ""))[1] == "backward"]
    assert [has_explicit_gradient(site.node, site.qualified_name) for site in calls] == [True, False]
