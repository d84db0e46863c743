"""Where one sampler goes: from its construction through names, loaders, batch samplers,
containers, calls and returns (in this file and the project's others) to the loops that
iterate it, and whether `set_epoch` reaches it on the way. What a loader, a sampler or a
training loop is comes from `dplint.data`; this module follows the values."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from dplint.semantic import (
    Binding,
    SemanticModel,
    argument,
    literal_value,
    subtree,
)
from dplint.distributed import enclosing_function
from dplint.flow import class_method
from dplint.flow_common import class_methods, is_property, record_fields
from dplint.training import loops_around
from dplint.data import (
    BATCH_SAMPLERS,
    BATCH_SAMPLER_SAMPLER,
    LOADER_CLASSES,
    builtin_name,
    call_runs_backward,
    class_forwards_to_loader,
    is_iteration_wrapper,
    is_tqdm,
    iterating_loop,
    loader_argument,
    loader_class,
    parameter_for,
    project_methods,
    project_never_sets_epoch,
    trains_in,
)


# Builtins that take a sampler or loader without keeping or changing it.
# hasattr() only asks: `if hasattr(s, "set_epoch"): s.set_epoch(e)` sets the epoch by the call, not the test.
HARMLESS_BUILTINS = {"len", "isinstance", "hasattr", "print", "str", "repr", "type", "id"}


# What a sampler holder exposes on the way to its sampler; touching one of these off the
# path we follow may reach the sampler in a way we don't track.
SAMPLER_ATTRIBUTES = {"sampler", "batch_sampler", "set_epoch", "epoch"}


@dataclass(eq=False)
class Iteration:
    """One place the sampler's loader is iterated, possibly in another function or file."""

    model: SemanticModel
    node: cst.CSTNode  # the `for` over it, or the `iter(loader)` call
    epoch_loops: list  # loops that run this iteration again (outermost first), across calls
    trains: bool  # its batches reach a backward() (in the loop, a callee, or a consumer)
    # The epoch loop surely counts epochs (a `for` over the loader inside it): a fix may use
    # its variable. Not for `iter()`/`next()` steps, generators or loops in a caller.
    fixable: bool = True
    loops_model: Optional[SemanticModel] = None  # where the epoch loops are, when not in `model`
    # `itertools.cycle(loader)`: the loader is iterated once, then its saved batches replay.
    replays: bool = False
    # A generator's own loop re-iterates the loader (`while True: yield from loader`).
    generator: bool = False

    @property
    def loops_in(self) -> SemanticModel:
        """The model holding `epoch_loops` (a caller in another file may run the epochs)."""
        return self.loops_model or self.model


@dataclass(eq=False)
class SamplerFlow:
    """Where one sampler construction goes, as far as this file shows.

    `holders` are the bindings that reach the sampler, each with the attribute path from
    the name to the sampler: (`sampler`, ()), (`train_loader`, ("sampler",)),
    (`loader`, ("batch_sampler", "sampler")), and whether the name surely holds it (not when
    `sampler = None` may still be there: `sampler = None` / `if ddp: sampler = ...`). `escapes` is set as soon as the sampler or a
    holder goes where the file can't follow it (an unknown call, a return, a container):
    then nothing can be said about its epochs.
    """

    sampler: cst.Call
    iterations: list[Iteration] = field(default_factory=list)  # where it or its loader is iterated
    # (binding, path, certain): certain when, wherever the name is live, it holds this value
    holders: list[tuple[Binding, tuple[str, ...], bool]] = field(default_factory=list)
    sets_epoch: bool = False  # `.set_epoch(...)` (or `.epoch = ...`) reaches it somewhere
    escapes: bool = False
    # (function, model, call) for each call followed into, innermost last: a value returned
    # by a function entered through a parameter goes back to that call, not to every caller.
    entered: list = field(default_factory=list)
    # The sampler itself is returned to a caller in another file: that call site is where a
    # rule reports it (`returns_shuffling_sampler`), not the factory.
    returned_elsewhere: bool = False
    # `loaders["train"] = DataLoader(...)` stores the dict was followed from (not replacements).
    entry_stores: set = field(default_factory=set)
    # It reached a loader or batch sampler class of the project, whose `epoch` attribute
    # (`loader.epoch = n`) its own code may hand to the sampler.
    project_holder: bool = False
    # (function, call): the sampler's own function returns it to that call only (one instance).
    only_site: Optional[tuple] = None
    # (model, loop) of a batch sampler's `__iter__` that iterates the sampler's holder again on
    # each turn of `loop` (`while it <= n: for batch in self.batch_sampler: ...`): one pass of
    # the loader is many passes of the sampler.
    redrawn: list = field(default_factory=list)
    # The project holder classes reached (a loader wrapper with its own `__iter__`), the names
    # of their methods, those of their methods that set the epoch (`def set_epoch(self, e):
    # self.loader.sampler.set_epoch(e)`) and those called on an instance or by the class.
    holder_classes: set = field(default_factory=set)
    records: list = field(default_factory=list)  # the fields of each record class reached
    holder_members: set = field(default_factory=set)
    epoch_methods: set = field(default_factory=set)
    called_methods: set = field(default_factory=set)

    def settle(self) -> "SamplerFlow":
        """A holder's method that sets the epoch sets it when something calls it."""
        if self.epoch_methods & self.called_methods:
            self.sets_epoch = True
        return self


# A factory called from more places than this is not traced once per call.
MAX_FACTORY_CALLS = 8


def trace_sampler(model: SemanticModel, sampler: cst.Call, path: tuple[str, ...] = ()) -> SamplerFlow:
    """Follow a sampler construction through names, loaders and batch samplers.

    A function that builds the sampler each time it runs returns a new sampler to each of
    its calls: `set_epoch` on the evaluation loader one call made (`build_loader(test_set)`)
    does not move the epoch of the training loader another call made. Where `set_epoch` is
    found, each call of the function is followed on its own, and the iterations of the calls
    whose sampler never gets an epoch are what is left."""
    flow = _traced_per_call(model, sampler, path)
    if flow.redrawn:
        # A pass of the loader that runs once still draws the sampler on each turn of the
        # batch sampler's loop: that loop is the one that must move the epoch.
        loops_model, loop = flow.redrawn[0]
        flow.iterations = [it if it.epoch_loops else Iteration(it.model, it.node, [loop], it.trains, False, loops_model,
                                                                generator=True) for it in flow.iterations]
    return flow


def _traced_per_call(model: SemanticModel, sampler: cst.Call, path: tuple[str, ...] = ()) -> SamplerFlow:
    flow = SamplerFlow(sampler)
    _follow(model, sampler, path, flow, set(), True)
    flow.settle()
    function = _enclosing_function(model, sampler)
    if not (flow.sets_epoch or flow.escapes) or not isinstance(function, cst.FunctionDef):
        return flow
    sites = model.flow.all_call_sites(function) or ()
    if not 2 <= len(sites) <= MAX_FACTORY_CALLS:
        return flow
    instances = []
    for _, call, _ in sites:
        instance = SamplerFlow(sampler, only_site=(function, call))
        _follow(model, sampler, path, instance, set(), True)
        instances.append(instance.settle())
    # The sampler of a call that escapes (the validation loader handed to a helper we can't
    # see) says nothing of another call's: only the calls followed to the end are judged.
    judged = [instance for instance in instances if not instance.escapes]
    if (flow.escapes and not judged) or (not flow.escapes and len(judged) < len(instances)) \
            or all(instance.sets_epoch for instance in judged):
        return flow
    flow.sets_epoch = flow.escapes = False
    flow.holders = [holder for instance in judged if not instance.sets_epoch for holder in instance.holders]
    flow.iterations = [it for instance in judged for it in instance.iterations
                       if it.replays or not instance.sets_epoch]
    return flow


def _follow(model: SemanticModel, occurrence: cst.CSTNode, path: tuple[str, ...], flow: SamplerFlow, seen: set,
            certain: bool) -> None:
    """Classify one place an expression reaching the sampler (by `path`) is used."""
    if flow.escapes:
        return
    parent = model.parent(occurrence)
    if path and path[0].startswith("{") and not isinstance(parent, cst.Element):
        _follow_dict(model, occurrence, parent, path, flow, seen, certain)  # (an element of a tuple: below)
        return
    if isinstance(parent, (cst.DictElement, cst.DictComp)) and parent.value is occurrence:
        # An entry of a dict: `{"train": DataLoader(...)}`, `{x: DistributedSampler(d[x]) for x in phases}`.
        holder = model.parent(parent) if isinstance(parent, cst.DictElement) else parent
        _follow(model, holder, (_dict_entry(model, parent), *path), flow, seen, certain)
        return
    if isinstance(parent, cst.Attribute) and parent.value is occurrence:
        attribute = parent.attr.value
        if path and attribute == path[0]:
            _follow(model, parent, path[1:], flow, seen, certain)
        elif not path and (attribute == "set_epoch" or attribute == "epoch" and _is_stored(model, parent)):
            method = _holder_method(model, parent, flow)
            if method is None:
                flow.sets_epoch = True  # `sampler.epoch = n` is all `set_epoch(n)` does
            else:
                flow.epoch_methods.add(method)  # it sets the epoch when it is called
        elif attribute == "epoch" and (not path or path[0] in ("sampler", "batch_sampler")
                                       and not flow.project_holder):
            pass  # read, or `loader.epoch = n` on torch's DataLoader: an attribute nothing reads
        elif attribute in flow.holder_members:
            flow.called_methods.add(attribute)  # the holder's own code: its body is followed
        elif path and any(path[0] in fields and attribute in fields for fields in flow.records):
            pass  # another field of a record (`info.sampler` beside `info.dataloader`): followed on its own
        elif attribute in SAMPLER_ATTRIBUTES:
            flow.escapes = True
        # any other attribute (`loader.dataset`, `sampler.num_samples`) is only read
        return
    if isinstance(parent, cst.Arg) and parent.value is occurrence:
        _follow_argument(model, parent, path, flow, seen, certain)
        return
    if isinstance(parent, cst.For) and parent.iter is occurrence:
        flow.iterations.append(_iteration(model, parent, flow.entered))
        return
    if isinstance(parent, cst.From) and parent.item is occurrence and isinstance(model.parent(parent), cst.Yield):
        # `yield from loader` in a generator: one pass over the loader per time it runs.
        flow.iterations.append(_iteration(model, model.parent(parent), flow.entered))
        return
    if path and path[0].startswith("["):
        # An element of a tuple: `train_dl, val_dl = make_loaders()` or `make_loaders()[0]`.
        index = int(path[0][1:-1])
        if isinstance(parent, cst.Subscript) and parent.value is occurrence:
            element = parent.slice[0].slice if len(parent.slice) == 1 else None
            if isinstance(element, cst.Index) and isinstance(element.value, cst.Integer) and int(element.value.value) == index:
                _follow(model, parent, path[1:], flow, seen, certain)
                return
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is occurrence:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], (cst.Tuple, cst.List)):
                elements = targets[0].elements
                if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements):
                    key = model.binding_key(elements[index].value, parent)
                    binding = next((b for b in model.bindings.get(key or "", ()) if b.node is parent), None)
                    if binding is not None:
                        _follow_binding(model, binding, path[1:], flow, seen, certain)
                        return
            if len(targets) == 1 and isinstance(targets[0], cst.Name):
                # `params = (loader, model)`: the name holds the tuple, element and all
                binding = next((b for b in model.bindings.get(targets[0].value, ()) if b.node is parent), None)
                if binding is not None:
                    _follow_binding(model, binding, path, flow, seen, certain)
                    return
        if isinstance(parent, cst.Element) and isinstance(model.parent(parent), cst.Tuple):
            # `(train_sampler, train_dl), (_, val_dl) = build(train), build(val)`: the element's
            # own target is unpacked again.
            assign, target = _unpacked_target(model, model.parent(parent), parent)
            if isinstance(target, (cst.Tuple, cst.List)) and index < len(target.elements) and not any(
                    isinstance(e, cst.StarredElement) for e in target.elements):
                key = model.binding_key(target.elements[index].value, assign)
                binding = next((b for b in model.bindings.get(key or "", ()) if b.node is assign), None)
                if binding is not None:
                    _follow_binding(model, binding, path[1:], flow, seen, certain)
                    return
        if isinstance(parent, cst.IfExp) and occurrence is not parent.test:
            # `(_, extra_dl) = build(extra) if extra else (None, None)`: the tuple on one branch.
            _follow(model, parent, path, flow, seen, False)
            return
        if isinstance(parent, cst.Return) or _only_tested(parent, occurrence):
            if isinstance(parent, cst.Return):
                _follow_return(model, parent, path, flow, seen, certain)
            return
        flow.escapes = True
        return
    if isinstance(parent, cst.Element) and _loop_over_literal(model, parent) is not None:
        # `for loader in [train_loader, val_loader]:` the loop variable holds it in one pass.
        loop = _loop_over_literal(model, parent)
        binding = next((b for b in model.bindings.get(loop.target.value, ()) if b.node is loop), None)
        if binding is None:
            flow.escapes = True
        else:
            _follow_binding(model, binding, path, flow, seen, False)
        return
    if isinstance(parent, cst.Element) and isinstance(model.parent(parent), cst.Tuple):
        tuple_node = model.parent(parent)
        if isinstance(model.parent(tuple_node), cst.Return) and not any(
            isinstance(e, cst.StarredElement) for e in tuple_node.elements
        ):
            index = next(i for i, e in enumerate(tuple_node.elements) if e is parent)
            _follow_return(model, model.parent(tuple_node), (f"[{index}]", *path), flow, seen, certain)
            return
        binding = _unpacked_binding(model, tuple_node, parent)
        if binding is not None:
            _follow_binding(model, binding, path, flow, seen, certain and model.parent(tuple_node) is binding.node)
            return
        if _display_held_or_passed(model, tuple_node):
            _follow_display_element(model, tuple_node, parent, path, flow, seen, certain)
            return
        flow.escapes = True
        return
    if isinstance(parent, cst.Element) and isinstance(model.parent(parent), cst.List) \
            and _display_held_or_passed(model, model.parent(parent)):
        # `train_and_evaluate(..., [train_loader, eval_loader])`, unpacked by the callee
        _follow_display_element(model, model.parent(parent), parent, path, flow, seen, certain)
        return
    if isinstance(parent, cst.Return):
        _follow_return(model, parent, path, flow, seen, certain)
        return
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is occurrence:
        _follow_assignment(model, parent, path, flow, seen, certain)
        return
    if isinstance(parent, cst.IfExp) and occurrence is not parent.test:
        # `DistributedSampler(ds) if ddp else None`, `tqdm(loader) if rank == 0 else loader`:
        # the value holds it on one branch.
        _follow(model, parent, path, flow, seen, False)
        return
    if _only_tested(parent, occurrence) or _operand_of_test(model, parent):
        return
    flow.escapes = True


def _display_held_or_passed(model: SemanticModel, display: cst.BaseExpression) -> bool:
    """A list or tuple display (no `*` element) passed as an argument or bound to one name:
    where it goes, its elements can be told apart by index."""
    if any(isinstance(e, cst.StarredElement) for e in display.elements):
        return False
    parent = model.parent(display)
    if isinstance(parent, cst.Arg):
        return parent.value is display and not parent.star
    return isinstance(parent, cst.Assign) and parent.value is display and len(parent.targets) == 1 \
        and isinstance(parent.targets[0].target, cst.Name)


def _follow_display_element(model: SemanticModel, display, element: cst.Element, path: tuple[str, ...],
                            flow: "SamplerFlow", seen: set, certain: bool) -> None:
    """Follow the display as the value holding this element at its index (`[i]`, as for a
    returned tuple): `a, b = loaders` or `loaders[0]` where it goes reads it back."""
    index = next(i for i, e in enumerate(display.elements) if e is element)
    _follow(model, display, (f"[{index}]", *path), flow, seen, certain)


def _unpacked_binding(model: SemanticModel, values: cst.Tuple, element: cst.Element) -> Optional[Binding]:
    """`sampler, shuffle = DistributedSampler(ds), False`: the binding of the target at the
    element's position, when a tuple literal is unpacked into as many plain targets (also
    one branch of `(DistributedSampler(ds), False) if ddp else (None, True)`)."""
    assign, target = _unpacked_target(model, values, element)
    key = model.binding_key(target, assign) if target is not None else None
    return next((b for b in model.bindings.get(key or "", ()) if b.node is assign), None)


def _unpacked_target(model: SemanticModel, values: cst.Tuple, element: cst.Element):
    """(the assignment, the target at the element's position) where a tuple literal is
    unpacked into as many targets; (None, None) otherwise."""
    value = values
    while isinstance(model.parent(value), cst.IfExp) and model.parent(value).test is not value:
        value = model.parent(value)
    assign = model.parent(value)
    if not isinstance(assign, cst.Assign) or assign.value is not value or len(assign.targets) != 1:
        return None, None
    targets = assign.targets[0].target
    if not isinstance(targets, (cst.Tuple, cst.List)) or len(targets.elements) != len(values.elements) or any(
            isinstance(e, cst.StarredElement) for e in (*targets.elements, *values.elements)):
        return None, None
    index = next(i for i, e in enumerate(values.elements) if e is element)
    return assign, targets.elements[index].value


def _operand_of_test(model: SemanticModel, operation: Optional[cst.CSTNode]) -> bool:
    """`if epoch % k == 0 and self.test_loader:`: an operand of `and`/`or` whose value is
    only truth-tested (the whole operation is an `if`/`while` test or under `not`)."""
    if not isinstance(operation, cst.BooleanOperation):
        return False
    while isinstance(model.parent(operation), cst.BooleanOperation):
        operation = model.parent(operation)
    test = model.parent(operation)
    return isinstance(test, (cst.If, cst.While)) and test.test is operation or (
        isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not))


_ANY_KEY = "{*}"


def _dict_entry(model: SemanticModel, entry: cst.CSTNode) -> str:
    """The path step of a dict entry: `{'train'}`, `{'train'|'val'}` for a comprehension over
    literal keys, `{*}` when the key is unknown."""
    keys = None
    if isinstance(entry, cst.DictElement):
        return _key_step(entry.key)
    if isinstance(entry, cst.DictComp) and isinstance(entry.key, cst.Name):
        loop = entry.for_in
        if (loop.inner_for_in is None and not loop.ifs and isinstance(loop.target, cst.Name)
                and loop.target.value == entry.key.value and isinstance(loop.iter, (cst.List, cst.Tuple, cst.Set))):
            keys = _literal_keys(tuple(e.value for e in loop.iter.elements))
    return "{" + "|".join(sorted(keys)) + "}" if keys else _ANY_KEY


def _subscript_step(model: SemanticModel, subscript: cst.Subscript) -> str:
    """The entry `d[...]` names: its literal key, also through a name bound to a constant
    (`split = "train"; d[split]`); `{*}` when unknown."""
    index = subscript.slice[0].slice if len(subscript.slice) == 1 else None
    if not isinstance(index, cst.Index):
        return _ANY_KEY
    step = _key_step(index.value)
    if step == _ANY_KEY and isinstance(index.value, cst.Name):
        value = model.value_at(index.value, subscript)
        if isinstance(value, (cst.SimpleString, cst.Integer)):
            step = _key_step(value)
    return step


def _key_step(key: cst.BaseExpression) -> str:
    keys = _literal_keys((key,))
    return "{" + next(iter(keys)) + "}" if keys else _ANY_KEY


def _literal_keys(exprs) -> Optional[set[str]]:
    keys = set()
    for expr in exprs:
        try:
            keys.add(repr(literal_value(expr)))
        except ValueError:
            return None
    return keys


def _same_entry(first: str, second: str) -> bool:
    """Whether two dict path steps may name the same entry."""
    if _ANY_KEY in (first, second):
        return True
    return bool(set(first[1:-1].split("|")) & set(second[1:-1].split("|")))


def _follow_dict(model: SemanticModel, occurrence: cst.CSTNode, parent: Optional[cst.CSTNode], path: tuple[str, ...],
                 flow: SamplerFlow, seen: set, certain: bool) -> None:
    """A dict one of whose entries (`path[0]`) reaches the sampler: its reads by key, stores,
    and where the dict itself goes."""
    entry = path[0]
    if isinstance(parent, cst.Subscript) and parent.value is occurrence:
        key = _subscript_step(model, parent)
        if not _same_entry(entry, key):
            return  # another entry: `loaders["val"]`
        target = model.parent(parent)
        if parent in flow.entry_stores:
            return  # the store this entry was followed from
        if isinstance(target, (cst.AssignTarget, cst.AugAssign)) and target.target is parent or isinstance(target, cst.Del):
            if _ANY_KEY in (key, entry) and not isinstance(target, cst.Del) or any(
                    _exclusive_branches(model, store, parent) for store in flow.entry_stores):
                # `loaders[split] = ...` for splits we can't tell: most likely other entries;
                # `if ddp: d["train"] = A` / `else: d["train"] = B`: one or the other
                return
            flow.escapes = True  # the entry may be replaced: we no longer know what it holds
            return
        _follow(model, parent, path[1:], flow, seen, certain and key == entry != _ANY_KEY)
        return
    if isinstance(parent, cst.Attribute) and parent.value is occurrence:
        if parent.attr.value == "keys":
            return
        call = model.parent(parent)
        if parent.attr.value in ("get", "pop", "setdefault") and isinstance(call, cst.Call) and call.func is parent and call.args:
            # `d.get(k)` / `d.pop(k)` reads entry k (pop also removes it); another literal key
            # (`cfg.pop("shuffle")`) leaves this entry in place.
            key = _key_step(call.args[0].value)
            if _same_entry(entry, key):
                _follow(model, call, path[1:], flow, seen, False)
            return
        flow.escapes = True  # `.items()`, `.values()`, `.update()`...: not followed
        return
    if isinstance(parent, cst.For) and parent.iter is occurrence:
        return  # iterates the keys
    if isinstance(parent, cst.Arg) and parent.value is occurrence:
        _follow_argument(model, parent, path, flow, seen, certain)
        return
    if isinstance(parent, cst.Return):
        _follow_return(model, parent, path, flow, seen, certain)
    elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is occurrence:
        _follow_assignment(model, parent, path, flow, seen, certain)
    elif not _only_tested(parent, occurrence):
        flow.escapes = True


def _follow_assignment(model: SemanticModel, parent, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                       certain: bool) -> None:
    """`name = <what reaches the sampler>`: follow the name."""
    targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
    if len(targets) == 1 and isinstance(targets[0], cst.Subscript):
        _follow_entry_store(model, parent, targets[0], path, flow, seen)
        return
    key = model.binding_key(targets[0], parent) if len(targets) == 1 else None
    binding = next((b for b in model.bindings.get(key or "", ()) if b.node is parent), None)
    if binding is None:
        flow.escapes = True
    else:
        _follow_binding(model, binding, path, flow, seen, certain)


def _follow_entry_store(model: SemanticModel, assign, target: cst.Subscript, path: tuple[str, ...], flow: SamplerFlow,
                        seen: set) -> None:
    """`loaders["train"] = DataLoader(...)` (also `self.loaders[phase] = ...`): the dict the
    name holds there keeps it under that key (any key, when it is not a literal)."""
    step = _subscript_step(model, target)
    key = model.binding_key(target.value, assign)
    binding = model.binding_at(key, assign) if key is not None else None
    if binding is None:
        flow.escapes = True  # a dict reached some other way (`opt.loaders[...]`, a parameter's)
        return
    flow.entry_stores.add(target)
    _follow_binding(model, binding, (step, *path), flow, seen, False)


def _is_stored(model: SemanticModel, attribute: cst.Attribute) -> bool:
    """`x.epoch = ...` (or `+=`): the attribute is assigned, not read."""
    parent = model.parent(attribute)
    return isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and parent.target is attribute


def _replayed_iteration(model: SemanticModel, cycle: cst.Call) -> Iteration:
    """`batches = itertools.cycle(loader)` drawn by `next(batches)` (or a `for` over it) in a
    training loop: `cycle` iterates the loader once, then yields the batches it saved, so
    every later pass repeats the first. Its loops are the loops the draws run in."""
    step_loops: list[list[cst.CSTNode]] = []  # outermost first, the drawing loop last
    loop = iterating_loop(model, cycle)
    if loop is not None:
        step_loops.append([*loops_around(model, loop), loop])
    parent = model.parent(cycle)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is cycle:
        key = model.binding_key(parent.targets[0].target, parent) or ""
        binding = next((b for b in model.bindings.get(key, ()) if b.node is parent), None)
        for node, _, _ in model.references.get(key, ()) if binding is not None else ():
            if not _is_load(model, node) or model.binding_at(key, node) is not binding:
                continue
            use = model.parent(node)
            call = model.parent(use)
            if (isinstance(use, cst.Arg) and use.value is node and isinstance(call, cst.Call)
                    and builtin_name(model, call.func) == "next"):
                step_loops.append(loops_around(model, call))
            elif isinstance(use, cst.For) and use.iter is node:
                step_loops.append([*loops_around(model, use), use])
    for loops in step_loops:
        if loops and trains_in(model, loops[-1]):
            return Iteration(model, cycle, loops, True, False, replays=True)
    return Iteration(model, cycle, [], False, False, replays=True)


def _loop_over_literal(model: SemanticModel, element: cst.Element) -> Optional[cst.For]:
    """The `for name in [a, b]:` whose literal list or tuple holds this element."""
    sequence = model.parent(element)
    loop = model.parent(sequence)
    if (isinstance(sequence, (cst.List, cst.Tuple)) and isinstance(loop, cst.For) and loop.iter is sequence
            and isinstance(loop.target, cst.Name)):
        return loop
    return None


def _only_tested(parent: Optional[cst.CSTNode], occurrence: cst.CSTNode) -> bool:
    """`if sampler:`, `sampler is None`, `not sampler`, a bare expression statement."""
    if isinstance(parent, (cst.If, cst.While, cst.IfExp)):
        return parent.test is occurrence
    if isinstance(parent, cst.UnaryOperation):
        return isinstance(parent.operator, cst.Not)
    return isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Expr))


def _follow_argument(model: SemanticModel, arg: cst.Arg, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                     certain: bool) -> None:
    call = model.parent(arg)
    value = arg.value
    if not isinstance(call, cst.Call):
        flow.escapes = True  # a class base, a decorator argument...
        return
    name = loader_class(model, call) or model.qualified_name(call.func)
    if arg.star == "**" and path and path[0].startswith("{"):
        _follow_splatted_entry(model, call, path, flow, seen, certain)
    elif arg.star == "*" and _follow_splatted_element(model, call, arg, path, flow, seen, certain):
        pass
    elif arg.star:
        flow.escapes = True
    elif name in LOADER_CLASSES and loader_argument(model, call, "sampler") is value:
        _follow(model, call, ("sampler", *path), flow, seen, certain)
    elif name in LOADER_CLASSES and loader_argument(model, call, "batch_sampler") is value:
        _follow(model, call, ("batch_sampler", *path), flow, seen, certain)
    elif arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler") and _forwards_to_loader(model, call):
        flow.project_holder = True
        _follow(model, call, (arg.keyword.value, *path), flow, seen, certain)
    elif name in BATCH_SAMPLERS and argument(call, *BATCH_SAMPLER_SAMPLER) is value:
        _follow(model, call, ("sampler", *path), flow, seen, certain)
    elif builtin_name(model, call.func) == "dict" and arg.keyword is not None:
        _follow(model, call, (_key_step(cst.SimpleString(repr(arg.keyword.value))), *path), flow, seen, certain)
    elif builtin_name(model, call.func) in HARMLESS_BUILTINS or _formats_text(call):
        pass
    elif is_iteration_wrapper(model, call) and iterating_loop(model, call) is not None:
        flow.iterations.append(_iteration(model, iterating_loop(model, call), flow.entered))
    elif is_tqdm(model, call.func) and argument(call, 0, "iterable") is value:
        # `loader = tqdm(loader)`: iterating the progress bar iterates the loader, once.
        _follow(model, call, path, flow, seen, False)
    elif builtin_name(model, call.func) in ("enumerate", "zip") and arg.keyword is None:
        # `bar = tqdm(enumerate(loader))` ... `for step, batch in bar:`: iterating what the
        # name holds iterates the loader, once (where the name is iterated).
        _follow(model, call, path, flow, seen, False)
    elif model.qualified_name(call.func) == "itertools.islice" and call.args and call.args[0] is arg:
        # `for batch in itertools.islice(loader, n):` the first n batches of one pass
        _follow(model, call, path, flow, seen, False)
    elif model.qualified_name(call.func) == "itertools.cycle" and argument(call, 0, "iterable") is value:
        flow.iterations.append(_replayed_iteration(model, call))
    elif getattr(flow, "draws", False) and builtin_name(model, call.func) == "iter" and len(call.args) == 1:
        _follow(model, call, path, flow, seen, certain)  # `iter(generator)` is the generator itself
    elif builtin_name(model, call.func) == "iter" and len(call.args) == 1:
        flow.iterations.append(_iteration(model, call))  # `it = iter(loader)` ... `next(it)`
    elif getattr(flow, "draws", False) and builtin_name(model, call.func) == "next" and argument(call, 0, "iterator") is value:
        around = loops_around(model, call)  # a batch drawn from a generator object
        flow.iterations.append(Iteration(model, call, around, bool(around) and trains_in(model, around[-1]), False))
    elif not _follow_into_callee(model, call, arg, path, flow, seen, certain) and not _project_hook(model, call):
        flow.escapes = True  # handed to code we can't see into: it may call set_epoch


def _project_hook(model: SemanticModel, call: cst.Call) -> bool:
    """`self.callbacks.on_epoch_begin(train_loader=loader)`: a method call on an object the
    code can't type, that only the project's own classes define (a callback hook, a logger),
    in a project whose text never names `set_epoch` nor imports a library that calls it:
    whatever runs there, it can't change the sampler's epoch."""
    func = call.func
    if not isinstance(func, cst.Attribute) or model.qualified_name(func) is not None:
        return False
    callee = model.flow.callee(call)
    if callee is None and not project_methods(model, func.attr.value):
        return False
    return project_never_sets_epoch(model)


def _forwards_to_loader(model: SemanticModel, call: cst.Call) -> bool:
    """A project subclass of torch's DataLoader whose `__init__` (if it has one) hands its
    `**kwargs` to `super().__init__` and takes no `sampler` itself (`DataLoaderFast(n, ds,
    sampler=s)` that only adds prefetching): a `sampler=` keyword reaches DataLoader's."""
    callee = model.flow.callee(call)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return False
    return class_forwards_to_loader(callee.model, callee.node)


def _formats_text(call: cst.Call) -> bool:
    """`"got sampler={}".format(sampler)`: only its text is used."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "format"
            and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString)))


def _entry_popped(model: SemanticModel, call: cst.Call, keyword: str) -> bool:
    """A `name.pop("<keyword>")` in the function of a call splatting `**name`."""
    names = {arg.value.value for arg in call.args if arg.star == "**" and isinstance(arg.value, cst.Name)}
    function = enclosing_function(model, call)
    for site in model.calls:
        method = site.node.func
        if (isinstance(method, cst.Attribute) and method.attr.value == "pop" and isinstance(method.value, cst.Name)
                and method.value.value in names and site.node.args and enclosing_function(model, site.node) is function):
            try:
                if literal_value(site.node.args[0].value) == keyword:
                    return True
            except ValueError:
                return True  # a key we can't tell may be this one
    return False


def _follow_splatted_entry(model: SemanticModel, call: cst.Call, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                           certain: bool) -> None:
    """`DataLoader(ds, **kwargs)` where an entry of the dict reaches the sampler
    (`kwargs["sampler"] = DistributedSampler(...)`, `{"sampler": ...}`): the entry is the
    keyword argument of its name. Into a function of the project, it is the parameter of
    that name, else one entry of its `**kwargs` parameter."""
    try:
        keys = {ast.literal_eval(key) for key in path[0][1:-1].split("|")}
    except (ValueError, SyntaxError):
        keys = set()
    if len(keys) != 1 or not isinstance(next(iter(keys)), str):
        flow.escapes = True  # an entry we can't name
        return
    (keyword,) = keys
    if _entry_popped(model, call, keyword):
        return  # `kwargs.pop("sampler")` in the same function: the call may not get it
    if loader_class(model, call) is not None:
        if keyword in ("sampler", "batch_sampler"):
            _follow(model, call, (keyword, *path[1:]), flow, seen, certain)
        else:
            flow.escapes = True
        return
    callee = model.flow.callee(call)
    function = callee.function if callee is not None else None
    params = function.params if function is not None else None
    if params is not None and any(p.name.value == keyword for p in (*params.params, *params.kwonly_params)):
        entered = _follow_into_parameter(model, call, callee, keyword, path[1:], flow, seen, certain)
    elif params is not None and isinstance(params.star_kwarg, cst.Param):
        entered = _follow_into_parameter(model, call, callee, params.star_kwarg.name.value, path, flow, seen, certain)
    else:
        entered = False
    if not entered and not _project_hook(model, call):
        flow.escapes = True


def _follow_splatted_element(model: SemanticModel, call: cst.Call, arg: cst.Arg, path: tuple[str, ...],
                             flow: SamplerFlow, seen: set, certain: bool) -> bool:
    """`train_epoch(*params, epoch)` with `params = (loader, model, ...)`: element i of the
    tuple fills the positional parameter after the call's plain positional arguments before
    it, plus i. False where that cannot be told (a keyword or another `*` before it)."""
    step = path[0] if path else ""
    if not (step.startswith("[") and step[1:-1].isdigit()):
        return False
    before = list(itertools.takewhile(lambda other: other is not arg, call.args))
    if any(other.star or other.keyword is not None for other in before):
        return False
    callee = model.flow.callee(call)
    function = callee.function if callee is not None else None
    if function is None:
        return False
    params = [*function.params.posonly_params, *function.params.params][1 if callee.bound else 0:]
    position = len(before) + int(step[1:-1])
    if position >= len(params):
        return False
    return _follow_into_parameter(model, call, callee, params[position].name.value, path[1:], flow, seen, certain)


def _follow_into_callee(model: SemanticModel, call: cst.Call, arg: cst.Arg, path: tuple[str, ...], flow: SamplerFlow,
                        seen: set, certain: bool) -> bool:
    """Follow an argument into the parameter of a function or class of this file (or of the
    project); False when the callee is unknown code."""
    callee = model.flow.callee(call)
    function = callee.function if callee is not None else None
    if function is None:
        return callee is not None and isinstance(callee.node, cst.ClassDef) and \
            _follow_into_record(model, call, arg, callee, path, flow, seen, certain)
    name = parameter_for(model, call, arg, function, callee.bound)
    if name is None:
        return False
    return _follow_into_parameter(model, call, callee, name, path, flow, seen, certain)


def _follow_into_record(model: SemanticModel, call: cst.Call, arg: cst.Arg, callee, path: tuple[str, ...],
                        flow: SamplerFlow, seen: set, certain: bool) -> bool:
    """`DataInfo(dataloader, sampler)` of a dataclass: the instance holds the argument as
    the field of its place or keyword, and its methods read it as `self.<field>`
    (`def set_epoch(self, epoch): self.sampler.set_epoch(epoch)`, which sets the epoch when
    something calls it)."""
    fields = record_fields(callee.model, callee.node)
    if fields is None or arg.star:
        return False
    if arg.keyword is not None:
        field_name = arg.keyword.value if arg.keyword.value in fields else None
    else:
        index = [a for a in call.args if a.keyword is None].index(arg)
        field_name = fields[index] if index < len(fields) else None
    if field_name is None:
        return False
    flow.holder_classes.add(callee.node)
    flow.holder_members.update(m.name.value for m in class_methods(callee.node))
    flow.records.append(fields)
    _follow(model, call, (field_name, *path), flow, seen, certain)
    for method in class_methods(callee.node):
        params = method.params.params
        if not params or is_property(callee.model, method) or method.decorators:
            continue
        instance = params[0].name.value
        for node in subtree(method.body):
            if isinstance(node, cst.Attribute) and node.attr.value == field_name and \
                    isinstance(node.value, cst.Name) and node.value.value == instance:
                _follow(callee.model, node, path, flow, seen, False)
    return True


def _follow_into_parameter(model: SemanticModel, call: cst.Call, callee, name: str, path: tuple[str, ...],
                           flow: SamplerFlow, seen: set, certain: bool) -> bool:
    """Follow what a call passes into the callee's parameter `name`."""
    function = callee.function
    other = callee.model
    binding = next((b for b in other.bindings.get(name, ()) if isinstance(b.node, cst.Param)
                    and other.scope(b.node) is other.scope(function.body)), None)
    if binding is None:
        return False
    if any(entered is function for entered, _, _ in flow.entered):
        return True  # recursion: this function is already being followed
    holder = isinstance(callee.node, cst.ClassDef) and class_method(callee.node, "__iter__") is not None
    if holder:
        # Its methods and properties (`def sampler(self): return self.loader.sampler`) run
        # their bodies, whose reads of `self.<kept>` the binding below follows: calling or
        # reading one on the instance hands the sampler to nothing else.
        flow.holder_classes.add(callee.node)
        flow.holder_members.update(m.name.value for m in class_methods(callee.node))
    flow.entered.append((function, model, call))
    try:
        _follow_binding(other, binding, path, flow, seen, certain)
    finally:
        flow.entered.pop()
    if holder:
        # A batch sampler of the project (`PairBatchSampler(ds, sampler, 8)`) keeping it as
        # `self.sampler`: the instance reaches it through that attribute.
        for kept in _kept_as(function, name):
            flow.project_holder = True
            _follow(model, call, (kept, *path), flow, seen, certain)
            _drawn_by_own_iter(other, callee.node, kept, flow)
    return True


def _drawn_by_own_iter(model: SemanticModel, class_node: cst.ClassDef, kept: str, flow: SamplerFlow) -> None:
    """A `for` over `self.<kept>` (which holds the sampler) inside a loop of the batch
    sampler's own `__iter__`: each turn of that loop draws the sampler again. (What the
    methods do with `self.<kept>`, a `set_epoch` among it, `_follow` reads on its own.)"""
    method = class_method(class_node, "__iter__")
    params = method.params.params if method is not None else ()
    if not params:
        return
    held = ".".join((params[0].name.value, kept))
    for node in subtree(method.body):
        if isinstance(node, cst.For) and model.code(node.iter) == held:
            around = loops_around(model, node)
            if around:
                flow.redrawn.append((model, around[-1]))


def _kept_as(init: cst.FunctionDef, parameter: str) -> list[str]:
    """`x` for each `self.x = <parameter>` statement of a constructor's own body."""
    kept = []
    for statement in init.body.body if isinstance(init.body, cst.IndentedBlock) else ():
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if (isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and small.value.value == parameter
                    and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Attribute)
                    and isinstance(small.targets[0].target.value, cst.Name) and small.targets[0].target.value.value == "self"):
                kept.append(small.targets[0].target.attr.value)
    return kept


def _follow_return(model: SemanticModel, statement: cst.Return, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                   certain: bool) -> None:
    """A returned sampler or loader goes on at every call of its function in this file."""
    function = next((a for a in model.ancestors(statement) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
    for depth in range(len(flow.entered) - 1, -1, -1):
        entered, caller, call = flow.entered[depth]
        if entered is function:  # entered through a parameter: back to that very call
            inner = flow.entered[depth:]
            del flow.entered[depth:]
            try:
                _follow(caller, call, path, flow, seen, certain and len(model.flow.own_returns(function)) == 1)
            finally:
                flow.entered.extend(inner)
            return
    if isinstance(function, cst.FunctionDef) and is_property(model, function):
        _follow_property(model, function, path, flow, seen, certain)
        return
    sites = model.flow.all_call_sites(function) if isinstance(function, cst.FunctionDef) else None
    if not sites:
        flow.escapes = True  # returned to callers we can't see
        return
    if (function, path) in seen:
        return  # another return of the same function: its callers are followed already
    seen.add((function, path))
    certain = certain and len(model.flow.own_returns(function)) == 1  # other returns: not always this one
    flow.returned_elsewhere = flow.returned_elsewhere or not path and any(caller is not model for caller, _, _ in sites)
    if flow.only_site is not None and flow.only_site[0] is function:
        sites = [site for site in sites if site[1] is flow.only_site[1]]
    for caller, call, _ in sites:
        _follow(caller, call, path, flow, seen, certain)


def _holder_method(model: SemanticModel, node: cst.CSTNode, flow: SamplerFlow) -> Optional[str]:
    """The name of the method of a reached holder class that `node` is in, when the method
    runs only if called: not a dunder (`__iter__` runs each pass), not one the class's own
    code calls (`self.set_epoch(self.epoch)` in `__iter__`), nor a property."""
    method = _enclosing_function(model, node)
    owner = model.parent(model.parent(method)) if method is not None else None
    if owner not in flow.holder_classes or method.name.value.startswith("__") or is_property(model, method):
        return None
    name = method.name.value
    called_inside = any(isinstance(n, cst.Attribute) and n.attr.value == name and isinstance(n.value, cst.Name)
                        and n.value.value == "self" for n in subtree(owner))
    return None if called_inside else name


def _follow_property(model: SemanticModel, function: cst.FunctionDef, path: tuple[str, ...], flow: SamplerFlow,
                     seen: set, certain: bool) -> None:
    """`@property def sampler(self): return self.loader.sampler` (a loader wrapper): each
    instance made of the class gives it as its attribute, `prefetcher.sampler`."""
    owner = model.parent(model.parent(function))
    init = class_method(owner, "__init__") if isinstance(owner, cst.ClassDef) else None
    sites = model.flow.all_call_sites(init) if init is not None else None
    if not sites:
        flow.escapes = True  # instances made where we can't see
        return
    if (function, path) in seen:
        return
    seen.add((function, path))
    for caller, call, _ in sites:
        _follow(caller, call, (function.name.value, *path), flow, seen, certain)


def _iteration(model: SemanticModel, node: cst.CSTNode, entered: list = (), depth: int = 3) -> Iteration:
    """Where a loop over the loader (or an `iter(loader)`) runs again and whether it trains:
    the loops around it, else around the calls of its function; a generator that yields
    its batches trains when what consumes it does."""
    function = _enclosing_function(model, node)
    if isinstance(node, cst.Yield):  # `yield from loader`
        if function is None:
            return Iteration(model, node, [], False, False)
        around = loops_around(model, node)
        if not around:
            return _consumers_iteration(model, function, entered, depth) or Iteration(model, node, [], False, False)
        return Iteration(model, node, around, _generator_trains(model, function, entered), False, generator=True)
    if isinstance(node, cst.For) and function is not None and model.flow.is_generator(function):
        around = loops_around(model, node)
        if not around:
            passed_on = _consumers_iteration(model, function, entered, depth)
            if passed_on is not None:
                return passed_on
        return Iteration(model, node, around, _generator_trains(model, function, entered), False, generator=True)
    if isinstance(node, cst.Call):  # iter(loader): each call starts a new pass
        around = loops_around(model, node)
        if around:
            return Iteration(model, node, around, trains_in(model, around[-1]), False)
        # `self.loader = iter(loader)` in a prefetcher's constructor, built once per epoch by
        # `train_one_epoch(...)`: the pass trains when the call in the loop runs backward
        where, around, call = _loop_call_around(model, function, 3)
        return Iteration(model, node, around, call is not None and call_runs_backward(where, call), False, where)
    around = loops_around(model, node)
    if around:
        return Iteration(model, node, around, trains_in(model, node))
    where, around = _loops_around_calls(model, function, 3)
    return Iteration(model, node, around, trains_in(model, node), False, where)


def _consumers_iteration(model: SemanticModel, generator: cst.FunctionDef, entered: list, depth: int) -> Optional[Iteration]:
    """A generator that passes the loader's batches on, one pass per call (`for obj in
    iterable: ...; yield obj`, a progress logger's `log_every`): the loop over its call (in
    any file of the project) iterates the loader. The first such loop that trains in an
    epoch loop, as an iteration no fix may edit; None when there is none. Entered through
    a parameter (`flow.entered`), only the call that passed the loader counts."""
    if depth <= 0:
        return None
    through = [(caller, call, None) for function, caller, call in entered if function is generator]
    for caller, call, _ in through[-1:] or model.flow.all_call_sites(generator) or ():
        loop = iterating_loop(caller, call)
        if loop is None:
            continue
        consumer = _iteration(caller, loop, (), depth - 1)
        if consumer.epoch_loops and consumer.trains:
            consumer.fixable = False
            return consumer
    return None


def _enclosing_function(model: SemanticModel, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    scope = model.scope(node)
    return scope.node if isinstance(scope.node, cst.FunctionDef) else None


def _loops_around_calls(model: SemanticModel, function: Optional[cst.FunctionDef], depth: int) -> tuple[SemanticModel, list]:
    """(model, loops): the loops around the calls of a function (`run()` loops over epochs
    calling `_one_pass()`), also in the project's other files (`for epoch in ...:
    train_one_epoch(model, loader)` in main.py, the function in engine.py)."""
    where, around, _ = _loop_call_around(model, function, depth)
    return where, around


def _loop_call_around(model: SemanticModel, function: Optional[cst.FunctionDef],
                      depth: int) -> tuple[SemanticModel, list, Optional[cst.Call]]:
    """`_loops_around_calls`, with the call in the innermost loop that leads to the function
    (None when no loop is found)."""
    if function is None or depth <= 0:
        return model, [], None
    for caller, call, _ in model.flow.known_call_sites(function):  # one call in a loop runs it again
        around = loops_around(caller, call)
        if around:
            return caller, around, call
        found = _loop_call_around(caller, _enclosing_function(caller, call), depth - 1)
        if found[1]:
            return found
    return model, [], None


def _generator_trains(model: SemanticModel, generator: cst.FunctionDef, entered: list = ()) -> bool:
    """The generator's batches are drawn (`for b in gen(...)`, `next(it)`) in a training loop:
    next to its call in this file, else wherever the generator object goes (see `_draws_train`)."""
    return _drawn_beside_call(model, generator) or _draws_train(model, generator, entered)


def _drawn_beside_call(model: SemanticModel, generator: cst.FunctionDef) -> bool:
    for call, _ in model.flow.call_sites(generator) or ():
        parent = model.parent(call)
        if isinstance(parent, cst.For) and parent.iter is call:
            if trains_in(model, parent):
                return True
            continue
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            key = model.binding_key(parent.targets[0].target, parent)
            for node, scope, _ in model.references.get(key or "", ()):
                use = model.parent(node)
                if isinstance(use, cst.Arg) and builtin_name(model, model.parent(use).func) == "next":
                    around = loops_around(model, use)
                    if around and trains_in(model, around[-1]):
                        return True
                elif isinstance(use, cst.For) and use.iter is node and trains_in(model, use):
                    return True
    return False


class _Draws(SamplerFlow):
    """Where a generator object goes, followed like a loader (names, `self.x`, parameters,
    returns, other files) to find the places its batches are drawn (`next(gen)`, a `for`
    over it). Only evidence of training is sought: a use that can't be followed ends that
    path, not the search."""

    draws = True

    @property
    def escapes(self) -> bool:
        return False

    @escapes.setter
    def escapes(self, value: bool) -> None:
        pass


def _draws_train(model: SemanticModel, generator: cst.FunctionDef, entered: list) -> bool:
    """Some call of the generator (the one that passed the loader in, when entered through a
    parameter) makes an object whose batches are drawn in a training loop, in any function
    or file it reaches: `data = load_data(...)` returning `forever(loader)`, then
    `TrainLoop(data=data)` keeping it as `self.data` and `next(self.data)` in `run_loop`."""
    depth = next((i for i, (function, _, _) in enumerate(entered) if function is generator), None)
    sites = [entered[depth][1:]] if depth is not None else [
        (caller, call) for caller, call, _ in model.flow.all_call_sites(generator) or ()]
    busy = model.flow.__dict__.setdefault("_generators_traced", set())
    if generator in busy:
        return False  # a generator drawing from itself
    busy.add(generator)
    try:
        for caller, call in sites:
            draws = _Draws(call)
            draws.entered = list(entered[:depth] if depth is not None else ())
            _follow(caller, call, (), draws, set(), False)
            if any(iteration.trains for iteration in draws.iterations):
                return True
    finally:
        busy.discard(generator)
    return False


def _follow_binding(model: SemanticModel, binding: Binding, path: tuple[str, ...], flow: SamplerFlow, seen: set,
                    certain: bool) -> None:
    key = (binding, path, tuple(id(call) for _, _, call in flow.entered))  # once per calling context
    if key in seen:
        return
    seen.add(key)
    certain = certain and _holds_only_this(model, binding)
    flow.holders.append((binding, path, certain))
    key, owner = binding.key, binding.scope
    if key.startswith("self.") and any(held.key == key for held, _, _ in flow.holders[:-1]):
        # a subclass storing what its base class's method returned (`self.train_loader =
        # self.get_train_dataloader(ds)`) in the attribute the base already keeps it in: the
        # same slot of the same object, whose reads the base's binding is followed to
        return
    if key.startswith("self.") and not _attribute_stays_in_class(model, binding):
        flow.escapes = True
        return
    if key.startswith("self."):
        # `data = Data(ds)` ... `for x in data.loader:`: the instance's attribute, read outside
        for reader, read in model.flow.read_from_outside(owner, key):
            _follow(reader, read, path, flow, seen, certain)
    for node, scope, _ in model.references.get(key, ()):
        if not _is_load(model, node) or model.owner_scope(key, scope) is not owner:
            continue  # a store, or another variable of the same name
        if not key.startswith("self.") and scope is not owner:
            if owner.kind == "module" and scope.kind == "function":
                # A module global read in a function (`def train_model(): for b in
                # dataloaders[phase]`): it holds what the module bound last when the call runs.
                live_here = [b for b, _ in model.flow.reaching(key, node)]
                if any(b is binding for b in live_here):
                    _follow(model, node, path, flow, seen, certain and len(live_here) == 1)
                continue
            if owner.kind == "function" and _only_binding_in_scope(model, binding):
                # A closure (`def train_epoch(): for x in loader:` inside main): it reads the
                # variable when called, and main gives it this one value.
                _follow(model, node, path, flow, seen, certain)
                continue
            flow.escapes = True  # read inside a nested function: runs when (and if) it is called
            return
        live = model.binding_at(key, node)
        if live is None:
            flow.escapes = True  # read where source order can't tell which value it holds
            return
        if live is binding:
            _follow(model, node, path, flow, seen, certain)
        elif binding.order < live.order and _exclusive_branches(model, binding.node, live.node):
            # `if distributed: sampler = DistributedSampler(ds)` / `else: sampler = None`:
            # the name holds one or the other.
            _follow(model, node, path, flow, seen, False)


def _only_binding_in_scope(model: SemanticModel, binding: Binding) -> bool:
    return sum(1 for other in model.bindings.get(binding.key, ()) if other.scope is binding.scope) == 1


def _holds_only_this(model: SemanticModel, binding: Binding) -> bool:
    """The key's only binding in its scope, or one that runs unconditionally at the top of
    its function (or module): where it is live, the name holds its value."""
    if _only_binding_in_scope(model, binding):
        return True
    statement = model.statement_of(binding.node)
    block = model.parent(statement)
    if isinstance(block, cst.Module):
        return True
    return isinstance(block, cst.IndentedBlock) and model.parent(block) is model.scope(statement).node


def _exclusive_branches(model: SemanticModel, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether two nodes sit in different branches of one `if` statement."""
    branches = {}
    child = first
    for ancestor in model.ancestors(first):
        if isinstance(ancestor, cst.If):
            branches[ancestor] = child
        child = ancestor
    child = second
    for ancestor in model.ancestors(second):
        if ancestor in branches and ancestor.test is not child:
            return branches[ancestor] is not child and branches[ancestor] is not ancestor.test
        child = ancestor
    return False


def _attribute_stays_in_class(model: SemanticModel, binding: Binding) -> bool:
    """`self.loader` is assigned once in its class, and `.loader` is read nowhere else but on
    an instance the code built (`data = Data(ds)` ... `data.loader`: followed there)."""
    key, owner = binding.key, binding.scope
    if not _only_binding_in_scope(model, binding):
        return False
    attribute = key[len("self."):]
    on_instances = None
    for node, scope, _ in model.references.get(attribute, ()):
        parent = model.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node and not _names_a_module(model, parent):
            if model.binding_key(parent, parent) == key and scope.class_scope is owner:
                continue
            if on_instances is None:
                on_instances = {id(read) for reader, read in model.flow.read_from_outside(owner, key) if reader is model}
            if id(parent) not in on_instances:
                return False  # `trainer.loader` of an object not known to be one, or a subclass's `self.loader`
    return True


def _names_a_module(model: SemanticModel, attribute: cst.Attribute) -> bool:
    """`torch.utils.data.sampler` in an import, or an imported module's attribute: no object's."""
    if model.qualified_name(attribute) is not None:
        return True
    return any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in model.ancestors(attribute))


def _is_load(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether a recorded Name/Attribute occurrence reads the variable (not a store, a
    keyword, a parameter, an attribute name or an import)."""
    parent = model.parent(node)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, parent = parent, model.parent(parent)  # `a, b = None, None`: a store
        if isinstance(parent, (cst.AssignTarget, cst.For, cst.CompFor)) and getattr(parent, "target", None) is node:
            return False
        if not isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
            return True
    if isinstance(parent, cst.Attribute):
        return parent.attr is not node
    if isinstance(parent, cst.Arg):
        return parent.keyword is not node
    if isinstance(parent, (cst.AssignTarget, cst.AnnAssign, cst.For, cst.CompFor)):
        return getattr(parent, "target", None) is not node
    return not isinstance(
        parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName, cst.NameItem)
    )
