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

from dplint.backends import option_declaration
from dplint.distributed import (
    attribute_values, callers_of, is_rank_guarded, mentions_rank, mentions_spawn_index, on_exclusive_branches)
from dplint.semantic import DATA_PARALLEL, SemanticModel, argument, dotted_name, keyword_arg, literal_value, subtree
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


def selects_by_visible_devices(model: SemanticModel) -> bool:
    """Whether the file may give each process its own GPU through CUDA_VISIBLE_DEVICES (each
    then sees that GPU as GPU 0): a write whose value can differ between the processes of one
    launch. A value every process computes alike (a literal, a command-line option, a list
    written by the launcher before it spawns the workers, strings built from those) shows
    every process the same GPUs, and `cuda` is the first of them in all. A file that names the
    variable only in ways not read here (an `env` dict handed to a child) counts: unknown."""
    if VISIBLE_DEVICES not in model.text:
        return False
    writes = visible_devices_writes(model)
    return not writes or any(_may_differ_per_process(model, expr, write.node) for write in writes for expr in write.inputs)


# Calls that build a string from their arguments, and nothing else: alike in every process
# when those are. (`",".join(...)`, `"{}".format(...)` are read by their method's name.)
STRING_BUILDERS = {"str", "int", "len", "map", "list", "tuple", "sorted", "range", "join", "format", "split", "strip",
                   "replace"}


def _may_differ_per_process(model: SemanticModel, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 2) -> bool:
    """Whether a value may differ between the processes of one launch: it reads a rank (the
    launcher's LOCAL_RANK, `args.local_rank`), the index `mp.spawn` passes, a name or
    attribute bound to one of those, or the result of a call the file does not show
    (`claim_free_gpu()`)."""
    if mentions_rank(model, value) or mentions_spawn_index(model, value, at):
        return True
    for node in subtree(value):
        if isinstance(node, cst.Call):
            func = node.func
            word = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            if word not in STRING_BUILDERS:
                return True
        elif depth > 0 and isinstance(node, cst.Name) and not isinstance(model.parent(node), cst.Attribute):
            bound = model.value_at(node, at, depth=1)
            if bound is not None and bound is not node and _may_differ_per_process(model, bound, at, depth - 1):
                return True
        elif depth > 0 and isinstance(node, cst.Attribute):
            if any(_may_differ_per_process(model, bound, bound, depth - 1) for bound in attribute_values(model, node)):
                return True  # `args.gpu = gpu` in the spawned worker, then `str(args.gpu)`
    return False


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


# ------------------------------------------------------------ the GPU of a process group's process
# Without `torch.cuda.set_device(i)` the current device of every process is GPU 0, and the bare
# `cuda` device (`x.cuda()`, `x.to("cuda")`, `torch.device("cuda")`) means the current device:
# every rank of an NCCL group places its work on GPU 0. A `set_device` counts for a group only
# where it runs in the process that starts the group: on the path of calls into the
# `init_process_group` (its function and the functions of this file that call it), off the
# other branch of a test than that path, or in a function one of those calls.
SET_DEVICE = "torch.cuda.set_device"
TORCH_DEVICE = "torch.device"
# Calls into the project followed when looking for a `set_device` made on the script's behalf
# (`utils.init_distributed_mode(args)` in many repositories).
DEVICE_SEARCH_DEPTH = 3


def bare_cuda_placements(model: SemanticModel) -> list[cst.Call]:
    """Every `x.cuda()`, `x.to("cuda")`, `torch.device("cuda")` and torch call given
    `device="cuda"` of the file, in order; the device also through a name every value of
    which is bare `cuda` (`device = "cuda"` ... `x.to(device)`)."""
    found = []
    for site in model.calls:
        call = site.node
        if site.qualified_name == TORCH_DEVICE and len(call.args) == 1 and _holds_bare_cuda(model, call.args[0].value, call):
            found.append(call)
            continue
        if site.qualified_name is not None and site.qualified_name.startswith("torch.") and site.qualified_name != TORCH_DEVICE:
            device = argument(call, None, "device")
            if device is not None and _holds_bare_cuda(model, device, call):
                found.append(call)
            continue
        if not isinstance(call.func, cst.Attribute) or site.qualified_name is not None and site.qualified_name.startswith("torch."):
            continue  # torch's functions; `config.model.cuda()` of `from train_config import config` is a method
        method = call.func.attr.value
        if method == "cuda" and argument(call, 0, "device") is None and not any(arg.star for arg in call.args):
            found.append(call)  # `.cuda()`, `.cuda(non_blocking=True)`: the current device
        elif method == "cuda" and _holds_current_device(model, argument(call, 0, "device"), call):
            found.append(call)  # `.cuda(torch.cuda.current_device())`: the same
        elif method == "to" and (device := argument(call, 0, "device")) is not None and _holds_bare_cuda(model, device, call):
            found.append(call)  # `x.to("cuda")`, `x.to(device, non_blocking=True)`, `x.to(device="cuda")`
    return found


def _holds_bare_cuda(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """A bare `cuda` literal, a name each known value of which is one (none unknown), or an
    attribute of an object handed around (`args.device`, read in `Trainer(args)`'s methods)."""
    if is_bare_cuda(expr) or _is_current_device(model, expr):
        return True
    if isinstance(expr, cst.Attribute) and model.binding_key(expr, at) is None:
        return _attribute_holds_bare_cuda(model, expr)
    if not isinstance(expr, cst.Name):
        return False
    values = model.flow.values_at(expr, at)
    return bool(values) and (all(value.known and (is_bare_cuda(value.expr) or isinstance(value.expr, cst.Attribute) and _attribute_holds_bare_cuda(value.model, value.expr)) for value in values)
                             or _all_current_device(values))


CURRENT_DEVICE = "torch.cuda.current_device"


def _holds_current_device(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode) -> bool:
    """`torch.cuda.current_device()`, or a name every value of which is that call: the index
    of the current device, which is GPU 0 in every process until something selects one."""
    if not isinstance(expr, cst.Name):
        return expr is not None and _is_current_device(model, expr)
    return _all_current_device(model.flow.values_at(expr, at))


def _is_current_device(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and model.qualified_name(expr.func) == CURRENT_DEVICE


def _all_current_device(values: list) -> bool:
    return bool(values) and all(value.known and _is_current_device(value.model, value.expr) for value in values)


def _attribute_holds_bare_cuda(model: SemanticModel, attribute: cst.Attribute) -> bool:
    """Whether every value this file gives an attribute spelled so is a device literal, one of
    them bare `cuda` and the others `cpu` (`args.device = "cuda"` / `else: args.device =
    "cpu"`, or the default of the `--device` option): like `"cuda" if gpu else "cpu"`, bare
    `cuda` on the GPU path. An attribute the file never sets, or sets to anything else
    (`f"cuda:{local_rank}"`, a config's value), is not known to be."""
    values = list(attribute_values(model, attribute))
    option = option_declaration(model, attribute)
    if option is not None:
        default = argument(option, None, "default")
        if default is None:
            return False  # the option's value when not given is None: the command line decides
        values.append(default)
    return bool(values) and all(is_bare_cuda(value) or _names(value, "cpu") for value in values) and any(
        is_bare_cuda(value) for value in values)


def is_bare_cuda(expr: cst.BaseExpression) -> bool:
    """`"cuda"`, or `"cuda" if torch.cuda.is_available() else "cpu"`: bare `cuda` on the GPU path."""
    if isinstance(expr, cst.IfExp):
        branches = (expr.body, expr.orelse)
        return any(is_bare_cuda(b) for b in branches) and all(is_bare_cuda(b) or _names(b, "cpu") for b in branches)
    return _names(expr, "cuda")


def _names(expr: cst.BaseExpression, device: str) -> bool:
    try:
        return literal_value(expr) == device
    except ValueError:
        return False


def selects_a_device(model: SemanticModel, depth: int = DEVICE_SEARCH_DEPTH, seen: Optional[set] = None) -> bool:
    """`set_device` anywhere in the file or in a project function it calls; a
    CUDA_VISIBLE_DEVICES write (each process then sees its own GPU as GPU 0)."""
    seen = set() if seen is None else seen
    if id(model) in seen:
        return False
    seen.add(id(model))
    if selects_by_visible_devices(model) or any(site.qualified_name == SET_DEVICE for site in model.calls):
        return True
    return depth > 0 and any(
        _other_file_selects(model, site, depth, seen) for site in model.calls)


def _other_file_selects(model: SemanticModel, site, depth: int, seen: set) -> bool:
    if site.qualified_name is not None and site.qualified_name.startswith("torch"):
        return False
    callee = model.flow.callee(site.node)
    return callee is not None and callee.model is not model and selects_a_device(callee.model, depth - 1, seen)


def owner_def(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
    return None


@dataclass
class GroupProcess:
    """What the process that starts one process group runs, as far as its file shows.

    `path` holds (function, node) for the init's function and every function of the file
    that calls into it (the node being the init or the call on the way to it; function None
    for module level); `entries` are the outermost of those functions, and `outside` the
    calls of other files into an entry (caller's model, call)."""

    path: list
    entries: list
    outside: list
    unseen_entry: bool  # an entry nobody visibly calls (a spawn target, a framework's hook)


def group_process(model: SemanticModel, init: cst.Call) -> GroupProcess:
    path, entries, outside, unseen = [], [], [], False
    pending, seen = [(owner_def(model, init), init)], set()
    while pending:
        function, node = pending.pop()
        if (function, id(node)) in seen:
            continue
        seen.add((function, id(node)))
        path.append((function, node))
        if function is None:
            continue
        callers = callers_of(model, function)
        pending += [(owner_def(model, call), call) for call in callers]
        if callers:
            continue
        entries.append(function)
        sites = model.flow.all_call_sites(function) or []
        others = [(caller, call) for caller, call, _ in sites if caller is not model]
        outside += others
        unseen |= not others
    return GroupProcess(path, entries, outside, unseen)


def late_set_device(model: SemanticModel, init: cst.Call) -> Optional[tuple[cst.Call, cst.Call]]:
    """(set_device, placement) where the only GPU selection of the group's process is a
    `set_device` of the init's own function that runs after a bare `cuda` placement of that
    function (`model = Net().cuda()` then `torch.cuda.set_device(local_rank)`): the current
    device was GPU 0 when the placement ran, and the tensor stays there; None otherwise."""
    function = owner_def(model, init)
    selections = [site.node for site in model.calls if site.qualified_name == SET_DEVICE
                  and owner_def(model, site.node) is function and not on_exclusive_branches(model, site.node, init)]
    if not selections:
        return None
    # `torch.device("cuda")` only names "the current device" for later placements: no tensor yet.
    placements = [p for p in bare_cuda_placements(model) if owner_def(model, p) is function
                  and model.qualified_name(p.func) != TORCH_DEVICE and not on_exclusive_branches(model, p, init)
                  and not _discarded(model, p)]
    late = []
    for selection in selections:
        earlier = [p for p in placements if model.order(p) < model.order(selection)
                   and not on_exclusive_branches(model, p, selection)]
        if not earlier:
            return None
        late.append((selection, earlier[0]))
    if selects_a_device_for(model, init, ignored={id(node) for node in selections}):
        return None
    return late[0]


def _discarded(model: SemanticModel, placement: cst.Call) -> bool:
    """A placement whose tensor no name keeps (`torch.empty(1, device="cuda").backward()` as a
    statement of its own): it leaves a CUDA context on GPU 0, but no tensor stays there."""
    node: cst.CSTNode = placement
    parent = model.parent(node)
    while isinstance(parent, cst.Attribute) and parent.value is node or isinstance(parent, cst.Call) and parent.func is node:
        node, parent = parent, model.parent(parent)
    return isinstance(parent, cst.Expr)


def selects_a_device_for(model: SemanticModel, init: cst.Call, ignored: frozenset = frozenset()) -> bool:
    """Whether a GPU is selected in the process that makes `init`: a `set_device` in a
    function on its path of calls, not on the other branch of a test than that path
    (`if args.distributed: init_process_group(...)` / `elif gpu: set_device(gpu)`), or in a
    function such a call runs (three calls deep, across files). Where an entry of the path
    is called by nobody the file shows (an `mp.spawn` target, a hook), a `set_device` of any
    other function of the file may run there first, and counts. `ignored`: set_device calls
    left out (see late_set_device)."""
    if selects_by_visible_devices(model):
        return True
    process = group_process(model, init)
    on_path = {function for function, _ in process.path}
    excluded = set()
    for site in model.calls:
        function = owner_def(model, site.node)
        if function not in on_path:
            continue
        for owner, node in process.path:
            if owner is function and on_exclusive_branches(model, site.node, node) or id(site.node) in ignored:
                excluded.add(id(site.node))
                break
        else:
            if _runs_set_device(model, site, DEVICE_SEARCH_DEPTH, set(on_path)):
                return True
    if not process.unseen_entry:
        return False
    return any(owner_def(model, site.node) not in on_path and id(site.node) not in excluded
               and _runs_set_device(model, site, DEVICE_SEARCH_DEPTH, set(on_path)) for site in model.calls)


def _runs_set_device(model: SemanticModel, site, depth: int, seen: set) -> bool:
    """`set_device(...)` itself, or a call of a project function whose body runs one (not
    one in `seen`: the path's own functions are judged branch by branch)."""
    if site.qualified_name == SET_DEVICE:
        return True
    if depth <= 0 or site.qualified_name is not None and site.qualified_name.startswith("torch"):
        return False
    callee = model.flow.callee(site.node)
    if callee is None:
        return False
    if callee.model is not model:
        return selects_a_device(callee.model, depth - 1)
    function = callee.node if isinstance(callee.node, cst.FunctionDef) else None
    if function is None or function in seen:
        return False
    seen.add(function)
    return any(owner_def(model, other.node) is function and _runs_set_device(model, other, depth - 1, seen)
               for other in model.calls)


def caller_placements(model: SemanticModel, init: cst.Call) -> list[tuple[SemanticModel, cst.Call]]:
    """A helper that starts the group for other files (`utils.init_distributed_mode(args)`):
    the process goes on in each caller's file, so its bare `cuda` placements are the
    group's too, in every caller file that selects no GPU itself, except those on the other
    branch of a test than the call."""
    found = []
    process = group_process(model, init)
    for caller, call in process.outside:
        if caller_selects_a_device(caller, model, process):
            continue
        found += [(caller, placement) for placement in bare_cuda_placements(caller)
                  if not on_exclusive_branches(caller, placement, call)]
        found += [(where, placement) for where, placement in callee_placements(
            caller, lambda node, caller=caller, call=call: not on_exclusive_branches(caller, node, call))
            if where is not model]
    return found


def caller_selects_a_device(caller: SemanticModel, model: SemanticModel, process: GroupProcess) -> bool:
    """Whether another file that calls into the group's process selects a GPU itself: a
    `set_device` or CUDA_VISIBLE_DEVICES write of its own, or a call of a function that runs
    one; the functions of the group's own path are left out, being judged branch by branch
    (`parse_gpu(args)` whose other platform's branch sets the device is no selection)."""
    if selects_by_visible_devices(caller):
        return True
    on_path = {function for function, _ in process.path}
    for site in caller.calls:
        if site.qualified_name == SET_DEVICE:
            return True
        if site.qualified_name is not None and site.qualified_name.startswith("torch"):
            continue
        callee = caller.flow.callee(site.node)
        if callee is None or callee.model is caller:
            continue
        if callee.model is not model:
            if selects_a_device(callee.model, DEVICE_SEARCH_DEPTH - 1, {id(caller), id(model)}):
                return True
            continue
        function = callee.node if isinstance(callee.node, cst.FunctionDef) else None
        if function is not None and function not in on_path and any(
                owner_def(model, other.node) is function and _runs_set_device(model, other, DEVICE_SEARCH_DEPTH - 1, set(on_path))
                for other in model.calls):
            return True
    return False


# Methods of a class the process builds that run in it: a module is built to be called.
BUILT_CLASS_RUNS = ("__init__", "forward", "__call__")


def callee_placements(model: SemanticModel, runs_in_process, depth: int = DEVICE_SEARCH_DEPTH,
                      seen: Optional[set] = None) -> list[tuple[SemanticModel, cst.Call]]:
    """Bare `cuda` placements that the process runs in other project files: in the body of a
    function of another file that one of its calls runs (`utils.to_gpu(batch)`), and in the
    `__init__` and `forward` of a class of another file it builds (`Net()`: the module's
    `forward` runs when the process calls it), followed `depth` calls deep. `runs_in_process`
    says which call sites of `model` the process makes. A call that only some ranks make (a
    rank-0 evaluation) is left out: there GPU 0 may be the right device."""
    seen = set() if seen is None else seen
    found = []
    for site in model.calls:
        if site.qualified_name is not None and site.qualified_name.startswith("torch"):
            continue
        if not runs_in_process(site.node) or is_rank_guarded(model, site.node):
            continue
        callee = model.flow.callee(site.node)
        if callee is None or callee.model is model:
            continue
        for function in _running_functions(callee.node):
            if (id(callee.model), function) in seen:
                continue
            seen.add((id(callee.model), function))
            other = callee.model
            found += [(other, p) for p in bare_cuda_placements(other) if owner_def(other, p) is function]
            if depth > 1:
                found += callee_placements(other, lambda node, f=function, m=other: owner_def(m, node) is f, depth - 1, seen)
    return found


def _running_functions(node: cst.CSTNode) -> list[cst.FunctionDef]:
    if isinstance(node, cst.FunctionDef):
        return [node]
    if isinstance(node, cst.ClassDef):
        return [s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value in BUILT_CLASS_RUNS]
    return []
