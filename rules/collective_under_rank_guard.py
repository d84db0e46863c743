"""DPL017 collective-under-rank-guard: a collective that only some ranks reach hangs the job."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from dplint.distributed import is_rank_guarded, main_rank_passes
from dplint.rank_routes import only_uniform_tests, some_ranks_route
from dplint.rule import Example, Rule, Severity, Violation
from dplint.semantic import SemanticModel
from dplint.training import backprops, is_loss_call, loss_inputs, peel_backward_root
from dplint.wrappers import constructions

# torch.distributed's collectives (torch 2.13): every rank of the group must call them.
COLLECTIVES = frozenset(
    "torch.distributed." + name
    for name in (
        "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_into_tensor",
        "reduce_scatter", "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter",
        "all_to_all", "all_to_all_single", "broadcast_object_list", "all_gather_object",
        "gather_object", "scatter_object_list", "all_reduce_coalesced", "all_gather_coalesced",
    )
)


def collective_name(qualified_name: str | None) -> str | None:
    """"torch.distributed.barrier" (also through `distributed_c10d`) -> "barrier"."""
    if qualified_name is None:
        return None
    qualified_name = qualified_name.replace("torch.distributed.distributed_c10d.", "torch.distributed.")
    return qualified_name.rpartition(".")[2] if qualified_name in COLLECTIVES else None


class CollectiveUnderRankGuard(Rule):
    """
    ## What it does
    Flags a `torch.distributed` collective (`barrier`, `all_reduce`, `all_gather`,
    `broadcast`, `reduce`, `gather`, `scatter`, the `*_object` forms, ...) that only some
    ranks reach: inside `if rank == 0:` (or any rank guard: `is_main_process()`,
    `args.local_rank in (-1, 0)`, `args.gpu == 0` with `args.gpu` the index mp.spawn passes,
    a guard held in a variable or attribute; a guard means what it tests, so a configured
    count such as `if cfg.dist.gpus != 0:` is the same on every rank and guards nothing), after an early
    `return` on the other ranks, in a `@rank_zero_only` function, or in a function of the file
    that one of its calls, up to four calls away, only reaches under such a guard
    (`if rank == 0: write_index()` -> `list_shards()` -> `snapshot_folder()` -> `barrier()`).
    One such route is enough: every rank taking another route does not change that the guarded
    one hangs.

    A collective its function also calls elsewhere, where the other ranks are (the "first
    rank goes ahead" pair `if local_rank not in (-1, 0): barrier()` ... `if local_rank == 0:
    barrier()`, or one call per branch of the guard: rank 0 reaches exactly one of the two;
    two barriers both in the `else` of `if rank <= 0:` do not pair), is matched on every rank
    that runs the function (also one in an enclosing function: a closure's broadcast under
    `if rank == 0:` meets the other ranks' broadcast in the enclosing `else:`), so it is
    flagged only when the function itself is reached through a call only the main process
    makes and the main process passes the collective's own rank tests there: rank tests are
    evaluated for rank 0 (`rank == 0`, `local_rank in [-1, 0]`, `is_main_process()` hold;
    `rank != 0`, `if rank:` fail), with the function's parameters read as what that call
    passes (`and not evaluate` with `evaluate=True`); a configuration part of a test may go
    either way. A call made once per branch of a rank guard counts as made on every rank, and
    so does a function the guarded call's scope also hands on as a value (`optimizer.step(closure)`
    on rank 0, `closure()` on the others): who calls it is out of sight. The `__enter__` and
    `__exit__` of one class pair like the halves of a `@contextmanager` generator (`if rank !=
    leader: barrier()` on entry, `if rank == leader: barrier()` on exit). A route through a
    function decorated `@functools.cache` / `@lru_cache` that the file calls more than once is
    not followed: whether the guarded call runs its body or returns a value every rank already
    computed depends on its arguments repeating.

    Silent under tests every rank answers alike: whether the job is distributed
    (`local_rank != -1`, `rank >= 0`), its world size, whether the group is initialised,
    whether the launcher set its variables (`"RANK" in os.environ`,
    `os.environ.get("LOCAL_RANK") is None`, `not os.getenv("RANK")`: set for every process or
    for none; the rank's value, `os.environ.get("RANK") == "0"`, does count), a setting named
    after a set of ranks (`if load_on_all_ranks:`, `num_ranks`), a machine's index compared with anything
    (`group_rank == g_rank`, `node_rank == 0`: every process of a machine passes it together);
    for early exits on anything that is not a rank (a local flag); for calls of other files;
    for a test of the rank against the world size itself, which no rank passes (`if rank >=
    size: return` with `size` passed `dist.get_world_size()`, or, with no caller in sight, a
    parameter named `size` beside the rank as in torch's `run(rank, size)` tutorial); a
    smaller bound (a process grid's size) stays a guard.

    A `backward()` of a loss computed from a DistributedDataParallel's forward (the model is a
    DDP on every path) is a collective too: DDP's backward all-reduces the gradients with every
    rank. It is flagged under a rank guard the same way, except inside `with ddp.no_sync():`.
    A forward alone (evaluation on rank 0 under `torch.no_grad()`) is not: on torch 2.13 it does
    not wait for the other ranks (checked with gloo, also with BatchNorm buffers), while rank 0
    alone running forward and backward failed with `Timed out waiting ... for send operation to
    complete`.

    ## Why is this bad?
    A collective returns only when every rank of the process group has entered it. The ranks
    that skip it go on to the next collective (or exit), so the job hangs until the process
    group's timeout (in torch 2.13, 10 minutes for NCCL and 30 minutes for other backends by
    default), and then dies with a timeout error that names neither line.

    ## Example
    ```python
    if dist.get_rank() == 0:
        dist.all_reduce(val_loss)
        print(val_loss.item() / dist.get_world_size())
    ```

    Use instead:
    ```python
    dist.all_reduce(val_loss)
    if dist.get_rank() == 0:
        print(val_loss.item() / dist.get_world_size())
    ```

    ## Fix safety
    No fix: where the collective belongs depends on what the guarded code needs.
    """

    code = "DPL017"
    name = "collective-under-rank-guard"
    severity = Severity.ERROR
    summary = "a torch.distributed collective that only some ranks reach hangs every rank"
    fix_applicability = None
    # A collective's name and the module it comes from; "distributed" alone is in every
    # Apache license header.
    tokens = (
        ("distributed", "barrier"), ("distributed", "all_reduce"), ("distributed", "all_gather"),
        ("distributed", "broadcast"), ("distributed", "all_to_all"),
        # `reduce`, `gather`, `scatter` are common words (`accelerator.gather(...)`): spelled
        # as torch.distributed's own, through `dist.` / `distributed.` or imported from it
        ("distributed", "dist.reduce"), ("distributed", "dist.gather"), ("distributed", "dist.scatter"),
        ("torch.distributed import", "reduce"), ("torch.distributed import", "gather"),
        ("torch.distributed import", "scatter"),
        ("DistributedDataParallel", "backward"),  # DDP's backward all-reduces
    )

    VALID = (
        # Every rank reaches it.
        "import torch.distributed as dist\n"
        "dist.all_reduce(loss)\n"
        "if dist.get_rank() == 0:\n"
        "    print(loss.item())\n",
        # The first rank goes ahead, the others wait; then rank 0 joins them.
        "import torch.distributed as dist\n"
        "if args.local_rank not in (-1, 0):\n"
        "    dist.barrier()\n"
        "dataset = load(args)\n"
        "if args.local_rank == 0:\n"
        "    dist.barrier()\n",
        # A test every rank answers alike: is this a distributed run at all?
        "import torch.distributed as dist\n"
        "if args.local_rank != -1:\n"
        "    dist.all_reduce(loss)\n",
        # No rank is at or past the world size: every rank goes on.
        "import torch.distributed as dist\n"
        "def run(rank, world_size, x):\n"
        "    if rank >= world_size:\n"
        "        return\n"
        "    dist.all_reduce(x)\n",
        # One call per branch.
        "import torch.distributed as dist\n"
        "if rank == 0:\n"
        "    dist.broadcast_object_list(objs, src=0)\n"
        "else:\n"
        "    dist.broadcast_object_list(objs, src=0)\n",
    )
    INVALID = (
        Example(
            "import torch.distributed as dist\n"
            "if dist.get_rank() == 0:\n"
            "    dist.all_reduce(val_loss)\n"
            "    print(val_loss.item())\n",
        ),
        Example(
            "import torch.distributed as dist\n"
            "def evaluate(model, rank):\n"
            "    if rank != 0:\n"
            "        return\n"
            "    dist.barrier()\n",
        ),
        # DDP's backward all-reduces the gradients: a collective of every rank.
        Example(
            "import torch.distributed as dist\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(net)\n"
            "if dist.get_rank() == 0:\n"
            "    loss = model(batch).sum()\n"
            "    loss.backward()\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        by_scope: dict[tuple, list] = {}
        sites = []
        for site in model.calls:
            name = collective_name(site.qualified_name)
            if name is not None:
                sites.append((site, name))
                by_scope.setdefault((_pairing_scope(model, site), name), []).append(site.node)
        for site, name in sites:
            siblings = [other for other in by_scope[(_pairing_scope(model, site), name)] if other is not site.node]
            route = some_ranks_route(model, site.node, paired=_paired(model, site.node, siblings))
            if route is None:
                continue
            how = "the rank guard around it reach it"
            if route:
                outer = route[-1]
                how = (f"the rank guard around `{model.code(outer.func)}()` (line {model.position(outer)[0].line}) "
                       f"reach it, through that call")
            yield Violation(
                node=site.node,
                message=(
                    f"`{model.code(site.node.func)}()` is a collective that every rank must call, but only the ranks "
                    f"that pass {how}: the others never enter it, so the job hangs "
                    f"until the process group's timeout; call it on every rank, outside the guard"
                ),
            )
        yield from self._guarded_ddp_backwards(model)

    @staticmethod
    def _guarded_ddp_backwards(model: SemanticModel) -> Iterator[Violation]:
        """A backward of a DistributedDataParallel forward that only some ranks run: DDP's
        backward all-reduces the gradients, a collective of every rank."""
        if not any(w.kind == "DDP" for w in constructions(model)):
            return
        for backprop in backprops(model):
            node = backprop.site.node
            forward = next((f for f in (_ddp_forward(model, root) for root in backprop.roots) if f is not None), None)
            if forward is None or _inside_no_sync(model, node):
                continue
            route = some_ranks_route(model, node)
            if route is None:
                continue
            yield Violation(
                node=node,
                message=(
                    f"this backward runs through the DistributedDataParallel forward at line "
                    f"{model.position(forward)[0].line}, and DDP's backward all-reduces the gradients with "
                    "every rank, but only the ranks that pass the rank guard around it run it: the others never "
                    "join, so the job hangs until the process group's timeout (gloo: `Timed out waiting ... for "
                    "send operation to complete`); run the training step on every rank and guard only what "
                    "one rank must do (logging, saving)"
                ),
            )


def _ddp_forward(model: SemanticModel, root) -> Optional[cst.Call]:
    """The call of a DistributedDataParallel (on every path) a back-propagated value comes
    from: `ddp(x).sum()`, or a loss computed on its output (`criterion(ddp(x), y)`)."""
    value = peel_backward_root(model, root)
    candidates = [value]
    if isinstance(value, cst.Call) and is_loss_call(model, value):
        candidates = [peel_backward_root(model, arg) for arg in loss_inputs(model, value)]
    for candidate in candidates:
        if not isinstance(candidate, cst.Call):
            continue
        found = [wrapping for wrapping, _ in model.flow.wrappings_at(candidate.func, candidate)]
        # a wrapper on every path, the first one a DDP (as `wrapped_on_some_path` would say)
        if found and None not in found and found[0].kind == "DDP":
            return candidate
    return None


def _inside_no_sync(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Inside `with ddp.no_sync():` the backward does not all-reduce."""
    return any(
        isinstance(ancestor, cst.With) and "no_sync" in model.code(ancestor.items[0].item)
        for ancestor in model.ancestors(node)
    )


# A class context manager's methods run around one `with` block, like the code before and
# after a @contextmanager generator's `yield`.
CONTEXT_HALVES = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


def _pairing_scope(model: SemanticModel, site) -> int:
    """Where a collective's matching calls may sit: its outermost function (a closure's
    broadcast under `if rank == 0:` pairs with the enclosing function's broadcast in the
    other ranks' `else:` loop, a handshake), else its own scope."""
    outermost = None
    for ancestor in model.ancestors(site.node):
        if isinstance(ancestor, cst.ClassDef):
            if outermost is not None and outermost.name.value in CONTEXT_HALVES:
                return id(ancestor)  # `__enter__` / `__exit__`: the two halves of one `with`
            break
        if isinstance(ancestor, cst.FunctionDef):
            outermost = ancestor
    return id(outermost) if outermost is not None else id(site.scope)


def _paired(model: SemanticModel, node: cst.Call, siblings: list) -> bool:
    """Whether another call of the same collective in the same function can be the one the
    other ranks make: `if local_rank not in (-1, 0): barrier()` ... `if local_rank == 0:
    barrier()`, or one call per branch of `if rank == 0:`. Where both are judged for the
    main process, they pair only when it reaches exactly one of them (two barriers both in
    the `else` of `if rank == 0:` leave rank 0 one barrier short)."""
    here = main_rank_passes(model, node) if is_rank_guarded(model, node) else True
    for other in siblings:
        if not is_rank_guarded(model, other) or only_uniform_tests(model, other):
            continue  # every rank makes that call: it pairs with nothing
        there = main_rank_passes(model, other)
        if here is None or there is None or here != there:
            return True
    return False
