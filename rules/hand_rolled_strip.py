"""DPL013 hand-rolled-strip: `k[7:]`, `k.replace("module.", "")`, `k.lstrip("module.")` over
a state dict's keys."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import CONSUME_PREFIX, CONSUME_PREFIX_MODULE, CONSUME_PREFIX_NAME, holds_state_dict
from dplint.fixes import ensure_import
from dplint.key_edits import (
    FIRST, LSTRIP, REPLACE, SLICE, SPLIT, WRAPPER_PREFIXES, KeyEdit, KeyLoop, every_key_has_prefix,
    first_key_has_wrapper_prefix, key_loop, module_inside, one_key_decides, prefix_edits, replaces_once,
    tested_prefixes, wraps_submodule_in_place,
)
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel

USE_INSTEAD = 'use `consume_prefix_in_state_dict_if_present(state_dict, "module.")`'
MESSAGES = {
    LSTRIP: '`{code}` strips characters, not a prefix: `"module.mlp.w".lstrip("module.")` is `"p.w"`, '
            "so keys are mangled; {use}",
    SLICE: "`{code}` cuts 7 characters from every key, also from keys without the `module.` prefix "
           "(a checkpoint saved from the bare model), corrupting them; {use}, which strips it only where it is present",
    SPLIT: "`{code}` cuts each key at a `module.` found anywhere in it, not only a leading prefix "
           "(a key without it raises `IndexError` or is kept whole, a sub-module named `module` is cut); {use}",
    FIRST: "`{code}` drops the first part of every key after checking only one key for `module`: "
           "a key without the prefix (extra entries, a partly wrapped checkpoint) loses a real "
           "module name; {use}, which checks every key",
    REPLACE: "`{code}` removes `module.` anywhere in a key, not only the prefix (a submodule named "
             "`module` loses its name too); {use}",
}


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
    a bare model's on none. `startswith("module")` without the dot is not exact (a bare
    Darknet's `module_list.…` matches it), nor is `first.split(".")[1] == "module"` (a
    sub-module wrapped in place: `encoder.module.…`).

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
        for edit in prefix_edits(model):
            loop = key_loop(model, edit.node, edit.key)
            if loop is not None and _wrong(model, edit, loop):
                message = MESSAGES[edit.kind].format(code=model.code(edit.node), use=USE_INSTEAD)
                severity = Severity.ERROR if edit.kind == LSTRIP else Severity.WARNING
                yield Violation(edit.node, message, _fix(model, edit.node, loop), severity=severity)


def _wrong(model: SemanticModel, edit: KeyEdit, loop: KeyLoop) -> bool:
    """Whether the edit can cut what is not the wrapper's prefix from some key."""
    if edit.kind == LSTRIP:
        return True  # a character set, whatever guards it
    prefixes = tested_prefixes(model, loop)
    if any(module_inside(prefix) for prefix in prefixes):
        return False  # `backbone.module.`: only a sub-module was wrapped, not the model
    # Each key is tested for the prefix, every key has it, or the first key's exact test decides.
    guarded = (any(prefix in WRAPPER_PREFIXES for prefix in prefixes) or every_key_has_prefix(model, loop)
               or first_key_has_wrapper_prefix(model, loop))
    if edit.kind == REPLACE:
        # `k.replace("module.", "", 1)` under a guard is exact; where a sub-module is wrapped in
        # place the keys hold `encoder.module.`, which only `replace` reaches.
        return not (guarded and replaces_once(edit.node)) and not wraps_submodule_in_place(model)
    if guarded:
        return False
    if edit.kind == FIRST:
        return one_key_decides(model, edit, loop)  # else another prefix (`backbone.`): not the wrapper's
    if prefixes:
        return False  # another prefix of the same length, cut on purpose
    return edit.kind == SPLIT or holds_state_dict(model, loop.source, loop.node)


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
