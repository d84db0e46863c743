"""`dplint.semantic.walk` visits exactly the nodes LibCST's `visit` does, in the same order."""

import libcst as cst

from dplint.semantic import TOKEN_NODES, walk
from dplint.flow import analysed

SOURCE = '''
from __future__ import annotations
from . import helpers
from .models import (Net as N, build)
from os import *
import torch.nn as nn, sys

@decorator(1)
async def train(a, /, b: int = 2, *args, c, d=3, **kwargs) -> None:
    """Doc."""
    global counter
    x = [i ** 2 for i in range(10) if i % 2]
    y = {k: v for k, v in zip(a, b)}
    z = {*x, *y}
    w = (lambda q, *r: q)(1)
    s = f"{x!r:>{width}} {y=} {{}}" f'{z}'
    t = "a" "b"
    async with open(a) as f, open(b):
        async for item in f:
            await item
    try:
        pass
    except (ValueError, KeyError) as error:
        raise RuntimeError() from error
    else:
        del x[1:2, ::3]
    finally:
        yield
    while not a and b or c:
        break
    else:
        continue
    if a is not None:
        a += 1
    elif b in c:
        a, *b = c
    else:
        assert a, "message"
    match a:
        case [1, 2, *rest]:
            pass
        case {"k": v, **others}:
            pass
        case Point(x=0) | None:
            pass
        case _ if a:
            pass
    return (a if b else c)[0].attr(*args, key=1, **kwargs)

class Model(nn.Module, metaclass=Meta):
    value: int = 1
    def forward(self, x):
        nonlocal_value = x @ x
        return -x + ~x if x else not x
'''


class Recorder(cst.CSTVisitor):
    def __init__(self, skip=()):
        self.seen = []
        self.skip = skip

    def on_visit(self, node):
        self.seen.append(("visit", node))
        return type(node).__name__ not in self.skip

    def on_leave(self, original_node):
        self.seen.append(("leave", original_node))


def test_walk_visits_like_libcst():
    module = cst.parse_module(SOURCE)
    for skip in ((), ("FunctionDef",), ("Call", "Lambda")):
        expected, walked = Recorder(skip), Recorder(skip)
        module.visit(expected)
        walk(module, walked)
        assert [(event, id(node)) for event, node in walked.seen] == [(event, id(node)) for event, node in expected.seen]


def test_walk_runs_typed_visitor_methods():
    module = cst.parse_module(SOURCE)
    names = []

    class Names(cst.CSTVisitor):
        def visit_FunctionDef(self, node):
            names.append(node.name.value)
            return node.name.value != "train"  # nested names of `train` skipped

        def visit_Name(self, node):
            names.append(node.value)

    walk(module, Names())
    assert "train" in names and "forward" in names and "lambda" not in names
    assert "kwargs" not in names  # inside train, skipped
    assert "nonlocal_value" in names


def test_model_tables_follow_source_order():
    module = cst.parse_module(SOURCE)
    model = analysed(module)
    order = Recorder()
    module.visit(order)
    visited = [node for event, node in order.seen if event == "visit" and node is not module and type(node) not in TOKEN_NODES]
    assert list(model.nodes()) == visited
