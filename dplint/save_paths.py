"""Where a `torch.save` writes, and which ranks get to it: the facts unguarded-rank-save asks.

Each fact is a statement about what the program does:

- A save writes the file its second argument (`f=`) names; `with open(p, "wb") as f:
  torch.save(x, f)` writes `p`; a save that forwards its function's `*args` writes the path
  the call of that function passes (`save_on_master(state, "ckpt.pt")`).
- The path differs per rank when its value is built from a rank-valued expression: the rank
  torch reports (`dist.get_rank()`), the rank a launcher sets (`os.environ["LOCAL_RANK"]`),
  the index `mp.spawn` passes its function first, or a rank variable (`rank`, `args.rank`).
  A name or a `self.` attribute is judged by what the file assigns it, a parameter by what
  the calls pass it; only a value the file never shows (a parameter no call here fills,
  `args.local_rank` from argparse) is judged by the word it is spelled with. A constant is the
  same path on every rank whatever its letters say: `"every_rank.pt"`, and `rank_ckpt_path =
  "ckpt.pt"`, are one file for all ranks.
- A value each process draws for itself (`uuid.uuid4()`, `os.getpid()`, `secrets.token_hex()`)
  names a file of that process alone; an in-memory buffer (`io.BytesIO()`) or a temporary
  file is private to the process that opens it.
- A save inside a function called only under a rank guard is guarded (see
  `dplint.distributed.every_rank_reaches`); so is one whose function of another project file
  guards it: `save_on_master(...)` saves on rank 0 when its body guards the save, and on every
  rank when it does not.
- A test guards only when some rank cannot pass it, judged by what it tests, not by a word
  in its name: `if a or rank == 0:` lets every rank in when `a` is set, an early return on
  `not a and not is_rank0` lets every rank go on when `a` is set (not a pure rank guard), and
  `save_on_master = cfg.save` ... `if save_on_master:` tests a setting. In a job of several
  processes the process group is up (`dist.is_initialized()`) and the file's switch to several
  processes (`if args.distributed:` around its DDP) is on; any other setting may be either way.
  A guard on one statement does not cover another in the same loop; an exit (`continue`,
  `return`) covers what follows it in its block.
- A function that wraps a model in DistributedDataParallel runs on every rank: the
  constructor is a collective that every process of the group joins.
- An `if` in a helper that tests only a parameter the call fills with a literal (or leaves at
  its default) is decided by the call: `if model is not None:` is skipped when no model is
  passed, `if local_rank > -1:` guards nothing when the call leaves `local_rank=-1`.
- A method of a project class runs on every rank when this file calls it on an instance on
  every rank; a rank handed to the object (`Fitter(model, device=rank)`) guards a save whose
  test or path reads it; where it goes out of sight (a base class, `*args`) we can't tell.
- Where every sign of several processes in a file needs one test (`if cfg.DIST_TRAIN:`), a
  save on that test's other answer runs in a one-process job.
"""

from __future__ import annotations

import operator
from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import TORCH_SAVE, called_function
from dplint.distributed import (
    WORLD_SIZE_WORDS,
    Route,
    attribute_values,
    branch_tests,
    callers_of,
    compound_answers,
    enclosing_function,
    ends_in_exit,
    every_rank_answer,
    every_rank_reaches,
    guard_tests,
    has_rank_decorator,
    is_compound_test,
    is_rank_guarded,
    is_rank_word,
    main_rank_truth,
    mentions_rank,
    mentions_spawn_index,
    multi_process_switches,
    on_single_process_branch,
    passed_for,
)
from dplint.flow import class_method
from dplint.semantic import (
    SemanticModel,
    argument,
    children_of,
    dotted_name,
    literal_value,
)
from dplint.wrapper_classes import constructions

# Calls whose value differs in every process: a path built from one names a file of that
# process alone.
PER_PROCESS_CALLS = {"uuid.uuid1", "uuid.uuid4", "os.getpid", "secrets.token_hex", "secrets.token_urlsafe"}
# Targets private to the process that opens them: nothing is shared.
PRIVATE_TARGETS = ("io.", "tempfile.")
# Calls that read the value stored under a key: `os.getenv("RANK")`, `cfg.get("rank")`.
KEY_READS = {"getenv", "get", "pop"}
FOLLOW_DEPTH = 3
# True in every process of a multi-process job: the process group is up.
GROUP_IS_UP = {"torch.distributed.is_initialized", "torch.distributed.is_available"}


# ------------------------------------------------------------------------ the path written
def writes_own_file(model: SemanticModel, save: cst.Call, call: Optional[cst.Call] = None,
                    caller: Optional[SemanticModel] = None) -> bool:
    """Whether the file (or buffer) `save` writes is its process's own, or we can't tell which
    it is. `call` (in `caller`, this file by default) is the call by which every rank runs the
    save's function: its arguments are what the function's parameters hold."""
    caller = caller or model
    target = argument(save, 1, "f")
    if target is None:
        passed = _forwarded_path(model, save, call, caller)
        return passed is None or _differs_or_private(caller, passed)
    if _is_private(model, model.value_at(target, save)):
        return True
    key = model.binding_key(target, save)
    binding = model.binding_at(key, save) if key is not None else None
    if binding is not None and isinstance(binding.node, cst.With):  # `with open(path, "wb") as f:`
        return any(_differs_or_private(model, item.item) for item in binding.node.items
                   if item.asname is not None and dotted_name(item.asname.name) == key)
    if binding is not None and isinstance(binding.node, cst.Param) and call is not None:
        function = enclosing_function(model, save)
        passed = caller.flow.parameter_argument(call, function, key, _is_method(model, function))
        if passed is not None:
            return _differs_or_private(caller, passed)
    return differs_per_process(model, target)


def _forwarded_path(model: SemanticModel, save: cst.Call, call: Optional[cst.Call],
                    caller: SemanticModel) -> Optional[cst.BaseExpression]:
    """`def save_on_master(*args, **kwargs): torch.save(*args, **kwargs)`: the path is what
    `call` passes in the place of torch.save's second argument."""
    function = enclosing_function(model, save)
    if call is None or not isinstance(function, cst.FunctionDef) or any(arg.star for arg in call.args):
        return None
    star = function.params.star_arg
    before = 0
    for arg in save.args:
        if arg.star == "*":
            if not (isinstance(star, cst.Param) and dotted_name(arg.value) == star.name.value):
                return None
            positional = len(function.params.posonly_params) + len(function.params.params)
            index = positional - _is_method(model, function) + 1 - before
            plain = [passed for passed in call.args if passed.keyword is None]
            keyword = [passed for passed in call.args if passed.keyword is not None and passed.keyword.value == "f"]
            if 0 <= index < len(plain):
                return plain[index].value
            return keyword[0].value if keyword else None
        if arg.keyword is not None or arg.star:
            return None
        before += 1
    return None


def _is_method(model: SemanticModel, function: cst.CSTNode) -> bool:
    return model.scope(function).kind == "class"


def _differs_or_private(model: SemanticModel, expr: cst.BaseExpression) -> bool:
    return _is_private(model, model.value_at(expr, expr)) or differs_per_process(model, expr)


def _is_private(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> bool:
    return isinstance(expr, cst.Call) and (model.qualified_name(expr.func) or "").startswith(PRIVATE_TARGETS)


def differs_per_process(model: SemanticModel, expr: cst.BaseExpression, depth: int = FOLLOW_DEPTH) -> bool:
    """Whether the value of `expr` differs from process to process: it is built from a rank
    (or a value each process draws for itself), not merely spelled with a rank's word."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            if _is_operand(model, node) and _name_differs(model, node, depth):
                return True
        elif isinstance(node, cst.Attribute):
            if _is_operand(model, node) and _attribute_differs(model, node, depth):
                return True
            if not isinstance(node.value, (cst.Name, cst.Attribute)):
                stack.append(node.value)  # `uuid.uuid4().hex`: the object is part of the value
        elif isinstance(node, cst.Call):
            if _call_differs(model, node):
                return True
            stack.extend(arg.value for arg in node.args)
            if isinstance(node.func, cst.Attribute):
                stack.append(node.func.value)  # `rank_dir.joinpath("x.pt")`: the object is part of the value
        elif isinstance(node, cst.Subscript):
            if any(_rank_key(element.slice.value) for element in node.slice if isinstance(element.slice, cst.Index)):
                return True  # `os.environ["LOCAL_RANK"]`, `cfg["rank"]`
            stack.extend(children_of(node))
        elif not isinstance(node, cst.SimpleString):
            stack.extend(children_of(node))
    return False


def _is_operand(model: SemanticModel, node: cst.CSTNode) -> bool:
    """A name or attribute used as a value (not the object of an attribute, not a callee)."""
    parent = model.parent(node)
    return not (isinstance(parent, cst.Attribute) and parent.value is node) and not (
        isinstance(parent, cst.Call) and parent.func is node)


def _rank_key(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.SimpleString) and is_rank_word(expr.value.strip("'\""))


def _call_differs(model: SemanticModel, call: cst.Call) -> bool:
    """`dist.get_rank()`, `get_local_rank()` (a call spelled as a rank: its code lives
    elsewhere), `uuid.uuid4()`, `os.getenv("LOCAL_RANK")`, `getattr(args, "rank")`."""
    if model.qualified_name(call.func) in PER_PROCESS_CALLS:
        return True
    callee = dotted_name(call.func) or ""
    word = callee.rpartition(".")[2]
    if is_rank_word(word):
        return True
    if word in KEY_READS and call.args:
        return _rank_key(call.args[0].value)
    return word == "getattr" and len(call.args) > 1 and _rank_key(call.args[1].value)


def _name_differs(model: SemanticModel, name: cst.Name, depth: int) -> bool:
    """A name holds what its scope assigns it (any of its assignments), a parameter what the
    calls pass it; the index `mp.spawn` passes is the process's own."""
    if not model.contains(name):
        return is_rank_word(name.value)
    binding = model.binding_at(name.value, name)
    if binding is None or depth == 0:
        return is_rank_word(name.value)
    if isinstance(binding.node, cst.Param):
        if mentions_spawn_index(model, name, name):
            return True
        function = enclosing_function(model, name)
        if isinstance(function, cst.FunctionDef) and callers_of(model, function):
            return any(differs_per_process(model, passed, depth - 1)
                       for passed in passed_for(model, function, binding.node))
        return is_rank_word(name.value)  # filled where we can't see: its name is all we have
    values = [b.value for b in model.bindings.get(name.value, ()) if b.scope is binding.scope and b.value is not None]
    if not values:
        return is_rank_word(name.value)  # a loop target, an import: what it holds is out of sight
    return any(differs_per_process(model, value, depth - 1) for value in values)


def _attribute_differs(model: SemanticModel, attribute: cst.Attribute, depth: int) -> bool:
    """`self.x` holds what the class assigns it; an attribute of an object this file hands to
    other code (`args.rank`, set by a helper elsewhere) may be set there too, so a rank's word
    counts beside what this file assigns."""
    values = attribute_values(model, attribute) if depth > 0 else []
    if any(differs_per_process(model, value, depth - 1) for value in values):
        return True
    mine = dotted_name(attribute.value) == "self" and values
    return not mine and is_rank_word(attribute.attr.value)


# ------------------------------------------------------------------------ who gets to a save
def every_rank_runs(model: SemanticModel, node: cst.CSTNode) -> Optional[Route]:
    """A Route when every rank runs `node`: `every_rank_reaches`'s, or one where each test on the
    way is judged by what it tests (a test every rank can pass guards nothing, see the module
    doc) and a function that builds a DistributedDataParallel runs on every rank."""
    return every_rank_reaches(model, node) or _route(model, node, frozenset(), multi_process_switches(model))


def _route(model: SemanticModel, node: cst.CSTNode, visiting: frozenset, switches: set) -> Optional[Route]:
    if len(visiting) > 8 or _guarded(model, node, switches) or on_single_process_branch(model, node):
        return None
    function = enclosing_function(model, node)
    if function is None:
        return None if any(isinstance(a, cst.ClassDef) for a in model.ancestors(node)) else Route()
    if not isinstance(function, cst.FunctionDef) or function in visiting or not function.body.body:
        return None
    entry = every_rank_reaches(model, function.body.body[0])  # spawned, starts the group, or called so
    if entry is not None:
        return entry
    if _builds_ddp(model, function, switches):
        return Route()
    callers = callers_of(model, function)
    if not callers and visiting and _entry_of_a_ddp_object(model, function, switches):
        # (not the save's own method: a `save(path)` nobody calls is an API whose caller decides)
        return Route()
    for call in callers:
        route = _route(model, call, visiting | {function}, switches)
        if route is not None:
            return Route((call, *route.calls))
    return None


def _entry_of_a_ddp_object(model: SemanticModel, method: cst.FunctionDef, switches: set) -> bool:
    """A method nothing in the project calls, of a class one of whose methods builds a
    DistributedDataParallel on every rank (`Trainer.__init__`): every rank has such an object,
    and the driver that runs it (`trainer.fit()`, a framework) runs it on each. Asked only of
    a method that calls on towards the save (`fit()` calling `self.save()`)."""
    owner = model.parent(model.parent(method))
    if not isinstance(owner, cst.ClassDef) or method.name.value.startswith("_"):
        return False
    methods = [s for s in owner.body.body if isinstance(s, cst.FunctionDef)]
    return any(_builds_ddp(model, other, switches) for other in methods) and not model.flow.known_call_sites(method)


def _builds_ddp(model: SemanticModel, function: cst.FunctionDef, switches: set) -> bool:
    """A function that wraps a model in DistributedDataParallel (not under a rank test) runs on
    every rank: the constructor is a collective that every process of the group joins."""
    return any(wrapping.kind == "DDP" and enclosing_function(model, wrapping.call) is function
               and not _guarded(model, wrapping.call, switches) for wrapping in constructions(model))


def _guarded(model: SemanticModel, node: cst.CSTNode, switches: set) -> bool:
    """Whether some rank never gets to `node` inside its function: the tests around it and the
    early exits before it (as `is_rank_guarded` finds them), each one judged by `_guards`."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return has_rank_decorator(ancestor)
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            if _guards(model, ancestor.test, child is ancestor.body, switches):
                return True
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            if _guards(model, ancestor.left, isinstance(ancestor.operator, cst.And), switches):
                return True
        for sibling in ancestor.body if isinstance(ancestor, (cst.IndentedBlock, cst.Module)) else ():
            if sibling is child:
                break
            if isinstance(sibling, cst.If):
                other = sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None
                if ends_in_exit(model, sibling.body) and _guards(model, sibling.test, False, switches):
                    return True
                if other is not None and ends_in_exit(model, other) and _guards(model, sibling.test, True, switches):
                    return True
        child = ancestor
    return False


def _guards(model: SemanticModel, test: cst.BaseExpression, needed: bool, switches: set) -> bool:
    """Whether some rank surely fails to answer `needed` (or we can't tell: then it guards)."""
    if not mentions_rank(model, test):
        return False
    answers = [_answers(model, test, rank, switches) for rank in (0, 1, 2)]
    return any(found is None or needed not in found for found in answers)


def _answers(model: SemanticModel, test: cst.BaseExpression, rank: int, switches: set,
             depth: int = 2) -> Optional[frozenset]:
    """The answers `test` can give on the process of `rank` in a job of several processes;
    None when it can't tell."""
    if is_compound_test(test):
        return compound_answers(test, lambda part: _answers(model, part, rank, switches, depth))
    if isinstance(test, cst.Call) and model.qualified_name(test.func) in GROUP_IS_UP:
        return frozenset((True,))
    code = model.code(test).strip()
    for truth in (True, False):
        if (code, truth) in switches:
            return frozenset((truth,))
    sides = (test.left, *(part.comparator for part in test.comparisons)) if isinstance(test, cst.Comparison) else ()
    if any(WORLD_SIZE_WORDS.search(_last_name(side)) for side in sides):
        return None  # the number of processes: `world_size == 1` is judged by on_single_process_branch
    if _is_flag(model, test):
        return None  # its values tell nothing without the tests they are assigned under
    values = _followed_values(model, test) if depth > 0 else None
    if values:
        found = [_answers(model, value, rank, switches, depth - 1) for value in values]
        return None if None in found else frozenset().union(*found)
    return main_rank_truth(model, test, rank=rank)


def _is_flag(model: SemanticModel, test: cst.BaseExpression) -> bool:
    """A name or attribute the file binds to a constant: `writes = False` / `if rank == 0:
    writes = True`, `self.talkative = True` (mentions_rank reads where each value is set)."""
    if isinstance(test, cst.Attribute):
        values = attribute_values(model, test)
    elif isinstance(test, cst.Name) and model.contains(test) and model.binding_at(test.value, test) is not None:
        scope = model.binding_at(test.value, test).scope
        values = [b.value for b in model.bindings.get(test.value, ()) if b.scope is scope and b.value is not None]
    else:
        return False
    return any(_is_constant(value) for value in values)


def _last_name(expr: cst.BaseExpression) -> str:
    """`world_size` of `args.world_size` and of `dist.get_world_size()`'s callee."""
    return (dotted_name(expr.func if isinstance(expr, cst.Call) else expr) or "").rpartition(".")[2]


def _followed_values(model: SemanticModel, test: cst.BaseExpression) -> Optional[list]:
    """The values a local name holds (its scope's assignments), followed instead of its word;
    None for a parameter or a name bound elsewhere."""
    if not isinstance(test, cst.Name) or not model.contains(test):
        return None
    binding = model.binding_at(test.value, test)
    if binding is None or isinstance(binding.node, cst.Param):
        return None
    values = [b.value for b in model.bindings.get(test.value, ()) if b.scope is binding.scope]
    return None if not values or None in values else values


def _is_constant(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return True
    try:
        literal_value(expr)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------ one-process paths
def on_one_process_path(model: SemanticModel, nodes) -> bool:
    """`if cfg.DIST_TRAIN: (DDP) ... else: torch.save(...)`, or `else: trainer.save()` on the
    way to it: the save, or a call that brings every rank to it, needs the other answer of a
    test that every sign of several processes in the file needs."""
    switches = multi_process_switches(model)
    return bool(switches) and any(
        (test, not truth) in switches for node in nodes for test, truth in branch_tests(model, node))


# ------------------------------------------------------------------------ helpers of other files
def project_save_helpers(model: SemanticModel) -> list[tuple[cst.Call, SemanticModel, cst.FunctionDef]]:
    """Calls of plain functions of other project files whose text holds `torch.save`
    (`checkpoint.save_checkpoint(model, ...)` with `import checkpoint`)."""
    project = getattr(model, "project", None)
    if project is None:
        return []
    found = []
    for site in model.calls:
        name = site.qualified_name
        if name is None or name.startswith(("torch.", "builtins.")) or "." not in name and name not in model.imports:
            continue
        try:
            if not project.mentions(name, model, ("torch.save",), through_own_file=True):
                continue
        except Exception:
            continue
        target = called_function(model, site.node)
        if target is None or target[0] is model or target[2]:
            continue  # this file's functions are followed by every_rank_reaches; methods elsewhere
        found.append((site.node, target[0], target[1]))
    return found


def unguarded_helper_saves(model: SemanticModel, helpers) -> Iterator[tuple]:
    """(call, its file's model, the function, the save, whether the call's arguments decided a
    test) for each `torch.save` of a helper of another file that every rank reaches from here."""
    for call, other, function in helpers:
        if every_rank_runs(model, call) is None:
            continue
        saves = _saves_by_function(other)
        for save in saves.get(function, ()):
            reached, decided = _reached_unguarded(model, call, other, function, save)
            if reached and not writes_own_file(other, save, call, model) and not on_one_process_path(other, (save,)):
                yield call, other, function, save, decided
        for inner, inner_function in _own_file_calls(other, function, saves):
            # `save_model(...)` -> `save_on_master(to_save, path)` in the helper's own file: the
            # inner call must be reached past no guard, and its save past none of its own
            if not _reached_unguarded(model, call, other, function, inner)[0]:
                continue
            for save in saves[inner_function]:
                if _reached_unguarded(other, inner, other, inner_function, save)[0] \
                        and not writes_own_file(other, save, inner, other) and not on_one_process_path(other, (inner, save)):
                    yield call, other, function, save, False


def _reached_unguarded(caller: SemanticModel, call: cst.Call, other: SemanticModel, function: cst.FunctionDef,
                       node: cst.CSTNode) -> tuple[bool, bool]:
    """(whether `call` reaches `node` of `function` past no rank guard and not on a
    one-process branch, whether the call's arguments decided a test on the way)."""
    reached, guarded, decided = reach_in_function(caller, call, other, function, node)
    return reached and not guarded and not on_single_process_branch(other, node), decided


def _saves_by_function(model: SemanticModel) -> dict:
    """Function -> the `torch.save` calls in its own body (not in a function nested in it)."""
    found: dict = {}
    for site in model.calls:
        if site.qualified_name == TORCH_SAVE:
            found.setdefault(enclosing_function(model, site.node), []).append(site.node)
    return found


def _own_file_calls(model: SemanticModel, function: cst.FunctionDef, saves: dict) -> list[tuple[cst.Call, cst.FunctionDef]]:
    """(call, callee) for each call in the function's own body of a plain function of the same
    file that itself holds a `torch.save` (`saves`: `_saves_by_function` of the file)."""
    found = []
    for site in model.calls:
        if enclosing_function(model, site.node) is not function:
            continue
        callee = model.flow.callee(site.node, local=True)
        if callee is None or callee.bound or not isinstance(callee.node, cst.FunctionDef) or callee.node is function:
            continue
        if saves.get(callee.node):
            found.append((site.node, callee.node))
    return found


_COMPARE = {
    cst.GreaterThan: operator.gt, cst.LessThan: operator.lt, cst.GreaterThanEqual: operator.ge,
    cst.LessThanEqual: operator.le, cst.Equal: operator.eq, cst.NotEqual: operator.ne,
    cst.Is: operator.is_, cst.IsNot: operator.is_not,
}
_UNKNOWN = object()


def _argument_value(model: SemanticModel, call: cst.Call, function: cst.FunctionDef, name: str, bound: bool = False):
    """The literal a call passes for a parameter (or its default); _UNKNOWN otherwise."""
    passed = model.flow.parameter_argument(call, function, name, bound)
    if isinstance(passed, cst.Name) and passed.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[passed.value]
    try:
        return literal_value(passed) if passed is not None else _UNKNOWN
    except ValueError:
        return _UNKNOWN


def decided_by_call(model: SemanticModel, test: cst.BaseExpression, call: cst.Call, function: cst.FunctionDef,
                    params: set, bound: bool = False) -> Optional[bool]:
    """True/False when the test depends only on a parameter that this call fills with a
    literal (`if model is not None:` with `model` left at None; `if local_rank > -1:` with the
    default -1); None when it cannot tell."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = decided_by_call(model, test.expression, call, function, params, bound)
        return None if inner is None else not inner
    if isinstance(test, cst.Name) and test.value in params:
        value = _argument_value(model, call, function, test.value, bound)
        return None if value is _UNKNOWN else bool(value)
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name)):
        return None
    compare = _COMPARE.get(type(test.comparisons[0].operator))
    right = test.comparisons[0].comparator
    if compare is None or test.left.value not in params:
        return None
    value = _argument_value(model, call, function, test.left.value, bound)
    try:
        other = None if isinstance(right, cst.Name) and right.value == "None" else literal_value(right)
        return None if value is _UNKNOWN else bool(compare(value, other))
    except (ValueError, TypeError):
        return None


def _every_rank_answers(model: SemanticModel, test: cst.BaseExpression) -> Optional[bool]:
    """The answer each process of a distributed job gives to a rank test they all answer
    alike (`local_rank > -1`, `rank != -1`: True; the `else` is the run without a launcher)."""
    return every_rank_answer(model, test) if mentions_rank(model, test) else None


def reach_in_function(caller: SemanticModel, call: cst.Call, other: SemanticModel, function: cst.FunctionDef,
                      save: cst.CSTNode, bound: bool = False) -> tuple[bool, bool, bool]:
    """(whether the call can reach the save, whether a rank guard the call leaves in force
    covers it, whether the call's arguments decided a test): `if` tests of the function
    decided by the call's literal arguments are taken or skipped as the call makes them, and
    do not guard."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                     *function.params.kwonly_params)}
    decided_any = guarded = False
    child: cst.CSTNode = save
    for ancestor in other.ancestors(save):
        if ancestor is function:
            break
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            for sibling in ancestor.body:  # `if return_model: return new` before the save
                if sibling is child:
                    break
                if not isinstance(sibling, cst.If):
                    continue
                decided = decided_by_call(caller, sibling.test, call, function, params, bound)
                if decided is None:
                    decided = _every_rank_answers(other, sibling.test)
                other_branch = sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None
                if decided is None:
                    branches = [branch for branch in (sibling.body, other_branch) if branch is not None]
                    if mentions_rank(other, sibling.test) and any(ends_in_exit(other, branch) for branch in branches):
                        guarded = True  # `if dist.get_rank() != 0: return` earlier in the method
                    continue
                taken = sibling.body if decided else other_branch
                if taken is not None and ends_in_exit(other, taken):
                    return False, False, True
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            decided = decided_by_call(caller, ancestor.test, call, function, params, bound)
            if decided is None:
                decided = _every_rank_answers(other, ancestor.test)
            if decided is not None:
                decided_any = True
                if decided != (child is ancestor.body):
                    return False, False, True
            elif mentions_rank(other, ancestor.test):
                guarded = True
        child = ancestor
    if not decided_any:
        guarded = is_rank_guarded(other, save)
    return True, guarded, decided_any


# ------------------------------------------------------------------------ methods of project classes
def project_method_calls(model: SemanticModel) -> list[tuple]:
    """(call, constructor call, the class's file, the method, where the rank lands) for calls
    of a method of an instance of a project class defined in another file whose text holds
    `torch.save`: `stopper(loss, model, path)` with `stopper = EarlyStopping(...)` runs its
    `__call__`, `saver.dump(state)` with `saver = Saver(out)` runs `dump`. Left out where the
    rank goes where we can't follow it, or the instance is built on one rank."""
    project = getattr(model, "project", None)
    built_here = _saving_objects_built(model, project) if project is not None else set()
    found = []
    for site in model.calls if built_here else ():
        call, func = site.node, site.node.func
        holder = func if isinstance(func, cst.Name) else func.value if isinstance(func, cst.Attribute) else None
        if holder is None or dotted_name(holder) not in built_here:
            continue
        built = model.value_at(holder, call)
        if not isinstance(built, cst.Call) or built is holder or is_rank_guarded(model, built):
            continue  # `if rank == 0: saver = Saver(out)`: an object of one rank
        target = called_function(model, call)
        if target is None or target[0] is model or not target[2]:
            continue
        carriers = _rank_carriers(model, call, built, target[0], target[1])
        if carriers is not None:
            found.append((call, built, target[0], target[1], carriers))
    return found


def _saving_objects_built(model: SemanticModel, project) -> set[str]:
    """The names (`stopper`, `self.saver`) this file assigns an instance of an imported
    project class whose text holds `torch.save` to."""
    names: set[str] = set()
    for site in model.calls:
        owner = site.qualified_name
        if owner is None or "." not in owner or owner.startswith(("torch.", "builtins.")):
            continue  # a class of this file or of no import: followed elsewhere or not at all
        statement = model.parent(site.node)
        if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
            continue
        target = dotted_name(statement.targets[0].target)
        if target is None or target in names:
            continue
        try:
            if project.mentions(owner, model, ("torch.save",)) and _makes_project_class(model, site.node):
                names.add(target)
        except Exception:
            continue
    return names


def _makes_project_class(model: SemanticModel, call: cst.Call) -> bool:
    callee = model.flow.callee(call)
    return callee is not None and callee.model is not model and isinstance(callee.node, cst.ClassDef)


def _parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _rank_carriers(model: SemanticModel, call: cst.Call, built: cst.Call, other: SemanticModel,
                   method: cst.FunctionDef) -> Optional[tuple[set, set]]:
    """Where the rank that this file hands the object lands: (attributes of `self` that the
    constructor copies a rank-carrying parameter into, parameters of `method` the call fills
    with a rank): `Fitter(model, device=rank)` with `self.device = device`. Empty sets when
    no argument carries a rank; None when one does and it goes elsewhere (into another call,
    a `*args`, a base class)."""
    ranked = [arg for arg in (*call.args, *built.args) if mentions_rank(model, arg.value)]
    if not ranked:
        return set(), set()
    owner = other.parent(other.parent(method))
    init = class_method(owner, "__init__") if isinstance(owner, cst.ClassDef) else None

    def filled(at: cst.Call, function: Optional[cst.FunctionDef]) -> set:
        if function is None:
            return set()
        known = _parameter_names(function)
        names = {name for name in known if any(
            model.flow.parameter_argument(at, function, name, True) is arg.value for arg in ranked)}
        for arg in at.args:  # `device=rank` beside a `**config["trainer"]` the flow leaves unread
            if arg in ranked and arg.keyword is not None and arg.keyword.value in known:
                names.add(arg.keyword.value)
        return names

    params, init_params = filled(call, method), filled(built, init)
    if len(params) + len(init_params) != len(ranked):
        return None
    attributes: set = set()
    stack: list = [init.body] if init is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute):
            stack.append(node.value)  # `self.device`: `device` there is the attribute's name
            continue
        stack.extend(children_of(node))
        if not (isinstance(node, cst.Name) and node.value in init_params):
            continue
        statement = other.parent(node)
        if isinstance(statement, cst.Param):
            continue
        target = dotted_name(statement.targets[0].target) if isinstance(statement, cst.Assign) and (
            statement.value is node and len(statement.targets) == 1) else None
        if target is None or not target.startswith("self."):
            return None  # `super().__init__(rank)`, `self.log = Logger(rank)`: the rank goes on elsewhere
        attributes.add(statement.targets[0].target.attr.value)
    return attributes, params


def _carries_rank(expr: cst.CSTNode, carriers: tuple[set, set]) -> bool:
    """Whether `expr` reads a rank the object was handed (`self.device == 0`, a parameter filled
    with the rank), or calls a method of `self` that may."""
    attributes, params = carriers
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and dotted_name(node.value) == "self" and node.attr.value in attributes:
            return True
        if isinstance(node, cst.Name) and node.value in params:
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and (attributes or params) \
                and dotted_name(node.func.value) == "self":
            if any(_carries_rank(arg.value, carriers) for arg in node.args) or not node.args:
                return True  # `if self.is_lead():` may read it
        stack.extend(children_of(node))
    return False


def _method_route(other: SemanticModel, method: cst.FunctionDef, save: cst.Call, depth: int = 4) -> Optional[list]:
    """The `self.` calls, outermost first, by which `method` reaches the function around
    `save` in its own class, each unguarded ([] when `save` sits in `method` itself)."""
    function = enclosing_function(other, save)
    if function is method:
        return []
    if depth == 0 or not isinstance(function, cst.FunctionDef) or is_rank_guarded(other, save):
        return None
    for caller in callers_of(other, function):
        route = _method_route(other, method, caller, depth - 1)
        if route is not None:
            return [*route, caller]
    return None


def unguarded_method_saves(model: SemanticModel, methods) -> Iterator[tuple]:
    """(the class's file, the method, the save) for each `torch.save` of a project class's
    method (or a `self.` method it calls) that this file runs on every rank through an
    instance, with no rank test on the way."""
    for call, built, other, method, carriers in methods:
        if every_rank_runs(model, call) is None:
            continue
        for site in other.calls:
            save = site.node
            route = _method_route(other, method, save) if site.qualified_name == TORCH_SAVE else None
            if route is None:
                continue
            reached, guarded, _ = reach_in_function(model, call, other, method, route[0] if route else save, bound=True)
            if not reached or guarded or (route and is_rank_guarded(other, save)):
                continue
            nodes = (save, *route)
            if writes_own_file(other, save) or any(on_single_process_branch(other, node) for node in nodes):
                continue  # `if get_world_size() == 1:`: one process, nothing else writes
            if any(_carries_rank(test, carriers) for node in nodes for test, _ in guard_tests(other, node)):
                continue  # `if self.device == 0:` with `Fitter(..., device=rank)`: the rank it was handed
            if any(_carries_rank(arg, carriers) for arg in (*save.args, *(a for c in route for a in c.args))):
                continue  # `f"{out}/ckpt{self.device}.pt"`, or the rank handed on to another method
            if any(_constructor_excludes(model, built, other, method, node) for node in nodes):
                continue  # `if self.accelerator is not None:` ... `else: torch.save(...)`, built with one
            if not on_one_process_path(other, nodes):
                yield other, method, save


def _constructor_excludes(model: SemanticModel, built: cst.Call, other: SemanticModel, method: cst.FunctionDef,
                          node: cst.CSTNode) -> bool:
    """Whether an `if` around `node` (in its function) tests an attribute the constructor
    copies from one of its parameters (`self.accelerator = accelerator`) and the branch that
    holds `node` is the one this instance never takes: `Stopper(accelerator=accelerator)` never
    runs `else:` of `if self.accelerator is not None:`."""
    child = node
    for ancestor in other.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            truth = _attribute_test_truth(model, built, other, method, ancestor.test)
            if truth is not None and truth != (child is ancestor.body):
                return True
        child = ancestor
    return False


def _attribute_test_truth(model: SemanticModel, built: cst.Call, other: SemanticModel, method: cst.FunctionDef,
                          test: cst.BaseExpression) -> Optional[bool]:
    """The answer of `self.x is None` / `self.x is not None` / `self.x` / `not self.x` for this
    instance, when `__init__` sets `self.x` from a parameter (its only assignment in the class)
    that the constructor call fills with `None` or with a new object; None when it can't tell."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _attribute_test_truth(model, built, other, method, test.expression)
        return None if inner is None else not inner
    none_test = None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator_, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if not (isinstance(operator_, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and right.value == "None"):
            return None
        none_test, test = isinstance(operator_, cst.Is), test.left
    if not (isinstance(test, cst.Attribute) and dotted_name(test.value) == "self"):
        return None
    owner = other.parent(other.parent(method))
    init = class_method(owner, "__init__") if isinstance(owner, cst.ClassDef) else None
    assigned = _class_attribute_values(owner, test.attr.value) if init is not None else []
    if init is None or len(assigned) != 1 or not isinstance(assigned[0], cst.Name):
        return None
    passed = model.flow.parameter_argument(built, init, assigned[0].value, True)
    if isinstance(passed, cst.Name) and passed.value == "None":
        is_none = True
    elif isinstance(model.value_at(passed, built) if passed is not None else None, cst.Call):
        is_none = False  # a new object: `accelerator = Accelerator()` passed on
    else:
        return None
    return is_none if none_test is True else (not is_none)


def _class_attribute_values(owner: cst.ClassDef, name: str) -> list[Optional[cst.BaseExpression]]:
    """What the class's methods assign to `self.<name>` (augmented assignments too)."""
    found: list = []
    stack: list[cst.CSTNode] = [owner.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign):
            targets = [target.target for target in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            targets = [node.target]
        else:
            stack.extend(children_of(node))
            continue
        for target in targets:
            if dotted_name(target) == f"self.{name}":
                found.append(node.value)
            elif isinstance(target, (cst.Tuple, cst.List)) and any(
                    dotted_name(element.value) == f"self.{name}" for element in target.elements):
                found.append(None)  # `self.a, self.b = ...`: a value we do not pair up
    return found
