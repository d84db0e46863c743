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
  to CUDA_VISIBLE_DEVICES"); only without NVML (no NVIDIA driver: then no CUDA either) does it
  call `_cuda_getDeviceCount`. It is not counted: a write after it takes effect.
* `torch.load(f)` without `map_location` restores each tensor to the device it was saved
  from (`torch/serialization.py`, `_deserialize` -> `_validate_device`, which calls
  `torch.cuda.is_available()` and `device_count()`): a checkpoint saved from a GPU
  initialises CUDA. With `map_location="cuda..."` it always does; with a CPU one it never does.
* `torch.amp.GradScaler()` / `torch.cuda.amp.GradScaler()` (device "cuda", `enabled=True` by
  default) and `torch.autocast("cuda")` / `torch.cuda.amp.autocast()` ask
  `torch.cuda.amp.common.amp_definitely_not_available()`, i.e. `torch.cuda.is_available()`,
  when they are constructed enabled (`torch/amp/grad_scaler.py` ~135, `autocast_mode.py` ~284).
* Safe: `torch.device("cuda:1")`, `torch.manual_seed`, `torch.cuda.manual_seed(_all)`
  (queued until initialisation), `torch.cuda.memory_allocated`, `torch.cuda.empty_cache`.

"Certainly before" is run order the file shows: the module's top level in order, entering
the body of a function where the run order calls it (`main()` under
`if __name__ == "__main__":`, `self.setup()`, `obj.method()` with `obj = Cls()` of this file,
and, through the project, a function or class of another file: its summary, what it does
on its way to returning), and each function body on its own, starting from what was
certain where it was defined (it can only run after its `def`). Code in a branch, a loop
body or a `try` body may not run: what it does is kept afterwards as an event of some
paths only (`CudaEvent.certain` False).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import libcst as cst

from dplint.semantic import DATA_PARALLEL, SemanticModel, argument, dotted_name, keyword_arg, literal_value
from dplint.wrapper_classes import wrapping_built_by

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
MAY_INITIALISE_CALLS: set = set()  # device_count(): see the module docstring
# Built enabled on "cuda" (their default), they call `torch.cuda.is_available()`:
# {qualified name: the position of the device argument (None: always CUDA)}.
AMP_CONSTRUCTORS = {
    "torch.amp.GradScaler": 0,
    "torch.amp.grad_scaler.GradScaler": 0,
    "torch.cuda.amp.GradScaler": None,
    "torch.cuda.amp.grad_scaler.GradScaler": None,
    "torch.autocast": 0,
    "torch.amp.autocast": 0,
    "torch.amp.autocast_mode.autocast": 0,
    "torch.cuda.amp.autocast": None,
    "torch.cuda.amp.autocast_mode.autocast": None,
}
TORCH_LOAD = "torch.load"  # without `map_location`: only when the checkpoint holds CUDA tensors
NOT_DEVICE_CALLS = {"torch.device"}  # `torch.device("cuda:1", ...)` only names a device
EXIT_CALLS = {"sys.exit", "os._exit"}
EXIT_BUILTINS = {"exit", "quit"}
INLINE_BUDGET = 5000  # statements walked through calls, per file: keeps huge files linear
INLINE_DEPTH = 8  # main() -> train() -> setup() ...: deeper call chains are not followed

IMPORT, INIT, MAY_INIT = "import", "init", "may-init"


@dataclass(frozen=True)
class CudaEvent:
    kind: str  # IMPORT: torch was imported; INIT: CUDA initialised; MAY_INIT: it may have been
    node: cst.CSTNode  # the import statement or the call (in the file the timeline reads)
    description: str  # for messages: "`torch.cuda.is_available()`"
    why: str = ""  # MAY_INIT: when it initialises CUDA
    via: str = ""  # a call of another file's function that makes it: "in utils.py:9, reached through `f()` on "
    certain: bool = True  # False: it runs on some paths only (a branch, a loop body, a `try`)


NVML_NOTE = "initialises CUDA where NVML is unavailable"
LOAD_NOTE = (
    "restores tensors saved from a GPU onto it and so initialises CUDA when the checkpoint "
    "holds CUDA tensors (no `map_location`)"
)


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
    built = wrapping_built_by(model, call) if name not in INITIALISING_CALLS else None
    if name in INITIALISING_CALLS or (built is not None and built.kind == "DP"):
        # a DataParallel of any class derived from torch's (mmcv's, the project's) runs its constructor
        shown = "nn.DataParallel(...)` (its constructor calls `torch.cuda.is_available()`)" if name == DATA_PARALLEL or built else f"{name}()`"
        return CudaEvent(INIT, call, "`" + shown)
    if name in MAY_INITIALISE_CALLS:
        return CudaEvent(MAY_INIT, call, f"`{name}()`", NVML_NOTE)
    if name in AMP_CONSTRUCTORS:
        return _amp_event(model, call, name)
    if name == TORCH_LOAD:
        location = argument(call, 1, "map_location")
        if location is None and not any(arg.star for arg in call.args):
            return CudaEvent(MAY_INIT, call, "`torch.load(...)`", LOAD_NOTE)
        if location is not None and is_cuda_device(model, location, call):
            return CudaEvent(INIT, call, '`torch.load(..., map_location="cuda")`')
        return None
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


def _amp_event(model: SemanticModel, call: cst.Call, name: str) -> Optional[CudaEvent]:
    """A GradScaler or autocast built for CUDA: it initialises CUDA when enabled (an `enabled=`
    that is not a literal makes it an event of some paths)."""
    position = AMP_CONSTRUCTORS[name]
    if position is not None:
        keyword = "device_type" if "autocast" in name else "device"
        device = argument(call, position, keyword)
        if device is not None and not is_cuda_device(model, device, call):
            return None
        if device is None and "autocast" in name:
            return None  # `torch.autocast` needs its device type: unknown here
    enabled = keyword_arg(call, "enabled")
    try:
        flag = literal_value(enabled.value) if enabled is not None else True
    except ValueError:
        flag = None
    if flag is False:
        return None
    shown = name.replace(".grad_scaler", "").replace(".autocast_mode", "")
    return CudaEvent(INIT, call, f"`{shown}(...)` (it asks `torch.cuda.is_available()`)", certain=flag is not None)


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

    def __init__(self, model: SemanticModel, walk: bool = True) -> None:
        self.model = model
        self._states: dict[cst.CSTNode, list[tuple[CudaEvent, ...]]] = {}
        self._calling: list[cst.FunctionDef] = []
        self._budget = INLINE_BUDGET
        self._calls: dict[cst.CSTNode, list[cst.Call]] = {}  # owner -> certain calls, run order
        self._leaving: set[cst.CSTNode] = set()  # statements that may return, raise or exit
        self._generators: set[cst.CSTNode] = set()  # functions that yield
        self._summaries: dict[cst.FunctionDef, tuple[CudaEvent, ...]] = {}
        self._headers: dict[cst.CSTNode, tuple] = {}  # a compound statement that may return -> state after its header
        self._index()
        if walk:
            self._block(model.module.body, ())

    def summary(self, function: cst.FunctionDef) -> tuple[CudaEvent, ...]:
        """The CUDA events a call of `function` (of this file) makes before it returns, from an
        empty state: what another file's timeline adds where it calls it."""
        if function not in self._summaries:
            self._summaries[function] = ()  # a recursive call adds nothing
            self._calling.append(function)
            events = self._block(_body(function.body), (), function=True)
            self._calling.pop()
            self._summaries[function] = tuple(e for e in events if e.kind != IMPORT)
        return self._summaries[function]

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
        for node in model.nodes_of(cst.Return, cst.Raise, cst.Yield, cst.Await):
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

    # A block returns the state after it. With `function=True` it returns what is known when
    # the function returns: certain, what ran before its first statement that may return (that
    # statement's own calls, or its header's, included); on some paths, what ran after.
    def _block(self, statements: Sequence[cst.CSTNode], state: tuple, function: bool = False) -> tuple:
        at_return = None
        for statement in statements:
            state = self._statement(statement, state)
            if function and at_return is None and statement in self._leaving:
                at_return = self._headers.pop(statement, state)
        return _with_some_paths(at_return, [state]) if at_return is not None else state

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
        if statement in self._leaving:
            self._headers[statement] = state  # what runs before any `return` inside
        ends: list[tuple] = []  # the states at the ends of parts that may not run
        if isinstance(statement, cst.If):
            ends.append(self._block(_body(statement.body), state))
            if isinstance(statement.orelse, cst.If):
                ends.append(self._statement(statement.orelse, state))
            elif statement.orelse is not None:
                ends.append(self._block(_body(statement.orelse.body), state))
        elif isinstance(statement, (cst.For, cst.While)):
            ends.append(self._block(_body(statement.body), state))
            if statement.orelse is not None:
                ends.append(self._block(_body(statement.orelse.body), state))
        elif isinstance(statement, cst.With):
            state = self._block(_body(statement.body), state)
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            suites = [statement.body, *(handler.body for handler in statement.handlers)]
            suites += [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
            for suite in suites:
                ends.append(self._block(_body(suite), state))
        elif isinstance(statement, cst.FunctionDef):
            self._block(_body(statement.body), state)  # runs later, after what is certain here
        elif isinstance(statement, cst.ClassDef):
            state = self._block(_body(statement.body), state)  # a class body runs at once
        elif isinstance(statement, cst.Match):
            for case in statement.cases:
                ends.append(self._block(_body(case.body), state))
        return _with_some_paths(state, ends)

    def _calls_of(self, owner: cst.CSTNode, state: tuple) -> tuple:
        for call in self._calls.get(owner, ()):
            callee = self._callee(call)
            if isinstance(callee, cst.FunctionDef):
                self._calling.append(callee)
                state = self._block(_body(callee.body), state, function=True)
                self._calling.pop()
            elif callee is not None:
                state = self._summarised(call, *callee, state)
            event = cuda_event(self.model, call)
            if event is not None:
                state += (event,)
        return state

    def _callee(self, call: cst.Call):
        """The function of this file whose body runs when `call` runs (a plain function, a
        method through `self.m()`, a class's `__init__`), or (model, function) of another
        project file; None when unknown."""
        if self._budget <= 0 or len(self._calling) >= INLINE_DEPTH:
            return None
        if isinstance(call.func, cst.Name) and call.func.value not in self.model.imports:
            binding = self.model.binding_at(call.func.value, call)
            function = binding.node if binding is not None else None
            if isinstance(function, cst.ClassDef):
                function = _constructor(function)
        else:
            found = self.model.flow.callee(call)
            if found is None:
                return None
            function = found.function
            if found.model is not self.model:
                return (found.model, function) if _runs_its_body(function) else None
        if not isinstance(function, cst.FunctionDef) or function in self._calling:
            return None
        if not _runs_its_body(function) or function in self._generators:
            return None
        return function

    def _summarised(self, call: cst.Call, other: SemanticModel, function: cst.FunctionDef, state: tuple) -> tuple:
        """Another file's function: its summary, each event reported at this call."""
        key = (id(other), id(function))
        if function in _timeline_of(other)._generators:
            return state  # a generator runs its body only when iterated
        if key in _SUMMARISING or len(_SUMMARISING) >= INLINE_DEPTH:
            return state
        _SUMMARISING.add(key)
        try:
            events = _timeline_of(other).summary(function)
        finally:
            _SUMMARISING.discard(key)
        shown = self.model.code(call.func)
        for event in events:
            where = event.via or f"in {_shown_path(other.path)}:{other.position(event.node)[0].line}, "
            via = f"{where}reached through `{shown}()` on "
            state += (CudaEvent(event.kind, call, event.description, event.why, via=via, certain=event.certain),)
        return state


def _shown_path(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive
        return path


def _runs_its_body(function: Optional[cst.FunctionDef]) -> bool:
    """A decorator may skip the body (`@rank_zero_only`); async functions return before running it."""
    return isinstance(function, cst.FunctionDef) and not function.decorators and function.asynchronous is None


def _constructor(node: cst.ClassDef) -> Optional[cst.FunctionDef]:
    for statement in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
        if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
            return statement
    return None


def _with_some_paths(state: tuple, ends: list[tuple]) -> tuple:
    """`state` plus, as events of some paths only, what the parts that may not run added."""
    known = {event.node for event in state}
    for end in ends:
        for event in end:
            if event.node not in known and event.kind != IMPORT:
                known.add(event.node)
                state += (replace(event, certain=False),)
    return state


# Other files' timelines, built without walking their module (only to summarise functions).
_TIMELINES: "weakref.WeakKeyDictionary[SemanticModel, CudaTimeline]" = weakref.WeakKeyDictionary()
_SUMMARISING: set = set()  # (model, function) summaries under way: a cycle adds nothing


def _timeline_of(model: SemanticModel) -> "CudaTimeline":
    timeline = _TIMELINES.get(model)
    if timeline is None:
        timeline = _TIMELINES[model] = CudaTimeline(model, walk=False)
    return timeline


_WALKED: "weakref.WeakKeyDictionary[SemanticModel, CudaTimeline]" = weakref.WeakKeyDictionary()
CALLER_DEPTH = 3  # `use_gpus()` -> `setup()` of this file -> the other file's call


def walked_timeline(model: SemanticModel) -> "CudaTimeline":
    """A file's timeline with its run order walked (states before every statement)."""
    timeline = _WALKED.get(model)
    if timeline is None:
        timeline = _WALKED[model] = CudaTimeline(model)
    return timeline


def events_before_callers(model: SemanticModel, node: cst.CSTNode) -> list[CudaEvent]:
    """What other files of the project certainly did before they call the function around
    `node` (or a function of this file that calls it, up to CALLER_DEPTH calls up): for
    `def use_gpus(ids): os.environ["CUDA_VISIBLE_DEVICES"] = ids` called by train.py after
    `torch.cuda.is_available()`, that call. Each event points at the called function's `def`
    (this file's node) and names the caller's file and line in `via`."""
    function = next((a for a in model.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    found: list[CudaEvent] = []
    frontier, seen = [function] if function is not None else [], set()
    for _ in range(CALLER_DEPTH):
        upper = []
        for function in frontier:
            if function in seen:
                continue
            seen.add(function)
            for caller, call, _bound in model.flow.all_call_sites(function) or ():
                if caller is model:
                    outer = next((a for a in model.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
                    if outer is not None:
                        upper.append(outer)
                    continue
                for state in walked_timeline(caller).states(caller.statement_of(call)):
                    for event in state:
                        if event.kind == IMPORT or _same_callee(caller, event.node, call):
                            # An earlier run of this same call (a loop, a helper called twice):
                            # its own write came first there, so that one took effect.
                            continue
                        where = f"{_shown_path(caller.path)}:{caller.position(event.node)[0].line}"
                        found.append(replace(
                            event, node=function,
                            via=f"in {where}, before that file calls `{function.name.value}()`, defined on "))
        frontier = upper
    return found


def _same_callee(model: SemanticModel, node: cst.CSTNode, call: cst.Call) -> bool:
    """Whether `node` is the statement of `call` or a call of the same name (`Config(...)` twice)."""
    if model.statement_of(node) is model.statement_of(call):
        return True
    called = node if isinstance(node, cst.Call) else None
    if called is None:
        return False
    last = lambda func: func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    return last(called.func) == last(call.func)


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
