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
from typing import Iterator, Optional, Sequence

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


def certain_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """The calls an expression or simple statement certainly makes, in evaluation order
    (arguments before the call). Skipped: the branches of `a if c else b`, the right side of
    `and`/`or`, lambdas and comprehensions."""
    stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, children_done = stack.pop()
        if children_done:
            if isinstance(current, cst.Call):
                yield current
            continue
        if isinstance(current, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            continue
        stack.append((current, True))
        if isinstance(current, cst.IfExp):
            children: Sequence[cst.CSTNode] = (current.test,)
        elif isinstance(current, cst.BooleanOperation):
            children = (current.left,)
        else:
            children = current.children
        stack.extend((child, False) for child in reversed(children))


class CudaTimeline:
    """What had certainly happened before each statement, once per run order that reaches it.

    `states(statement)` lists, per run order, the events before the statement began.
    """

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._states: dict[cst.CSTNode, list[tuple[CudaEvent, ...]]] = {}
        self._calling: list[cst.FunctionDef] = []
        self._budget = INLINE_BUDGET
        self._block(model.module.body, ())

    def states(self, statement: cst.CSTNode) -> list[tuple[CudaEvent, ...]]:
        return self._states.get(statement, [])

    # A block returns the state after it. With `function=True` it returns what is certain
    # when the function returns: the state before its first statement that may return early.
    def _block(self, statements: Sequence[cst.CSTNode], state: tuple, function: bool = False) -> tuple:
        at_return = None
        for statement in statements:
            if function and at_return is None and _may_leave(self.model, statement):
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
                    state = self._expression(small, state)
        elif isinstance(statement, cst.If):
            state = self._expression(statement.test, state)
            self._block(_body(statement.body), state)
            if isinstance(statement.orelse, cst.If):
                self._statement(statement.orelse, state)
            elif statement.orelse is not None:
                self._block(_body(statement.orelse.body), state)
        elif isinstance(statement, (cst.For, cst.While)):
            state = self._expression(statement.iter if isinstance(statement, cst.For) else statement.test, state)
            self._block(_body(statement.body), state)
            if statement.orelse is not None:
                self._block(_body(statement.orelse.body), state)
        elif isinstance(statement, cst.With):
            for item in statement.items:
                state = self._expression(item.item, state)
            state = self._block(_body(statement.body), state)
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            suites = [statement.body, *(handler.body for handler in statement.handlers)]
            suites += [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
            for suite in suites:
                self._block(_body(suite), state)
        elif isinstance(statement, cst.FunctionDef):
            for decorator in statement.decorators:
                state = self._expression(decorator.decorator, state)
            self._block(_body(statement.body), state)  # runs later, after what is certain here
        elif isinstance(statement, cst.ClassDef):
            state = self._block(_body(statement.body), state)  # a class body runs at once
        elif isinstance(statement, cst.Match):
            for case in statement.cases:
                self._block(_body(case.body), state)
        return state

    def _expression(self, node: cst.CSTNode, state: tuple) -> tuple:
        for call in certain_calls(node):
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
        if not isinstance(call.func, cst.Name) or self._budget <= 0:
            return None
        binding = self.model.binding_at(call.func.value, call)
        function = binding.node if binding is not None else None
        if not isinstance(function, cst.FunctionDef) or function in self._calling:
            return None
        # A decorator may skip the body (`@rank_zero_only`); async and generator functions
        # return before running it.
        if function.decorators or function.asynchronous is not None or _contains(function.body, (cst.Yield,)):
            return None
        return function


def _body(suite: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else (cst.SimpleStatementLine(body=suite.body),)


def _contains(node: cst.CSTNode, kinds: tuple) -> bool:
    """Whether `node` holds one of `kinds`, outside nested functions, lambdas and classes."""
    stack = list(node.children)
    while stack:
        current = stack.pop()
        if isinstance(current, kinds):
            return True
        if not isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(current.children)
    return False


def _may_leave(model: SemanticModel, statement: cst.CSTNode) -> bool:
    """A statement after which the rest of its function may not run: it holds a `return`,
    a `raise` or a `sys.exit()` (outside nested functions)."""
    stack = [statement]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Return, cst.Raise)):
            return True
        if isinstance(current, cst.Call):
            name = model.qualified_name(current.func)
            if name in EXIT_CALLS or (name is None and isinstance(current.func, cst.Name) and current.func.value in EXIT_BUILTINS):
                return True
        if current is statement or not isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(current.children)
    return False


# ------------------------------------------------------------------ CUDA_VISIBLE_DEVICES writes
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
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
