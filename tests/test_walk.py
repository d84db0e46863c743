"""`dplint.walk.walk` meets the nodes `CSTNode.visit` meets, in the same order, without
rebuilding them."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import FIXTURES
from dplint.walk import walk

FILES = sorted(FIXTURES.rglob("*.py"))


class Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.events.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)  # a visitor may stop at a node

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.events.append(("leave", id(original_node)))


def events(module: cst.Module, walker) -> list[tuple[str, int]]:
    recorder = Recorder()
    walker(module, recorder)
    return recorder.events


@pytest.mark.parametrize("text", [
    "x = f'{a!r:>{width}}' + f'{b}'\n",  # a format spec only some f-string expressions have
    "async def f(*, a: int = 1, **k) -> None:\n    async with g() as (x, y):\n        yield [i async for i in x if i]\n",
    "match p:\n    case [1, *rest] | {'k': v} if v:\n        pass\n",
    "lambda x: (yield)\n",
    "@d\nclass C(B, metaclass=M):\n    x: int = 1\n    def m(self): return self.x[1:2, ::3]\n",
])
def test_the_order_of_libcst_visit(text: str):
    module = cst.parse_module(text)
    assert events(module, walk) == events(module, lambda m, v: m.visit(v))


def test_every_fixture_is_walked_as_libcst_visits_it():
    for path in FILES:
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except cst.ParserSyntaxError:
            continue  # fixtures of files that do not parse
        assert events(module, walk) == events(module, lambda m, v: m.visit(v)), path
