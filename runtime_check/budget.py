"""The budget: truncate the script's loops, not the script (harness side).

The script (and every module of the user's project it imports) is compiled with each `for`
loop's iterable wrapped in `__dplint_loop__(iterable, line, end_line)` and each `while`
test in `__dplint_while__(test, line, end_line)`; line numbers are unchanged. Each loop counts
its iterations that did work, by what happened during the iteration:

* an *epoch* iteration started a pass over a DataLoader (a loop around the batch loop);
* a *batch* iteration drew a batch or took an optimizer step, without starting a pass.

A loop ends after `epochs` epoch iterations or `batches` batch iterations (the iteration
that would come next is not started; the loop's `else:` runs as usual), and the script goes
on: the saves, loads and evaluation after the training loop run. A DataLoader pass started
from code that was not rewritten (a library's trainer) yields at most `batches` batches, and
no batch at all once `epochs` passes started from the same line.
"""

from __future__ import annotations

import ast
import builtins
import importlib.abc
import importlib.machinery
import os
import sys

LOOP, WHILE = "__dplint_loop__", "__dplint_while__"
RUNAWAY_PASSES = 1000  # passes from one line after which the run stops (a loop verify cannot cut)


class BudgetReached(BaseException):
    """Stops a run whose loop verify could not cut; not an Exception, so `except Exception:`
    in the script does not swallow it."""


class LoopRewriter(ast.NodeTransformer):
    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        node.iter = self._call(LOOP, node.iter, node)
        return node

    def visit_While(self, node: ast.While):
        self.generic_visit(node)
        node.test = self._call(WHILE, node.test, node)
        return node

    @staticmethod
    def _call(name: str, value: ast.expr, loop: ast.stmt) -> ast.expr:
        end = loop.end_lineno or loop.lineno
        call = ast.Call(
            func=ast.Name(id=name, ctx=ast.Load()),
            args=[value, ast.Constant(loop.lineno), ast.Constant(end)], keywords=[],
        )
        return ast.copy_location(call, value)


def compile_with_budget(source, filename: str):
    tree = ast.parse(source, filename)
    tree = ast.fix_missing_locations(LoopRewriter().visit(tree))
    return compile(tree, filename, "exec", dont_inherit=True)


class Budget:
    """Counts passes, batches and steps; decides when a loop has had its share."""

    def __init__(self, recorder, batches: int, epochs: int) -> None:
        self.recorder = recorder
        self.batches = batches
        self.epochs = epochs
        self.generation = 0
        self.reset()

    def reset(self) -> None:
        self.passes = 0  # DataLoader passes started
        self.work = 0  # batches drawn + optimizer steps
        self.passes_from: dict[object, int] = {}  # call site -> passes started there
        self.cut_loops: set[int] = set()

    # ----------------------------------------------------------------- the rewritten loops
    def loop(self, iterable, line: int, end_line: int):
        iterator = iter(iterable)
        epochs = batches = 0
        while True:
            if epochs >= self.epochs or batches >= self.batches:
                self._cut(line, end_line, epochs, batches)
                return
            passes, work = self.passes, self.work
            try:
                item = next(iterator)
            except StopIteration:
                return
            yield item
            epochs, batches = self._count(passes, work, epochs, batches)

    def while_test(self, line: int, end_line: int):
        """A `while` loop's state: call it with each test value."""
        state = {"epochs": 0, "batches": 0, "passes": None, "work": None}
        budget = self

        def test(value) -> bool:
            if state["passes"] is not None and value:
                state["epochs"], state["batches"] = budget._count(
                    state["passes"], state["work"], state["epochs"], state["batches"]
                )
                if state["epochs"] >= budget.epochs or state["batches"] >= budget.batches:
                    budget._cut(line, end_line, state["epochs"], state["batches"])
                    return False
            state["passes"], state["work"] = budget.passes, budget.work
            return bool(value)

        return test

    def _count(self, passes: int, work: int, epochs: int, batches: int) -> tuple[int, int]:
        if self.passes > passes:
            return epochs + 1, batches
        if self.work > work:
            return epochs, batches + 1
        return epochs, batches

    def _cut(self, line: int, end_line: int, epochs: int, batches: int) -> None:
        if line not in self.cut_loops:
            self.cut_loops.add(line)
            kind = "epochs" if epochs >= self.epochs else "batches"
            self.recorder.emit("loop-cut", line=line, end_line=end_line, epochs=epochs, batches=batches, by=kind)

    # ------------------------------------------------------------------------ installing
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import DataLoader

        budget = self
        original_iter = DataLoader.__iter__

        def __iter__(loader):
            caller = sys._getframe(1)
            line = budget.recorder.script_line(caller)
            site = ("script", line) if line is not None else (caller.f_code.co_filename, caller.f_lineno)
            done = budget.passes_from.get(site, 0)
            budget.passes_from[site] = done + 1
            budget.passes += 1
            if done >= RUNAWAY_PASSES:
                budget.recorder.emit("budget", line=line, epochs=done)
                raise BudgetReached(f"{done} DataLoader passes started from line {line}")
            budget.recorder.emit("epoch", line=line, epoch=done)
            limit = budget.batches if done < budget.epochs else 0
            return LimitedIterator(original_iter(loader), limit, budget)

        DataLoader.__iter__ = __iter__

        def after_step(optimizer, args, kwargs):
            budget.work += 1

        register_optimizer_step_post_hook(after_step)
        builtins.__dict__[LOOP] = self.loop
        whiles: dict = {}

        def while_test(value, line, end):
            # one state per `while` statement, frame and variant: the loop counts anew each
            # time its function runs
            frame = sys._getframe(1)
            key = (budget.generation, id(frame), frame.f_code, line)
            if key not in whiles:
                whiles[key] = budget.while_test(line, end)
            return whiles[key](value)

        builtins.__dict__[WHILE] = while_test

    def next_variant(self) -> None:
        self.reset()
        self.generation += 1


class LimitedIterator:
    """At most `limit` batches of a DataLoader iterator; everything else is the iterator's."""

    def __init__(self, inner, limit: int, budget: Budget) -> None:
        self._inner = inner
        self._limit = limit
        self._yielded = 0
        self._budget = budget

    def __iter__(self):
        return self

    def __next__(self):
        if self._yielded >= self._limit:
            raise StopIteration
        batch = next(self._inner)
        self._yielded += 1
        self._budget.work += 1
        return batch

    def __len__(self) -> int:
        return min(self._limit, len(self._inner))

    def __getattr__(self, name):
        return getattr(self._inner, name)


# ------------------------------------------------------------- the user's own modules
class ProjectLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module of the user's project with its loops rewritten (never from, nor to,
    a `__pycache__`)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return compile_with_budget(self.get_data(path), path)


class ProjectFinder(importlib.abc.MetaPathFinder):
    """Finds modules under the project folder (the overlay) and loads them with ProjectLoader."""

    def __init__(self, root: str) -> None:
        self.root = os.path.join(os.path.abspath(root), "")

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return spec
        if not os.path.abspath(spec.origin).startswith(self.root) or "site-packages" in spec.origin:
            return spec
        spec.loader = ProjectLoader(fullname, spec.origin)
        return spec
