"""DPL004 strip-module: a `module.`-prefixed state_dict loaded into a bare model."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import (
    CONSUME_PREFIX,
    CONSUME_PREFIX_MODULE,
    CONSUME_PREFIX_NAME,
    StateDictLoad,
    checkpoint_facts,
    fresh_name,
    has_multiline_string,
    literal_key,
    shapes_may_match,
    wrapper_kind_name,
)
from dplint.fixes import ensure_import
from dplint.rule import Applicability, Edit, EditKind, Example, Finding, Fix, Position, Rule, Severity, Violation
from dplint.semantic import SemanticModel

# Where a load_state_dict call may sit for the state dict to be prepared on the line above it:
# nothing between it and its statement may run it conditionally (`a if c else b`, `x or y`,
# a lambda or a comprehension).
_PLAIN_CONTEXTS = (cst.Expr, cst.Assign, cst.AnnAssign, cst.Return, cst.Arg, cst.Call, cst.Await)


def _torch_error(class_name: Optional[str]) -> str:
    owner = class_name or "<model>"
    return (
        f"`RuntimeError: Error(s) in loading state_dict for {owner}: Missing key(s) in state_dict: ... "
        f'Unexpected key(s) in state_dict: "module.…`'
    )


def _message(target: str, class_name: Optional[str], origin: str, strict_false: bool) -> str:
    consequence = (
        "with `strict=False` it loads nothing and says nothing (every key comes back missing and unexpected)"
        if strict_false
        else f"torch raises {_torch_error(class_name)}"
    )
    return (
        f"`{target}` is a bare model but gets {origin}, whose keys all start with `module.`: {consequence}; "
        f'strip the prefix with `consume_prefix_in_state_dict_if_present(state_dict, "module.")`'
    )


def _keys_text(keys) -> str:
    return "".join(f"[{key!r}]" for key in keys)


class StripModule(Rule):
    """
    ## What it does
    Flags a state dict with `module.`-prefixed keys loaded into a bare (unwrapped) model: the
    state dict is a `nn.DataParallel` / `DistributedDataParallel` wrapper's `state_dict()`, or
    comes from a checkpoint path that this file (or, when dplint checks several files in one
    run, another file) saved a wrapper's `state_dict()` to.

    Checkpoints are matched by path: a literal (or `os.path.join` of literals), the same
    variable, or the same attribute of the same object (`handle.name`) in one file; across
    files, and inside one file when the path is computed, by the path's shape when its file
    name says which file it is (`f"{out}/last.pt"` and `os.path.join(ckpt_dir, "last.pt")` are
    both `*/last.pt`; `"checkpoint_{}.tar".format(epoch)` is `checkpoint_*.tar`; a name with a
    literal stem of at least 5 characters, such as `log_dir + "/segnet" + suffix` called with
    `suffix="_best"`), and by the literal keys inside the saved dict. Two shapes match when
    their file names agree and a computed folder may stand for the other's (`f"./{out}/best({i}).th"`
    is `*/best(*).th` and matches `os.path.join("runs", f"best({n}).th")`); in one file, a
    computed path held in a name and the same expression spelled inline (over the same bindings)
    are one file. The target is bare when built by a constructor, by a name bound only to
    classes (`Arch = ResNet` ... `Arch()`), or when the same function wraps it in
    DataParallel/DDP after the load (`net = build_net()`, load, `net = nn.DataParallel(net)`). The save and the load may
    go through helpers: a function or method that `torch.save`s its parameter or the
    parameter's `state_dict()` (its path read with the caller's arguments), one that returns
    `torch.load(...)`, in this file or in the project file it is imported from. The wrapper is
    judged per path (see `save-wrapped-state-dict`): a load on the branch where the model is
    bare is not flagged. Silent when no save of the project writes a wrapper's state dict to a
    path of that shape (a checkpoint the user passes, a download), or when the path's file name
    is computed (`f"{run}.pt"`).

    ## Why is this bad?
    A wrapper keeps the model as its attribute `module`, so every key of its state dict starts
    with `module.`. A bare model has no such attribute, and `load_state_dict` (strict by default)
    raises (torch 2.13):

        RuntimeError: Error(s) in loading state_dict for Net:
            Missing key(s) in state_dict: "fc.weight", "fc.bias".
            Unexpected key(s) in state_dict: "module.fc.weight", "module.fc.bias".

    With `strict=False` it raises nothing and loads nothing: every key is returned as missing
    and unexpected, and the model keeps its random initialisation.

    ## Example
    ```python
    torch.save(model_dp.state_dict(), "model.pt")  # model_dp = nn.DataParallel(net)
    ...
    net = Net()
    net.load_state_dict(torch.load("model.pt"))
    ```

    Use instead:
    ```python
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    net = Net()
    state_dict = torch.load("model.pt")
    consume_prefix_in_state_dict_if_present(state_dict, "module.")
    net.load_state_dict(state_dict)
    ```
    or save `model_dp.module.state_dict()` in the first place (see `save-wrapped-state-dict`).

    ## Fix safety
    The fix puts the state dict in a variable (or reuses the one that holds it), strips the
    prefix in place with `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present` (it
    also renames `_metadata`, and does nothing when no key has the prefix), and adds that import
    once. It is safe: the load it changes raises today. It is unsafe when the reused variable is
    read again after the load (that code would see the stripped keys). Findings that link files
    (a checkpoint saved by another script) have no automatic fix.
    """

    code = "DPL004"
    name = "strip-module"
    severity = Severity.ERROR
    summary = "a `module.`-prefixed state_dict (from a DataParallel/DDP wrapper) loaded into a bare model"
    fix_applicability = Applicability.SAFE
    tokens = ("state_dict",)

    VALID = (
        # The inner model's state dict has no prefix.
        "import torch\nimport torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "model_dp = nn.DataParallel(net)\n"
        'torch.save(model_dp.module.state_dict(), "m.pt")\n'
        "fresh = nn.Linear(2, 2)\n"
        'fresh.load_state_dict(torch.load("m.pt"))\n',
        # Loading into the wrapper's inner module from its own (unprefixed) state dict.
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(Net())\n"
        'model.module.load_state_dict(torch.load("bare.pt"))\n',
        # The prefix is already stripped.
        "import torch\nimport torch.nn as nn\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "model_dp = nn.DataParallel(nn.Linear(2, 2))\n"
        'torch.save(model_dp.state_dict(), "m.pt")\n'
        'sd = torch.load("m.pt")\n'
        'consume_prefix_in_state_dict_if_present(sd, "module.")\n'
        "nn.Linear(2, 2).load_state_dict(sd)\n",
        # The target is a parameter: it may be a wrapper too. Say nothing.
        "import torch\nimport torch.nn as nn\n"
        "def restore(model):\n"
        "    model.load_state_dict(nn.DataParallel(nn.Linear(2, 2)).state_dict())\n",
    )
    INVALID = (
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "\n"
            "model_dp = nn.DataParallel(nn.Linear(4, 2))\n"
            'torch.save(model_dp.state_dict(), "dp.pt")\n'
            "net = nn.Linear(4, 2)\n"
            'net.load_state_dict(torch.load("dp.pt", map_location="cpu"))\n',
            expected=(
                "import torch\n"
                "import torch.nn as nn\n"
                "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
                "\n"
                "model_dp = nn.DataParallel(nn.Linear(4, 2))\n"
                'torch.save(model_dp.state_dict(), "dp.pt")\n'
                "net = nn.Linear(4, 2)\n"
                'state_dict = torch.load("dp.pt", map_location="cpu")\n'
                'consume_prefix_in_state_dict_if_present(state_dict, "module.")\n'
                "net.load_state_dict(state_dict)\n"
            ),
        ),
        Example(
            "import torch\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "from models import Net\n"
            "\n"
            "\n"
            "def export(net):\n"
            "    ddp = DDP(net)\n"
            "    weights = ddp.state_dict()\n"
            "    cpu_copy = Net()\n"
            "    cpu_copy.load_state_dict(weights)  # copy for export\n"
            "    return cpu_copy\n",
            expected=(
                "import torch\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "from models import Net\n"
                "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
                "\n"
                "\n"
                "def export(net):\n"
                "    ddp = DDP(net)\n"
                "    weights = ddp.state_dict()\n"
                "    cpu_copy = Net()\n"
                '    consume_prefix_in_state_dict_if_present(weights, "module.")\n'
                "    cpu_copy.load_state_dict(weights)  # copy for export\n"
                "    return cpu_copy\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        facts = checkpoint_facts(model)
        for load in facts.loads:
            if not load.target_is_bare or load.prefix_consumed:
                continue
            origin = self._origin(model, load)
            if origin is None:
                continue
            yield Violation(
                node=load.call,
                message=_message(model.code(load.target), load.bare_class, origin, load.strict_false),
                fix=self._fix(model, load),
            )

    @staticmethod
    def _origin(model: SemanticModel, load: StateDictLoad) -> Optional[str]:
        """How the prefixed state dict reaches this load, in words; None when it does not."""
        def line(node: cst.CSTNode) -> int:
            return model.position(node)[0].line

        found = load.wrapper_state_dict
        if found is not None:
            kind = wrapper_kind_name(found.wrapping)
            where = "" if line(found.call) == line(load.call) else f" (line {line(found.call)})"
            return f"`{model.code(found.receiver)}.state_dict()` of a {kind}{where}"
        if load.loaded is None:
            return None
        saves = checkpoint_facts(model).wrapper_saves_of(load.loaded)
        if not saves:
            return None
        save = saves[0]
        kind = wrapper_kind_name(save.state_dict.wrapping)
        return (
            f"the checkpoint {save.path.text}{_keys_text(save.keys)} that line {line(save.save)} saves from "
            f"`{model.code(save.state_dict.receiver)}.state_dict()` of a {kind}"
        )

    @staticmethod
    def _fix(model: SemanticModel, load: StateDictLoad) -> Optional[Fix]:
        arg = load.argument
        statement = model.statement_of(load.call)
        if (
            arg is None
            or not isinstance(statement, cst.SimpleStatementLine)
            or len(statement.body) != 1  # `a = f(); m.load_state_dict(sd)`: the line above is too early
            or has_multiline_string(arg)
        ):
            return None
        node: cst.CSTNode = load.call
        while node is not statement:
            parent = model.parent(node)
            if parent is statement:
                break
            if not isinstance(parent, _PLAIN_CONTEXTS):
                return None
            node = parent
        local, import_edit = ensure_import(model, CONSUME_PREFIX_MODULE, CONSUME_PREFIX_NAME, statement)
        if import_edit is None and CONSUME_PREFIX not in model.imports.values():
            return None
        root, keys = _root_and_keys(arg)
        if root is not None:
            # Strip the prefix in place on the variable that holds the state dict.
            edits = [Edit(statement, f'{local}({model.code(arg)}, "module.")', EditKind.INSERT_BEFORE_STATEMENT)]
            safe = not _read_after(model, root, keys, load.call)
        else:
            name = fresh_name(model, "state_dict")
            edits = [
                Edit(statement, f'{name} = {model.code(arg)}\n{local}({name}, "module.")', EditKind.INSERT_BEFORE_STATEMENT),
                Edit(arg, name),
            ]
            safe = True
        if import_edit is not None:
            edits.append(import_edit)  # last: when both insert at one point, the import goes first
        return Fix(
            Applicability.SAFE if safe else Applicability.UNSAFE,
            'Strip the `module.` prefix with `consume_prefix_in_state_dict_if_present(..., "module.")` before loading',
            tuple(edits),
        )

    # ------------------------------------------------------------------ across files
    def project_facts(self, model: SemanticModel) -> Optional[dict]:
        facts = checkpoint_facts(model)
        saves = []
        for save in facts.saves:
            if save.path.shape is None:
                continue
            start, _ = model.position(save.save)
            saves.append(
                {
                    "path": save.path.shape,
                    "keys": list(save.keys),
                    "line": start.line,
                    "column": start.column,
                    "wrapper": wrapper_kind_name(save.state_dict.wrapping),
                    "receiver": model.code(save.state_dict.receiver),
                }
            )
        loads = []
        for load in facts.loads:
            loaded = load.loaded
            if (
                not load.target_is_bare
                or load.prefix_consumed
                or load.wrapper_state_dict is not None
                or loaded is None
                or loaded.path.shape is None
                or facts.wrapper_saves_of(loaded)  # reported by `check`
            ):
                continue
            start, end = model.position(load.call)
            loads.append(
                {
                    "path": loaded.path.shape,
                    "keys": list(loaded.keys),
                    "line": start.line,
                    "column": start.column,
                    "end_line": end.line,
                    "end_column": end.column,
                    "target": model.code(load.target),
                    "class": load.bare_class,
                    "strict_false": load.strict_false,
                }
            )
        if loads:
            loads = _unsuppressed(model, loads, self.code)
        if not saves and not loads:
            return None
        return {"saves": saves, "loads": loads}

    @classmethod
    def check_project(cls, facts_by_path: dict[str, dict]) -> Iterator[Finding]:
        saved: list[tuple[str, dict]] = [
            (path, save) for path in sorted(facts_by_path) for save in facts_by_path[path].get("saves", ())
        ]
        for path in sorted(facts_by_path):
            for load in facts_by_path[path].get("loads", ()):
                # The saver may be this file too when the path is computed (`*` in its shape: in
                # a helper, or in another function with another variable); a literal path in
                # one file is matched by `check`.
                savers = sorted(
                    ((file, save) for file, save in saved
                     if save["keys"] == load["keys"] and shapes_may_match(save["path"], load["path"])
                     and (file != path or "*" in save["path"])),
                    key=lambda found: (found[0] == path, found[1]["path"] != load["path"]),
                )
                if not savers:
                    continue
                file, save = savers[0]
                shown = repr(save["path"]) if "*" not in save["path"] else f"`{save['path']}`"
                origin = (
                    f"the checkpoint {shown}{_keys_text(save['keys'])} that {file}:{save['line']} saves "
                    f"from `{save['receiver']}.state_dict()` of a {save['wrapper']}"
                )
                yield Finding(
                    code=cls.code,
                    name=cls.name,
                    message=_message(load["target"], load["class"], origin, load["strict_false"]),
                    severity=cls.severity,
                    filename=path,
                    location=Position(load["line"], load["column"] + 1),
                    end_location=Position(load["end_line"], load["end_column"] + 1),
                )


def _unsuppressed(model: SemanticModel, loads: list[dict], code: str) -> list[dict]:
    """The loads whose line no `# noqa: DPL004` / `# dplint: ignore[strip-module]` silences.

    Findings from `check_project` are added after the per-file suppressions ran, so a load
    that the user silenced is left out of the facts here.
    """
    from dplint.suppressions import MAY_HAVE_DIRECTIVE, find_directives

    text = model.text
    if not MAY_HAVE_DIRECTIVE.search(text):
        return loads
    directives = find_directives(text) or []
    return [
        load
        for load in loads
        if not any(d.target_row in (None, load["line"]) and d.covers(code) for d in directives)
    ]


def _root_and_keys(expr: cst.BaseExpression) -> tuple[Optional[str], tuple[str, ...]]:
    """`ckpt["model"]` -> ("ckpt", ("model",)); `sd` -> ("sd", ()); anything else -> (None, ())."""
    keys: list[str] = []
    while literal_key(expr) is not None:
        keys.insert(0, literal_key(expr))
        expr = expr.value
    if isinstance(expr, cst.Name):
        return expr.value, tuple(keys)
    return None, ()


def _read_after(model: SemanticModel, root: str, keys: tuple[str, ...], call: cst.Call) -> bool:
    """Whether `root` is read after the load, other than as `root["another key"]`."""
    after = model.order(call)
    for node, _, order in model.references.get(root, ()):
        if order <= after or call in set(model.ancestors(node)):
            continue
        parent = model.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if keys and isinstance(parent, cst.Subscript) and literal_key(parent) not in (None, keys[0]):
            continue
        return True
    return False
