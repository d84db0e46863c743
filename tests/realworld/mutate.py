"""Inject one real bug at a time into the benchmark's checkouts and see whether dplint finds it.

Usage:
    python tests/realworld/mutate.py --checkouts DIR [--limit N] [--jobs J] [--budget S]
                                     [--dplint CMD] [--only TEXT] [--json FILE] [--verbose]

DIR holds the checkouts of checkout.sh (``owner__name@commit10/``).  For each repository (its
first checkout when there are several), every operator below finds the real sites of its
shape with LibCST, and each site gives one mutant: the repository is copied once to a temp
folder, one file is rewritten, ``dplint check --no-cache --output-format json --exit-zero -j 1
.`` runs at the copy's root (as a user's CI does, so findings that need several files count),
and the file is restored.  A mutant is *detected* when a finding of the operator's rule
appears in the run that the unmutated run did not have (lines of the mutated file mapped back
through a diff).  Sites where the unmutated code already had a finding of that rule within
``SITE_SLACK`` lines are counted apart (``had``) and left out of the recall.

Recall is printed per operator and per part of the blind split (split.py), and per variant
where the operator has one (whether the wrapper is made in the same file or another).

Time is bounded: at most ``--limit`` mutants per operator per repository (chosen by a hash
of the site, not by file order), each dplint run under ``--timeout`` seconds, and no new
mutant starts after ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from split import part_of  # noqa: E402

sys.path.remove(str(HERE))

SITE_SLACK = 5  # lines around a site where an existing finding means "already flagged"
# A test that names the process's rank (the mutator's own notion; dplint's is not used here).
RANK_WORDS = re.compile(r"rank|main_process|is_main|is_master|master_process|is_primary|"
                        r"local_process_index|process_index", re.IGNORECASE)
BARE_CUDA = re.compile(r"\.cuda\((?:\)|non_blocking)|[\"']cuda[\"']")
WRAPPER_CALL = re.compile(r"(^|\.)(DistributedDataParallel|DataParallel|DDP|DP)$")
# torch.nn.Module's own attributes: the wrapper has them too, so `m.module.x` -> `m.x` is no bug.
MODULE_API = frozenset("""
    add_module apply bfloat16 buffers children compile cpu cuda double eval extra_repr float
    forward get_buffer get_extra_state get_parameter get_submodule half ipu load_state_dict
    modules mtia named_buffers named_children named_modules named_parameters parameters
    register_backward_hook register_buffer register_forward_hook register_forward_pre_hook
    register_full_backward_hook register_full_backward_pre_hook register_load_state_dict_post_hook
    register_module register_parameter register_state_dict_pre_hook requires_grad_
    set_extra_state share_memory state_dict to to_empty train training type xpu zero_grad
    __class__ __dict__ module
""".split())


@dataclass
class Mutant:
    operator: str
    rule: str  # the dplint rule slug that should report the injected bug
    path: str  # relative to the repository root
    line: int  # the site's first line in the unmutated file
    text: "str | Rewrite"  # the whole mutated file (a Rewrite until built)
    variant: str = ""  # e.g. where the wrapper is made: "same-file" / "other-file"


@dataclass
class Repo:
    """What operators may know of the whole repository (plain text facts, no dplint)."""
    files: dict[str, str]  # relative path -> source
    wrapped_names: dict[str, set[str]] = field(default_factory=dict)  # name -> files wrapping it
    saving_helpers: set[str] = field(default_factory=set)  # functions whose body calls torch.save
    mentions_nccl: bool = False
    bare_cuda: bool = False


# --- small LibCST helpers -------------------------------------------------------------------

def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def dotted(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def call_name(call: cst.Call) -> Optional[str]:
    return dotted(call.func)


def last_name(call: cst.Call) -> Optional[str]:
    name = call_name(call)
    return None if name is None else name.rsplit(".", 1)[-1]


def single_call_statement(stmt: cst.CSTNode) -> Optional[cst.Call]:
    """The call of a statement line that is nothing but one call expression."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value
    return None


class Replace(cst.CSTTransformer):
    """Replace one node (by identity) with a node, a FlattenSentinel or a removal."""

    def __init__(self, target: cst.CSTNode, replacement):
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node, updated_node):
        if original_node is self.target:
            return self.replacement(updated_node) if callable(self.replacement) else self.replacement
        return updated_node


class DeleteStatement(cst.CSTTransformer):
    """Delete one statement line from its block; an emptied block gets `pass`."""

    def __init__(self, target: cst.CSTNode):
        self.target = target

    def _without(self, original_body, updated_body):
        for index, stmt in enumerate(original_body):
            if stmt is self.target:
                rest = list(updated_body[:index]) + list(updated_body[index + 1:])
                return rest or [cst.SimpleStatementLine([cst.Pass()])]
        return None

    def leave_IndentedBlock(self, original_node, updated_node):
        body = self._without(original_node.body, updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node, updated_node):
        body = self._without(original_node.body, updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)


class Rewrite:
    """A mutation not yet applied: running the transformer is most of the cost, so only the
    mutants chosen to run are built."""

    def __init__(self, module: cst.Module, transformer: cst.CSTTransformer):
        self.module, self.transformer = module, transformer

    def build(self) -> Optional[str]:
        """The module's code after the transformer, or None when it does not re-parse or is unchanged."""
        text = self.module.visit(self.transformer).code
        if text == self.module.code:
            return None
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError:
            return None
        return text


def rewrite(module: cst.Module, transformer: cst.CSTTransformer) -> Rewrite:
    return Rewrite(module, transformer)


class Sites(cst.CSTVisitor):
    """One pass that records the nodes each operator may mutate, with their positions and
    enclosing statements."""

    METADATA_DEPENDENCIES = (PositionProvider, ParentNodeProvider)

    def __init__(self):
        self.calls: list[cst.Call] = []
        self.attributes: list[cst.Attribute] = []
        self.ifs: list[cst.If] = []
        self.functions: list[cst.FunctionDef] = []
        self.statements: list[cst.SimpleStatementLine] = []

    def visit_Call(self, node):
        self.calls.append(node)

    def visit_Attribute(self, node):
        self.attributes.append(node)

    def visit_If(self, node):
        self.ifs.append(node)

    def visit_FunctionDef(self, node):
        self.functions.append(node)

    def visit_SimpleStatementLine(self, node):
        self.statements.append(node)


class Context:
    """A parsed file and its metadata, for the operators."""

    def __init__(self, path: str, text: str, repo: Repo):
        self.path, self.text, self.repo = path, text, repo
        self.wrapper = MetadataWrapper(cst.parse_module(text))
        self.module = self.wrapper.module
        self.sites = Sites()
        self.wrapper.visit(self.sites)
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)

    def line(self, node) -> int:
        return self.positions[node].start.line

    def ancestors(self, node) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def function_of(self, node) -> Optional[cst.FunctionDef]:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def under_rank_test(self, node) -> bool:
        return any(isinstance(a, cst.If) and RANK_WORDS.search(code_of(a.test)) for a in self.ancestors(node))


def mentions_rank(test: cst.BaseExpression) -> bool:
    return bool(RANK_WORDS.search(code_of(test)))


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Calls inside a node, not entering nested function or class bodies."""
    found = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, call):
            found.append(call)

        def visit_FunctionDef(self, _):
            return False

        def visit_ClassDef(self, _):
            return False

    node.visit(Collect())
    return found


NO_GRAD = ("no_grad", "inference_mode")


def calls_without_grad(function: cst.FunctionDef) -> set[int]:
    """ids of the calls a function makes with gradients off: the whole function under a
    `@torch.no_grad()` decorator, or inside a `with torch.no_grad():` block."""
    def off(expr) -> bool:
        expr = expr.func if isinstance(expr, cst.Call) else expr
        return isinstance(expr, (cst.Attribute, cst.Name)) and \
            (expr.attr if isinstance(expr, cst.Attribute) else expr).value in NO_GRAD

    if any(off(d.decorator) for d in function.decorators):
        return {id(c) for c in calls_in(function.body)}
    found: set[int] = set()

    class Collect(cst.CSTVisitor):
        def visit_With(self, node):
            if any(off(item.item) for item in node.items):
                found.update(id(c) for c in calls_in(node.body))

        def visit_FunctionDef(self, _):
            return False

    function.body.visit(Collect())
    return found


# --- the operators ---------------------------------------------------------------------------

def op_drop_set_epoch(ctx: Context) -> Iterator[Mutant]:
    """Delete a `x.set_epoch(e)` statement: a sampler's (one argument; `writer.set_epoch(it,
    mode)` is not one), given an epoch that changes (deleting `set_epoch(0)` of a new sampler,
    whose epoch starts at 0, changes nothing)."""
    for stmt in ctx.sites.statements:
        call = single_call_statement(stmt)
        if call is not None and last_name(call) == "set_epoch" and isinstance(call.func, cst.Attribute) \
                and len(call.args) == 1 and not isinstance(call.args[0].value, (cst.Integer, cst.SimpleString)):
            text = rewrite(ctx.module, DeleteStatement(stmt))
            if text:
                yield Mutant("drop-set-epoch", "missing-set-epoch", ctx.path, ctx.line(stmt), text)


def op_shuffle_beside_sampler(ctx: Context) -> Iterator[Mutant]:
    """Add `shuffle=True` to a DataLoader call that passes `sampler=` (and no `shuffle=`)."""
    for call in ctx.sites.calls:
        if last_name(call) != "DataLoader":
            continue
        keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
        sampler = keywords.get("sampler")
        if sampler is None or "shuffle" in keywords or (
                isinstance(sampler.value, cst.Name) and sampler.value.value == "None"):
            continue
        if any(arg.star for arg in call.args[call.args.index(sampler) + 1:]):
            continue  # keep the keyword before any `**kwargs`

        def add_shuffle(updated: cst.Call, sampler=sampler, index=call.args.index(sampler)) -> cst.Call:
            old = updated.args[index]
            shuffle = cst.Arg(
                keyword=cst.Name("shuffle"), value=cst.Name("True"), comma=old.comma,
                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                      whitespace_after=cst.SimpleWhitespace("")))
            mid = old.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args = list(updated.args[:index]) + [mid, shuffle] + list(updated.args[index + 1:])
            return updated.with_changes(args=args)

        text = rewrite(ctx.module, Replace(call, add_shuffle))
        if text:
            yield Mutant("shuffle-beside-sampler", "sampler-shuffle", ctx.path, ctx.line(sampler), text)


def saved_names(ctx: Context, function) -> set[str]:
    """Names handed to a `torch.save` in the function (or module): `torch.save(state, f)`."""
    names = set()
    scope = function if function is not None else ctx.module
    for call in calls_in(scope):
        if call_name(call) == "torch.save" and call.args:
            names |= {n.value for n in _names_in(call.args[0].value)}
    return names


def _names_in(node) -> list[cst.Name]:
    found = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, name):
            found.append(name)

    node.visit(Collect())
    return found


def op_unwrap_saved_state_dict(ctx: Context) -> Iterator[Mutant]:
    """`m.module.state_dict()` -> `m.state_dict()` where the dict goes to `torch.save`."""
    for call in ctx.sites.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "state_dict"
                and isinstance(func.value, cst.Attribute) and func.value.attr.value == "module"):
            continue
        if not _reaches_save(ctx, call):
            continue
        inner = func.value

        text = rewrite(ctx.module, Replace(inner, lambda updated: updated.value))
        if text:
            yield Mutant("unwrap-saved-state-dict", "save-wrapped-state-dict", ctx.path, ctx.line(call), text)


def _reaches_save(ctx: Context, call: cst.Call) -> bool:
    """Inside a `torch.save(...)` call, or assigned to a name that a `torch.save` of the same
    function saves (`state = {"model": m.module.state_dict()}` ... `torch.save(state, f)`)."""
    for ancestor in ctx.ancestors(call):
        if isinstance(ancestor, cst.Call) and call_name(ancestor) == "torch.save":
            return True
        if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
            targets = ([t.target for t in ancestor.targets] if isinstance(ancestor, cst.Assign)
                       else [ancestor.target])
            bases = set()
            for target in targets:
                while isinstance(target, (cst.Subscript, cst.Attribute)):
                    target = target.value
                if isinstance(target, cst.Name):
                    bases.add(target.value)
            return bool(bases & saved_names(ctx, ctx.function_of(call)))
        if isinstance(ancestor, (cst.FunctionDef, cst.SimpleStatementLine)):
            return False
    return False


def op_drop_save_rank_guard(ctx: Context) -> Iterator[Mutant]:
    """Remove the rank test of an `if` (no `else`) around a save: the whole `if` when the test
    is only about ranks, the rank part of an `and` otherwise."""
    for node in ctx.sites.ifs:
        if node.orelse is not None or not mentions_rank(node.test) or isinstance(ctx.parents.get(node), cst.If):
            continue  # an `elif` has no place of its own to put the body in
        if not any(call_name(c) == "torch.save" or call_name(c) in ctx.repo.saving_helpers
                   for c in calls_in(node.body)):
            continue
        test = node.test
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            parts = _conjuncts(test)
            kept = [p for p in parts if not mentions_rank(p)]
            if kept:
                new_test = kept[0]
                for part in kept[1:]:
                    new_test = cst.BooleanOperation(left=new_test, operator=cst.And(), right=part)
                replacement = lambda updated, t=new_test: updated.with_changes(test=t)  # noqa: E731
            else:
                replacement = _unwrapped_body
        else:
            replacement = _unwrapped_body
        text = rewrite(ctx.module, Replace(node, replacement))
        if text:
            yield Mutant("drop-save-rank-guard", "unguarded-rank-save", ctx.path, ctx.line(node), text)


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _unwrapped_body(updated: cst.If):
    """The `if`'s statements in its place (LibCST re-indents them to the enclosing block)."""
    if isinstance(updated.body, cst.SimpleStatementSuite):
        body = [cst.SimpleStatementLine(body=updated.body.body, leading_lines=updated.leading_lines)]
    else:
        body = list(updated.body.body)
        body[0] = body[0].with_changes(leading_lines=list(updated.leading_lines) + list(body[0].leading_lines))
    return cst.FlattenSentinel(body)


def op_drop_set_device(ctx: Context) -> Iterator[Mutant]:
    """Delete `torch.cuda.set_device(...)` in a repository that uses NCCL.  The variant says
    whether the deletion matters to a rank (see _set_device_variant)."""
    if not ctx.repo.mentions_nccl:
        return
    for stmt in ctx.sites.statements:
        call = single_call_statement(stmt)
        if call is not None and (call_name(call) or "").endswith("cuda.set_device"):
            text = rewrite(ctx.module, DeleteStatement(stmt))
            if text:
                yield Mutant("drop-set-device", "missing-set-device", ctx.path, ctx.line(stmt), text,
                             _set_device_variant(ctx, stmt))


# Deletions of set_device that no rank feels: the set_device served the one-process run, or
# every placement the rank runs names its device. Shown, but not counted in the recall.
NO_BUG_VARIANTS = ("one-process-branch", "indexed-cuda")

DISTRIBUTED_START = re.compile(r"init_process_group|DistributedDataParallel|\bDDP\(")


def _set_device_variant(ctx: Context, stmt: cst.CSTNode) -> str:
    """"one-process-branch": the set_device sits on one branch of an `if` whose other branch
    (and not its own) starts the process group or wraps in DistributedDataParallel
    (`if args.distributed: ...` / `elif args.gpu is not None: set_device(args.gpu)`): it
    serves the one-process run, no rank loses it. "bare-cuda": the file places work on the bare
    `cuda` device (see BareCuda) outside the other branches of the `if`s around the set_device,
    or a file it imports does: a rank may run it.
    "indexed-cuda": every placement the rank may run names its device."""
    others = []
    child = stmt
    for ancestor in ctx.ancestors(stmt):
        if isinstance(ancestor, cst.If):
            own, other = (ancestor.body, ancestor.orelse) if child is ancestor.body else (ancestor.orelse, ancestor.body)
            if other is not None:
                if DISTRIBUTED_START.search(code_of(other)) and not DISTRIBUTED_START.search(code_of(own)):
                    return "one-process-branch"
                others.append(other)
        child = ancestor
    spans = [(ctx.line(other), ctx.positions[other].end.line) for other in others]
    for line in _bare_cuda_lines(ctx):
        if not any(start <= line <= end for start, end in spans):
            return "bare-cuda"
    return "bare-cuda" if _imported_file_places_on_bare_cuda(ctx) else "indexed-cuda"


class BareCuda(cst.CSTVisitor):
    """Placements on the bare `cuda` device: `.cuda()` (also with only `non_blocking=`), a `"cuda"` string. Not a parameter's
    default (a caller may replace it) nor `torch.device("cuda", i)` (an index)."""

    def __init__(self):
        self.skipped: set[int] = set()
        self.found: list[cst.CSTNode] = []

    def visit_Param(self, param):
        if param.default is not None:
            self.skipped.add(id(param.default))

    def visit_Call(self, call):
        # `.cuda()`, `.cuda(non_blocking=True)`: no device given, the current one
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "cuda" and not any(
                arg.keyword is None or arg.keyword.value == "device" for arg in call.args):
            self.found.append(call)
        if (call_name(call) or "").endswith("device") and len(call.args) > 1:
            self.skipped.add(id(call.args[0].value))

    def visit_SimpleString(self, string):
        if id(string) not in self.skipped and string.evaluated_value == "cuda":
            self.found.append(string)


def _bare_cuda_lines(ctx: Context) -> list[int]:
    placements = BareCuda()
    ctx.module.visit(placements)
    return [ctx.line(node) for node in placements.found]


def _imported_file_places_on_bare_cuda(ctx: Context) -> bool:
    """Whether a file this one imports places work on the bare `cuda` device (the model's own
    `labels = torch.zeros(n).cuda()` in its forward, a helper's `.cuda()`): it runs in the rank."""
    for other, text in ctx.repo.files.items():
        if other == ctx.path or not BARE_CUDA.search(text) or not _imports(ctx.repo, ctx.path, other):
            continue
        try:
            module = cst.parse_module(text)
        except Exception:  # noqa: BLE001 - a file that does not parse places nothing
            continue
        placements = BareCuda()
        module.visit(placements)
        if placements.found:
            return True
    return False


def _wrap_variant(ctx: Context, name: str) -> Optional[str]:
    """Where a name (its last part: `self.model` -> `model`) is assigned a wrapper: this file,
    or another file that imports this one or that this one imports. A file no import links to
    this one (a test script beside a training script, both with a `model`) holds another object
    under the same name: None."""
    files = ctx.repo.wrapped_names.get(name.rsplit(".", 1)[-1], set())
    if ctx.path in files:
        return "same-file"
    if any(_imports(ctx.repo, ctx.path, other) or _imports(ctx.repo, other, ctx.path) for other in files):
        return "other-file"
    return None


def _imports(repo: Repo, importer: str, imported: str) -> bool:
    """Whether the text of `importer` imports the module of file `imported` (by its last name:
    `from models.trainer import Trainer`, `import trainer`, `from . import trainer`)."""
    stem = imported.rsplit("/", 1)[-1][:-3]
    if stem == "__init__":
        stem = imported.rsplit("/", 2)[-2] if "/" in imported else stem
    pattern = re.compile(rf"^\s*(from\s+[\w.]*\b{re.escape(stem)}\b\s+import|from\s+[\w.]+\s+import\s+.*\b{re.escape(stem)}\b"
                         rf"|import\s+[\w.]*\b{re.escape(stem)}\b)", re.MULTILINE)
    return bool(pattern.search(repo.files.get(importer, "")))


def op_drop_module_attribute(ctx: Context) -> Iterator[Mutant]:
    """`m.module.x` -> `m.x` (read, not a torch Module attribute, not on `self`)."""
    stores = set()
    for stmt in ctx.sites.statements:
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                stores |= {id(t.target) for t in small.targets}
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                stores.add(id(small.target))
    for node in ctx.sites.attributes:
        inner = node.value
        if not (isinstance(inner, cst.Attribute) and inner.attr.value == "module"):
            continue
        base = dotted(inner.value)
        if base is None or base == "self" or node.attr.value in MODULE_API or id(node) in stores:
            continue
        variant = _wrap_variant(ctx, base) or ("no-wrap-seen" if not ctx.repo.wrapped_names.get(base.rsplit(".", 1)[-1])
                                               else None)
        if variant is None:
            continue  # the name is wrapped only in files no import links to this one
        text = rewrite(ctx.module, Replace(node, lambda updated: updated.with_changes(value=updated.value.value)))
        if text:
            yield Mutant("drop-module-attribute", "attribute-through-wrapper", ctx.path, ctx.line(node), text,
                         variant)


def op_forward_through_inner(ctx: Context) -> Iterator[Mutant]:
    """`m(x)` -> `m.module(x)` in a function that calls `.backward(...)`, where `m` (its last
    part) is assigned a DataParallel/DDP wrapper somewhere in the repository; not a call with
    gradients off (`with torch.no_grad():`, a `@torch.no_grad()` function): evaluation."""
    for function in ctx.sites.functions:
        inside = calls_in(function.body)
        if not any(isinstance(c.func, (cst.Attribute, cst.Name)) and
                   (c.func.attr if isinstance(c.func, cst.Attribute) else c.func).value == "backward"
                   for c in inside):
            continue
        evaluating = calls_without_grad(function)
        for call in inside:
            name = call_name(call)
            if name is None or name == "self" or not call.args or id(call) in evaluating:
                continue  # (an evaluation forward under no_grad through the inner model is no bug)
            variant = _wrap_variant(ctx, name)
            if variant is None:
                continue
            module_attr = cst.Attribute(value=call.func, attr=cst.Name("module"))
            text = rewrite(ctx.module, Replace(call, lambda updated, f=module_attr: updated.with_changes(func=f)))
            if text:
                yield Mutant("forward-through-inner", "wrapper-bypass", ctx.path, ctx.line(call), text, variant)


def op_barrier_under_rank_guard(ctx: Context) -> Iterator[Mutant]:
    """Put a `dist.barrier()` statement (not already under a rank test) under `if rank == 0`:
    into the rank-guarded `if` just before it when there is one, else a new
    `if <dist>.get_rank() == 0:` around it."""
    for stmt in ctx.sites.statements:
        call = single_call_statement(stmt)
        name = call_name(call) if call is not None else None
        if name is None or not name.endswith(".barrier") or ctx.under_rank_test(stmt):
            continue
        receiver = name.rsplit(".", 1)[0]
        if receiver not in {"dist", "torch.distributed", "distributed"}:
            continue
        parent = ctx.parents.get(stmt)
        siblings = list(getattr(parent, "body", []))
        index = next((i for i, s in enumerate(siblings) if s is stmt), None)
        before = siblings[index - 1] if index else None
        if (isinstance(before, cst.If) and before.orelse is None and mentions_rank(before.test)
                and isinstance(before.body, cst.IndentedBlock)):
            text = rewrite(ctx.module, _MoveInto(before, stmt))
        else:
            guard = cst.parse_expression(f"{receiver}.get_rank() == 0")
            text = rewrite(ctx.module, Replace(stmt, lambda updated, g=guard: cst.If(
                test=g, body=cst.IndentedBlock([updated.with_changes(leading_lines=[])]),
                leading_lines=updated.leading_lines)))
        if text:
            yield Mutant("barrier-under-rank-guard", "collective-under-rank-guard", ctx.path, ctx.line(stmt), text)


class _MoveInto(DeleteStatement):
    """Delete `stmt` and append it to the body of the `if` before it."""

    def __init__(self, guard: cst.If, stmt: cst.CSTNode):
        super().__init__(stmt)
        self.guard, self.stmt = guard, stmt

    def leave_If(self, original_node, updated_node):
        if original_node is self.guard:
            body = updated_node.body
            moved = self.stmt.with_changes(leading_lines=[])
            return updated_node.with_changes(body=body.with_changes(body=list(body.body) + [moved]))
        return updated_node


OPERATORS: dict[str, Callable[[Context], Iterator[Mutant]]] = {
    "drop-set-epoch": op_drop_set_epoch,
    "shuffle-beside-sampler": op_shuffle_beside_sampler,
    "unwrap-saved-state-dict": op_unwrap_saved_state_dict,
    "drop-save-rank-guard": op_drop_save_rank_guard,
    "drop-set-device": op_drop_set_device,
    "drop-module-attribute": op_drop_module_attribute,
    "forward-through-inner": op_forward_through_inner,
    "barrier-under-rank-guard": op_barrier_under_rank_guard,
}


# --- the repository facts and the mutants of a repository ------------------------------------

class RepoFacts(cst.CSTVisitor):
    """Names assigned a wrapper (`model = DDP(model)`, `self.net = nn.DataParallel(net)`) and
    functions that call `torch.save` without naming a rank (so they save on every caller)."""

    def __init__(self):
        self.wrapped: set[str] = set()
        self.saving: set[str] = set()

    def visit_Assign(self, node):
        if isinstance(node.value, cst.Call) and WRAPPER_CALL.search(call_name(node.value) or ""):
            for target in node.targets:
                name = dotted(target.target)
                if name:
                    self.wrapped.add(name.rsplit(".", 1)[-1])

    def visit_FunctionDef(self, node):
        if any(call_name(c) == "torch.save" for c in calls_in(node.body)) and not RANK_WORDS.search(
                code_of(node.body)):
            self.saving.add(node.name.value)


def read_repo(root: Path) -> Repo:
    files = {}
    for path in sorted(root.rglob("*.py")):
        try:
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    repo = Repo(files)
    for path, text in files.items():
        repo.mentions_nccl |= "nccl" in text.lower()
        repo.bare_cuda |= bool(BARE_CUDA.search(text))
        if not any(word in text for word in ("DataParallel", "DDP", "DP(", "torch.save")):
            continue
        try:
            module = cst.parse_module(text)
        except Exception:  # noqa: BLE001 - Python 2 files, templates: no sites there
            continue
        facts = RepoFacts()
        module.visit(facts)
        for name in facts.wrapped:
            repo.wrapped_names.setdefault(name, set()).add(path)
        repo.saving_helpers |= facts.saving
    return repo


# The words a file needs for an operator to find a site in it (files without any are not parsed).
OPERATOR_WORDS = {
    "drop-set-epoch": ("set_epoch",),
    "shuffle-beside-sampler": ("sampler=", "sampler ="),
    "unwrap-saved-state-dict": (".module.state_dict",),
    "drop-save-rank-guard": ("save",),
    "drop-set-device": ("set_device",),
    "drop-module-attribute": (".module.",),
    "forward-through-inner": ("backward",),
    "barrier-under-rank-guard": ("barrier",),
}


def mutants_of(repo: Repo, operators=OPERATORS) -> Iterator[Mutant]:
    """Every site's mutant, not yet built (`built` makes the text)."""
    for path, text in repo.files.items():
        wanted = [op for name, op in operators.items() if any(w in text for w in OPERATOR_WORDS[name])]
        if not wanted:
            continue
        try:
            ctx = Context(path, text, repo)
        except Exception:  # noqa: BLE001 - files LibCST cannot parse
            continue
        for operator in wanted:
            yield from operator(ctx)


def built(mutant: Mutant) -> Optional[Mutant]:
    """The mutant with its text, or None when the mutation does not give new, parseable code."""
    if isinstance(mutant.text, Rewrite):
        mutant.text = mutant.text.build()
    return mutant if mutant.text else None


def choose(mutants: list[Mutant], limit: Optional[int]) -> list[Mutant]:
    """At most `limit` built mutants per operator, spread over the repository by a hash of the site."""
    by_operator = defaultdict(list)
    for m in mutants:
        by_operator[m.operator].append(m)
    chosen = []
    for group in by_operator.values():
        group.sort(key=lambda m: hashlib.sha256(f"{m.path}:{m.line}:{m.operator}".encode()).hexdigest())
        taken = 0
        for mutant in group:
            if limit is not None and taken >= limit:
                break
            if built(mutant):
                chosen.append(mutant)
                taken += 1
    return chosen


# --- running dplint and judging ---------------------------------------------------------------

def run_dplint(dplint_cmd: str, folder: Path, timeout: float) -> list[tuple[str, str, int]]:
    command = shlex.split(dplint_cmd) + ["check", "--no-cache", "--output-format", "json",
                                          "--exit-zero", "-j", "1", "."]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1])
    found = []
    for item in json.loads(done.stdout or "[]"):
        path = Path(item["filename"])
        if path.is_absolute():
            path = path.relative_to(folder.resolve())
        found.append((path.as_posix().removeprefix("./"), item["name"], item["location"]["row"]))
    return found


def line_map(old: str, new: str) -> dict[int, int]:
    """Lines of `new` (1-based) that are unchanged lines of `old`, mapped to their old number."""
    mapping = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                mapping[j1 + k + 1] = i1 + k + 1
    return mapping


def judge(mutant: Mutant, original: str, baseline, findings) -> dict:
    """Whether the run found a new finding of the mutant's rule, and what was there before."""
    mapping = line_map(original, mutant.text)
    before = set(baseline)
    new = []
    for path, rule, line in findings:
        old_line = mapping.get(line) if path == mutant.path else line
        if old_line is None or (path, rule, old_line) not in before:
            new.append((path, rule, line))
    hits = [f for f in new if f[1] == mutant.rule]
    had = [f for f in baseline if f[0] == mutant.path and abs(f[2] - mutant.line) <= SITE_SLACK]
    return {
        "detected": bool(hits),
        "at_site": any(p == mutant.path and abs(line - mutant.line) <= SITE_SLACK for p, _, line in hits),
        "had": any(rule == mutant.rule for _, rule, _ in had),
        "before_at_site": sorted({f"{rule}:{line}" for _, rule, line in had}),
        "new": [f"{p}:{line} {rule}" for p, rule, line in new],
    }


def repo_name(folder: str) -> str:
    return folder.split("@", 1)[0].replace("__", "/", 1)


def mutate_repo(checkout: Path, args, deadline: float, log) -> list[dict]:
    repo = read_repo(checkout)
    chosen = choose(list(mutants_of(repo)), args.limit)
    if not chosen:
        return []
    name = repo_name(checkout.name)
    part = part_of(name)
    records = []
    with tempfile.TemporaryDirectory(prefix="dplint-mutate-") as tmp:
        copies = []
        for j in range(max(1, min(args.jobs, len(chosen)))):
            copy = Path(tmp) / f"c{j}"
            shutil.copytree(checkout, copy, symlinks=True)
            copies.append(copy)
        try:
            baseline = run_dplint(args.dplint, copies[0], args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            log(f"{checkout.name}: baseline failed: {error}")
            return []
        work: queue.Queue = queue.Queue()
        for mutant in chosen:
            work.put(mutant)
        lock = threading.Lock()

        def worker(copy: Path):
            while time.monotonic() < deadline:
                try:
                    mutant = work.get_nowait()
                except queue.Empty:
                    return
                target = copy / mutant.path
                original = repo.files[mutant.path]
                target.write_text(mutant.text, encoding="utf-8")
                try:
                    record = judge(mutant, original, baseline, run_dplint(args.dplint, copy, args.timeout))
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    record = {"error": str(error)}
                finally:
                    target.write_text(original, encoding="utf-8")
                record.update(repo=name, part=part, operator=mutant.operator, rule=mutant.rule,
                              path=mutant.path, line=mutant.line, variant=mutant.variant)
                with lock:
                    records.append(record)
                    if args.verbose:
                        mark = "ERROR" if "error" in record else (
                            "HAD" if record["had"] else ("FOUND" if record["detected"] else "MISS"))
                        log(f"{mark:5} {part:9} {mutant.operator:26} {name}/{mutant.path}:{mutant.line}"
                            f"{' ' + mutant.variant if mutant.variant else ''}")

        threads = [threading.Thread(target=worker, args=(copy,)) for copy in copies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return records


def table(records: list[dict]) -> list[str]:
    """Recall per operator (and per operator and variant), developed-on and blind side by side."""
    def cells(group):
        judged = [r for r in group if "error" not in r]
        had = sum(r["had"] for r in judged)
        counted = [r for r in judged if not r["had"]]
        found = sum(r["detected"] for r in counted)
        recall = f"{found / len(counted):.2f}" if counted else "  -"
        return f"{len(judged):>4} {had:>4} {found:>4}/{len(counted):<4} {recall:>5}"

    keys = sorted({(r["operator"], r["rule"]) for r in records}, key=lambda k: list(OPERATORS).index(k[0]))
    head = f"{'sites':>5} {'had':>4} {'found':>9} {'recall':>6}"
    lines = [f"{'operator (rule)':52} {'developed on':^27} | {'blind':^27}", f"{'':52} {head} | {head}"]

    def row(label, group):
        parts = [[r for r in group if r["part"] == p] for p in ("developed", "blind")]
        return f"{label:52} {cells(parts[0])} | {cells(parts[1])}"

    bugs = [r for r in records if r["variant"] not in NO_BUG_VARIANTS]
    for operator, rule in keys:
        group = [r for r in records if r["operator"] == operator]
        lines.append(row(f"{operator} ({rule})", [r for r in group if r in bugs]))
        variants = sorted({r["variant"] for r in group if r["variant"]})
        for variant in variants:
            label = f"  {variant}" + (" (no bug: not counted)" if variant in NO_BUG_VARIANTS else "")
            lines.append(row(label, [r for r in group if r["variant"] == variant]))
    lines.append(row("all", bugs))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkouts", required=True, type=Path)
    parser.add_argument("--dplint", default="dplint", help="command that runs dplint")
    parser.add_argument("--limit", type=int, default=5, help="mutants per operator per repository (0: all)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--budget", type=float, default=1800, help="seconds after which no mutant starts")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for one dplint run")
    parser.add_argument("--only", metavar="TEXT", help="only checkouts whose folder name contains TEXT")
    parser.add_argument("--json", type=Path, help="write every mutant's record here")
    parser.add_argument("--verbose", action="store_true", help="one line per mutant")
    args = parser.parse_args(argv)
    args.limit = args.limit or None

    def log(text):
        print(text, file=sys.stderr, flush=True)

    started = time.monotonic()
    deadline = started + args.budget
    first_of_repo = {}
    for folder in sorted(p for p in args.checkouts.iterdir() if p.is_dir() and "@" in p.name):
        if not args.only or args.only in folder.name:
            first_of_repo.setdefault(repo_name(folder.name), folder)
    records = []
    for name, folder in sorted(first_of_repo.items()):
        if time.monotonic() >= deadline:
            log(f"budget spent: {name} and later repositories not run")
            break
        records.extend(mutate_repo(folder, args, deadline, log))
    elapsed = time.monotonic() - started
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in records))
    for r in records:
        if "error" in r:
            print(f"ERROR {r['repo']}/{r['path']}:{r['line']} {r['operator']}: {r['error']}")
    print("\n".join(table(records)))
    repos = {r["repo"] for r in records}
    blind = {r["repo"] for r in records if r["part"] == "blind"}
    print(f"\nrepositories {len(repos)} (blind {len(blind)}), mutants {len(records)}, {elapsed:.0f} s")
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
