"""Shared knowledge of multi-process scripts: does a file run on several ranks, and which code
runs on one rank only.

A file runs on several ranks when it starts a process group (`init_process_group`,
`deepspeed.init_distributed()`, `Accelerator()`, `hvd.init()`, or a helper named like
`init_distributed_mode`), builds a `DistributedDataParallel` or a `DistributedSampler`, or
reads the `LOCAL_RANK` a launcher passes (a `--local_rank` option only when its value is
used). Code runs on one rank (or on a rank-dependent subset) when it sits under a *rank
guard*: an `if` (or `x if ... else y`, or `... and x`) whose test involves a rank or a
main-process helper (`rank == 0`, `dist.get_rank() == 0`, `args.local_rank in (-1, 0)`,
`int(os.environ["RANK"]) == 0`, `is_main_process()`, `accelerator.is_main_process`,
`trainer.is_global_zero`, `args.gpu == 0`), after an early exit such as
`if not is_master: return`, in a function decorated `@rank_zero_only` / `@master_only`, or in
a function defined in this file whose every call we can see is itself guarded.

"Involves a rank" is judged from the words the code uses, because rank-0 helpers live in
other files: an identifier or string mentioning rank, master, main process, process index, global zero,
world/local process zero, or primary; a name bound (on any path) to such an expression; an
attribute this file assigns such an expression to (`self.is_logger = rank == 0`,
`args.save_logs = args.logs and is_main_process()`); a call to a function of this file that
returns one; a function of another project file whose every return is a rank test or a
constant (`primary()`: `return dist.get_rank() == 0`); a flag bound only to constants that
gets one of them only under a rank test (`self.verbose = False` under `if dist.get_rank() !=
0:`). A comparison of the rank with the world size itself (`rank >= world_size`) is false on
every rank: not a rank test. A branch taken only in a one-process job (`if
dist.get_world_size() == 1:`) is no rank guard, but nothing else runs beside it
(on_single_process_branch). A machine's index (`node_rank == 0`, `args.nr == 0`, `machine_rank`) is not a
process rank: every process of that machine passes it. Where the code can't tell (a function nobody in this
file calls, a callback), the answer is "can't tell" and rules stay silent.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import libcst as cst

from dplint.semantic import (
    SemanticModel,
    argument,
    children_of,
    dotted_name,
    literal_value,
    names_a_definition,
    peel_self_returning,
)
from dplint.wrapper_classes import constructions

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# Calls that make the process one rank of several (launched by torchrun, mp.spawn, a
# launcher of another library): the code after them runs on every rank.
PROCESS_GROUP_STARTS = {
    INIT_PROCESS_GROUP,
    "deepspeed.init_distributed",
    "deepspeed.initialize",
    "accelerate.Accelerator",
    "horovod.torch.init",
    "torch.distributed.launcher.api.elastic_launch",
}
# Project helpers that start the process group (`utils.init_distributed_mode(args)` in the
# DETR/DeiT family, `init_dist(launcher)` in MMCV's, `setup_ddp(rank, world)`...): judged by
# name, since they live in another file.
PROCESS_GROUP_HELPER_WORDS = re.compile(
    r"^_?(init|setup)_?(dist|distributed|ddp|process_group)(_mode|_env|_training)?$|^(dist|ddp)_?(init|setup)$",
    re.IGNORECASE,
)
# Classes that only exist in a multi-process run.
MULTI_PROCESS_CLASSES = {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
# Start one process per rank, each running the function passed first.
SPAWNERS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}
# `sys.exit()` and friends end the rank that runs them, like `return` ends a function.
EXITS = {"sys.exit", "exit", "quit", "os._exit"}

RANK_WORDS = re.compile(
    r"rank|master|main_?process|is_main|global_zero|process_zero|is_primary|is_chief|is_root|root_worker"
    r"|process_ind(ex|ices)|process_idx",  # `accelerator.process_index`, `jax.process_index()`: the rank
    re.IGNORECASE,
)
# The index of a machine, not of a process: `node_rank == 0` (or `args.nr == 0`) is true for
# every process of the first machine, so it guards nothing on one machine.
NODE_WORDS = re.compile(r"node_?rank|machine_?rank|group_?rank|node_?id|^nr$|^node$", re.IGNORECASE)
# Ranks in the plural name a set of ranks, the same in every process: `load_on_all_ranks`,
# `num_ranks`, `ranks_per_node`.
PLURAL_RANKS = re.compile(r"ranks", re.IGNORECASE)
# "master" in names that are not the main process: the rendezvous address every rank reads
# (`MASTER_ADDR`, `MASTER_PORT`), apex's fp32 copy of the weights (`amp.master_params()`).
NOT_RANK_WORDS = re.compile(r"master_?(addr|port|params?|weights?|grads?)", re.IGNORECASE)
# `args.gpu == 0` / `device_id == 0`: the process index under mp.spawn, compared with 0.
DEVICE_INDEX_WORDS = re.compile(r"gpu|device_id", re.IGNORECASE)
MAX_DEPTH = 8


@dataclass(frozen=True)
class Route:
    """How every rank reaches a node: the unguarded calls leading to it, innermost first
    (empty when the node runs at module level or in a function every rank runs)."""

    calls: tuple[cst.Call, ...] = ()


def is_multi_process(model: SemanticModel) -> bool:
    """The file runs as one of several processes: it starts a process group (itself, through
    DeepSpeed, Accelerate or Horovod, or through a helper named like `init_distributed_mode`),
    builds a DistributedDataParallel or a DistributedSampler, or reads the `LOCAL_RANK` that a
    launcher (torchrun, `torch.distributed.launch`, deepspeed) hands every process (a
    `--local_rank` option only when the script uses its value, not only declares or prints it).
    A file whose every process group is `init_process_group(..., world_size=1)` is one process
    (the old one-process DDP over several GPUs), unless a launcher's rank says otherwise."""
    if any(site.qualified_name in MULTI_PROCESS_CLASSES for site in model.calls):
        return True
    starts = [site.node for site in model.calls if starts_process_group(model, site.node)]
    if starts and all(is_group_of_one(call) for call in starts):
        return _reads_launcher_rank(model)  # one process over every GPU: a DDP here is no sign
    if starts or any(wrapping.kind == "DDP" for wrapping in constructions(model)):
        return True
    return _reads_launcher_rank(model)


def is_group_of_one(call: cst.Call) -> bool:
    """`init_process_group(..., world_size=1)`: a process group of exactly one process."""
    size = argument(call, None, "world_size")
    return isinstance(size, cst.Integer) and size.value == "1"


def starts_process_group(model: SemanticModel, call: cst.Call) -> bool:
    """`dist.init_process_group(...)`, `deepspeed.init_distributed()`, `Accelerator()`, or a
    call of a helper named like one (`utils.init_distributed_mode(args)`)."""
    name = model.qualified_name(call.func)
    if name in PROCESS_GROUP_STARTS:
        return True
    callee = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", None)
    return isinstance(callee, str) and PROCESS_GROUP_HELPER_WORDS.search(callee) is not None


def _reads_launcher_rank(model: SemanticModel) -> bool:
    """`int(os.environ["LOCAL_RANK"])`, `os.getenv("LOCAL_RANK")`,
    `torch.cuda.set_device(args.local_rank)`, or a `parser.add_argument("--local_rank", ...)`
    whose value the script then uses (`if args.local_rank != -1:`, `cuda:{args.local_rank}`):
    the script is started once per GPU by a launcher. An option declared and never read, or
    read only to be printed, is a template's leftover, not a second process."""
    return bool(launcher_rank_reads(model, first=True))


def launcher_rank_reads(model: SemanticModel, first: bool = False) -> list[cst.CSTNode]:
    """Where the file reads a launcher's rank (see _reads_launcher_rank): the calls given it,
    or the uses of a declared `--local_rank` option. With `first`, stop at the first one.
    (Calls' arguments first: a full walk of the file would cost every file with a
    `torch.save`; the walk is made only for a declared option.)"""
    found: list[cst.CSTNode] = []
    declared = False
    for site in model.calls:
        callee = _callee_word(site.node)
        if LOGGING_CALLS.match(callee):
            continue
        for arg in site.node.args:
            value = arg.value
            if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index):
                value = value.slice[0].slice.value
            if isinstance(value, cst.SimpleString) and value.value.strip("'\"").lstrip("-").lower() in (
                "local_rank", "local-rank"
            ):
                if callee == "add_argument":
                    declared = True
                    continue
                found.append(site.node)
            elif isinstance(value, cst.Attribute) and value.attr.value == "local_rank":
                found.append(site.node)  # `torch.cuda.set_device(args.local_rank)`: parsed in another file
            else:
                continue
            if first:
                return found
            break
    if declared and not found:
        found = _local_rank_option_uses(model, first)
    return found


# Calls that only show a value: a rank read there selects nothing.
LOGGING_CALLS = re.compile(r"^(print|info|warning|warn|debug|error|critical|exception|log|format|write|set_description)$")


def _callee_word(call: cst.Call) -> str:
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _local_rank_option_uses(model: SemanticModel, first: bool) -> list[cst.CSTNode]:
    """`args.local_rank` read anywhere but in a call that only prints it."""
    found: list[cst.CSTNode] = []
    for node in model.nodes_of(cst.Attribute):
        if node.attr.value == "local_rank" and not any(
            isinstance(ancestor, cst.Call) and LOGGING_CALLS.match(_callee_word(ancestor))
            for ancestor in model.ancestors(node)
        ):
            found.append(node)
            if first:
                break
    return found


# ------------------------------------------------------------------------ rank tests
def mentions_rank(model: SemanticModel, expr: Optional[cst.CSTNode], depth: int = 2, followed: bool = False) -> bool:
    """Whether an expression involves a rank or a main-process notion (see the module doc).
    `followed`: `expr` is a value bound to a name the test reads, judged by its surface."""
    if expr is None:
        return False
    while isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        expr = expr.expression
    if isinstance(expr, cst.BooleanOperation):
        return mentions_rank(model, expr.left, depth, followed) or mentions_rank(model, expr.right, depth, followed)
    if _reads_environ(expr):
        return False  # `if not os.environ.get("RANK"):`: whether the launcher set it, alike on every rank
    if isinstance(expr, cst.Comparison) and _rank_beyond_world_size(model, expr):
        return False  # `if rank >= world_size: return`: false on every rank, excludes none
    for node in _subtree(expr, into_calls=not followed, skip=_same_on_every_process):
        if isinstance(node, cst.Name) and is_rank_word(node.value):
            return True
        if isinstance(node, cst.Attribute) and is_rank_word(node.attr.value):
            return True
        if isinstance(node, cst.SimpleString) and _is_key_read(model, node) and is_rank_word(node.value.strip("'\"")):
            return True  # `os.environ["LOCAL_RANK"]`, `cfg.get("rank")`: a value read under a rank's name
        if isinstance(node, cst.Comparison) and _device_index_is_zero(model, node, depth):
            return True
        if depth > 0 and isinstance(node, cst.Name) and _is_operand(model, node):
            # `is_master = rank == 0` ... `if is_master:`, on any of its assignments
            # (`log = False` then `if dist: log = rank == 0`).
            values = _assigned_values(model, node)
            if any(mentions_rank(model, value, depth - 1, followed=True) for value in values):
                return True
            if _flag_set_by_rank(model, values, depth - 1):
                return True
        if depth > 0 and isinstance(node, cst.Attribute) and _is_operand(model, node):
            # `self.is_logger = rank == 0` in `__init__`, `args.save_logs = ... and is_main_process()`.
            values = attribute_values(model, node)
            if any(mentions_rank(model, value, depth - 1, followed=True) for value in values):
                return True
            if _flag_set_by_rank(model, values, depth - 1):
                return True  # `self.verbose = True` / `if dist.get_rank() != 0: self.verbose = False`
        if depth > 0 and isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            if any(_returns_rank_test(model, function, depth - 1) or returns_value_on_some_ranks(model, function)
                   for function in model.functions.get(node.func.value, ())):
                return True
        if depth > 0 and isinstance(node, cst.Call) and _imported_rank_test(model, node, depth - 1):
            return True  # `if primary():` with `def primary(): return dist.get_rank() == 0` in utils/
        if depth > 0 and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            # `result = self.evaluate()` ... `if result is not None:`: a method of this class
            if any(returns_value_on_some_ranks(model, function) for function in called_functions(model, node.func, node)):
                return True
        if depth > 0 and followed and isinstance(node, cst.Call) and _imported_returns_on_some_ranks(model, node):
            return True  # `stats = evaluate(...)` with `from engine import evaluate`, then `if stats:`
    return False


def _flag_set_by_rank(model: SemanticModel, values: list, depth: int) -> bool:
    """A flag bound only to constants, one of which it gets only under a rank test:
    `self.verbose = True` then `if args.distributed and dist.get_rank() != 0: self.verbose =
    False` (or `save = False` / `if rank == 0: save = True`). Reading it is that rank test.
    A flag that some assignment of each value sets without a rank test (`if args.quiet:
    self.verbose = False`) is configuration, the same on every rank."""
    if len(values) < 2:
        return False
    by_value: dict = {}
    for value in values:
        try:
            constant = literal_value(value)
        except ValueError:
            return False
        by_value.setdefault(constant, []).append(value)
    if len(by_value) < 2:
        return False
    return any(all(_assigned_under_rank_test(model, value, depth) for value in assigned)
               for assigned in by_value.values())


def _assigned_under_rank_test(model: SemanticModel, value: cst.CSTNode, depth: int) -> bool:
    """Whether the assignment of `value` sits, in its function, under an `if` whose test
    involves a rank."""
    child = value
    for ancestor in model.ancestors(value):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.If) and child is not ancestor.test and mentions_rank(model, ancestor.test, depth):
            return True
        child = ancestor
    return False


def _rank_beyond_world_size(model: SemanticModel, test: cst.Comparison) -> bool:
    """`rank >= world_size` (or `world_size <= rank`) with the world size itself on the other
    side (`dist.get_world_size()`, or a name or parameter every caller fills with it): torch's
    `get_rank()` is always below `get_world_size()`, so no rank passes it. A smaller bound (a
    process grid's size) keeps the test a rank guard."""
    if len(test.comparisons) != 1:
        return False
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(operator, cst.GreaterThanEqual):
        rank, size = test.left, right
    elif isinstance(operator, cst.LessThanEqual):
        rank, size = right, test.left
    else:
        return False
    return _rank_number(rank) is not None and _holds_world_size(model, size, 2)


# Parameter names that, with no visible caller, hold the world size (`def run(rank, size):`).
WORLD_SIZE_PARAMETERS = {"size", "world", "nprocs", "num_procs"}


def _holds_world_size(model: SemanticModel, expr: cst.BaseExpression, depth: int) -> bool:
    """The world size itself: spelled so, or a name bound (or a parameter passed) only to it."""
    if _is_world_size(expr):
        return True
    if depth == 0 or not isinstance(expr, cst.Name) or expr not in model._order:
        return False
    binding = model.binding_at(expr.value, expr)
    if binding is None:
        return False
    if isinstance(binding.node, cst.Param):
        function = enclosing_function(model, expr)
        if not isinstance(function, cst.FunctionDef):
            return False
        passed = passed_for(model, function, binding.node)
        calls = callers_of(model, function)
        if not calls:
            # called through a value (`fn(rank, size)`, torch's tutorial `init_process`):
            # beside a rank, `size` is the world size by convention
            return expr.value in WORLD_SIZE_PARAMETERS
        return bool(passed) and len(passed) == len(calls) and all(
            _holds_world_size(model, model.value_at(value, call) or value, depth - 1)
            for value, call in zip(passed, calls))
    values = _assigned_values(model, expr)
    return bool(values) and all(_holds_world_size(model, value, depth - 1) for value in values)


def is_rank_word(text: str) -> bool:
    """An identifier or string naming a process rank or the main process, not a machine's index
    nor a set of ranks (`load_on_all_ranks`, `num_ranks`: a setting every process shares)."""
    text = PLURAL_RANKS.sub("", text)
    return RANK_WORDS.search(text) is not None and NODE_WORDS.search(text) is None and NOT_RANK_WORDS.search(text) is None


def _same_on_every_process(node: cst.CSTNode) -> bool:
    """A comparison every process of a machine answers alike, whatever rank words it uses:
    whether the launcher set a variable (`"RANK" in os.environ`, `os.environ.get("LOCAL_RANK")
    is None`: the launcher sets it for every process or for none), or a test of the machine's
    index (`group_rank == g_rank` with `group_rank` read from `GROUP_RANK`, a loop counter on
    the other side: each machine's processes all pass it together)."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return False
    operator, right = node.comparisons[0].operator, node.comparisons[0].comparator
    if isinstance(operator, (cst.In, cst.NotIn)):
        return _is_environ(right)
    if isinstance(operator, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and right.value == "None":
        return _reads_environ(node.left)
    if isinstance(operator, (cst.Equal, cst.NotEqual)):
        return any(_is_machine_index(side) for side in (node.left, right))
    return False


def _is_environ(expr: cst.BaseExpression) -> bool:
    """`os.environ` (or `environ` imported from os)."""
    name = dotted_name(expr)
    return name is not None and name.rpartition(".")[2] == "environ"


def _reads_environ(expr: cst.BaseExpression) -> bool:
    """`os.environ.get("X")` or `os.getenv("X")`, without a default: None when unset."""
    if not isinstance(expr, cst.Call) or len(expr.args) != 1:
        return False
    func = expr.func
    if isinstance(func, cst.Attribute) and func.attr.value == "get":
        return _is_environ(func.value)
    return (dotted_name(func) or "").rpartition(".")[2] == "getenv"


def _is_machine_index(expr: cst.BaseExpression) -> bool:
    """`node_rank`, `args.group_rank`, `int(os.environ["GROUP_RANK"])`, `os.getenv("NODE_RANK")`."""
    if isinstance(expr, cst.Call) and expr.args:
        callee = dotted_name(expr.func) or ""
        if callee in ("int", "os.getenv", "getenv", "os.environ.get", "environ.get"):
            return _is_machine_index(expr.args[0].value)
        return False
    if isinstance(expr, cst.Subscript) and _is_environ(expr.value) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        return _is_machine_index(expr.slice[0].slice.value)
    if isinstance(expr, cst.SimpleString):
        text = expr.value.strip("'\"")
    elif isinstance(expr, (cst.Name, cst.Attribute)):
        text = _last_identifier(expr)
    else:
        return False
    return NODE_WORDS.search(text) is not None


def _assigned_values(model: SemanticModel, name: cst.Name) -> list[cst.BaseExpression]:
    """Every value the name's scope assigns to it (not only the textually last one)."""
    live = model.binding_at(name.value, name) if name in model._order else None
    if live is None:
        return []
    return [b.value for b in model.bindings.get(name.value, ()) if b.scope is live.scope and b.value is not None]


_ATTRIBUTE_VALUES: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def attribute_values(model: SemanticModel, attribute: cst.Attribute) -> list[cst.BaseExpression]:
    """The values this file assigns to an attribute spelled the same way (`args.save_logs = ...`,
    `self.is_logger = ...` in any method)."""
    table = _ATTRIBUTE_VALUES.get(model)
    if table is None:
        table = {}
        for node in model.nodes_of(cst.Assign, cst.AnnAssign, cst.AugAssign):  # in source order
            if isinstance(node, cst.Assign):
                targets = [target.target for target in node.targets]
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and node.value is not None:
                targets = [node.target]
            else:
                continue
            for target in targets:
                dotted = dotted_name(target) if isinstance(target, cst.Attribute) else None
                if dotted is not None:
                    table.setdefault(dotted, []).append(node.value)
        _ATTRIBUTE_VALUES[model] = table
    dotted = dotted_name(attribute)
    return table.get(dotted, []) if dotted is not None else []


def _is_operand(model: SemanticModel, name: cst.BaseExpression) -> bool:
    """A name used as a value, not as the object of an attribute or a callee (`args` in
    `args.x`, `f` in `f()`): only such names are followed to what they hold."""
    parent = model.parent(name)
    return not (isinstance(parent, cst.Attribute) and parent.value is name) and not (
        isinstance(parent, cst.Call) and parent.func is name
    )


def _is_key_read(model: SemanticModel, string: cst.SimpleString) -> bool:
    """Whether a string literal is the key a value is read under: `os.environ["RANK"]`,
    `cfg["local_rank"]`, `os.getenv("RANK")`, `opts.get("rank")`, `getattr(args, "rank")`.
    Any other string is a constant, the same on every rank whatever its letters say: a file
    name `"every_rank.pt"` or a message is no rank."""
    parent = model.parent(string)
    if isinstance(parent, cst.Index):
        element = model.parent(parent)
        return isinstance(element, cst.SubscriptElement)
    if not isinstance(parent, cst.Arg):
        return False
    call = model.parent(parent)
    if not isinstance(call, cst.Call):
        return False
    callee = _callee_word(call)
    if callee in ("getenv", "get", "pop"):
        return call.args[0] is parent
    return callee in ("getattr", "hasattr") and len(call.args) > 1 and call.args[1] is parent


# One device's index (`gpu`, `args.gpu`, `gpu_id`, `local_gpu`, `device_id`): under mp.spawn,
# the index of this process's GPU, unlike a number of GPUs (`gpus`, `n_gpu`, `num_gpus`).
ONE_DEVICE_INDEX = re.compile(r"(local_?)?(gpu|device)_?(id|idx|index)?", re.IGNORECASE)


def _device_index_is_zero(model: SemanticModel, comparison: cst.Comparison, depth: int = 2) -> bool:
    """`args.gpu == 0`, `gpu_id != 0`: this process's device index compared with 0, true on
    the first process of each machine only. The compared value is this process's device when
    what the file assigns it comes from a rank (`self.gpu_id = int(os.environ["LOCAL_RANK"])`,
    `args.gpu = gpu` with `gpu` the index mp.spawn passes) or, with nothing assigned in the
    file, when it is spelled as one device's index. A count of devices (`cfg.dist.gpus != 0`,
    `gpu_total = torch.cuda.device_count()`) is the same on every rank: it guards nothing."""
    sides = [comparison.left, *(target.comparator for target in comparison.comparisons)]
    if not any(isinstance(side, cst.Integer) and side.value == "0" for side in sides):
        return False
    return any(_holds_device_index(model, side, depth) for side in sides if isinstance(side, (cst.Name, cst.Attribute)))


def _holds_device_index(model: SemanticModel, expr: cst.BaseExpression, depth: int) -> bool:
    """A device-named value that is this process's device (see `_device_index_is_zero`)."""
    if not DEVICE_INDEX_WORDS.search(_last_identifier(expr)):
        return False
    values = _assigned_values(model, expr) if isinstance(expr, cst.Name) else attribute_values(model, expr)
    if values and depth > 0:
        return any(mentions_rank(model, value, depth - 1, followed=True)
                   or (isinstance(value, (cst.Name, cst.Attribute)) and _holds_device_index(model, value, depth - 1))
                   or (isinstance(value, cst.Call) and value.args and isinstance(value.args[0].value, (cst.Name, cst.Attribute))
                       and _callee_word(value) == "int" and _holds_device_index(model, value.args[0].value, depth - 1))
                   for value in values)
    return not values and ONE_DEVICE_INDEX.fullmatch(_last_identifier(expr)) is not None


def _last_identifier(expr: cst.BaseExpression) -> str:
    return expr.attr.value if isinstance(expr, cst.Attribute) else expr.value  # type: ignore[union-attr]


def _returns_rank_test(model: SemanticModel, function: cst.FunctionDef, depth: int) -> bool:
    returns = [node for node in _subtree(function.body) if isinstance(node, cst.Return) and node.value is not None]
    return any(mentions_rank(model, statement.value, depth) for statement in returns)


_RANK_HELPERS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def _imported_rank_test(model: SemanticModel, call: cst.Call, depth: int) -> bool:
    """A call of a function of another project file whose every return is a rank test or a
    constant, whatever its name: `primary()` with `if not dist.is_initialized(): return True`
    / `return dist.get_rank() == 0`, `leader()` with `return rank_now() == 0`."""
    name = dotted_name(call.func)
    project = getattr(model, "project", None)
    if name is None or project is None or name.partition(".")[0] not in model.imports:
        return False
    try:
        qualified = model.qualified_name(call.func)
        if qualified is None or qualified.startswith("torch.") or not project.mentions(qualified, model, _RANK_TEXT):
            return False  # read as text first: parse no file whose function names no rank
        callee = model.flow.callee(call)
    except Exception:
        return False
    if callee is None or callee.model is model or not isinstance(callee.node, cst.FunctionDef):
        return False
    known = _RANK_HELPERS.setdefault(callee.model, {})
    key = (callee.node, depth)
    if key not in known:
        known[key] = False  # while deciding
        known[key] = _returns_only_rank_tests(callee.model, callee.node, depth)
    return known[key]


def _returns_only_rank_tests(model: SemanticModel, function: cst.FunctionDef, depth: int) -> bool:
    """Every `return` of the function gives a constant or a value involving a rank, and one
    does (nested definitions left out)."""
    nested = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
    returns = [node for node in _subtree(function.body, skip=lambda n: n is not function.body and isinstance(n, nested))
               if isinstance(node, cst.Return)]
    if not returns or any(statement.value is None for statement in returns):
        return False
    ranked = False
    for statement in returns:
        if mentions_rank(model, statement.value, depth):
            ranked = True
            continue
        try:
            literal_value(statement.value)
        except ValueError:
            return False
    return ranked


def _imported_returns_on_some_ranks(model: SemanticModel, call: cst.Call) -> bool:
    """A function of another project file, imported here, that returns a value on some ranks only."""
    name = dotted_name(call.func)
    project = getattr(model, "project", None)
    if name is None or name.partition(".")[0] not in model.imports or project is None:
        return False
    try:
        qualified = model.qualified_name(call.func)
        if qualified is None or not project.mentions(qualified, model, _RANK_TEXT):
            return False  # read as text first: parse no file whose function names no rank
        callee = model.flow.callee(call)
    except Exception:
        return False
    return (callee is not None and callee.model is not model and isinstance(callee.node, cst.FunctionDef)
            and returns_value_on_some_ranks(callee.model, callee.node))


# Words one of which a function returning on some ranks only must contain (`RANK_WORDS`,
# `DEVICE_INDEX_WORDS` in their plain spellings).
_RANK_TEXT = ("rank", "master", "main", "process_ind", "primary", "global_zero", "chief", "root", "gpu", "device_id")


_SOME_RANKS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def returns_value_on_some_ranks(model: SemanticModel, function: cst.FunctionDef) -> bool:
    """A function that returns a value only under a rank guard and None on the other ranks
    (`if rank == 0: return score.item()` then `return None`, or nothing at the end): the
    caller's `if result is not None:` (or `if result:`) lets only those ranks through.
    A function with no None path (`if local_rank == -1: return model` / `return DDP(model)`)
    returns a value on every rank: not one."""
    known = _SOME_RANKS.setdefault(model, {})
    if function in known:
        return known[function]
    known[function] = False  # while deciding: a guard that calls back here is no guard
    valued, none_path = [], not ends_in_exit(model, function.body)  # it can end without a return
    for node in _subtree(function.body, skip=lambda n: n is not function.body and isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef))):
        if isinstance(node, cst.Return):
            if node.value is None or isinstance(node.value, cst.Name) and node.value.value == "None":
                none_path = True
            else:
                valued.append(node)
    answer = none_path and bool(valued) and all(
        any(mentions_rank(model, test) and not same_on_every_rank(model, test) for test, _ in guard_tests(model, node))
        for node in valued)  # `if args.local_rank != -1: return sampler`: every rank alike, no guard
    known[function] = answer
    return answer


# Calls whose result is their argument, reshaped: `int(os.environ["RANK"])`, `os.getenv("RANK")`.
_CONVERSIONS = {"int", "str", "bool", "float", "getenv", "get"}


def _subtree(node: cst.CSTNode, into_calls: bool = True, skip=None) -> Iterator[cst.CSTNode]:
    """The nodes of a tree; with `into_calls=False` the arguments of a call are left out
    (but for conversions such as `int(...)`): a value bound to a name is a rank test when a
    rank shows at its surface (`is_master = rank == 0`), not when some call deep inside it
    happens to take a rank-named argument (`overflow = math.isnan(norm_of(master_params))`).
    `skip`: parts left out with everything under them."""
    stack = [node]
    while stack:
        current = stack.pop()
        if skip is not None and skip(current):
            continue
        yield current
        if not into_calls and isinstance(current, cst.Call):
            callee = current.func.attr.value if isinstance(current.func, cst.Attribute) else getattr(current.func, "value", "")
            if callee not in _CONVERSIONS:
                stack.append(current.func)
                continue
        stack.extend(reversed(children_of(current)))


# ------------------------------------------------------------------------ guards
def enclosing_function(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost def or lambda around a node; None at module level (or in a class body)."""
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return ancestor
    return None


def is_rank_guarded(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether a node, inside its own function (or module), runs only on some ranks. A test
    that every process of the job answers alike (`local_rank != -1`, `rank > -1`: "is this a
    distributed run") singles out no rank."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return has_rank_decorator(ancestor)
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test and _singles_out_ranks(model, ancestor.test):
            return True
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right and _singles_out_ranks(model, ancestor.left):
            return True
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)) and _after_rank_exit(model, ancestor, child, node):
            return True
        child = ancestor
    return False


def _singles_out_ranks(model: SemanticModel, test: cst.BaseExpression) -> bool:
    return mentions_rank(model, test) and not same_on_every_rank(model, test)


def has_rank_decorator(definition: cst.CSTNode) -> bool:
    """`@rank_zero_only`, `@master_only`, `@main_process_only`..."""
    if not isinstance(definition, cst.FunctionDef):
        return False
    for decorator in definition.decorators:
        target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        if isinstance(target, (cst.Name, cst.Attribute)) and is_rank_word(_last_identifier(target)):
            return True
    return False


def _after_rank_exit(model: SemanticModel, block: cst.CSTNode, statement: cst.CSTNode,
                     node: Optional[cst.CSTNode] = None) -> bool:
    """`if not is_master: return` (or `raise`, `continue`, `break`, `sys.exit()`) earlier in the
    block. An exit on `not a and not is_rank0` does not fire where `node` runs under `if a:`
    (one of its parts is false there, on every rank)."""
    for sibling in block.body:  # type: ignore[attr-defined]
        if sibling is statement:
            return False
        if isinstance(sibling, cst.If) and _singles_out_ranks(model, sibling.test):
            if ends_in_exit(model, sibling.body) and node is not None and _false_on_the_path(model, sibling.test, node):
                continue
            branches = [sibling.body, sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None]
            if any(branch is not None and ends_in_exit(model, branch) for branch in branches):
                return True
    return False


def _false_on_the_path(model: SemanticModel, test: cst.BaseExpression, node: cst.CSTNode) -> bool:
    """Whether a part of the `and` test is answered the other way by a test that `node` needs
    (`not a` where `node` is under `if a:`)."""
    if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)):
        return False
    known = dict(_canonical_test(model, other, truth) for other, truth in guard_tests(model, node))
    parts, conjuncts = [test], []
    while parts:
        part = parts.pop()
        if isinstance(part, cst.BooleanOperation) and isinstance(part.operator, cst.And):
            parts += [part.left, part.right]
        else:
            conjuncts.append(part)
    for conjunct in conjuncts:
        text, needed = _canonical_test(model, conjunct, True)
        if known.get(text, needed) != needed:
            return True
    return False


def ends_in_exit(model: SemanticModel, block: cst.BaseSuite) -> bool:
    """A block whose last statement leaves it: `return`, `raise`, `continue`, `break`, `sys.exit()`."""
    last = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    if isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
        return True
    return (
        isinstance(last, cst.Expr)
        and isinstance(last.value, cst.Call)
        and (model.qualified_name(last.value.func) or dotted_name(last.value.func)) in EXITS
    )


def guard_tests(model: SemanticModel, node: cst.CSTNode) -> list[tuple[cst.BaseExpression, bool]]:
    """The tests a node passes inside its own function (or module), innermost first, each with
    the answer it needs: True for the `if` (or `x if test else y`, `test and x`) around it,
    False in their `else`, and the opposite of an earlier `if test: return` in the same block
    (True for `if test: ... else: return`)."""
    found = []
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            found.append((ancestor.test, child is ancestor.body))
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            found.append((ancestor.left, isinstance(ancestor.operator, cst.And)))
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            for sibling in ancestor.body:
                if sibling is child:
                    break
                if isinstance(sibling, cst.If):
                    if ends_in_exit(model, sibling.body):
                        found.extend(_passed_exiting_arms(model, sibling))
                    elif isinstance(sibling.orelse, cst.Else) and ends_in_exit(model, sibling.orelse.body):
                        found.append((sibling.test, True))
        child = ancestor
    return found


def _passed_exiting_arms(model: SemanticModel, chain: cst.If) -> list[tuple[cst.BaseExpression, bool]]:
    """After `if a: return` / `elif b: ...; return` / `elif c: x = 1`, code below was reached
    with `a` and `b` false: every test of the leading arms that all exit (not `c`, whose arm
    falls through)."""
    found = []
    arm: Optional[cst.BaseSuite] = chain
    while isinstance(arm, cst.If) and ends_in_exit(model, arm.body):
        found.append((arm.test, False))
        arm = arm.orelse
    return found


# The number of processes of the job: `dist.get_world_size()` (or a project helper of that
# name), `world_size`, `args.world_size`, `accelerator.num_processes`.
WORLD_SIZE_WORDS = re.compile(r"(^|_)world_?size$|^num_processes$", re.IGNORECASE)


def on_single_process_branch(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether the node, in its function, runs only when the job is one process: under
    `if dist.get_world_size() == 1:` (`<= 1`, `< 2`), in the `else` of `if world_size > 1:`
    (`!= 1`, `>= 2`), or after `if world_size > 1: return`. With one process nothing else
    writes or waits, like on rank 0 alone."""
    return any(_one_process_answer(test) == needed for test, needed in guard_tests(model, node))


def _one_process_answer(test: cst.BaseExpression) -> Optional[bool]:
    """The answer of `test` that means "one process" (True for `world_size == 1`, False for
    `world_size > 1`), or None when the test is not about the world size."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _one_process_answer(test.expression)
        return None if inner is None else not inner
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    operator, right, left = type(test.comparisons[0].operator), test.comparisons[0].comparator, test.left
    if _is_world_size(right) and isinstance(left, cst.Integer):
        left, right = right, left  # `1 == world_size`
        operator = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan, cst.LessThanEqual: cst.GreaterThanEqual,
                    cst.GreaterThanEqual: cst.LessThanEqual}.get(operator, operator)
    if not (_is_world_size(left) and isinstance(right, cst.Integer)):
        return None
    bound = int(right.value)
    one = {(cst.Equal, 1): True, (cst.NotEqual, 1): False, (cst.LessThanEqual, 1): True, (cst.LessThan, 2): True,
           (cst.GreaterThan, 1): False, (cst.GreaterThanEqual, 2): False}
    return one.get((operator, bound))


def _is_world_size(expr: cst.BaseExpression) -> bool:
    """`dist.get_world_size()`, `get_world_size()`, `world_size`, `args.world_size`,
    `int(os.environ["WORLD_SIZE"])`."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "int" and len(expr.args) == 1:
        return _is_world_size(expr.args[0].value)
    if isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, (cst.Name, cst.Attribute)):
        return WORLD_SIZE_WORDS.search(_last_identifier(expr.func)) is not None  # `get_world_size()`, `world_size()`
    if isinstance(expr, cst.Subscript) and _is_environ(expr.value) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        return isinstance(key, cst.SimpleString) and key.value.strip("'\"") == "WORLD_SIZE"
    return isinstance(expr, (cst.Name, cst.Attribute)) and WORLD_SIZE_WORDS.search(_last_identifier(expr)) is not None


def on_exclusive_branches(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether no run of their function reaches both nodes: they need one test (the same
    code, `not`, `!=`, `is not`, `not in` read as the other answer) answered both ways
    (`if args.local_rank == -1: device = cuda` / `else: init_process_group(...)`, or
    `if local_rank != -1:` ... `if local_rank == -1:`)."""
    if enclosing_function(model, first) is not enclosing_function(model, second):
        return False
    needed = dict(_canonical_test(model, test, truth) for test, truth in guard_tests(model, first))
    return any(needed.get(text, truth) != truth for text, truth in (
        _canonical_test(model, test, truth) for test, truth in guard_tests(model, second)))


def multi_process_switches(model: SemanticModel) -> set[tuple[str, bool]]:
    """The tests (code, answer) that every sign of several processes in the file needs:
    `if cfg.DIST_TRAIN:` around the only DistributedDataParallel, `if not args.distributed:
    return` before the only `init_process_group`. The other answer is the file's one-process
    path (a launcher's rank read, `int(os.environ["LOCAL_RANK"])`, is a sign too). Empty when
    some sign needs none of them."""
    signs = [site.node for site in model.calls
             if site.qualified_name in MULTI_PROCESS_CLASSES or starts_process_group(model, site.node)]
    signs += [wrapping.call for wrapping in constructions(model) if wrapping.kind == "DDP"]
    if not signs:
        return set()
    signs += launcher_rank_reads(model)
    common: Optional[set] = None
    for sign in signs:
        needed = set(branch_tests(model, sign))
        common = needed if common is None else common & needed
    return common or set()


def branch_tests(model: SemanticModel, node: cst.CSTNode) -> Iterator[tuple[str, bool]]:
    """The tests a node needs in its function (see guard_tests) as (code, answer), negations
    folded in and `a and b` needed true read as both needed true (`a or b` false: both false)."""
    pending = list(guard_tests(model, node))
    while pending:
        test, truth = pending.pop()
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, truth = test.expression, not truth
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) == truth:
            pending += [(test.left, truth), (test.right, truth)]
            continue
        yield _canonical_test(model, test, truth)


_OPPOSITES = {cst.NotEqual: "==", cst.IsNot: "is", cst.NotIn: "in"}


def _canonical_test(model: SemanticModel, test: cst.BaseExpression, truth: bool) -> tuple[str, bool]:
    """A test's code and the answer needed, negations folded in: `not x` is `x` answered the
    other way, `a != b` is `a == b` answered the other way."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, truth = test.expression, not truth
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        opposite = _OPPOSITES.get(type(target.operator))
        operator = opposite or model.code(target.operator).strip()
        text = f"{model.code(test.left).strip()} {operator} {model.code(target.comparator).strip()}"
        return text, truth if opposite is None else not truth
    return model.code(test).strip(), truth


# ------------------------------------------------------------------------ the main rank
# Names that are true on the main process only (`is_master`, `is_main_process()`,
# `trainer.is_global_zero`, `rank_zero`): checked before RANK_WORDS, which they overlap.
MAIN_WORDS = re.compile(
    r"master|main_?process|is_main|global_zero|process_zero|is_primary|is_chief|is_root|root_worker|rank_?(0|zero)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CallSite:
    """A call of `function`: its parameters are read as the call's arguments."""

    call: cst.Call
    function: cst.FunctionDef
    bound: bool


BOTH = frozenset((True, False))


def is_compound_test(test: cst.BaseExpression) -> bool:
    """`not x`, `a and b`, `a or b`: tests whose answers `compound_answers` combines."""
    return isinstance(test, cst.BooleanOperation) or (
        isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not))


def compound_answers(test: cst.BaseExpression,
                     answers_of: Callable[[cst.BaseExpression], Optional[frozenset]]) -> Optional[frozenset]:
    """The answers a compound test can give from those of its parts (`answers_of`; None: can't
    tell): `not` flips them; `and` / `or` combine them, and a part that alone settles the
    result (`False` for `and`, `True` for `or`) settles it even when the other can't tell."""
    if isinstance(test, cst.UnaryOperation):
        inner = answers_of(test.expression)
        return None if inner is None else frozenset(not value for value in inner)
    left, right = answers_of(test.left), answers_of(test.right)
    both_and = isinstance(test.operator, cst.And)
    settled = frozenset((not both_and,))
    if left is None or right is None:
        return settled if settled in (left, right) else None
    return frozenset((a and b) if both_and else (a or b) for a in left for b in right)


def main_rank_truth(model: SemanticModel, test: cst.BaseExpression, site: Optional[CallSite] = None,
                    depth: int = 2, rank: int = 0) -> Optional[frozenset]:
    """The answers `test` can give on the main process of a multi-process job (rank 0, local
    rank 0): `rank == 0`, `args.local_rank in [-1, 0]`, `is_main_process()` give {True};
    `rank != 0`, `local_rank not in (-1, 0)`, `if rank:` give {False}; a part that involves no
    rank (a configuration flag, the same on every rank) may give either; `and`/`or`/`not`
    combine them. A name or attribute bound to a rank test (every binding alike), and a
    parameter of `site.function` read as what `site.call` passes, are followed. None when a
    part involves a rank in a way this cannot evaluate. With `rank`, the same for the process of
    that rank (and local rank): `is_main_process()` holds on rank 0 only."""
    if is_compound_test(test):
        return compound_answers(test, lambda part: main_rank_truth(model, part, site, depth, rank))
    if isinstance(test, cst.Comparison):
        answer = _main_rank_comparison(test, rank)
        if answer is not None:
            return frozenset((answer,))
    elif _is_main_reference(test):
        return frozenset((rank == 0,))
    elif _rank_number(test) is not None:
        return frozenset((rank != 0,))  # `if rank:`: rank 0 is falsy
    try:
        return frozenset((bool(literal_value(test)),))
    except ValueError:
        pass
    if isinstance(test, cst.Name) and names_a_definition(model, test.value):
        return frozenset((True,))  # `not evaluate` with `def evaluate(...)` in the file: always False
    if depth > 0 and isinstance(test, (cst.Name, cst.Attribute)):
        values = _parameter_values(model, test, site) if isinstance(test, cst.Name) else []
        if values:
            site = None  # the argument is read where the call is
        else:
            values = _assigned_values(model, test) if isinstance(test, cst.Name) else attribute_values(model, test)
        answers = [main_rank_truth(model, value, site, depth - 1, rank) for value in values]
        if answers and None not in answers:
            return frozenset().union(*answers)
    return None if mentions_rank(model, test) else BOTH


def _is_main_reference(expr: cst.BaseExpression) -> bool:
    """`is_master`, `args.is_main_process`, `is_main_process()`, `accelerator.is_main_process`."""
    target = expr.func if isinstance(expr, cst.Call) else expr
    return isinstance(target, (cst.Name, cst.Attribute)) and MAIN_WORDS.search(_last_identifier(target)) is not None


def _rank_number(expr: cst.BaseExpression) -> Optional[int]:
    """0 for an expression holding the main process's rank (`rank`, `args.local_rank`,
    `dist.get_rank()`, `int(os.environ["LOCAL_RANK"])`, `args.gpu` under mp.spawn); None otherwise."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "int" and len(expr.args) == 1:
        return _rank_number(expr.args[0].value)
    if isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, (cst.Name, cst.Attribute)):
        name = _last_identifier(expr.func)
        return 0 if re.search(r"get_(local_|global_)?rank$", name) and NODE_WORDS.search(name) is None else None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        if isinstance(key, cst.SimpleString) and key.value.strip("'\"") in ("RANK", "LOCAL_RANK"):
            return 0
        return None
    if isinstance(expr, cst.Call) and dotted_name(expr.func) in ("os.environ.get", "os.getenv", "environ.get") \
            and expr.args and isinstance(expr.args[0].value, cst.SimpleString) \
            and expr.args[0].value.value.strip("'\"") in ("RANK", "LOCAL_RANK"):
        return 0  # `os.environ.get("RANK", -1)`: the launcher's rank (its default only without one)
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = _last_identifier(expr)
        if MAIN_WORDS.search(name) is None and (
            re.search(r"(^|_)rank$", name, re.IGNORECASE) or DEVICE_INDEX_WORDS.fullmatch(name)
        ) and NODE_WORDS.search(name) is None:
            return 0
    return None


def _numbers(expr: cst.BaseExpression) -> Optional[tuple[int, ...]]:
    items = [element.value for element in expr.elements] if isinstance(expr, (cst.List, cst.Tuple, cst.Set)) else [expr]
    try:
        values = tuple(literal_value(item) for item in items)
    except ValueError:
        return None
    return values if all(isinstance(v, int) and not isinstance(v, bool) for v in values) else None


def _main_rank_comparison(test: cst.Comparison, process: int = 0) -> Optional[bool]:
    if len(test.comparisons) != 1:
        return None
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    left = test.left
    rank = _rank_number(left)
    numbers = _numbers(right)
    if rank is None and isinstance(operator, (cst.Equal, cst.NotEqual)):
        left, right = right, left  # `0 == rank`
        rank, numbers = _rank_number(left), _numbers(right)
    if rank is None or numbers is None:
        return None
    rank = process
    if isinstance(operator, (cst.In, cst.NotIn)):
        return (rank in numbers) == isinstance(operator, cst.In)
    if len(numbers) != 1 or isinstance(right, (cst.List, cst.Tuple, cst.Set)):
        return None
    number = numbers[0]
    compare = {
        cst.Equal: rank == number, cst.NotEqual: rank != number, cst.LessThan: rank < number,
        cst.GreaterThan: rank > number, cst.LessThanEqual: rank <= number, cst.GreaterThanEqual: rank >= number,
    }
    return compare.get(type(operator))


def _parameter_values(model: SemanticModel, name: cst.Name, site: Optional[CallSite]) -> list[cst.BaseExpression]:
    """What `site.call` passes for `name` when it is a parameter of `site.function`."""
    if site is None or name.value not in {p.name.value for p in site.function.params.params + site.function.params.kwonly_params}:
        return []
    if enclosing_function(model, name) is not site.function:
        return []
    value = model.flow.parameter_argument(site.call, site.function, name.value, site.bound)
    return [value] if value is not None else []


def every_rank_answer(model: SemanticModel, test: cst.BaseExpression) -> Optional[bool]:
    """The one answer every process of a distributed job gives to a rank test: True for
    `local_rank != -1`, `rank >= 0` (-1 meaning "not distributed"), judged for ranks 0, 1 and
    2; None when the ranks may answer differently or it can't be told. A flag that holds either
    value (`writes = rank == 0` spelled as two assignments) gives both answers: None."""
    answers = {main_rank_truth(model, test, rank=rank) for rank in (0, 1, 2)}
    if len(answers) != 1 or None in answers:
        return None
    (answer,) = answers
    return next(iter(answer)) if len(answer) == 1 else None


def same_on_every_rank(model: SemanticModel, test: cst.BaseExpression) -> bool:
    """A rank test every process of a distributed job answers alike (`every_rank_answer`)."""
    return every_rank_answer(model, test) is not None


def main_rank_passes(model: SemanticModel, node: cst.CSTNode, site: Optional[CallSite] = None) -> Optional[bool]:
    """Whether the main process, once in the function around `node`, can pass every rank test
    on the way to it (True), surely fails one (False), or a test can't be told (None).
    Configuration parts of a test (`args.do_eval and rank == 0`) may go either way."""
    answer: Optional[bool] = True
    for test, needed in guard_tests(model, node):
        if not mentions_rank(model, test):
            continue
        answers = main_rank_truth(model, test, site)
        if answers is None:
            answer = None
        elif needed not in answers:
            return False
    return answer


# ------------------------------------------------------------------------ reachability
@dataclass(eq=False)
class _CallGraph:
    callers: dict[cst.FunctionDef, list[cst.Call]]
    spawned: set[cst.FunctionDef]
    starts_group: set[cst.FunctionDef]  # functions that start the process group themselves


_GRAPHS: "weakref.WeakKeyDictionary[SemanticModel, _CallGraph]" = weakref.WeakKeyDictionary()


def callers_of(model: SemanticModel, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls in this file that we can tell call this function (by name or `self.`/instance)."""
    return _graph(model).callers.get(function, [])


def every_rank_reaches(model: SemanticModel, node: cst.CSTNode) -> Optional[Route]:
    """A Route when every rank provably runs `node`; None when guarded or when we can't tell.

    Module-level code, functions started by `torch.multiprocessing.spawn` and functions that
    start the process group themselves run on every rank; a function does when one of its
    calls in this file does, unguarded.
    """
    return _route(model, node, frozenset())


def _route(model: SemanticModel, node: cst.CSTNode, visiting: frozenset) -> Optional[Route]:
    if len(visiting) > MAX_DEPTH or is_rank_guarded(model, node) or on_single_process_branch(model, node):
        return None
    function = enclosing_function(model, node)
    if function is None:
        in_class = any(isinstance(a, cst.ClassDef) for a in model.ancestors(node))
        return None if in_class else Route()
    if not isinstance(function, cst.FunctionDef) or function in visiting:
        return None
    graph = _graph(model)
    if function in graph.spawned or function in graph.starts_group:
        return Route()
    for call in graph.callers.get(function, ()):
        route = _route(model, call, visiting | {function})
        if route is not None:
            return Route((call, *route.calls))
    return None


def _graph(model: SemanticModel) -> _CallGraph:
    graph = _GRAPHS.get(model)
    if graph is None:
        graph = _CallGraph({}, set(), set())
        for site in model.calls:
            if starts_process_group(model, site.node):
                # An `mp.spawn` target (or a `main` a launcher runs once per GPU) that calls
                # `init_process_group` itself runs on every rank, whoever calls it.
                function = enclosing_function(model, site.node)
                if isinstance(function, cst.FunctionDef):
                    graph.starts_group.add(function)
            if site.qualified_name in SPAWNERS:
                graph.spawned.update(called_functions(model, argument(site.node, 0, "fn"), site.node))
                continue
            for function in called_functions(model, site.node.func, site.node):
                graph.callers.setdefault(function, []).append(site.node)
        # A function that calls one of those (`setup(rank, world)` first thing in `train`)
        # starts it too.
        pending = list(graph.starts_group)
        while pending:
            for call in graph.callers.get(pending.pop(), ()):
                caller = enclosing_function(model, call)
                if isinstance(caller, cst.FunctionDef) and caller not in graph.starts_group:
                    graph.starts_group.add(caller)
                    pending.append(caller)
        _GRAPHS[model] = graph
    return graph


def mentions_spawn_index(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Whether `expr` reads the process index that `mp.spawn` passes first to the function
    around `at` (`def main_worker(gpu, ...)`): a different value in each process of a machine."""
    function = enclosing_function(model, at)
    if not isinstance(function, cst.FunctionDef) or function not in _graph(model).spawned:
        return False
    positional = [*function.params.posonly_params, *function.params.params]
    if not positional:
        return False
    index = positional[0].name.value
    return any(
        isinstance(node, cst.Name) and node.value == index and model.binding_at(index, node) is not None
        and isinstance(model.binding_at(index, node).node, cst.Param)
        for node in _subtree(expr)
    )


def called_functions(model: SemanticModel, func: Optional[cst.BaseExpression], at: cst.CSTNode) -> list[cst.FunctionDef]:
    """The defs of this file a callee expression names: `f`, `self.f`, `obj.f` with `obj = C(...)`."""
    if isinstance(func, cst.Name):
        return _visible_functions(model, func.value, at) or _instance_call(model, func, at)
    if not isinstance(func, cst.Attribute):
        return []
    method = func.attr.value
    scope = model.scope(at)
    owner = func.value
    if isinstance(owner, cst.Name) and scope.self_name == owner.value and scope.class_scope is not None:
        return _methods(model, scope.class_scope.node, method)
    instance = peel_self_returning(model.value_at(owner, at))
    if isinstance(instance, cst.Call) and isinstance(instance.func, cst.Name):
        class_node = model.classes.get(instance.func.value)
        if class_node is not None and _visible_functions(model, instance.func.value, at, kind=cst.ClassDef):
            return _methods(model, class_node, method)
    return []


_CALLABLE_CLASSES: "weakref.WeakKeyDictionary[SemanticModel, set]" = weakref.WeakKeyDictionary()


def _instance_call(model: SemanticModel, func: cst.Name, at: cst.CSTNode) -> list[cst.FunctionDef]:
    """`stopper(loss, model, path)` with `stopper = EarlyStopping(...)`, a class of this file
    that defines `__call__`: that method runs."""
    callable_classes = _CALLABLE_CLASSES.get(model)
    if callable_classes is None:
        callable_classes = {name for name, node in model.classes.items() if _methods(model, node, "__call__")}
        _CALLABLE_CLASSES[model] = callable_classes
    if not callable_classes or func.value in model.classes:
        return []
    instance = peel_self_returning(model.value_at(func, at))
    if not (isinstance(instance, cst.Call) and isinstance(instance.func, cst.Name) and instance.func.value in callable_classes):
        return []
    if not _visible_functions(model, instance.func.value, instance, kind=cst.ClassDef):
        return []
    return _methods(model, model.classes[instance.func.value], "__call__")


def _visible_functions(model: SemanticModel, name: str, at: cst.CSTNode, kind=cst.FunctionDef) -> list:
    """Defs (or classes) named `name` in the scope a call at `at` resolves that name in.

    A def later in the file counts: a function body runs after the module defined everything.
    A name that scope also binds otherwise (an assignment, a parameter) resolves to nothing.
    """
    scope = model.scope(at)
    while scope is not None:
        if scope.kind == "class" and scope.node is not model.scope(at).node:
            scope = scope.parent
            continue
        if name in scope.local_names:
            bindings = [b for b in model.bindings.get(name, ()) if b.scope is scope]
            if not bindings or not all(isinstance(b.node, kind) for b in bindings):
                return []
            return [b.node for b in bindings]
        scope = scope.parent
    return []


def _methods(model: SemanticModel, class_node: cst.CSTNode, name: str) -> list[cst.FunctionDef]:
    body = class_node.body.body if isinstance(class_node, cst.ClassDef) else ()
    return [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name]


def passed_for(model: SemanticModel, function: cst.FunctionDef, param: cst.Param) -> list[cst.BaseExpression]:
    """What this file's calls of `function` pass for one of its parameters (its default where a
    call passes nothing)."""
    positional = [*function.params.posonly_params, *function.params.params]
    index: Optional[int] = positional.index(param) if param in positional else None
    if index is not None and model.scope(function).kind == "class":
        index -= 1  # `self.save(state, path)`: self is not among the call's arguments
    passed = []
    for call in callers_of(model, function):
        value = argument(call, index, param.name.value) if index is not None and index >= 0 else argument(call, None, param.name.value)
        if value is not None:
            passed.append(value)
        elif param.default is not None:
            passed.append(param.default)
    return passed
