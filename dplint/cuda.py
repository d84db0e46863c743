"""What initialises CUDA, and what had certainly happened to torch and CUDA before a statement.

The facts (torch 2.13, re-checked by wrapping `torch._C._cuda_getDeviceCount` and
`torch.cuda._lazy_init` on the CPU wheel and reading `torch/cuda/__init__.py`):

* `import torch` (and `torch.nn.parallel`, `torch.distributed`, `torch.utils.data`) makes no
  device query: `torch.cuda.is_initialized()` stays False.
* Initialise CUDA (the driver reads `CUDA_VISIBLE_DEVICES` then, once):
  `torch.cuda.is_available()` (`_cuda_getDeviceCount`, i.e. `cudaGetDeviceCount` -> `cuInit`),
  `set_device`, `current_device`, `get_device_name/properties/capability`, `synchronize`,
  `mem_get_info`, `is_bf16_supported`, `init`, any `.cuda()`, `.to("cuda")`, a torch
  call with `device="cuda"`, and the `nn.DataParallel(...)` constructor (it calls
  `torch.cuda.is_available()` through `_get_available_device_type`).
* `torch.cuda.device_count()` counts through NVML when NVML works (no initialisation, and
  torch does not cache the count "because the number of devices can change due to changes
  to CUDA_VISIBLE_DEVICES"); only without NVML does it call `_cuda_getDeviceCount`.
* Safe: `torch.device("cuda:1")`, `torch.manual_seed`, `torch.cuda.manual_seed(_all)`
  (queued until initialisation), `torch.cuda.memory_allocated`, `torch.cuda.empty_cache`.

"Certainly before" is run order the file shows: the module's top level in order, entering
the body of a function of this file where the run order calls it (`main()` under
`if __name__ == "__main__":`), and each function body on its own, starting from what was
certain where it was defined (it can only run after its `def`). Code in a branch, a loop
body or a `try` body may not run, so what it does is not certain afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import libcst as cst

from dplint.semantic import DATA_PARALLEL, SemanticModel, argument, dotted_name, literal_value

INITIALISING_CALLS = {
    "torch.cuda.is_available",
    "torch.cuda.set_device",
    "torch.cuda.current_device",
    "torch.cuda.get_device_name",
    "torch.cuda.get_device_properties",
    "torch.cuda.get_device_capability",
    "torch.cuda.synchronize",
    "torch.cuda.mem_get_info",
    "torch.cuda.is_bf16_supported",
    "torch.cuda.init",
    DATA_PARALLEL,
}
MAY_INITIALISE_CALLS = {"torch.cuda.device_count"}  # only where NVML is unavailable
NOT_DEVICE_CALLS = {"torch.device"}  # `torch.device("cuda:1", ...)` only names a device
EXIT_CALLS = {"sys.exit", "os._exit"}
EXIT_BUILTINS = {"exit", "quit"}
INLINE_BUDGET = 5000  # statements walked through calls, per file: keeps huge files linear
INLINE_DEPTH = 8  # main() -> train() -> setup() ...: deeper call chains are not followed

IMPORT, INIT, MAY_INIT = "import", "init", "may-init"


@dataclass(frozen=True)
class CudaEvent:
    kind: str  # IMPORT: torch was imported; INIT: CUDA initialised; MAY_INIT: device_count()
    node: cst.CSTNode  # the import statement or the call
    description: str  # for messages: "`torch.cuda.is_available()`"


def is_torch_import(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Import):
        return any((dotted_name(alias.name) or "").split(".")[0] == "torch" for alias in node.names)
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
        return (dotted_name(node.module) or "").split(".")[0] == "torch"
    return False


def is_cuda_device(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> bool:
    """`"cuda"`, `"cuda:1"`, `torch.device("cuda", 0)`, or a name bound to one of them."""
    value = model.value_at(expr, at) if expr is not None else None
    if isinstance(value, cst.Call) and model.qualified_name(value.func) == "torch.device":
        value = argument(value, 0, "type")
    if isinstance(value, cst.FormattedString):  # f"cuda:{rank}"
        head = value.parts[0] if value.parts else None
        return isinstance(head, cst.FormattedStringText) and head.value.startswith("cuda:")
    try:
        text = literal_value(value)
    except ValueError:
        return False
    return isinstance(text, str) and text.split(":")[0] == "cuda"


def cuda_event(model: SemanticModel, call: cst.Call) -> Optional[CudaEvent]:
    """The CUDA event a call is, or None."""
    name = model.qualified_name(call.func)
    if name in INITIALISING_CALLS:
        shown = "nn.DataParallel(...)` (its constructor calls `torch.cuda.is_available()`)" if name == DATA_PARALLEL else f"{name}()`"
        return CudaEvent(INIT, call, "`" + shown)
    if name in MAY_INITIALISE_CALLS:
        return CudaEvent(MAY_INIT, call, f"`{name}()`")
    if isinstance(call.func, cst.Attribute) and name is None:
        method = call.func.attr.value
        if method == "cuda":
            return CudaEvent(INIT, call, "`.cuda()`")
        if method == "to" and is_cuda_device(model, argument(call, 0, "device"), call):
            return CudaEvent(INIT, call, '`.to("cuda")`')
    if name is not None and name.startswith("torch.") and name not in NOT_DEVICE_CALLS:
        if is_cuda_device(model, argument(call, None, "device"), call):
            return CudaEvent(INIT, call, f'`{name}(..., device="cuda")`')
    return None


# Nodes whose code may not run when the expression around them does.
CONDITIONAL_PARTS = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _certain_owner(model: SemanticModel, call: cst.Call) -> Optional[cst.CSTNode]:
    """The small statement (or compound statement header) that certainly makes this call
    when it runs; None when the call sits in `a if c else b`'s branches, the right side of
    `and`/`or`, a lambda or a comprehension."""
    child: cst.CSTNode = call
    for ancestor in model.ancestors(call):
        if isinstance(ancestor, CONDITIONAL_PARTS):
            return None
        if isinstance(ancestor, cst.IfExp) and child is not ancestor.test:
            return None
        if isinstance(ancestor, cst.BooleanOperation) and child is not ancestor.left:
            return None
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return ancestor
        child = ancestor
    return None


class CudaTimeline:
    """What had certainly happened before each statement, once per run order that reaches it.

    `states(statement)` lists, per run order, the events before the statement began.
    The tree is never walked node by node here: calls come from the model's call list,
    returns and yields from its node table, so a large file costs little.
    """

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._states: dict[cst.CSTNode, list[tuple[CudaEvent, ...]]] = {}
        self._calling: list[cst.FunctionDef] = []
        self._budget = INLINE_BUDGET
        self._calls: dict[cst.CSTNode, list[cst.Call]] = {}  # owner -> certain calls, run order
        self._leaving: set[cst.CSTNode] = set()  # statements that may return, raise or exit
        self._generators: set[cst.CSTNode] = set()  # functions that yield
        self._index()
        self._block(model.module.body, ())

    def states(self, statement: cst.CSTNode) -> list[tuple[CudaEvent, ...]]:
        return self._states.get(statement, [])

    def events_in(self, owner: cst.CSTNode) -> tuple[CudaEvent, ...]:
        """The CUDA events a small statement (or a compound statement's header) certainly makes."""
        return tuple(e for call in self._calls.get(owner, ()) if (e := cuda_event(self.model, call)) is not None)

    def _index(self) -> None:
        model = self.model
        ends: dict[cst.CSTNode, int] = {}  # a call -> the last order of a call inside it
        for site in model.calls:
            owner = _certain_owner(model, site.node)
            if owner is not None:
                self._calls.setdefault(owner, []).append(site.node)
            for ancestor in model.ancestors(site.node):
                if isinstance(ancestor, cst.Call):
                    ends[ancestor] = max(ends.get(ancestor, 0), site.order)
                if isinstance(ancestor, cst.BaseStatement):
                    break
            name = site.qualified_name
            if name in EXIT_CALLS or (name is None and isinstance(site.node.func, cst.Name) and site.node.func.value in EXIT_BUILTINS):
                self._mark_leaving(site.node)
        for calls in self._calls.values():
            # Arguments run before the call that takes them: order by where each call ends.
            calls.sort(key=lambda call: (ends.get(call, model.order(call)), -model.order(call)))
        for node in model.nodes():  # every node once; no tree walk
            if isinstance(node, (cst.Return, cst.Raise)):
                self._mark_leaving(node)
            elif isinstance(node, (cst.Yield, cst.Await)):
                function = next((a for a in model.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
                self._generators.add(function)

    def _mark_leaving(self, node: cst.CSTNode) -> None:
        """Every statement around `node`, up to its function, may end that function early."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return
            if isinstance(ancestor, cst.BaseStatement):
                self._leaving.add(ancestor)

    # A block returns the state after it. With `function=True` it returns what is certain
    # when the function returns: the state before its first statement that may return early.
    def _block(self, statements: Sequence[cst.CSTNode], state: tuple, function: bool = False) -> tuple:
        at_return = None
        for statement in statements:
            if function and at_return is None and statement in self._leaving:
                at_return = state
            state = self._statement(statement, state)
        return at_return if at_return is not None else state

    def _statement(self, statement: cst.CSTNode, state: tuple) -> tuple:
        self._states.setdefault(statement, []).append(state)
        if self._calling:
            self._budget -= 1
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if is_torch_import(small):
                    state += (CudaEvent(IMPORT, small, f"`{self.model.code(small)}`"),)
                else:
                    state = self._calls_of(small, state)
            return state
        state = self._calls_of(statement, state)  # the header: test, iterable, items, decorators
        if isinstance(statement, cst.If):
            self._block(_body(statement.body), state)
            if isinstance(statement.orelse, cst.If):
                self._statement(statement.orelse, state)
            elif statement.orelse is not None:
                self._block(_body(statement.orelse.body), state)
        elif isinstance(statement, (cst.For, cst.While)):
            self._block(_body(statement.body), state)
            if statement.orelse is not None:
                self._block(_body(statement.orelse.body), state)
        elif isinstance(statement, cst.With):
            state = self._block(_body(statement.body), state)
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            suites = [statement.body, *(handler.body for handler in statement.handlers)]
            suites += [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
            for suite in suites:
                self._block(_body(suite), state)
        elif isinstance(statement, cst.FunctionDef):
            self._block(_body(statement.body), state)  # runs later, after what is certain here
        elif isinstance(statement, cst.ClassDef):
            state = self._block(_body(statement.body), state)  # a class body runs at once
        elif isinstance(statement, cst.Match):
            for case in statement.cases:
                self._block(_body(case.body), state)
        return state

    def _calls_of(self, owner: cst.CSTNode, state: tuple) -> tuple:
        for call in self._calls.get(owner, ()):
            callee = self._callee(call)
            if callee is not None:
                self._calling.append(callee)
                state = self._block(_body(callee.body), state, function=True)
                self._calling.pop()
            event = cuda_event(self.model, call)
            if event is not None:
                state += (event,)
        return state

    def _callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """A plain function of this file whose body runs when `call` runs."""
        if not isinstance(call.func, cst.Name) or self._budget <= 0 or len(self._calling) >= INLINE_DEPTH:
            return None
        binding = self.model.binding_at(call.func.value, call)
        function = binding.node if binding is not None else None
        if not isinstance(function, cst.FunctionDef) or function in self._calling:
            return None
        # A decorator may skip the body (`@rank_zero_only`); async and generator functions
        # return before running it.
        if function.decorators or function.asynchronous is not None or function in self._generators:
            return None
        return function


def _body(suite: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else (cst.SimpleStatementLine(body=suite.body),)


# ------------------------------------------------------------------ CUDA_VISIBLE_DEVICES writes
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# Calls that start a process: it inherits the environment as it is then, whatever this
# process's CUDA did. (Prefixes end with a dot.)
PROCESS_STARTERS = (
    "subprocess.",
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "multiprocessing.",
    "torch.multiprocessing.",
    "torch.distributed.run.",
    "torch.distributed.launcher.",
)
ENVIRON = "os.environ"
ENVIRON_CALLS = {"os.environ.setdefault", "os.putenv"}  # (key, value)


@dataclass(frozen=True)
class VisibleDevicesWrite:
    """One statement part that sets CUDA_VISIBLE_DEVICES in this process's environment."""

    node: cst.CSTNode  # the `os.environ[...]` assignment target, or the call
    root: cst.Name  # the imported name it goes through (`os`, or `environ`)
    inputs: tuple[cst.BaseExpression, ...]  # what runs before the write: key and value expressions


def visible_devices_writes(model: SemanticModel) -> list[VisibleDevicesWrite]:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = v`, `os.environ.update({...: v})` or
    `update(CUDA_VISIBLE_DEVICES=v)`, `os.environ.setdefault(...)`, `os.putenv(...)`."""
    writes = []
    for site in model.calls:
        call, name = site.node, site.qualified_name
        root = _root_name(call.func)
        if name in ENVIRON_CALLS and _is_visible_devices(model, argument(call, 0), call):
            writes.append(VisibleDevicesWrite(call, root, tuple(arg.value for arg in call.args)))
        elif name == ENVIRON + ".update" and _updates_visible_devices(model, call):
            writes.append(VisibleDevicesWrite(call, root, tuple(arg.value for arg in call.args)))
    for local, target in model.imports.items():
        if target not in ("os", ENVIRON):
            continue
        for node, _, _ in model.references.get(local, ()):
            environ = model.parent(node) if target == "os" else node
            if not isinstance(environ, (cst.Attribute, cst.Name)) or model.qualified_name(environ) != ENVIRON:
                continue
            subscript = model.parent(environ)
            if not (isinstance(subscript, cst.Subscript) and subscript.value is environ and len(subscript.slice) == 1):
                continue
            key = subscript.slice[0].slice
            statement = model.parent(subscript)
            if not (isinstance(statement, cst.AssignTarget) and isinstance(key, cst.Index)):
                continue
            if _is_visible_devices(model, key.value, subscript):
                assign = model.parent(statement)
                writes.append(VisibleDevicesWrite(subscript, node, (assign.value, key.value)))
    return writes


def _root_name(expr: cst.BaseExpression) -> cst.Name:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr


def _is_visible_devices(model: SemanticModel, key: Optional[cst.BaseExpression], at: cst.CSTNode) -> bool:
    try:
        return key is not None and literal_value(model.value_at(key, at)) == VISIBLE_DEVICES
    except ValueError:
        return False


def _updates_visible_devices(model: SemanticModel, call: cst.Call) -> bool:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == VISIBLE_DEVICES:
            return True
        if arg.keyword is None and not arg.star and isinstance(arg.value, cst.Dict):
            for element in arg.value.elements:
                if isinstance(element, cst.DictElement) and _is_visible_devices(model, element.key, call):
                    return True
    return False


def starts_process_after(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether the code that runs `node` later starts a process in the same function (or at
    the top level) on every path: a launcher sets CUDA_VISIBLE_DEVICES for its children."""
    return any(not _runs_only_on_some_paths(model, site.node, node) for site in _process_starts_after(model, node))


def conditional_process_start_after(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.Call]:
    """A process start after `node` that runs only on some paths (`if len(gpus) > 1:
    mp.spawn(...)` `else: worker(0)`): on the others this process itself uses the value."""
    starts = _process_starts_after(model, node)
    if not starts or any(not _runs_only_on_some_paths(model, site.node, node) for site in starts):
        return None
    return starts[0].node


def _process_starts_after(model: SemanticModel, node: cst.CSTNode) -> list:
    scope, order = model.scope(node), model.order(node)
    return [
        site
        for site in model.calls
        if site.scope is scope and site.order > order and site.qualified_name is not None
        and site.qualified_name.startswith(PROCESS_STARTERS)
    ]


def _runs_only_on_some_paths(model: SemanticModel, later: cst.CSTNode, earlier: cst.CSTNode) -> bool:
    """`later` sits in a branch or loop body (an `if`/`else`, `for`, `while`, `except`,
    `match` block) that `earlier` is not in. A `with` or `try` body does run."""
    around_earlier = set(model.ancestors(earlier))
    scope_node = model.scope(later).node
    for ancestor in model.ancestors(later):
        if ancestor is scope_node:
            break
        if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            owner = model.parent(ancestor)
            if owner is scope_node or isinstance(owner, (cst.With, cst.Try, cst.TryStar)):
                continue
            if ancestor not in around_earlier:
                return True
    return False
