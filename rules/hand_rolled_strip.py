"""DPL013 hand-rolled-strip: `k[7:]`, `k.replace("module.", "")`, `k.lstrip("module.")` over
a state dict's keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

import libcst as cst

from dplint.checkpoints import CONSUME_PREFIX, CONSUME_PREFIX_MODULE, CONSUME_PREFIX_NAME, holds_state_dict
from dplint.distributed import enclosing_function, passed_for
from dplint.fixes import ensure_import
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument, literal_value, method_call, walk
from dplint.wrappers import constructions

PREFIX = "module."
GUARD_PREFIXES = ("module", "module.")
COMPREHENSIONS = (cst.DictComp, cst.ListComp, cst.SetComp, cst.GeneratorExp)
USE_INSTEAD = 'use `consume_prefix_in_state_dict_if_present(state_dict, "module.")`'


@dataclass
class KeyLoop:
    """A loop or comprehension over a mapping's keys: `for k, v in X.items()` / `for k in X`."""

    node: Union[cst.For, cst.CompFor]
    owner: cst.CSTNode  # the For statement or the comprehension
    key: str
    source: cst.BaseExpression  # X
    # Where a `startswith` test of the key guards the strip: (node, the key's name there). A
    # strip in a lambda or function applied to the key (`cut(k)`) adds that body too.
    guard_scopes: tuple[tuple[cst.CSTNode, str], ...] = ()


class HandRolledStrip(Rule):
    """
    ## What it does
    Flags `module.` prefixes stripped from a state dict's keys by hand, in a loop or a
    comprehension over its keys (`for k, v in sd.items()`, `for k in sd`, `for k in
    list(sd.keys())` renaming in place), also inside a lambda or function applied to the key
    (`{cut(k): v for k, v in sd.items()}`):

    - `k.lstrip("module.")` (error);
    - `k[7:]` / `k[len("module."):]` without a `k.startswith("module")` guard (warning, only
      when the loop's mapping is known to be a state dict);
    - `k.replace("module.", "")` (warning, unless guarded and limited to one replacement);
    - `k.split("module.", 1)[1]`, `k.split("module.")[-1]`, `k.partition("module.")[2]`
      without a guard (warning);
    - dropping the first dotted component (`".".join(k.split(".")[1:])`, `k.split(".", 1)[1]`,
      `k.partition(".")[2]`) after a loose test of only one key (`start = 1 if
      next(iter(sd)).startswith("module") else 0`, or an `if list(sd)[0].startswith("module"):`
      around the loop, without the dot) (warning).

    A strip under a per-key `k.startswith("module")` guard is correct (it removes exactly the
    prefix, only where it is present) and is not flagged; `k[:7] == "module."` (also through a
    name, `head = k[:7]`), `k.split(".")[0] == "module"` and `k.find("module.") == 0` are the
    same test. So is a test of every key of the mapping the strip walks, in an `if` (or its
    `and` parts, or a name bound to it) around the loop: `if all(k.startswith("module.") for k
    in sd): sd = {k[7:]: v ...}`. An `any(...)` test, or an `all(...)` over another mapping,
    does not show that each stripped key has the prefix, and is flagged like no test. An
    exact test of the mapping's first key for `module.` in such an `if` is a guard too
    (`first = next(iter(sd))`; `if first.split(".")[0] == "module":`, `if
    list(sd)[0].startswith("module."):`): a wrapper's state dict has the prefix on every key and
    a bare model's on none; so is `first.split(".")[1] == "module"` (a wrapper saved inside
    another: `module.module.…`). `startswith("module")` without the dot is not exact (a bare
    Darknet's `module_list.…` matches it).

    The prefix may be a literal, a name bound to one, or a parameter that every call of its
    function in this file passes `"module."` for. Silent for other prefixes (`_orig_mod.` from
    `torch.compile`, `backbone.`), for a first-component drop that nothing ties to `module`,
    for a loop guarded by another prefix, and for a `module.` inside the key
    (`k.startswith("backbone.module.")`: only a sub-module was wrapped, not the model). A
    `replace` is not flagged in a file that wraps a sub-module in place (`model.encoder =
    nn.DataParallel(model.encoder)`): its keys hold `encoder.module.`, which only `replace`
    removes.

    ## Why is this bad?
    `str.lstrip` strips a set of characters, not a prefix: `"module.mlp.w".lstrip("module.")`
    is `"p.w"`, so any key whose name continues with one of `m o d u l e .` is mangled and the
    load fails or, with `strict=False`, silently skips it. `k[7:]` cuts seven characters from
    every key, also from a checkpoint saved from the bare model (`"fc.weight"` becomes
    `"ght"`). `replace` removes `module.` anywhere in a key, so a submodule named `module`
    loses its name. `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd,
    "module.")` strips the prefix only where it is present, in place, and renames the
    `_metadata` entries that `load_state_dict` reads too; the DDP documentation recommends it.

    ## Example
    ```python
    state_dict = torch.load("model.pt")
    state_dict = {k[7:]: v for k, v in state_dict.items()}
    ```

    Use instead:
    ```python
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    state_dict = torch.load("model.pt")
    consume_prefix_in_state_dict_if_present(state_dict, "module.")
    ```

    ## Fix safety
    The fix replaces a dict comprehension assigned to a name, `new = {k[7:]: v for k, v in
    sd.items()}`, by `new = dict(sd)` and `consume_prefix_in_state_dict_if_present(new,
    "module.")` (or by the call alone when the comprehension rebinds `sd` itself). It is unsafe:
    keys without the prefix are kept instead of being cut, and a rebound `sd` is changed in
    place, so other references to that dict see the new keys. Loops and other shapes get no fix.
    """

    code = "DPL013"
    name = "hand-rolled-strip"
    severity = Severity.ERROR
    summary = "`module.` prefix stripped by hand (`lstrip`, `k[7:]`, `replace`) instead of consume_prefix_in_state_dict_if_present"
    fix_applicability = Applicability.UNSAFE
    # A literal starting with "module" (lstrip, replace, startswith guards, len("module.")), or
    # the `[7:]` of an unguarded `k[7:]` over a state dict (which comes from `.state_dict()` or
    # a `*load*` call). Not plain "module": every file with `nn.modules` has it.
    tokens = ('"module', "'module", ("[7:]", "state_dict"), ("[7:]", "load"))
    anchor_tokens = ('"module', "'module", "[7:]")  # the strip is spelled here (the state dict may come from elsewhere)

    VALID = (
        # Guarded per key: strips exactly the prefix, only where it is present.
        "import torch\n"
        'sd = torch.load("dp.pt", map_location="cpu")\n'
        'sd = {(k.split("module.", 1)[1] if k.startswith("module.") else k): v for k, v in sd.items()}\n',
        # torch.compile's prefix, handled on purpose.
        "import torch\n"
        'sd = torch.load("compiled.pt")\n'
        'sd = {k.replace("_orig_mod.", ""): v for k, v in sd.items()}\n'
        'sd = {(k[10:] if k.startswith("_orig_mod.") else k): v for k, v in sd.items()}\n',
        # Another prefix of seven characters, guarded.
        "import torch\n"
        'sd = torch.load("m.pt")\n'
        'sd = {k[7:] if k.startswith("encoder") else k: v for k, v in sd.items()}\n',
        # Not a state dict: dplint can't tell what `names` holds.
        "def short(names):\n"
        "    return {k[7:]: v for k, v in names.items()}\n",
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "consume_prefix_in_state_dict_if_present(sd, 'module.')\n",
        # Only a sub-module was wrapped: `module.` sits inside the key.
        "import torch\n"
        'sd = torch.load("stage1.pt")\n'
        'sd = {k.replace("module.", ""): v for k, v in sd.items() if k.startswith("backbone.module.")}\n',
        # Every key has the prefix when the strip runs.
        "import torch\n"
        'sd = torch.load("dp.pt")\n'
        'if all(k.startswith("module.") for k in sd):\n'
        "    sd = {k[7:]: v for k, v in sd.items()}\n",
        # A per-key test spelled as a slice comparison.
        "import torch\n"
        'sd = torch.load("dp.pt")\n'
        'sd = {(k[7:] if k[:7] == "module." else k): v for k, v in sd.items()}\n',
        # The first component of another prefix.
        "import torch\n"
        'sd = torch.load("stage1.pt")\n'
        'enc = {".".join(k.split(".")[1:]): v for k, v in sd.items() if k.startswith("encoder.")}\n',
    )
    INVALID = (
        Example(
            "import torch\n"
            "\n"
            'state_dict = torch.load("model.pt", map_location="cpu")\n'
            "state_dict = {k[7:]: v for k, v in state_dict.items()}  # drop DataParallel's prefix\n"
            "model.load_state_dict(state_dict)\n",
            expected=(
                "import torch\n"
                "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
                "\n"
                'state_dict = torch.load("model.pt", map_location="cpu")\n'
                'consume_prefix_in_state_dict_if_present(state_dict, "module.")  # drop DataParallel\'s prefix\n'
                "model.load_state_dict(state_dict)\n"
            ),
        ),
        Example(
            "import torch\n"
            "\n"
            "def load(model, path):\n"
            '    checkpoint = torch.load(path)\n'
            '    weights = {k.lstrip("module."): v for k, v in checkpoint["model"].items()}\n'
            "    model.load_state_dict(weights)\n",
            expected=(
                "import torch\n"
                "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
                "\n"
                "def load(model, path):\n"
                '    checkpoint = torch.load(path)\n'
                '    weights = dict(checkpoint["model"])\n'
                '    consume_prefix_in_state_dict_if_present(weights, "module.")\n'
                "    model.load_state_dict(weights)\n"
            ),
        ),
        # A first-key check (the guarded in-place rename after it is correct, and silent).
        Example(
            "import torch\n"
            'sd = torch.load("dp.pt")\n'
            'skip = 1 if next(iter(sd)).startswith("module") else 0\n'
            'flat = {".".join(k.split(".")[skip:]): v for k, v in sd.items()}\n'
            "for k in list(sd.keys()):\n"
            '    if k.startswith("module."):\n'
            '        sd[k[len("module."):]] = sd.pop(k)\n',
            expected=(
                "import torch\n"
                "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
                'sd = torch.load("dp.pt")\n'
                'skip = 1 if next(iter(sd)).startswith("module") else 0\n'
                "flat = dict(sd)\n"
                'consume_prefix_in_state_dict_if_present(flat, "module.")\n'
                "for k in list(sd.keys()):\n"
                '    if k.startswith("module."):\n'
                '        sd[k[len("module."):]] = sd.pop(k)\n'
            ),
        ),
        # The classic snippet: a loop, guarded or not. No fix for loops.
        Example(
            "from collections import OrderedDict\n"
            "import torch\n"
            'ckpt = torch.load("dp.pt")\n'
            "clean = OrderedDict()\n"
            'for k, v in ckpt["state_dict"].items():\n'
            "    name = k[7:]  # remove `module.`\n"
            "    clean[name] = v\n"
            "for k in ckpt['state_dict']:\n"
            "    if k.startswith('module.'):\n"
            "        clean[k[7:]] = ckpt['state_dict'][k]\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for node, key, kind in _candidates(model):
            loop = _key_loop(model, node, key)
            if loop is None:
                continue
            guards = [prefix for scope, name in loop.guard_scopes for prefix in _startswith_prefixes(model, scope, name)]
            guarded = (
                any(prefix in GUARD_PREFIXES for prefix in guards)
                or _every_key_tested(model, loop)
                or _first_key_has_wrapper_prefix(model, loop)
            )
            if any(_module_inside(prefix) for prefix in guards) and kind != "lstrip":
                continue  # `backbone.module.`: only a sub-module was wrapped, not the model
            code = model.code(node)
            if kind == "lstrip":
                severity = Severity.ERROR
                message = (
                    f'`{code}` strips characters, not a prefix: `"module.mlp.w".lstrip("module.")` is `"p.w"`, '
                    f"so keys are mangled; {USE_INSTEAD}"
                )
            elif kind == "slice":
                if guards and not guarded:
                    continue  # another prefix of the same length, stripped on purpose
                if guarded:
                    continue  # guarded by `startswith("module")`: strips only the prefix, correctly
                elif holds_state_dict(model, loop.source, loop.node):
                    severity = Severity.WARNING
                    message = (
                        f"`{code}` cuts 7 characters from every key, also from keys without the `module.` prefix "
                        f"(a checkpoint saved from the bare model), corrupting them; {USE_INSTEAD}, which strips it "
                        "only where it is present"
                    )
                else:
                    continue
            elif kind == "split":
                if guards and not guarded:
                    continue
                if guarded:
                    continue  # guarded by `startswith("module")`: strips only the prefix, correctly
                else:
                    severity = Severity.WARNING
                    message = (
                        f"`{code}` cuts each key at a `module.` found anywhere in it, not only a leading prefix "
                        "(a key without it raises `IndexError` or is kept whole, a sub-module named `module` "
                        f"is cut); {USE_INSTEAD}"
                    )
            elif kind == "first":
                if guarded:
                    continue  # guarded by `startswith("module")`: strips only the prefix, correctly
                elif _first_key_test(model, node, loop):
                    severity = Severity.WARNING
                    message = (
                        f"`{code}` drops the first part of every key after checking only one key for `module`: "
                        "a key without the prefix (extra entries, a partly wrapped checkpoint) loses a real "
                        f"module name; {USE_INSTEAD}, which checks every key"
                    )
                else:
                    continue  # another prefix (`backbone.`): nothing says it is the wrapper's
            else:
                if guarded and _replaces_once(node):
                    continue  # `k.replace("module.", "", 1)` under a prefix guard: correct
                elif _wraps_submodule(model):
                    continue  # `model.encoder = DP(model.encoder)`: keys hold `encoder.module.`, inside
                else:
                    severity = Severity.WARNING
                    message = (
                        f"`{code}` removes `module.` anywhere in a key, not only the prefix (a submodule named "
                        f"`module` loses its name too); {USE_INSTEAD}"
                    )
            yield Violation(node, message, _fix(model, node, loop), severity=severity)


def _wraps_submodule(model: SemanticModel) -> bool:
    """This file wraps a sub-module in place (`model.encoder = nn.DataParallel(model.encoder)`),
    so its checkpoints hold `module.` inside the keys (`encoder.module.conv.weight`), where only
    `replace` reaches it. `self.model = DDP(self.model)` wraps a whole model."""
    for wrapping in constructions(model):
        assign = model.parent(wrapping.call)
        if not isinstance(assign, cst.Assign) or assign.value is not wrapping.call or wrapping.inner is None:
            continue
        inner = model.code(wrapping.inner)
        for target in assign.targets:
            key = model.code(target.target)
            if key == inner and isinstance(target.target, cst.Attribute) and (not key.startswith("self.") or key.count(".") >= 2):
                return True
    return False


def _guarded_message(code: str) -> str:
    return (
        f"`{code}` strips the `module.` prefix by hand; `consume_prefix_in_state_dict_if_present(state_dict, "
        '"module.")` does it in place, and also renames the `_metadata` entries that `load_state_dict` reads'
    )


def _candidates(model: SemanticModel) -> Iterator[tuple[cst.BaseExpression, str, str]]:
    """(expression, key variable, kind) for `k.lstrip("module.")`, `k.replace("module.", "")`
    ("lstrip", "replace"), `k[7:]` ("slice"), `k.split("module.", 1)[1]` /
    `k.partition("module.")[2]` ("split"), and the first-component drops `".".join(k.split(".")[1:])`,
    `k.split(".", 1)[1]`, `k.partition(".")[2]` ("first")."""
    for site in model.calls:
        method = method_call(site.node)
        if method is None or not isinstance(method[0], cst.Name) or method[1] not in ("lstrip", "replace"):
            continue
        old = _prefix_value(model, argument(site.node, 0), site.node)
        try:
            new = literal_value(argument(site.node, 1)) if method[1] == "replace" else ""
        except ValueError:
            continue
        # Exactly the wrapper's prefix: `k.replace("module.visual.trunk.", "")` strips another one.
        if old in GUARD_PREFIXES and new == "":
            yield site.node, method[0].value, method[1]
    for node in model.nodes_of(cst.Subscript):  # no second tree walk
        if len(node.slice) != 1:
            continue
        part = node.slice[0].slice
        if isinstance(node.value, cst.Name) and _cuts_prefix(model, part):
            yield node, node.value.value, "slice"
            continue
        cut = _cut_at(model, node)
        if cut is None:
            continue
        kind, key = cut
        if kind == "first" and isinstance(part, cst.Slice):
            join = model.parent(model.parent(node))  # Subscript -> Arg -> Call
            if not _is_dot_join(join):
                continue
            node = join
        yield node, key, kind


def _cut_at(model: SemanticModel, node: cst.Subscript) -> Optional[tuple[str, str]]:
    """("split" | "first", key) for `k.split(P, 1)[1]`, `k.split(P)[-1]`, `k.partition(P)[2]`
    (P the wrapper's prefix: "split"; P a dot: "first") and `k.split(".")[n:]` ("first")."""
    call = node.value
    if not isinstance(call, cst.Call):
        return None
    method = method_call(call)
    if method is None or not isinstance(method[0], cst.Name) or method[1] not in ("split", "partition"):
        return None
    separator = _prefix_value(model, argument(call, 0, "sep"), call)
    if separator in GUARD_PREFIXES:
        kind = "split"
    elif separator == ".":
        kind = "first"
    else:
        return None
    part = node.slice[0].slice
    if isinstance(part, cst.Slice):
        if kind == "first" and method[1] == "split" and part.lower is not None and part.upper is None and part.step is None:
            return kind, method[0].value
        return None
    try:
        index = literal_value(part.value) if isinstance(part, cst.Index) else None
    except ValueError:
        return None
    wanted = (2,) if method[1] == "partition" else (1, -1)
    if index not in wanted:
        return None
    if kind == "first" and method[1] == "split":
        try:
            if literal_value(argument(call, 1, "maxsplit")) != 1:
                return None
        except ValueError:
            return None
    return kind, method[0].value


def _is_dot_join(node: Optional[cst.CSTNode]) -> bool:
    if not isinstance(node, cst.Call) or len(node.args) != 1:
        return False
    method = method_call(node)
    if method is None or method[1] != "join":
        return False
    try:
        return literal_value(method[0]) == "."
    except ValueError:
        return False


def _prefix_value(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int = 3):
    """The string a prefix argument holds: a literal, a name bound to one, or a parameter that
    every call of its function in this file passes the same literal for; else None."""
    if expr is None or depth <= 0:
        return None
    try:
        return literal_value(expr)
    except ValueError:
        pass
    if not isinstance(expr, cst.Name):
        return None
    binding = model.binding_at(expr.value, at)
    if binding is None:
        return None
    if binding.value is not None:
        return _prefix_value(model, binding.value, binding.node, depth - 1)
    if not isinstance(binding.node, cst.Param):
        return None
    function = enclosing_function(model, binding.node)
    if not isinstance(function, cst.FunctionDef):
        return None
    passed = passed_for(model, function, binding.node)
    values = {_prefix_value(model, value, value, depth - 1) for value in passed}
    return values.pop() if len(values) == 1 and passed else None


def _cuts_prefix(model: SemanticModel, part: cst.BaseSlice) -> bool:
    """`[7:]` or `[len("module."):]`."""
    if not isinstance(part, cst.Slice) or part.upper is not None or part.step is not None:
        return False
    lower = part.lower
    if isinstance(lower, cst.Call) and isinstance(lower.func, cst.Name) and lower.func.value == "len" and len(lower.args) == 1:
        return _prefix_value(model, lower.args[0].value, lower) == PREFIX
    try:
        return literal_value(lower) == len(PREFIX)
    except ValueError:
        return False


def _key_loop(model: SemanticModel, node: cst.CSTNode, key: str, depth: int = 3) -> Optional[KeyLoop]:
    """The comprehension or `for` loop around `node` that binds `key` to a mapping's keys; for a
    key that is a parameter of a lambda or function (`cut = lambda name: ...`), the loop around
    a call of it whose argument is a loop's key (`{cut(k): v for k, v in sd.items()}`)."""
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, COMPREHENSIONS):
            comp_for: Optional[cst.CompFor] = ancestor.for_in
            while comp_for is not None:
                source = _mapping_of_keys(comp_for.target, comp_for.iter, key)
                if source is not None:
                    return KeyLoop(comp_for, ancestor, key, source, ((ancestor, key),))
                comp_for = comp_for.inner_for_in
        elif isinstance(ancestor, cst.For):
            source = _mapping_of_keys(ancestor.target, ancestor.iter, key)
            if source is not None:
                return KeyLoop(ancestor, ancestor, key, source, ((ancestor, key),))
        elif isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return _loop_around_calls(model, ancestor, key, depth) if depth > 0 else None
        elif isinstance(ancestor, cst.ClassDef):
            return None
    return None


def _loop_around_calls(model: SemanticModel, function: cst.CSTNode, key: str, depth: int) -> Optional[KeyLoop]:
    params = function.params
    names = [param.name.value for param in (*params.posonly_params, *params.params)]
    if not names or names[0] != key:
        return None
    if isinstance(function, cst.FunctionDef):
        name = function.name.value
    else:
        assign = model.parent(function)
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
            return None
        name = assign.targets[0].target.value
    for site in model.calls:
        call = site.node
        if isinstance(call.func, cst.Name) and call.func.value == name and call.args and isinstance(call.args[0].value, cst.Name):
            loop = _key_loop(model, call, call.args[0].value.value, depth - 1)
            if loop is not None:
                loop.guard_scopes = ((function, key), *loop.guard_scopes)
                return loop
    return None


def _mapping_of_keys(target: cst.BaseExpression, iterable: cst.BaseExpression, key: str) -> Optional[cst.BaseExpression]:
    """X for `k in X`, `k in X.keys()`, `k in list(X.keys())` (a copy, to rename in place) and
    `k, v in X.items()`; None for anything else."""
    if (
        isinstance(iterable, cst.Call)
        and isinstance(iterable.func, cst.Name)
        and iterable.func.value in ("list", "tuple")
        and len(iterable.args) == 1
        and not iterable.args[0].star
    ):
        iterable = iterable.args[0].value
    method = method_call(iterable) if isinstance(iterable, cst.Call) and not iterable.args else None
    if isinstance(target, cst.Name) and target.value == key:
        if method is not None and method[1] == "keys":
            return method[0]
        return None if isinstance(iterable, cst.Call) else iterable
    if (
        isinstance(target, (cst.Tuple, cst.List))
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
        and target.elements[0].value.value == key
        and method is not None
        and method[1] == "items"
    ):
        return method[0]
    return None


def _startswith_prefixes(model: SemanticModel, owner: cst.CSTNode, key: str) -> list[str]:
    """The literal prefixes `key.startswith(...)` (or `"..." in key`) tests anywhere in the loop
    or comprehension."""
    prefixes: list[str] = []

    class Finder(cst.CSTVisitor):
        def visit_Comparison(self, node: cst.Comparison) -> None:
            for target in node.comparisons:
                if isinstance(target.operator, cst.In) and isinstance(target.comparator, cst.Name) and target.comparator.value == key:
                    value = _prefix_value(model, node.left, node)
                    if isinstance(value, str):
                        prefixes.append(value)
            value = _equal_head_prefix(model, node, key)
            if value is not None:
                prefixes.append(value)

        def visit_Call(self, node: cst.Call) -> None:
            method = method_call(node)
            if method and method[1] == "startswith" and isinstance(method[0], cst.Name) and method[0].value == key:
                value = _prefix_value(model, argument(node, 0), node)
                if isinstance(value, str):
                    prefixes.append(value)

    walk(owner, Finder())
    return prefixes


def _key_prefix_test(model: SemanticModel, test: cst.BaseExpression, key: str) -> Optional[str]:
    """The prefix a test of one key checks: `key.startswith(P)`, `key[:7] == P`, `key.split(".")[0]
    == "module"` (see `_equal_head_prefix`); else None."""
    if isinstance(test, cst.Call):
        method = method_call(test)
        if method and method[1] == "startswith" and isinstance(method[0], cst.Name) and method[0].value == key:
            value = _prefix_value(model, argument(test, 0), test)
            return value if isinstance(value, str) else None
    if isinstance(test, cst.Comparison):
        return _equal_head_prefix(model, test, key)
    return None


def _equal_head_prefix(model: SemanticModel, node: cst.Comparison, key: str) -> Optional[str]:
    """The prefix P that `key[:len(P)] == P` (also through a name, `head = key[:7]; head ==
    P`), `key.split(".")[0] == "module"` or `key.find(P) == 0` tests, on either side of `==`:
    the same per-key test as `key.startswith(P)`."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, cst.Equal):
        return None
    sides = (node.left, node.comparisons[0].comparator)
    for head, other in (sides, sides[::-1]):
        literal = _prefix_value(model, other, node)
        if not isinstance(literal, str):
            continue
        if isinstance(head, cst.Name) and head.value != key:
            head = model.value_at(head, node)  # `head = k[:7]` first
        if isinstance(head, cst.Subscript) and len(head.slice) == 1:
            part = head.slice[0].slice
            if isinstance(head.value, cst.Name) and head.value.value == key and isinstance(part, cst.Slice):
                if part.lower is None and part.step is None and _slice_length(model, part.upper) == len(literal):
                    return literal  # `key[:7] == "module."`
            call = head.value
            method = method_call(call) if isinstance(call, cst.Call) else None
            if (method and method[1] == "split" and isinstance(method[0], cst.Name) and method[0].value == key
                    and _prefix_value(model, argument(call, 0, "sep"), call) == "." and isinstance(part, cst.Index)
                    and _literal_or_none(part.value) == 0 and "." not in literal):
                return literal + "."  # `key.split(".")[0] == "module"`: the first component
        if isinstance(head, cst.Call) and _literal_or_none(other) == 0:
            method = method_call(head)
            if method and method[1] in ("find", "index") and isinstance(method[0], cst.Name) and method[0].value == key:
                value = _prefix_value(model, argument(head, 0), head)
                return value if isinstance(value, str) else None
    return None


def _slice_length(model: SemanticModel, upper: Optional[cst.BaseExpression]) -> Optional[int]:
    """7 for `[:7]` and `[:len("module.")]`."""
    if isinstance(upper, cst.Call) and isinstance(upper.func, cst.Name) and upper.func.value == "len" and len(upper.args) == 1:
        value = _prefix_value(model, upper.args[0].value, upper)
        return len(value) if isinstance(value, str) else None
    value = _literal_or_none(upper)
    return value if isinstance(value, int) else None


def _literal_or_none(expr: Optional[cst.BaseExpression]):
    if expr is None:
        return None
    try:
        return literal_value(expr)
    except ValueError:
        return None


def _every_key_tested(model: SemanticModel, loop: KeyLoop) -> bool:
    """The strip runs only when every key of its mapping has the wrapper's prefix: under `if
    all(k.startswith("module.") for k in sd):` (or `all(...)` bound to a name first, or joined
    with `and`), where `sd` is the mapping the loop walks. `any(...)` is not such a test: keys
    without the prefix may be there, and lose seven characters."""
    wanted = model.code(loop.source)
    return any(_all_keys_have_prefix(model, test, wanted) for test in _tests_around(model, loop))


def _tests_around(model: SemanticModel, loop: KeyLoop) -> Iterator[cst.BaseExpression]:
    """The tests that hold wherever the loop runs: the `and` parts of each `if` (or conditional
    expression) whose body holds it, up to the enclosing function."""
    child: cst.CSTNode = loop.owner
    for ancestor in model.ancestors(loop.owner):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body:
            yield from _conjuncts(model, ancestor.test)
        child = ancestor


def _conjuncts(model: SemanticModel, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of `a and b` (a name is followed to the value it was bound to)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_conjuncts(model, test.left), *_conjuncts(model, test.right)]
    if isinstance(test, cst.Name):
        value = model.value_at(test, test)
        return [value] if value is not None and value is not test else []
    return [test]


def _all_keys_have_prefix(model: SemanticModel, test: cst.BaseExpression, mapping: str) -> bool:
    """`all(k.startswith("module.") for k in sd)` (or `sd.keys()`, a list comprehension) for
    the mapping spelled `mapping`."""
    if not (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "all" and len(test.args) == 1):
        return False
    comp = test.args[0].value
    if not isinstance(comp, (cst.GeneratorExp, cst.ListComp)) or comp.for_in.inner_for_in is not None or comp.for_in.ifs:
        return False
    target = comp.for_in.target
    if not isinstance(target, cst.Name):
        return False
    source = _mapping_of_keys(target, comp.for_in.iter, target.value)
    if source is None or model.code(source) != mapping:
        return False
    return _key_prefix_test(model, comp.elt, target.value) in GUARD_PREFIXES


def _first_key_has_wrapper_prefix(model: SemanticModel, loop: KeyLoop) -> bool:
    """The strip runs only under an `if` (around the loop, in this function) that tests the
    first key of the mapping it walks for the exact wrapper prefix: `first = next(iter(sd))`
    then `if first.split(".")[0] == "module":` (or `first.startswith("module.")`, `first[:7]
    == "module."`), or `if list(sd)[0].startswith("module."):`. A wrapper's state dict has the
    prefix on every key and a bare model's on none, so one key decides. `startswith("module")`
    without the dot is not exact (`module_list.0.conv` of a bare Darknet also matches)."""
    wanted = model.code(loop.source)
    return any(_tests_first_key(model, test, wanted) for test in _tests_around(model, loop))


def _tests_first_key(model: SemanticModel, test: cst.BaseExpression, mapping: str) -> bool:
    """`first.split(".")[0] == "module"` / `first.startswith("module.")` with `first` bound to
    the first key of `mapping`, or `next(iter(mapping)).startswith("module.")` in place."""
    if isinstance(test, cst.Call):
        method = method_call(test)
        if method and method[1] == "startswith" and _is_first_key(model, method[0], mapping, test):
            return _prefix_value(model, argument(test, 0), test) == "module."
    for name in _names_in(test):
        value = model.value_at(name, test)
        if value is not None and value is not name and _is_first_key(model, value, mapping, test):
            return _key_prefix_test(model, test, name.value) == "module." or _nested_wrapper_test(model, test, name.value)
    return False


def _nested_wrapper_test(model: SemanticModel, test: cst.BaseExpression, key: str) -> bool:
    """`key.split(".")[1] == "module"`: the key's second part is a wrapper's (`module.module.…`,
    a wrapper saved inside another), so cutting the outer `module.` leaves the inner prefix."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    for head, other in ((test.left, test.comparisons[0].comparator), (test.comparisons[0].comparator, test.left)):
        if _prefix_value(model, other, test) != "module" or not isinstance(head, cst.Subscript) or len(head.slice) != 1:
            continue
        part = head.slice[0].slice
        call = head.value
        method = method_call(call) if isinstance(call, cst.Call) else None
        if (method and method[1] == "split" and isinstance(method[0], cst.Name) and method[0].value == key
                and _prefix_value(model, argument(call, 0, "sep"), call) == "." and isinstance(part, cst.Index)
                and _literal_or_none(part.value) == 1):
            return True
    return False


def _names_in(test: cst.BaseExpression) -> list[cst.Name]:
    """The plain names `test` reads on the key's side: `first` in `first.split(".")[0] == ...`."""
    found: list[cst.Name] = []
    if isinstance(test, cst.Call):
        method = method_call(test)
        if method and isinstance(method[0], cst.Name):
            found.append(method[0])
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        for side in (test.left, test.comparisons[0].comparator):
            while isinstance(side, (cst.Subscript, cst.Call)):
                side = side.value if isinstance(side, cst.Subscript) else (method_call(side) or (None,))[0]
            if isinstance(side, cst.Name):
                found.append(side)
    return found


def _is_first_key(model: SemanticModel, expr, mapping: str, at: cst.CSTNode) -> bool:
    """`next(iter(X))`, `list(X)[0]`, `list(X.keys())[0]` for X spelled `mapping`."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "next" and expr.args:
        inner = expr.args[0].value
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name) and inner.func.value == "iter" and inner.args:
            return _spells_mapping(model, inner.args[0].value, mapping)
        return False
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        if _literal_or_none(expr.slice[0].slice.value) != 0:
            return False
        listed = expr.value
        if isinstance(listed, cst.Call) and isinstance(listed.func, cst.Name) and listed.func.value == "list" and listed.args:
            return _spells_mapping(model, listed.args[0].value, mapping)
    return False


def _spells_mapping(model: SemanticModel, expr: cst.BaseExpression, mapping: str) -> bool:
    method = method_call(expr) if isinstance(expr, cst.Call) and not expr.args else None
    if method is not None and method[1] == "keys":
        expr = method[0]
    return model.code(expr) == mapping


def _module_inside(prefix: str) -> bool:
    """`backbone.module.`: a `module.` inside the key, where a sub-module was wrapped."""
    return "module" in prefix and not prefix.startswith("module")


def _first_key_test(model: SemanticModel, node: cst.CSTNode, loop: KeyLoop) -> bool:
    """Whether dropping the first component is decided by a test for `module` on something
    other than each key: the slice start (`start = 1 if next(iter(sd)).startswith("module")
    else 0`), or an `if` around the loop (`if list(sd)[0].startswith("module."):`)."""
    tests: list[cst.CSTNode] = []
    subscript = node.args[0].value if isinstance(node, cst.Call) else None
    if isinstance(subscript, cst.Subscript):
        part = subscript.slice[0].slice
        lower = part.lower if isinstance(part, cst.Slice) else None
        value = model.value_at(lower, lower) if isinstance(lower, cst.Name) else None
        if value is not None:
            tests.append(value)
    for ancestor in model.ancestors(loop.owner):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            tests.append(ancestor.test)
    return any(_tests_for_module(model, test) for test in tests)


def _tests_for_module(model: SemanticModel, expr: cst.CSTNode) -> bool:
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            method = method_call(node)
            if method and method[1] == "startswith" and _prefix_value(model, argument(node, 0), node) in GUARD_PREFIXES:
                found = True

        def visit_Comparison(self, node: cst.Comparison) -> None:
            nonlocal found
            if any(isinstance(t.operator, cst.In) for t in node.comparisons):
                found = found or _prefix_value(model, node.left, node) in GUARD_PREFIXES

    walk(expr, Finder())
    return found


def _replaces_once(call: cst.Call) -> bool:
    try:
        return literal_value(argument(call, 2, "count")) == 1
    except ValueError:
        return False


def _fix(model: SemanticModel, node: cst.CSTNode, loop: KeyLoop) -> Optional[Fix]:
    """`new = {k[7:]: v for k, v in sd.items()}` -> `new = dict(sd)` + consume_prefix(new)."""
    comp = loop.owner
    if not isinstance(comp, cst.DictComp) or comp.for_in is not loop.node:
        return None
    comp_for = comp.for_in
    if comp_for.ifs or comp_for.inner_for_in is not None or comp_for.asynchronous is not None:
        return None
    target = comp_for.target
    if not (isinstance(target, cst.Tuple) and isinstance(comp.value, cst.Name)
            and isinstance(target.elements[1].value, cst.Name) and comp.value.value == target.elements[1].value.value):
        return None
    if not _is_stripped_key(comp.key, node, loop.key):
        return None
    assign = model.parent(comp)
    statement = model.parent(assign)
    if not (
        isinstance(assign, cst.Assign)
        and assign.value is comp
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
    ):
        return None
    local, import_edit = ensure_import(model, CONSUME_PREFIX_MODULE, CONSUME_PREFIX_NAME, statement)
    if import_edit is None and CONSUME_PREFIX not in model.imports.values():
        return None
    name = assign.targets[0].target.value
    call = f'{local}({name}, "module.")'
    source = loop.source
    if isinstance(source, cst.Name) and source.value == name:
        edits = [Edit(assign, call)]
    else:
        edits = [Edit(comp, f"dict({model.code(source)})"), Edit(statement, call, EditKind.INSERT_AFTER_STATEMENT)]
    if import_edit is not None:
        edits.append(import_edit)
    return Fix(Applicability.UNSAFE, 'Use `consume_prefix_in_state_dict_if_present(..., "module.")`', tuple(edits))


def _is_stripped_key(key_expr: cst.BaseExpression, node: cst.CSTNode, key: str) -> bool:
    """The comprehension's key is the flagged expression, or `<it> if k.startswith(...) else k`."""
    if key_expr is node:
        return True
    return (
        isinstance(key_expr, cst.IfExp)
        and key_expr.body is node
        and isinstance(key_expr.orelse, cst.Name)
        and key_expr.orelse.value == key
    )
