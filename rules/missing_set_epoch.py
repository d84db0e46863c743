"""DPL008 missing-set-epoch: a shuffling DistributedSampler whose epoch never changes."""

from __future__ import annotations

import os
from typing import Iterator, Optional

import libcst as cst

from dplint.data import (
    SAMPLER_SEED,
    distributed_sampler_shuffles,
    epoch_count_loop,
    epoch_sampler_shuffle,
    epoch_seeded_class,
    factory_sampler_shuffles,
    returns_shuffling_sampler,
)
from dplint.sampler_flow import SamplerFlow, trace_sampler
from dplint.rule import Applicability, Edit, EditKind, Example, Fix, Rule, Severity, Violation, shown_path
from dplint.semantic import SemanticModel, argument, literal_value


class MissingSetEpoch(Rule):
    """
    ## What it does
    Flags a shuffling `DistributedSampler` whose loader is iterated by a training loop
    (its batches reach a `.backward()`; not a loop that reads `.grad` and steps no
    optimizer, such as an importance score) that runs again and again (an epoch loop), when
    nothing ever calls `set_epoch(...)` on it: not `sampler.set_epoch`,
    `loader.sampler.set_epoch` nor `loader.batch_sampler.sampler.set_epoch`. Assigning
    `sampler.epoch = n` (also `loader.sampler.epoch = n`) counts: it is all `set_epoch(n)`
    does. `loader.epoch = n` does not when the loader is torch's (or PyG's, MONAI's)
    `DataLoader`, which never reads such an attribute; on a loader class of the project it
    may, and the rule stays silent.

    A library factory that builds the training loader's sampler itself counts as its
    construction: timm's `create_loader(..., is_training=True, distributed=...)`, whose loader
    holds a `DistributedSampler` as `loader.sampler` in a distributed run (worded "whenever
    `distributed=...` is true" when the code can't tell; no fix).

    A loader drawn through `itertools.cycle(loader)` (`batches = cycle(loader)`, then
    `next(batches)` in a training loop) is flagged even when `set_epoch` is called:
    `cycle` iterates the loader once and then replays the batches it saved, so no later
    pass sees a new order (checked with torch 2.13). A project's own `cycle` generator that
    re-iterates the loader is no such replay. No fix is offered for it.

    A sampler shuffles with `shuffle` left out or provably true; one whose `shuffle` is a
    value the code can't tell (`shuffle=opt["train"]["shuffle"]`, read from a config file)
    is flagged too, worded "whenever `shuffle=...` is true": it is meant to shuffle on the
    runs that set it, and `set_epoch` costs nothing on the others. Besides torch's
    `DistributedSampler` (and its subclasses, also MONAI's `monai.data.DistributedSampler`,
    which keeps torch's epoch seeding and takes `shuffle` fifth; also called through a local
    name holding the class, `sampler_cls = RandomSampler if single else DistributedSampler`,
    then flagged without a fix: the other class may have no `set_epoch`), a sampler class of the project (named
    `...Sampler`) counts when its `set_epoch` stores a `self.<x>` that its `__iter__`
    reads, as a copy of torch's does; its `shuffle` is read from the call or its
    `__init__` default. A batch sampler class of the project (one with `__iter__`) that
    keeps the sampler as `self.sampler` holds it as `loader.batch_sampler.sampler`; when its
    own `__iter__` iterates what it keeps inside a loop (maskrcnn-benchmark's
    `IterationBasedBatchSampler`: `while it <= n: for batch in self.batch_sampler: ...`),
    each turn of that loop is a new pass of the sampler, so a loader iterated once for all
    the iterations still needs `set_epoch` there.

    The sampler is followed through names (every binding that can reach a use, branch by
    branch; a module global also where a function reads it, a function's variable where a
    closure it defines reads it and the function binds it once; one target of a tuple
    assignment, `sampler, shuffle = DistributedSampler(ds), False`), loaders (torch's and PyG's,
    MONAI's, timm's `MultiEpochsDataLoader`, such a class held by a name (`loader_cls=DataLoader`
    as a parameter no caller changes, `loader_class = DataLoader` / `... = MultiEpochsDataLoader`),
    and a project subclass of DataLoader given `sampler=` that hands its `**kwargs` to
    `super().__init__`) and batch samplers, `self.x` attributes of its class, dict entries (`{"train":
    DataLoader(...)}`, `{x: DistributedSampler(d[x]) for x in ["train", "val"]}`, or stored
    one key at a time into the dict a name holds, `loaders["train"] = DataLoader(...)`, also
    `self.loaders[split] = ...`; read back as `loaders["train"]` or `loaders[phase]`; another
    literal key is another entry, and a second store to the same entry stops the search; a
    `"sampler"` entry of a dict splatted into a loader, `DataLoader(ds, **kwargs)`, is its
    sampler, also through a project function's `**kwargs`), the
    loop variable of `for loader in [train_loader, val_loader]`, a progress bar around the
    loader (`loader = tqdm(loader)`), a name holding `enumerate`/`zip` of it (`bar =
    tqdm(enumerate(loader))` ... `for step, batch in bar`), either branch of a conditional expression
    (`tqdm(loader) if rank == 0 else loader`), the parameters of functions and
    constructors it is passed to (`Runner(net, loader)`, `train_one_epoch(model, loader)`; an
    attribute the class keeps is also read on an instance the code built, `data = Data(ds)`
    ... `for x in data.loader`, in any file; one call of a method inside a loop makes that
    the epoch loop even where its other callers can't all be seen; also a static
    method's `self` given the instance by `mp.spawn`), and the values they return (also one
    element of a returned tuple: `train_dl, val_dl = make_loaders()`; one element of a list or
    tuple passed on or bound to a name, `train(..., [train_loader, eval_loader])` unpacked by the
    callee as `train_loader, eval_loader = loaders`); a value returned by
    a function entered through a parameter goes back to that call only.

    A factory that builds the sampler each time it runs gives each call a sampler of its
    own: `set_epoch` on the loader one call made (an evaluation loader) does not count for
    the loader another call made, and neither does the call whose loader goes where it cannot
    be followed (the evaluation loader handed to a library's evaluator). Also followed:
    torchdata's `StatefulDataLoader` (torch's parameters, no `set_epoch` of its own); a
    loader class picked by a conditional (`DataLoader if image_weights else
    InfiniteDataLoader`, the latter a class of the file or imported from another, handing its
    `**kwargs` to DataLoader); a project subclass of `tqdm`, or a package's own progress bar
    named `tqdm` (`from ultralytics.utils import TQDM`); a `(sampler, loader)`
    pair unpacked from one element of a tuple (`(s, dl), (_, val) = build(a), build(b)`) or
    from one branch of a conditional; a keyword dict from which another key is popped
    (`cfg.pop("shuffle")` leaves `cfg["sampler"]` in place).

    When the file is checked as part of a project, all of this continues in the project's
    other files: into functions and classes they define (`from engine import
    train_one_epoch`, `import helpers; helpers.make_sampler(...)`, `Trainer(...).fit()`),
    and back out of this file's functions to the other files that call them (a loader
    factory whose loader is iterated by `main.py`; an epoch loop in `main.py` around
    `train_one_epoch` of `engine.py`). A sampler built in a factory and returned itself to
    another file is reported at that call (`sampler=pick_sampler(ds)` that may return one,
    with a `shuffle` its only caller passes, or that this call passes true:
    `make_data_sampler(train_set, shuffle=True, ...)` beside `make_data_sampler(val_set,
    False, ...)`; also a factory named through `from samplers import *`), a sampler that
    stays inside a loader where it is built. Iteration is a `for` over the loader (also `enumerate`/`zip`/`tqdm`),
    `iter(loader)` with `next()`, or a generator that re-iterates it (`while True: for b in
    loader: yield b`, `while True: yield from loader`) whose batches are drawn in a training
    loop: the generator object is followed like a loader (returned to another file, kept as
    `self.data`, passed on) to the `next(...)` or `for` that draws it; a generator that passes
    one pass of it on (a logger's `for x in metric_logger.log_every(loader, 10)`) is
    iterated where its call is, in whichever file (when entered through its parameter,
    at that call only). The epoch loop, the iteration and the `backward()` may sit in
    different functions (`fit()` -> `_one_pass()` -> `_step()`) and files; a helper bound by
    `functools.partial(helper, ...)` and called runs that helper; a step called
    on an object whose class is
    picked at run time (`model = define_model(opt)`; `model.optimize_parameters()`) trains
    when every definition of that method in the project's classes (abstract stubs aside,
    at most 8) runs backward.

    It stays silent when the sampler provably does not shuffle (`shuffle=False`, also
    through parameters whose callers all pass False), when the loader is iterated once or
    only for evaluation, when the sampler is rebuilt each epoch with a changing `seed=`,
    and whenever the sampler or its loader
    reaches code that cannot be seen: a call of something that is neither a function nor a
    class of the file or project (a third-party trainer such as Lightning's `Trainer.fit`,
    Accelerate's `prepare`, an attribute of an unknown object), a list or a dict's
    `.items()`/`.values()`, a function whose callers are not all visible (a callback, one
    named in more project files than are searched, or passed as a value in another file),
    or a class attribute read from outside its class. Such code may call `set_epoch`
    itself, as Lightning and Accelerate do. One exception: a method call on an object the
    code can't type, that is a function or class of the project or a method name only the
    project's classes define (a callback hook: `self.callbacks.on_epoch_begin(loader=...)`),
    does not stop the search when no file of the project holds the text `set_epoch` or
    imports a library that calls it (Lightning, Accelerate, transformers, Ignite,
    DeepSpeed, MMEngine...): nothing there can move the epoch.

    Callers in other files are found by a text search of the project for the function's
    name next to an import of its module: code that reaches the function otherwise
    (`getattr`, a registry) is not seen.

    ## Why is this bad?
    `DistributedSampler.__iter__` seeds its permutation with `seed + self.epoch`
    (torch 2.13, `torch/utils/data/distributed.py` ~111), and only `set_epoch` changes
    `self.epoch`. Without it, every epoch yields the same permutation on every rank: each
    rank sees the same shard in the same order every epoch. Nothing warns about it; training
    just generalises worse.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    for epoch in range(epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()
    ```

    Use instead:
    ```python
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss_fn(model(x), y).backward()
    ```

    ## Fix safety
    The fix inserts `<sampler>.set_epoch(<epoch>)` as the first statement of the epoch loop,
    with the body's indentation. It is safe: it changes only the order the sampler already
    shuffles into. It is offered only when both names are unambiguous: the loop is
    `for <name> in range(...)` (or `tqdm(range(...))`, `trange(...)`), there is one such epoch
    loop, and a name bound before the loop reaches the sampler (`sampler`, or
    `train_loader.sampler` when the sampler was created inline). `while` loops,
    `for _ in ...`, and a sampler that may be `None` (`DistributedSampler(...) if ddp else
    None`, or assigned in one branch of an `if`), a sampler returned by a factory with other
    returns, and epoch loops in another function than the iteration (or `iter()`/`next()`
    steps, generators) get no fix: the call would fail there, or the loop variable may not
    count epochs.
    """

    code = "DPL008"
    name = "missing-set-epoch"
    severity = Severity.ERROR
    summary = "shuffling DistributedSampler without set_epoch(): every epoch repeats one order"
    fix_applicability = Applicability.SAFE
    fix_safety = "safe when unambiguous"
    # a project sampler: built for a loader, or defined here; a library factory's (timm's `create_loader`)
    tokens = ("DistributedSampler", ("Sampler", "DataLoader"), ("Sampler", "set_epoch"), ("create_loader", "timm"))

    VALID = (
        # set_epoch through the loader.
        "import torch\n"
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
        "for epoch in range(10):\n"
        "    loader.sampler.set_epoch(epoch)\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n",
        # shuffle=False: the epoch changes nothing.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds, shuffle=False)\n"
        "loader = DataLoader(ds, sampler=sampler)\n"
        "for epoch in range(10):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n",
        # The loader goes to a helper the rule does not follow: it may call set_epoch.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds)\n"
        "loader = DataLoader(ds, sampler=sampler)\n"
        "for epoch in range(10):\n"
        "    train_one_epoch(model, loader)\n",
        # Evaluation only (no backward): the order does not matter.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
        "for epoch in range(10):\n"
        "    for x in loader:\n"
        "        metric.update(model(x))\n",
        # Iterated once: there is no second epoch.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
        "for x in loader:\n"
        "    model(x).sum().backward()\n",
    )
    INVALID = (
        Example(
            "import torch.utils.data as tud\n"
            "sampler = tud.distributed.DistributedSampler(ds)\n"
            "loader = tud.DataLoader(ds, batch_size=8, sampler=sampler)\n"
            "for epoch in range(start_epoch, 90):\n"
            "    model.train()\n"
            "    for step, (x, y) in enumerate(loader):\n"
            "        loss_fn(model(x), y).backward()\n",
            expected=(
                "import torch.utils.data as tud\n"
                "sampler = tud.distributed.DistributedSampler(ds)\n"
                "loader = tud.DataLoader(ds, batch_size=8, sampler=sampler)\n"
                "for epoch in range(start_epoch, 90):\n"
                "    sampler.set_epoch(epoch)\n"
                "    model.train()\n"
                "    for step, (x, y) in enumerate(loader):\n"
                "        loss_fn(model(x), y).backward()\n"
            ),
        ),
        Example(
            "from tqdm import tqdm\n"
            "from torch.utils.data import DataLoader, DistributedSampler\n"
            "class Trainer:\n"
            "    def __init__(self, ds):\n"
            "        self.loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=True))\n"
            "    def fit(self, epochs):\n"
            "        for ep in tqdm(range(epochs)):\n"
            "            for batch in self.loader:\n"
            "                self.step(batch).backward()\n",
            expected=(
                "from tqdm import tqdm\n"
                "from torch.utils.data import DataLoader, DistributedSampler\n"
                "class Trainer:\n"
                "    def __init__(self, ds):\n"
                "        self.loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=True))\n"
                "    def fit(self, epochs):\n"
                "        for ep in tqdm(range(epochs)):\n"
                "            self.loader.sampler.set_epoch(ep)\n"
                "            for batch in self.loader:\n"
                "                self.step(batch).backward()\n"
            ),
        ),
        # No loop variable: flagged, no fix.
        Example(
            "from torch.utils.data import DataLoader, DistributedSampler\n"
            "sampler = DistributedSampler(ds)\n"
            "loader = DataLoader(ds, sampler=sampler)\n"
            "epoch = 0\n"
            "while epoch < 10:\n"
            "    for x in loader:\n"
            "        model(x).sum().backward()\n"
            "    epoch += 1\n",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for site in model.calls:
            sampler = site.node
            shuffles = distributed_sampler_shuffles(model, sampler)
            built_here = shuffles is not False
            in_factory = factory_sampler_shuffles(model, sampler) if not built_here else False
            if not (built_here or in_factory is not False or returns_shuffling_sampler(model, sampler)):
                continue
            # a library factory's loader holds its sampler as `loader.sampler`
            flow = trace_sampler(model, sampler, ("sampler",) if in_factory is not False else ())
            if flow.escapes or built_here and flow.returned_elsewhere:
                continue  # (a factory returning it to another file: reported at that call)
            training = [it for it in flow.iterations if it.epoch_loops and it.trains]
            replayed = [it for it in training if it.replays]
            if flow.sets_epoch and not replayed:
                continue
            epoch_loops = [it.epoch_loops for it in training if it.loops_in is model]
            if not training or _reseeded_each_epoch(model, sampler, epoch_loops):
                continue
            if replayed:
                yield Violation(node=sampler, message=_replay_message(model, sampler, shuffles, replayed[0]))
                continue
            where = training[0].loops_in
            line = where.position(training[0].epoch_loops[-1])[0].line
            same_file = where is model or os.path.abspath(where.path) == os.path.abspath(model.path)
            line = f"line {line}" if same_file else f"{shown_path(where.path)}:{line}"
            yield Violation(
                node=sampler,
                message=(
                    (f"This {_kind(model, sampler)} shuffles{_when(model, sampler, shuffles)}" if built_here else
                     f"`{model.code(sampler.func)}(...)` builds this training loader on a shuffling "
                     f"DistributedSampler{_factory_when(model, sampler, in_factory)}" if in_factory is not False else
                     f"`{model.code(sampler.func)}(...)` may return a shuffling DistributedSampler")
                    + ", but `set_epoch()` is never called on it: it seeds its order with "
                    + ("`seed + epoch`" if epoch_seeded_class(model, sampler)[0] else "its epoch")
                    + (f", so every pass of the generator's loop at {line} repeats the same order on "
                       "every rank; call `sampler.set_epoch(n)` before each pass" if training[0].generator else
                       f", so every epoch of the loop at {line} repeats the same order on every rank; "
                       "call `sampler.set_epoch(epoch)` at the start of each epoch")
                ),
                fix=self._fix(model, flow, epoch_loops) if built_here and _class_sure(model, sampler)
                and all(_fixable_here(model, it) for it in training) else None,
            )

    @staticmethod
    def _fix(model: SemanticModel, flow: SamplerFlow, epoch_loops: list[list[cst.CSTNode]]) -> Optional[Fix]:
        loops = {loop for outer in epoch_loops for loop in outer}
        if len(loops) != 1:
            return None  # nested candidate loops, or several epoch loops: which one counts epochs?
        (loop,) = loops
        epoch = epoch_count_loop(model, loop)
        if epoch is None or not isinstance(loop.body, cst.IndentedBlock) or not loop.body.body:
            return None
        first = loop.body.body[0]
        sampler = _name_at(model, flow, first)
        if sampler is None:
            return None
        return Fix(
            Applicability.SAFE,
            f"Call `{sampler}.set_epoch({epoch})` at the start of each epoch",
            (Edit(first, f"{sampler}.set_epoch({epoch})", EditKind.INSERT_BEFORE_STATEMENT),),
        )


def _class_sure(model: SemanticModel, sampler: cst.Call) -> bool:
    """Not `(RandomSampler if single else DistributedSampler)(ds)`: `set_epoch` may not exist."""
    seeded, sure = epoch_seeded_class(model, sampler)
    return seeded is None or sure


def _replay_message(model: SemanticModel, sampler: cst.Call, shuffles: Optional[bool], cycle) -> str:
    line = model.position(cycle.node)[0].line
    return (
        f"This {_kind(model, sampler)} shuffles{_when(model, sampler, shuffles)}, but its loader is drawn through "
        f"`itertools.cycle` (line {line}), which iterates the loader once and then replays the batches it saved: "
        "every pass after the first repeats the first pass's batches in the same order on every rank, "
        "whatever `set_epoch()` sets; draw from a generator that iterates the loader again each pass "
        "(`while True: sampler.set_epoch(n); n += 1; yield from loader`)"
    )


def _kind(model: SemanticModel, sampler: cst.Call) -> str:
    seeded, sure = epoch_seeded_class(model, sampler)
    if seeded is not None:
        return "DistributedSampler" if sure else f"`{model.code(sampler.func)}` sampler (a DistributedSampler on some runs)"
    return f"`{model.code(sampler.func)}` sampler"


def _when(model: SemanticModel, sampler: cst.Call, shuffles: Optional[bool]) -> str:
    """`shuffle=opt["shuffle"]`: the order repeats on the runs where that value is true."""
    if shuffles is True:
        return ""
    return f" whenever `shuffle={model.code(epoch_sampler_shuffle(model, sampler))}` is true"


def _factory_when(model: SemanticModel, factory: cst.Call, distributed: Optional[bool]) -> str:
    """`distributed=args.distributed`: the order repeats on the distributed runs."""
    if distributed is True:
        return ""
    return f" whenever `distributed={model.code(argument(factory, None, 'distributed'))}` is true"


def _fixable_here(model: SemanticModel, iteration) -> bool:
    """A `for` over the loader inside its epoch loop, in this file: the loop variable counts epochs."""
    return iteration.fixable and iteration.model is model


def _reseeded_each_epoch(model: SemanticModel, sampler: cst.Call, epoch_loops: list[list[cst.CSTNode]]) -> bool:
    """`DistributedSampler(ds, seed=base + epoch)` built inside the epoch loop: a new order
    each epoch without set_epoch (any seed that is not a constant counts: we can't tell)."""
    seed = argument(sampler, *SAMPLER_SEED)
    if seed is None:
        return False
    try:
        literal_value(seed)
        return False
    except ValueError:
        pass
    inside = set(model.ancestors(sampler))
    return any(loop in inside for loops in epoch_loops for loop in loops)


def _name_at(model: SemanticModel, flow: SamplerFlow, at: cst.CSTNode) -> Optional[str]:
    """The shortest expression reaching the sampler at `at`: `sampler`, `loader.sampler`..."""
    for binding, path, certain in sorted(flow.holders, key=lambda holder: (len(holder[1]), holder[0].order)):
        if not certain or model.binding_at(binding.key, at) is not binding:
            continue  # `sampler = None` then `if distributed: sampler = ...`: may be None there
        if any(step[0] in "[{" for step in path):
            continue  # an element of a tuple or dict: no attribute path names it
        name = binding.key
        if name.startswith("self."):
            self_name = model.scope(at).self_name
            if self_name is None:
                continue
            name = self_name + name[len("self"):]
        return ".".join((name, *path))
    return None
