"""DPL011 unguarded-rank-save: every DDP rank `torch.save`s the same file at the same time."""

from __future__ import annotations

import operator
from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import TORCH_SAVE, called_function
from dplint.flow import class_method
from dplint.distributed import (
    Route,
    callers_of,
    enclosing_function,
    ends_in_exit,
    every_rank_reaches,
    guard_tests,
    is_multi_process,
    multi_process_switches,
    branch_tests,
    is_rank_guarded,
    mentions_rank,
    mentions_spawn_index,
    on_single_process_branch,
    passed_for,
)
from dplint.rule import Example, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument, children_of, dotted_name, literal_value

# Targets that are private to the process that opens them: nothing is shared.
PRIVATE_TARGETS = ("io.", "tempfile.")


class UnguardedRankSave(Rule):
    """
    ## What it does
    In a script that runs as several processes (it calls `dist.init_process_group`,
    `deepspeed.init_distributed()`, `Accelerator()`, `hvd.init()` or a helper named like
    `init_distributed_mode` / `init_dist` / `setup_ddp`, builds a `DistributedDataParallel` or
    a `DistributedSampler`, or reads the `LOCAL_RANK` / `--local_rank` a launcher passes: an
    option declared and never used, or only printed, a template's leftover, is no evidence),
    flags a `torch.save(...)` that every rank runs. Every rank runs module-level code, a
    function started by `mp.spawn`, a function that starts the process group itself (directly
    or through a helper of this file: an `mp.spawn` target whose spawn is elsewhere), and a
    function this file calls from such code without a guard.

    A save is guarded, and not flagged, under an `if` (or `... and`, `x if ... else`) whose
    test involves a rank or a main-process helper (`if rank == 0:`, `if dist.get_rank() == 0:`,
    `if args.local_rank in (-1, 0):`, `if comm.is_main_process():`, `if self.global_rank == 0:`,
    `if accelerator.is_main_process:`), a name or attribute the file sets to such a test on any
    path (`is_master = rank == 0`, `self.is_logger = ...`, `args.save_logs = ... and
    is_main_process()`, `writer = SummaryWriter() if rank == 0 else None`), a value that a
    function of this file returns only under a rank guard and None elsewhere (`score =
    evaluate(...)` ... `if score is not None:`, with `if rank == 0: return acc` / `return None`
    in `evaluate`), after an early exit
    (`if not is_master: return`), in a function decorated `@rank_zero_only` / `@master_only`,
    or in a function whose calls in this file are all guarded. A function of another project
    file whose every `return` gives a rank test or a constant is a rank test whatever its name
    (`if primary():` with `return dist.get_rank() == 0`, and `return True` without a process
    group). A flag bound only to constants that gets one of its values only under a rank test
    (`self.verbose = True` / `if args.distributed and dist.get_rank() != 0: self.verbose =
    False`) is that rank test; one also set under a plain setting (`if args.quiet:`) is not. A
    save under `if dist.get_world_size() == 1:` (`<= 1`, `< 2`, `not world_size() > 1`, the
    `else` of `if world_size > 1:`) runs in a one-process job: not flagged. A test of the rank
    against the world size itself (`if rank >= world_size: return`, `size` passed
    `dist.get_world_size()`) excludes no rank and guards nothing. A machine's index
    (`node_rank == 0`, `args.nr == 0`) is not a guard: every process of that machine passes it.
    A save to a path built from a rank value (`f"ckpt_rank{rank}.pt"`, the process index
    `mp.spawn` passes its function first: `"final{}.pth".format(gpu)`, or a name bound to one:
    `bank_file = os.path.join(out, "bank" + str(args.rank) + ".pth")`; a constant such as
    `"every_rank.pt"` is the same path on every rank whatever its letters say), to a name each process
    draws for itself (`f"batch-{uuid.uuid4()}.pt"`, `os.getpid()`) or to an in-memory
    buffer is not flagged, nor a save in a function this file never calls (it can't tell who
    runs it), nor `utils.save_on_master(...)` (not a `torch.save`). A file whose every process
    group is `init_process_group(..., world_size=1)` (the old one-process DDP over all GPUs)
    runs as one process: nothing to guard. Where every sign of several processes in the file
    (its DistributedDataParallel, its process-group start, its DistributedSampler, its reads
    of a launcher's rank) needs one test (`if cfg.DIST_TRAIN:`, `if not args.distributed:
    return`), a save on that test's other answer
    (`else: torch.save(...)`, or `else: trainer.save()` on the way to it) is on the
    one-process path: not flagged.

    When dplint checks a project, a plain function of another project file that this file
    calls on every rank (`checkpoint.save_checkpoint(model, ...)` with `import checkpoint`)
    is followed too: a `torch.save` in it that no guard inside the function covers is
    reported there. So is a method of a project class that this file calls on every rank
    through an instance (`stopper(loss, model, path)` with `stopper = EarlyStopping(...)` runs
    its `__call__`; `saver.dump(state)` runs `dump`; a lower-case class name counts once it
    resolves to a project class), and the methods it calls through `self.`. The method's own
    guards apply as in a function (an early `if not leader(): return` or `if dist.get_rank()
    != 0: return` covers every later save, nested ones too, and `if leader(): self._write()`
    the saves of `_write`). Where the call or the constructor hands the object a rank
    (`Fitter(model, device=rank)`), a save is silent when a test on its way reads it (`if
    self.device == 0:` with `self.device = device`, a parameter the call fills with it, a
    `self.` method that may read it) or its path does (`f"opt{self.device}.pt"`); the other
    saves (the final one after the loop) are judged as usual; silent throughout when the rank
    goes where this can't follow (a base class, another object, `*args`). An
    `if self.accelerator is not None:` whose attribute the constructor copies
    from a parameter is decided by what the constructor call passes. A callable object of this
    file (`keep = BestKeeper(out)` ... `keep(loss, net)`) is followed like a function. An `if` in the function
    that tests only a parameter the call fills with a literal (or leaves at its default) is
    decided by it: `if model is not None:` is skipped when the call passes no model, and
    `if local_rank > -1:` (`else:` saves) guards nothing when the call leaves `local_rank=-1`;
    such a finding is on the call, where the rank is missing. An early exit decided the same
    way (`if return_model: return new` before the save, the call leaving `return_model=True`)
    keeps the call from the save.

    ## Why is this bad?
    Every rank opens the same path and writes it at once. `torch.save` writes the file in
    place (torch 2.13 `torch/serialization.py` `_open_zipfile_writer_file` hands the path to
    `PyTorchFileWriter`: no temporary file, no rename), so the writers interleave. Re-checked on
    torch 2.13 (CPU): two processes saving a 48 MiB state dict of different values to one path
    produced, in 12 of 12 trials, a file that loads without error but mixes tensors of both
    processes; an earlier 40-trial run also got `RuntimeError: ... record size ... does not
    match` up to 14 times, and `EOFError` for a reader racing a writer. Ranks' states do
    differ (BatchNorm running statistics are per rank), so the mix is a checkpoint no rank
    ever had.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = DDP(Net().to(rank), device_ids=[rank])
    ...
    torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    Use instead:
    ```python
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "checkpoint.pt")
    dist.barrier()  # before any rank loads it
    ```

    ## Fix safety
    No fix: which rank should write, and whether the others must wait for the file
    (`dist.barrier()`), depends on the script.
    """

    code = "DPL011"
    name = "unguarded-rank-save"
    severity = Severity.WARNING
    summary = "every DDP rank torch.save()s the same file at once"
    fix_applicability = None
    # A torch.save, spelled as torch's (`torch.save`, `th.save` beside `import torch as th`,
    # `save` from `from torch import ...`: the spellings its qualified name resolves from),
    # in a file that shows it runs as several processes (see is_multi_process). A plain
    # `save` is too common a word (`accelerator.save_state`) to make a file worth parsing.
    # (a literal: dplint/registry.py reads it without importing the rule)
    tokens = (
        ('torch.save', 'init_process_group'), ('torch.save', 'DistributedDataParallel'),
        ('torch.save', 'init_dist'), ('torch.save', '_dist'), ('torch.save', '_ddp'),
        ('torch.save', 'deepspeed'), ('torch.save', 'Accelerator'), ('torch.save', 'hvd'),
        ('torch.save', 'horovod'), ('torch.save', 'DistributedSampler'), ('torch.save', 'local_rank'),
        ('torch.save', 'LOCAL_RANK'), ('torch.save', 'local-rank'),
        ('torch as', '.save', 'init_process_group'), ('torch as', '.save', 'DistributedDataParallel'),
        ('torch as', '.save', 'init_dist'), ('torch as', '.save', '_dist'), ('torch as', '.save', '_ddp'),
        ('torch as', '.save', 'deepspeed'), ('torch as', '.save', 'Accelerator'),
        ('torch as', '.save', 'hvd'), ('torch as', '.save', 'horovod'),
        ('torch as', '.save', 'DistributedSampler'), ('torch as', '.save', 'local_rank'),
        ('torch as', '.save', 'LOCAL_RANK'), ('torch as', '.save', 'local-rank'),
        ('from torch import', 'save', 'init_process_group'),
        ('from torch import', 'save', 'DistributedDataParallel'), ('from torch import', 'save', 'init_dist'),
        ('from torch import', 'save', '_dist'), ('from torch import', 'save', '_ddp'),
        ('from torch import', 'save', 'deepspeed'), ('from torch import', 'save', 'Accelerator'),
        ('from torch import', 'save', 'hvd'), ('from torch import', 'save', 'horovod'),
        ('from torch import', 'save', 'DistributedSampler'), ('from torch import', 'save', 'local_rank'),
        ('from torch import', 'save', 'LOCAL_RANK'), ('from torch import', 'save', 'local-rank'),
    )

    VALID = (
        # Saved on rank 0 only.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_rank() == 0:\n"
        "    torch.save(state, 'ckpt.pt')\n",
        # An early exit for the other ranks.
        "import torch, torch.distributed as dist\n"
        "def save(state, is_master):\n"
        "    if not is_master:\n"
        "        return\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "dist.init_process_group('nccl')\n"
        "save(state, dist.get_rank() == 0)\n",
        # A helper only ever called under a guard.
        "import torch, torch.distributed as dist\n"
        "def save_checkpoint(state):\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "dist.init_process_group('nccl')\n"
        "if args.local_rank in (-1, 0):\n"
        "    save_checkpoint(state)\n",
        # One file per rank.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "torch.save(state, f'ckpt_rank{dist.get_rank()}.pt')\n",
        # A guard held in an attribute set in the constructor.
        "import torch, torch.distributed as dist\n"
        "class Fit:\n"
        "    def __init__(self):\n"
        "        dist.init_process_group('nccl')\n"
        "        self.writes = dist.get_rank() == 0\n"
        "    def end(self):\n"
        "        if self.writes:\n"
        "            torch.save(state, 'ckpt.pt')\n"
        "Fit().end()\n",
        # Not a multi-process script.
        "import torch\n"
        "torch.save(state, 'ckpt.pt')\n",
        # A one-process job, and a flag only rank 0 keeps.
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_world_size() == 1:\n"
        "    torch.save(state, 'ckpt.pt')\n"
        "chatty = True\n"
        "if dist.get_rank() != 0:\n"
        "    chatty = False\n"
        "if chatty:\n"
        "    torch.save(state, 'last.pt')\n",
    )
    INVALID = (
        # A machine's index is not a rank: all of the first machine's processes save.
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "def worker(gpu, args):\n"
            "    dist.init_process_group('nccl', rank=args.node_rank * 8 + gpu, world_size=16)\n"
            "    if args.node_rank == 0:\n"
            "        torch.save(state, 'ckpt.pt')\n",
        ),
        # Launched by DeepSpeed.
        Example(
            "import deepspeed, torch\n"
            "deepspeed.init_distributed()\n"
            "torch.save(state, 'ckpt.pt')\n",
        ),
        Example(
            "import torch\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('nccl')\n"
            "for epoch in range(10):\n"
            "    train(epoch)\n"
            "    torch.save(model.state_dict(), 'ckpt.pt')\n",
        ),
        Example(
            "import torch\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def save_checkpoint(state, path='last.pt'):\n"
            "    torch.save(state, path)\n"
            "def main(rank):\n"
            "    model = DDP(Net().to(rank), device_ids=[rank])\n"
            "    if rank == 0:\n"
            "        print('training')\n"
            "    save_checkpoint(model.module.state_dict())\n"
            "if __name__ == '__main__':\n"
            "    main(int(os.environ['LOCAL_RANK']))\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        saves = [site.node for site in model.calls if site.qualified_name == TORCH_SAVE]
        helpers = _project_save_helpers(model)
        methods = _project_method_calls(model)
        if not (saves or helpers or methods) or not is_multi_process(model):
            return
        yield from _saves_in_project_helpers(model, helpers)
        yield from _saves_in_project_methods(model, methods)
        switches = multi_process_switches(model)
        for save in saves:
            if _target_is_per_rank(model, save):
                continue
            route = every_rank_reaches(model, save)
            if route is None or _on_one_process_path(model, switches, (save, *route.calls)):
                continue
            yield Violation(
                node=save,
                message=(
                    f"every rank runs this `torch.save`{_through(model, route)}: all processes write "
                    "the same file at once, in place, so the checkpoint can silently mix tensors "
                    "of different ranks or fail to load; save on one rank "
                    "(`if dist.get_rank() == 0:`) and `dist.barrier()` before others read it"
                ),
            )


def _project_save_helpers(model: SemanticModel) -> list[tuple[cst.Call, SemanticModel, cst.FunctionDef]]:
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
            if not project.mentions(name, model, ("torch.save",)):
                continue
        except Exception:
            continue
        target = called_function(model, site.node)
        if target is None or target[0] is model or target[2]:
            continue  # this file's functions are followed by every_rank_reaches; methods are left out
        found.append((site.node, target[0], target[1]))
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


def _decided(model: SemanticModel, test: cst.BaseExpression, call: cst.Call, function: cst.FunctionDef, params: set,
             bound: bool = False):
    """True/False when the test depends only on a parameter that this call fills with a
    literal (`if model is not None:` with `model` left at None; `if local_rank > -1:` with the
    default -1); None when it cannot tell."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _decided(model, test.expression, call, function, params, bound)
        return None if inner is None else not inner
    if isinstance(test, cst.Name) and test.value in params:
        value = _argument_value(model, call, function, test.value, bound)
        return None if value is _UNKNOWN else bool(value)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name):
        compare = _COMPARE.get(type(test.comparisons[0].operator))
        right = test.comparisons[0].comparator
        if compare is None or test.left.value not in params:
            return None
        value = _argument_value(model, call, function, test.left.value, bound)
        if isinstance(right, cst.Name) and right.value == "None":
            other = None
        else:
            try:
                other = literal_value(right)
            except ValueError:
                return None
        if value is _UNKNOWN:
            return None
        try:
            return bool(compare(value, other))
        except TypeError:
            return None
    return None


def _reach(caller: SemanticModel, call: cst.Call, other: SemanticModel, function: cst.FunctionDef, save: cst.CSTNode,
           bound: bool = False):
    """(whether the call can reach the save, whether a rank guard the call leaves in force
    covers it, whether the call's arguments decided a test): `if` tests of the helper decided by the call's literal arguments are taken or
    skipped as the call makes them, and do not guard."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
    decided_any = False
    guarded = False
    child: cst.CSTNode = save
    for ancestor in other.ancestors(save):
        if ancestor is function:
            break
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            # `if return_model: return new` before the save, with the call leaving it True
            for sibling in ancestor.body:
                if sibling is child:
                    break
                if not isinstance(sibling, cst.If):
                    continue
                decided = _decided(caller, sibling.test, call, function, params, bound)
                if decided is None:
                    if mentions_rank(other, sibling.test) and any(
                            branch is not None and ends_in_exit(other, branch) for branch in (
                                sibling.body, sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None)):
                        guarded = True  # `if dist.get_rank() != 0: return` earlier in the method
                    continue
                taken = sibling.body if decided else sibling.orelse.body if isinstance(sibling.orelse, cst.Else) else None
                if taken is not None and ends_in_exit(other, taken):
                    return False, False, True
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            decided = _decided(caller, ancestor.test, call, function, params, bound)
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


def _saves_in_project_helpers(model: SemanticModel, helpers) -> Iterator[Violation]:
    """A `torch.save` that nothing guards inside a function of another project file, called
    on every rank from here: reported in that file, where the guard goes."""
    for call, other, function in helpers:
        if every_rank_reaches(model, call) is None:
            continue
        for site in other.calls:
            save = site.node
            if site.qualified_name != TORCH_SAVE or enclosing_function(other, save) is not function:
                continue
            reached, guarded, decided = _reach(model, call, other, function, save)
            if not reached or guarded or on_single_process_branch(other, save) or _target_is_per_rank(other, save):
                continue
            if _on_one_process_path(other, multi_process_switches(other), (save,)):
                continue  # the helper's file builds its DDP under a test this save is on the other side of
            if decided:  # the helper's own test would guard it: the call's arguments skip it
                yield Violation(
                    node=call,
                    message=(
                        f"every rank runs this call, and with these arguments `{function.name.value}()` reaches "
                        f"its `torch.save` (line {other.position(save)[0].line} of its file) past its rank test: all "
                        "processes write the same file at once, in place, so the checkpoint can silently mix "
                        "tensors of different ranks or fail to load; call it on one rank (`if dist.get_rank() "
                        "== 0:`) or pass the rank it tests"
                    ),
                )
                continue
            yield Violation(
                node=save,
                message=(
                    f"every rank runs this `torch.save`: `{function.name.value}()` is called on every rank by "
                    "another file of the project, so all processes write the same file at once, in place, and "
                    "the checkpoint can silently mix tensors of different ranks or fail to load; save on one "
                    "rank (`if dist.get_rank() == 0:`, at the call or here) and `dist.barrier()` before others read it"
                ),
            )


def _project_method_calls(model: SemanticModel) -> list[tuple[cst.Call, SemanticModel, cst.FunctionDef]]:
    """Calls of a method of an instance of a project class defined in another file whose text
    holds `torch.save`: `stopper(loss, model, path)` with `stopper = EarlyStopping(...)` runs
    its `__call__`, `saver.dump(state)` with `saver = Saver(out)` runs `dump`. Silent where the
    rank reaches the object (an argument of the call or of the constructor mentions it: the
    class may test it) or the instance is not one class's on every path."""
    project = getattr(model, "project", None)
    if project is None:
        return []
    built_here = _saving_objects_built(model, project)
    if not built_here:
        return []
    found = []
    for site in model.calls:
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
        if carriers is None:
            continue  # the rank goes where we can't follow it: the class may test it
        found.append((call, built, target[0], target[1], carriers))
    return found


def _parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _rank_carriers(model: SemanticModel, call: cst.Call, built: cst.Call, other: SemanticModel,
                   method: cst.FunctionDef) -> Optional[tuple[set, set]]:
    """Where the rank that this file hands the object lands: (attributes of `self` that the
    constructor copies a rank-carrying parameter into, parameters of `method` the call fills
    with a rank): `Fitter(model, device=rank)` with `self.device = device`. Empty sets when
    no argument mentions a rank; None when one does and it goes elsewhere (into another call,
    a `*args`, a base class)."""
    ranked = [arg for arg in (*call.args, *built.args) if mentions_rank(model, arg.value)]
    if not ranked:
        return set(), set()
    owner = other.parent(other.parent(method))
    init = class_method(owner, "__init__") if isinstance(owner, cst.ClassDef) else None

    def filled(at: cst.Call, function: Optional[cst.FunctionDef]) -> set:
        if function is None:
            return set()
        names = set()
        known = _parameter_names(function)
        for name in known:
            value = model.flow.parameter_argument(at, function, name, True)
            if value is not None and any(value is arg.value for arg in ranked):
                names.add(name)
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
        if isinstance(statement, cst.Param) or isinstance(statement, cst.Assign) and statement.value is node and len(
                statement.targets) == 1 and dotted_name(statement.targets[0].target) is not None and dotted_name(
                statement.targets[0].target).startswith("self."):
            if isinstance(statement, cst.Assign):
                attributes.add(statement.targets[0].target.attr.value)
            continue
        return None  # `super().__init__(rank)`, `self.log = Logger(rank)`: the rank goes on elsewhere
    return attributes, params


def _carries_rank(expr: cst.CSTNode, carriers: tuple[set, set]) -> bool:
    """Whether `expr` reads a rank the object was handed (`self.device == 0`, a parameter filled
    with the rank), or calls a method of `self` that may."""
    attributes, params = carriers
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            if node.attr.value in attributes:
                return True
        elif isinstance(node, cst.Name) and node.value in params:
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) == "self" \
                and (attributes or params):
            if any(_carries_rank(arg.value, carriers) for arg in node.args) or not node.args:
                return True  # `if self.is_lead():` may read it
        stack.extend(children_of(node))
    return False


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
            if not project.mentions(owner, model, ("torch.save",)):
                continue
            # classes are named in CapWords (`EarlyStopping(...)`, not `np.zeros(...)`); a
            # lower-case one (`trainer_wBert(...)`) counts once it resolves to a class
            if owner.rpartition(".")[2][:1].isupper() or _makes_project_class(model, site.node):
                names.add(target)
        except Exception:
            continue
    return names


def _makes_project_class(model: SemanticModel, call: cst.Call) -> bool:
    callee = model.flow.callee(call)
    return callee is not None and callee.model is not model and isinstance(callee.node, cst.ClassDef)


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
    instance, when `__init__` sets `self.x` from a parameter (its only assignment in the file)
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
    if not (isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name) and test.value.value == "self"):
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


def _class_attribute_values(owner: cst.ClassDef, name: str) -> list[cst.BaseExpression]:
    """What the class's methods assign to `self.<name>` (augmented assignments too)."""
    found = []
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


def _owner_name(other: SemanticModel, method: cst.FunctionDef) -> str:
    owner = other.parent(other.parent(method))
    return f"{owner.name.value}." if isinstance(owner, cst.ClassDef) else ""


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


def _saves_in_project_methods(model: SemanticModel, methods) -> Iterator[Violation]:
    """A `torch.save` in a method of a project class (another file) that this file calls on
    every rank through an instance (`stopper(loss, model, path)` runs `__call__`, which calls
    `self.save_checkpoint(...)`), with no rank test on the way: reported at the save."""
    for call, built, other, method, carriers in methods:
        if every_rank_reaches(model, call) is None:
            continue
        for site in other.calls:
            save = site.node
            if site.qualified_name != TORCH_SAVE:
                continue
            route = _method_route(other, method, save)
            if route is None:
                continue
            first = route[0] if route else save
            reached, guarded, _ = _reach(model, call, other, method, first, bound=True)
            if not reached or guarded or (route and is_rank_guarded(other, save)) or _target_is_per_rank(other, save):
                continue
            if any(on_single_process_branch(other, node) for node in (save, *route)):
                continue  # `if get_world_size() == 1:`: one process, nothing else writes
            if any(_carries_rank(test, carriers) for node in (save, *route) for test, _ in guard_tests(other, node)):
                continue  # `if self.device == 0:` with `Fitter(..., device=rank)`: the rank it was handed
            if any(_carries_rank(node, carriers) for node in (*save.args, *(arg for c in route for arg in c.args))):
                continue  # `f"{out}/ckpt{self.device}.pt"`, or the rank handed on to another method
            if any(_constructor_excludes(model, built, other, method, node) for node in (save, *route)):
                continue  # `if self.accelerator is not None:` ... `else: torch.save(...)`, built with one
            if _on_one_process_path(other, multi_process_switches(other), (save, *route)):
                continue
            yield Violation(
                node=save,
                message=(
                    f"every rank runs this `torch.save`: another file of the project calls `{_owner_name(other, method)}"
                    f"{method.name.value}` on an instance on every rank, so all processes write the same file at once, in "
                    "place, and the checkpoint can silently mix tensors of different ranks or fail to load; save "
                    "on one rank (`if accelerator.is_main_process:` / `if dist.get_rank() == 0:`, at the call or "
                    "here) and wait for it before others read the file"
                ),
            )


def _on_one_process_path(model: SemanticModel, switches: set, nodes) -> bool:
    """`if cfg.DIST_TRAIN: (DDP) ... else: torch.save(...)`, or `else: trainer.save()` on the
    way to it: the save, or a call that brings every rank to it, needs the other answer of a
    test that every sign of several processes in the file needs."""
    return bool(switches) and any(
        (test, not truth) in switches for node in nodes for test, truth in branch_tests(model, node))


def _through(model: SemanticModel, route: Route) -> str:
    # Name the call that brings every rank here, unless it is the script's entry point
    # (`main()` under `if __name__ == "__main__":`), which says nothing new.
    if not route.calls or enclosing_function(model, route.calls[0]) is None:
        return ""
    call = route.calls[0]
    line = model.position(call)[0].line
    return f" (through `{model.code(call.func)}()` on line {line}, called on every rank)"


def _target_is_per_rank(model: SemanticModel, save: cst.Call) -> bool:
    """The file (or buffer) written is not shared by the ranks, or we can't tell which it is."""
    target = argument(save, 1, "f")
    if target is None or mentions_rank(model, target):
        return True
    value = model.value_at(target, save)
    if _is_private(model, value):
        return True
    if isinstance(target, cst.Name) and value is not None and mentions_rank(model, value):
        return True  # `mb_path = os.path.join(out, "mb" + str(args.rank) + ".pth")`: a file per rank
    if any(_unique_per_process(expr) for expr in (target, value) if expr is not None):
        return True  # `f"{out}/batch-{uuid4()}.pt"`: a name no other process draws
    if any(mentions_spawn_index(model, expr, save) for expr in (target, value) if expr is not None):
        return True  # `"final_state{}.pth".format(gpu)`, `gpu` the index mp.spawn passes
    key = model.binding_key(target, save)
    binding = model.binding_at(key, save) if key is not None else None
    if binding is None:
        return False
    if isinstance(binding.node, cst.With):  # `with open(path, "wb") as f: torch.save(obj, f)`
        return any(
            mentions_rank(model, item.item) or _is_private(model, item.item)
            for item in binding.node.items
            if item.asname is not None and isinstance(item.asname.name, cst.Name) and item.asname.name.value == key
        )
    if isinstance(binding.node, cst.Param):
        function = enclosing_function(model, save)
        return isinstance(function, cst.FunctionDef) and any(
            mentions_rank(model, passed) for passed in passed_for(model, function, binding.node)
        )
    return False


# Calls whose value differs in every process (a random UUID, the process id): a path built
# from one names a file of this process alone.
UNIQUE_PER_PROCESS = {"uuid1", "uuid4", "getpid", "token_hex", "token_urlsafe"}


def _unique_per_process(expr: cst.BaseExpression) -> bool:
    """`f"{out}/batch-{uuid4()}.pt"`, `"dump_%d.pt" % os.getpid()`."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            callee = node.func.attr.value if isinstance(node.func, cst.Attribute) else getattr(node.func, "value", "")
            if callee in UNIQUE_PER_PROCESS:
                return True
        stack.extend(children_of(node))
    return False


def _is_private(model: SemanticModel, expr: Optional[cst.BaseExpression]) -> bool:
    return isinstance(expr, cst.Call) and (model.qualified_name(expr.func) or "").startswith(PRIVATE_TARGETS)
