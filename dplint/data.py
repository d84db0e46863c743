"""Shared knowledge of the input pipeline: which expressions are DataLoaders and samplers
(and with which `shuffle`), which classes seed their order with an epoch, which loops train
and which count epochs. Where a sampler goes is `dplint.sampler_flow`'s."""

from __future__ import annotations

import os
import re
from typing import Optional

import libcst as cst

from dplint.semantic import (
    DATA_LOADER,
    DISTRIBUTED_SAMPLER,
    SemanticModel,
    argument,
    dotted_name,
    is_docstring,
    literal_value,
    peel_self_returning,
    static_truth,
    subtree,
)
from dplint.distributed import enclosing_function
from dplint.flow import class_method, consistent
from dplint.project import may_call_function_matching
from dplint.training import backprops, partial_callee

# torch's own samplers: any of them next to a truthy `shuffle` makes DataLoader raise.
TORCH_SAMPLERS = {
    DISTRIBUTED_SAMPLER,
    "torch.utils.data.RandomSampler",
    "torch.utils.data.SequentialSampler",
    "torch.utils.data.SubsetRandomSampler",
    "torch.utils.data.WeightedRandomSampler",
    "torch.utils.data.sampler.RandomSampler",
    "torch.utils.data.sampler.SequentialSampler",
    "torch.utils.data.sampler.SubsetRandomSampler",
    "torch.utils.data.sampler.WeightedRandomSampler",
}

# DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, ...)
LOADER_SHUFFLE = (2, "shuffle")
LOADER_SAMPLER = (3, "sampler")

# Subclasses of torch's DataLoader in well-known libraries that hand `shuffle` and `sampler`
# on to it unchanged, with where each takes them. PyG 2.x `torch_geometric.loader.DataLoader
# (dataset, batch_size=1, shuffle=False, follow_batch=None, exclude_keys=None, **kwargs)`
# calls `super().__init__(dataset, batch_size, shuffle, ..., **kwargs)`; PyG 1.x had the same
# class as `torch_geometric.data.DataLoader`. MONAI's `monai.data.DataLoader(dataset,
# num_workers=0, **kwargs)` hands every other argument to torch's by keyword. Any other
# library's `DataLoader` is unknown. timm's `MultiEpochsDataLoader(*args, **kwargs)` hands
# all to torch's, then re-iterates torch's batch sampler forever (each pass calls
# `iter(sampler)` again: the sampler's epoch still picks the order). torchdata's
# `StatefulDataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
# ...)` subclasses torch's with the same parameters, adds a resumable state, and never calls
# the sampler's `set_epoch`.
_PYG_ARGUMENTS = {"shuffle": (2, "shuffle"), "sampler": (None, "sampler"), "batch_sampler": (None, "batch_sampler")}
_TORCH_ARGUMENTS = {"shuffle": LOADER_SHUFFLE, "sampler": LOADER_SAMPLER, "batch_sampler": (4, "batch_sampler")}
_KEYWORD_ARGUMENTS = {"shuffle": (None, "shuffle"), "sampler": (None, "sampler"), "batch_sampler": (None, "batch_sampler")}
LOADER_CLASSES = {
    DATA_LOADER: _TORCH_ARGUMENTS,
    "torch_geometric.loader.DataLoader": _PYG_ARGUMENTS,
    "torch_geometric.loader.dataloader.DataLoader": _PYG_ARGUMENTS,
    "torch_geometric.data.DataLoader": _PYG_ARGUMENTS,
    "timm.data.loader.MultiEpochsDataLoader": _TORCH_ARGUMENTS,
    "timm.data.MultiEpochsDataLoader": _TORCH_ARGUMENTS,
    "torchdata.stateful_dataloader.StatefulDataLoader": _TORCH_ARGUMENTS,
    "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader": _TORCH_ARGUMENTS,
    "monai.data.DataLoader": _KEYWORD_ARGUMENTS,
    "monai.data.dataloader.DataLoader": _KEYWORD_ARGUMENTS,
}
# A class of this file derived from torch's DataLoader that hands its `**kwargs` to
# `super().__init__` (see `class_forwards_to_loader`), picked beside torch's by a
# conditional (`loader = DataLoader if image_weights else InfiniteDataLoader`): its
# `sampler=` reaches DataLoader's; only keywords are read, positions may differ.
FORWARDING_SUBCLASS = "a DataLoader subclass of this file"
LOADER_CLASSES[FORWARDING_SUBCLASS] = _KEYWORD_ARGUMENTS


def is_loader_call(model: SemanticModel, call: cst.Call) -> bool:
    return loader_class(model, call) is not None


def loader_class(model: SemanticModel, call: cst.Call) -> Optional[str]:
    """The LOADER_CLASSES name a call constructs, also through a parameter that every call
    leaves at (or passes) one such class (`def loader(ds, *args, klass=DataLoader, **kw):
    return klass(ds, *args, sampler=s, **kw)`), or a local name every binding of which is
    one (taking their arguments alike); None for anything else."""
    name = model.qualified_name(call.func)
    if name in LOADER_CLASSES:
        return name
    if name is not None or not isinstance(call.func, cst.Name):
        return None
    binding = model.binding_at(call.func.value, call)
    if binding is None:
        return None
    if not isinstance(binding.node, cst.Param):
        # `loader_class = DataLoader` / `if fast: loader_class = MultiEpochsDataLoader`
        classes = {_loader_class_named(model, value)
                   for other in model.bindings.get(binding.key, ()) if other.scope is binding.scope
                   for value in _branches(other.value)}
        if not classes or not all(name in LOADER_CLASSES for name in classes):
            return None
        # the one taking the fewest arguments by position: where they differ, keywords only
        return min(classes, key=lambda name: (sum(p is not None for p, _ in LOADER_CLASSES[name].values()), name))
    param = binding.node
    function = model.parent(model.parent(param))
    sites = model.flow.all_call_sites(function) if isinstance(function, cst.FunctionDef) else None
    names = set()
    for caller, site, bound in sites or ():
        given = model.flow.parameter_argument(site, function, param.name.value, bound)
        names.add(None if given is None else (model if given is param.default else caller).qualified_name(given))
    return names.pop() if len(names) == 1 and next(iter(names)) in LOADER_CLASSES else None


def _branches(value: Optional[cst.BaseExpression]) -> list:
    """The values a conditional expression may give (`A if test else B`), or the value itself."""
    if isinstance(value, cst.IfExp):
        return [*_branches(value.body), *_branches(value.orelse)]
    return [value]


def _loader_class_named(model: SemanticModel, value: Optional[cst.BaseExpression]) -> Optional[str]:
    if value is None:
        return None
    name = model.qualified_name(value)
    if name is None and isinstance(value, cst.Name) and value.value in model.classes:
        if class_forwards_to_loader(model, model.classes[value.value]):
            return FORWARDING_SUBCLASS
    elif name not in LOADER_CLASSES and isinstance(value, cst.Name) and model.project is not None:
        # a project subclass imported from another file (`from ..dataloaders import InfiniteDataLoader`)
        named = model.flow._class_named(value)
        if named is not None and class_forwards_to_loader(*named):
            return FORWARDING_SUBCLASS
    return name


def loader_argument(model: SemanticModel, call: cst.Call, which: str) -> Optional[cst.BaseExpression]:
    """The `shuffle` / `sampler` / `batch_sampler` a loader construction is given, or None."""
    where = LOADER_CLASSES.get(loader_class(model, call) or "", {}).get(which)
    return argument(call, *where) if where is not None else None


def sampler_call(model: SemanticModel, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None) -> Optional[cst.Call]:
    """The torch sampler construction an expression holds (inline or through names), or None."""
    value = peel_self_returning(model.value_at(expr, at))
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in TORCH_SAMPLERS:
        return value
    return None


def loader_sampler(model: SemanticModel, loader: cst.Call) -> Optional[cst.Call]:
    """The sampler construction passed to a DataLoader call, or None when unknown or absent."""
    return sampler_call(model, loader_argument(model, loader, "sampler"), loader)


# Subclasses of torch's DistributedSampler in well-known libraries that keep its epoch
# seeding (neither `__iter__` nor `set_epoch` overridden), with where each takes `shuffle`.
# MONAI's `monai.data.DistributedSampler(dataset, even_divisible=True, num_replicas=None,
# rank=None, shuffle=True, **kwargs)` hands `shuffle` and `**kwargs` (`seed`, `drop_last`) to
# torch's `__init__` and only trims `num_samples`/`total_size` when `even_divisible=False`.
_MONAI_SHUFFLE = (4, "shuffle")
EPOCH_SEEDED_SAMPLERS = {
    DISTRIBUTED_SAMPLER: (3, "shuffle"),
    "monai.data.DistributedSampler": _MONAI_SHUFFLE,
    "monai.data.samplers.DistributedSampler": _MONAI_SHUFFLE,
}
TORCH_SAMPLERS |= set(EPOCH_SEEDED_SAMPLERS)

# Base classes that make a class of the project a sampler.
SAMPLER_BASES = TORCH_SAMPLERS | {"torch.utils.data.Sampler", "torch.utils.data.sampler.Sampler"}


def is_torch_sampler(value) -> bool:
    """A flow `Value` that is a construction of one of torch's samplers (in its own file),
    or of a class of the project derived from one (`class RandomSequentialSampler(Sampler)`):
    never None, so `DataLoader` refuses it next to a true `shuffle`."""
    expr = peel_self_returning(value.expr)
    if not isinstance(expr, cst.Call):
        return False
    if value.model.qualified_name(expr.func) in TORCH_SAMPLERS:
        return True
    callee = value.model.flow.callee(expr)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return False
    return any(callee.model.qualified_name(base.value) in SAMPLER_BASES for base in callee.node.bases)


def sampler_with_true_shuffle(model: SemanticModel, loader: cst.Call):
    """The first torch sampler `Value` a loader may get on a path where its `shuffle` is
    provably true on that same path; None when no path is known to have both.

    Conditions are judged together: `sampler = DistributedSampler(ds) if dist else None`
    with `shuffle=True` has both on the `dist` path; with `shuffle=(sampler is None)`,
    `shuffle=not dist` or a `shuffle` set False in the branch that sets the sampler, none.
    """
    shuffle = loader_argument(model, loader, "shuffle")
    sampler = loader_argument(model, loader, "sampler")
    if sampler is None:
        return None
    flow = model.flow
    # `shuffle=` itself, or `shuffle` entries that reach it through `**kwargs`
    shuffles = [(shuffle, loader, ())] if shuffle is not None else kwargs_entries(model, loader, "shuffle")
    for value in flow.values_at(sampler, loader):
        if not (value.known and is_torch_sampler(value)):
            continue
        for expr, at, path in shuffles:
            if consistent(value.conditions, path) and flow.truth(expr, at, (*value.conditions, *path)) is True:
                return value
    return None


def kwargs_entries(model: SemanticModel, call: cst.Call, key: str) -> list[tuple[cst.BaseExpression, cst.CSTNode, tuple]]:
    """(value, where, branch conditions) of every `key` entry a call gets through `**name`:
    entries of the dict literals bound to the name (`kw = {"shuffle": True}`) and of what is
    merged into it before the call in the same function (`if use_cuda: kw.update(cuda_kw)`).
    Empty when the entry may be removed (`kw.pop("shuffle")`, `del kw["shuffle"]`)."""
    found = []
    flow = model.flow
    function = enclosing_function(model, call)
    for arg in call.args:
        if arg.star != "**" or not isinstance(arg.value, cst.Name):
            continue
        name = arg.value.value
        for value in flow.values_at(arg.value, call):
            found += [(entry, value.expr, value.conditions) for entry in _dict_entries(value.expr, key)]
        for site in model.calls:
            method = site.node.func
            if not (isinstance(method, cst.Attribute) and isinstance(method.value, cst.Name) and method.value.value == name
                    and enclosing_function(model, site.node) is function and model.order(site.node) < model.order(call)):
                continue
            if method.attr.value in ("pop", "clear", "popitem"):
                return []
            if method.attr.value != "update":
                continue
            here = flow.branch_conditions(site.node)
            for merged in site.node.args:
                if merged.keyword is not None and merged.keyword.value == key:
                    found.append((merged.value, site.node, here))
                elif merged.keyword is None and not merged.star:
                    for value in flow.values_at(merged.value, site.node):
                        found += [(entry, value.expr, (*here, *value.conditions)) for entry in _dict_entries(value.expr, key)]
    if found and any(key in model.code(node) for node in model.nodes_of(cst.Del)):
        return []  # the walk only where an entry was found: most `**kwargs` carry none
    return found


def _dict_entries(expr, key: str) -> list[cst.BaseExpression]:
    """The values of `key` in a dict literal or a `dict(key=...)` call."""
    if isinstance(expr, cst.Dict):
        return [element.value for element in expr.elements
                if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
                and literal_value(element.key) == key]
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict":
        return [arg.value for arg in expr.args if arg.keyword is not None and arg.keyword.value == key]
    return []


def is_distributed_sampler(model: SemanticModel, call: Optional[cst.Call]) -> bool:
    return call is not None and model.qualified_name(call.func) in EPOCH_SEEDED_SAMPLERS


# ------------------------------------------------------------------ epochs and set_epoch
# DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False)
SAMPLER_SHUFFLE = (3, "shuffle")
SAMPLER_SEED = (4, "seed")
# DataLoader(..., batch_sampler=None) is its fifth parameter; BatchSampler(sampler, batch_size, drop_last)
LOADER_BATCH_SAMPLER = (4, "batch_sampler")
BATCH_SAMPLERS = {"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"}
BATCH_SAMPLER_SAMPLER = (0, "sampler")

# Callables whose result, iterated by a `for`, iterates their argument once, in order.
ITERATION_BUILTINS = {"enumerate", "zip", "iter"}
TQDM_NAMES = {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm.rich.tqdm"}
TRANGE_NAMES = {"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "tqdm.std.trange", "tqdm.rich.trange"}


def is_shuffling_distributed_sampler(model: SemanticModel, call: cst.Call) -> bool:
    """`DistributedSampler(ds)` or with a provably true `shuffle` (its default is True)."""
    return distributed_sampler_shuffles(model, call) is True


def distributed_sampler_shuffles(model: SemanticModel, call: cst.Call) -> Optional[bool]:
    """Whether a construction of a sampler seeded by its epoch shuffles: True by default or
    with a provably true `shuffle`; None when `shuffle` is a value the code can't tell (a
    config entry: `shuffle=opt["shuffle"]`), which shuffles on the runs that set it; False
    when it is provably false, is no such sampler, or takes `*args`/`**kwargs`."""
    shuffle = epoch_sampler_shuffle(model, call)
    if shuffle is None:
        return False
    return True if shuffle is _DEFAULT_TRUE else static_truth(model, shuffle, call)


_DEFAULT_TRUE = cst.Name("True")


def epoch_sampler_shuffle(model: SemanticModel, call: cst.Call) -> Optional[cst.BaseExpression]:
    """The `shuffle` value of a construction of a sampler whose order is seeded by its epoch
    (`_DEFAULT_TRUE` when it shuffles by default, or has no `shuffle` to turn off); None
    when the call is no such sampler or passes `*args`/`**kwargs`. Such a sampler is torch's
    `DistributedSampler`, or a class of the project (named `...Sampler`) that defines
    `set_epoch` storing its argument in `self.<x>` and whose `__iter__` reads `self.<x>`
    (its own or a base's; torch's when it derives from `DistributedSampler`)."""
    if any(arg.star for arg in call.args):
        return None
    library = EPOCH_SEEDED_SAMPLERS.get(epoch_seeded_class(model, call)[0] or "")
    if library is not None:
        shuffle = argument(call, *library)
        return _DEFAULT_TRUE if shuffle is None else shuffle
    name = dotted_name(call.func)
    if name is None or not name.rpartition(".")[2].endswith("Sampler"):
        return None
    callee = model.flow.callee(call)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return None
    chain, torch_base = _class_chain(callee.model, callee.node)
    if not _seeded_by_epoch(chain, torch_base):
        return None
    init = next((method for other, node in chain if (method := class_method(node, "__init__")) is not None), None)
    if init is None:
        given = argument(call, *SAMPLER_SHUFFLE) if torch_base else None
        return _DEFAULT_TRUE if given is None else given
    param = next((p for p in (*init.params.params, *init.params.kwonly_params) if p.name.value == "shuffle"), None)
    if param is None:
        return _DEFAULT_TRUE  # nothing turns its shuffle off
    for arg in call.args:
        if parameter_for(model, call, arg, init, True) == "shuffle":
            return arg.value
    if param.default is None:
        return None
    try:
        return _DEFAULT_TRUE if literal_value(param.default) else cst.Name("False")
    except ValueError:
        return param.default


def epoch_seeded_class(model: SemanticModel, call: cst.Call) -> tuple[Optional[str], bool]:
    """(the EPOCH_SEEDED_SAMPLERS class a call constructs, whether surely that one): the
    class itself, or a local name holding it (`sampler_cls = DistributedSampler`), also on
    one branch (`RandomSampler if args.local_rank == -1 else DistributedSampler`: not sure)."""
    name = model.qualified_name(call.func)
    if name is not None or not isinstance(call.func, cst.Name):
        return (name, True) if name in EPOCH_SEEDED_SAMPLERS else (None, False)
    binding = model.binding_at(call.func.value, call)
    if binding is None or isinstance(binding.node, cst.Param):
        return None, False
    held = []
    for other in model.bindings.get(binding.key, ()):
        stack = [other.value] if other.scope is binding.scope else []
        while stack:
            value = stack.pop()
            if isinstance(value, cst.IfExp):
                stack += [value.body, value.orelse]
            else:
                held.append(model.qualified_name(value) if value is not None else None)
    seeded = [name for name in held if name in EPOCH_SEEDED_SAMPLERS]
    return (seeded[0], len(held) == 1) if seeded else (None, False)


def _class_chain(model: SemanticModel, node: cst.ClassDef, depth: int = 4) -> tuple[list, bool]:
    """([(model, class)] the class and its project bases, first bases first; whether one of
    them derives from torch's DistributedSampler)."""
    chain, torch_base = [(model, node)], False
    for base in node.bases:
        qualified = model.qualified_name(base.value)
        if qualified in EPOCH_SEEDED_SAMPLERS:
            torch_base = True
            continue
        found = None
        if isinstance(base.value, cst.Name) and base.value.value in model.classes:
            found = (model, model.classes[base.value.value])
        elif qualified and model.project is not None and depth > 0:
            found = model.project.resolve(qualified, model)
        if found is not None and isinstance(found[1], cst.ClassDef) and depth > 0:
            more, more_torch = _class_chain(found[0], found[1], depth - 1)
            chain += more
            torch_base = torch_base or more_torch
    return chain, torch_base


def _seeded_by_epoch(chain: list, torch_base: bool) -> bool:
    """The first `__iter__` of the chain reads an attribute the first `set_epoch` stores
    (torch's own when neither is overridden, or when `__iter__` calls `super().__iter__()`)."""
    set_epoch = next((method for _, node in chain if (method := class_method(node, "set_epoch")) is not None), None)
    iterate = next((method for _, node in chain if (method := class_method(node, "__iter__")) is not None), None)
    stored = _self_attributes_stored(set_epoch) if set_epoch is not None else ({"epoch"} if torch_base else set())
    if iterate is None:
        return torch_base and bool(stored)
    if torch_base and "super().__iter__" in cst.Module([]).code_for_node(iterate).replace(" ", ""):
        return True
    return any(isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"
               and node.attr.value in stored for node in subtree(iterate))


def _self_attributes_stored(function: cst.FunctionDef) -> set[str]:
    return {target.target.attr.value for node in subtree(function) if isinstance(node, cst.Assign)
            for target in node.targets
            if isinstance(target.target, cst.Attribute) and isinstance(target.target.value, cst.Name)
            and target.target.value.value == "self"}


# Any spelling of a sampler: torch's `DistributedSampler` and a project's `...Sampler` class,
# or a getter's `self.sampler` (what `may_call_function_matching` looks for).
SAMPLER_TEXT = "(?i:sampler)"


# Library loader factories whose training loader gets a shuffling, epoch-seeded sampler in a
# distributed run, held as `loader.sampler`: timm's `create_loader(dataset, ..., is_training=
# False, ..., distributed=False, ...)` (timm/data/loader.py: `if distributed and not
# isinstance(dataset, IterableDataset): if is_training: DistributedSampler(dataset)`, or
# `RepeatAugSampler` with `num_aug_repeats`, which seeds by its epoch too); its
# `PrefetchLoader` hands `.sampler` through. Keywords only: positions changed across versions.
SAMPLER_BUILDING_FACTORIES = {"timm.data.create_loader", "timm.data.loader.create_loader"}


def factory_sampler_shuffles(model: SemanticModel, call: cst.Call) -> Optional[bool]:
    """For a call of a SAMPLER_BUILDING_FACTORIES factory given `is_training=` (provably
    true) and `distributed=`: True when `distributed` is provably true, None when it is a
    value the code can't tell (`args.distributed`: the distributed runs); False otherwise."""
    if model.qualified_name(call.func) not in SAMPLER_BUILDING_FACTORIES:
        return False
    training, distributed = argument(call, None, "is_training"), argument(call, None, "distributed")
    if training is None or distributed is None or static_truth(model, training, call) is not True:
        return False
    return static_truth(model, distributed, call)


def returns_shuffling_sampler(model: SemanticModel, call: cst.Call) -> bool:
    """A call of another file's function (through `model.project`) that may return a
    shuffling `DistributedSampler`: `pick_sampler(ds, distributed)` from `samplers.py`."""
    if model.project is None:
        return False
    dotted = dotted_name(call.func)
    head = dotted.partition(".")[0] if dotted is not None else None
    if head is None or dotted.startswith("torch") or head not in model.imports and head in model.bindings:
        return False  # (a name no import binds may come from a star import: `from utils import *`)
    # Text first: the construction is in the callee's file, so the callee (or a function it
    # calls by name) spells a sampler. Resolving every imported call's callee is the costly part.
    if not may_call_function_matching(model, call.func, SAMPLER_TEXT):
        return False
    callee = model.flow.callee(call)
    if callee is None or callee.model is model or not isinstance(callee.node, cst.FunctionDef):
        return False
    for value in callee.model.flow.returned_values(callee, None):
        expr = peel_self_returning(value.expr)
        if isinstance(expr, cst.Call) and value.model is callee.model and (
                is_shuffling_distributed_sampler(value.model, expr) or _shuffles_for_call(model, call, callee, expr)):
            return True
    return False


def _shuffles_for_call(model: SemanticModel, call: cst.Call, callee, sampler: cst.Call) -> bool:
    """`DistributedSampler(ds, shuffle=shuffle)` returned by `make_sampler(ds, shuffle,
    distributed)`: it shuffles for this call when every value this call gives its `shuffle`
    (`make_sampler(train_set, shuffle=True, ...)`) is true, whatever the other callers pass."""
    shuffle = epoch_sampler_shuffle(callee.model, sampler)
    if shuffle is None or shuffle is _DEFAULT_TRUE:
        return False
    context = ((callee.function, call, model, callee.bound),)
    values = callee.model.flow.values_at(shuffle, sampler, (), context)
    literals = []
    for value in values:
        try:
            literals.append(literal_value(value.expr) if value.known else None)
        except ValueError:
            return False
    return bool(literals) and all(literals)


# Libraries whose trainers or loaders call `set_epoch` on a sampler they are handed.
EPOCH_SETTING_LIBRARIES = (
    "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers", "ignite", "composer",
    "mmcv", "mmengine", "detectron2", "fairseq", "catalyst", "deepspeed", "colossalai", "torchtnt", "ray",
)
_IMPORTS_EPOCH_SETTER = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+(?:" + "|".join(EPOCH_SETTING_LIBRARIES) + r")\b", re.M)


def project_never_sets_epoch(model: SemanticModel) -> bool:
    """No .py file of the project (this one included) holds the text `set_epoch` or imports
    one of EPOCH_SETTING_LIBRARIES. False without a project or when it is too big to scan."""
    project = model.project
    if project is None:
        return False
    own = os.path.abspath(model.path)
    files = project.project_files(own)
    if not files:
        return False
    memo = project.__dict__.setdefault("_never_sets_epoch", {})
    if files not in memo:
        memo[files] = not any(
            text is None or "set_epoch" in text or _IMPORTS_EPOCH_SETTER.search(text)
            for text in map(project.file_text, files)
        )
    return memo[files]


def class_forwards_to_loader(model: SemanticModel, node: cst.ClassDef) -> bool:
    if not any(model.qualified_name(base.value) in (DATA_LOADER, "torch.utils.data.dataloader.DataLoader")
               for base in node.bases):
        return False
    init = class_method(node, "__init__")
    if init is None:
        return True
    params = init.params
    if not isinstance(params.star_kwarg, cst.Param) or any(
            p.name.value in ("sampler", "batch_sampler") for p in (*params.params, *params.kwonly_params)):
        return False
    kwargs = params.star_kwarg.name.value
    return any(isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "__init__"
               and isinstance(node.func.value, cst.Call) and dotted_name(node.func.value.func) == "super"
               and any(a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == kwargs for a in node.args)
               for node in subtree(init))


def parameter_for(model: SemanticModel, call: cst.Call, arg: cst.Arg, function: cst.FunctionDef, bound: bool) -> Optional[str]:
    params = function.params
    positional = [*params.posonly_params, *params.params]
    if bound:
        positional = positional[1:]
    if arg.keyword is not None:
        names = {p.name.value for p in (*positional, *params.kwonly_params)}
        return arg.keyword.value if arg.keyword.value in names else None
    index = [a for a in call.args if a.keyword is None].index(arg)
    return positional[index].name.value if index < len(positional) else None


def builtin_name(model: SemanticModel, func: cst.BaseExpression) -> Optional[str]:
    """"len" for a call of the builtin `len` (a Name the file never binds)."""
    if isinstance(func, cst.Name) and func.value not in model.imports and (
        func.value not in model.bindings or model.owner_scope(func.value, model.scope(func)) is None
    ):
        return func.value  # not bound where it is called (`iter` may be a loop variable elsewhere)
    return None


def is_iteration_wrapper(model: SemanticModel, call: cst.Call) -> bool:
    return builtin_name(model, call.func) in ITERATION_BUILTINS or is_tqdm(model, call.func)


def is_tqdm(model: SemanticModel, func: cst.BaseExpression) -> bool:
    """`tqdm(...)`: imported here, or by a project module this file star-imports
    (`from utils import *` where utils.py does `from tqdm import tqdm`)."""
    name = model.qualified_name(func)
    if name in TQDM_NAMES or _tqdm_subclass(model, func, name):
        return True
    if name is not None and name.rsplit(".", 1)[-1].lower() == "tqdm" and not name.startswith("."):
        return True  # a package's own progress bar (`from ultralytics.utils import TQDM`): tqdm's subclass
    if name is not None or not isinstance(func, cst.Name) or func.value in model.bindings:
        return False
    return _star_imported(model, func.value) in TQDM_NAMES


def _tqdm_subclass(model: SemanticModel, func: cst.BaseExpression, name: Optional[str]) -> bool:
    """A class of the file or project derived from tqdm (`class TQDM(tqdm_original)` that only
    changes the bar's format): iterating it iterates its argument once, like tqdm."""
    found = None
    if isinstance(func, cst.Name) and func.value in model.classes and name is None:
        found = (model, model.classes[func.value])
    elif name is not None and model.project is not None and not name.startswith(("tqdm.", "torch.")):
        try:
            found = model.project.resolve(name, model)
        except Exception:  # a project that cannot answer: not known to be tqdm
            found = None
    if not found or not isinstance(found[1], cst.ClassDef):
        return False
    other, node = found
    return any(other.qualified_name(base.value) in TQDM_NAMES for base in node.bases)


def _star_imported(model: SemanticModel, name: str) -> Optional[str]:
    """What `name` is imported as by a module of the project this file star-imports."""
    project = model.project
    modules = (*model.star_imports, *getattr(model, "relative_star_imports", ()))
    if project is None or not modules:
        return None
    for module in modules:
        for path, rest in project._candidates(module, model.path):
            other = None if rest else project.model_for(path)
            if other is not None and name in other.imports:
                return other.imports[name]
    return None


def iterating_loop(model: SemanticModel, call: cst.Call) -> Optional[cst.For]:
    """The `for` whose iterable is this call, through `enumerate(tqdm(...))`-style nesting."""
    while True:
        parent = model.parent(call)
        if isinstance(parent, cst.For) and parent.iter is call:
            return parent
        if not isinstance(parent, cst.Arg) or parent.star:
            return None
        outer = model.parent(parent)
        if not (isinstance(outer, cst.Call) and is_iteration_wrapper(model, outer)):
            return None
        call = outer


def trains_in(model: SemanticModel, loop: cst.CSTNode) -> bool:
    """A training loop: its body runs backward (itself or in the functions it calls), and
    is not one that only reads the gradients it made: a loop that reads `.grad` in its own
    body and steps no optimizer (`optimizer.step()`, `scaler.step(opt)`, an engine's
    `step()`, there or in its callees) computes head-importance scores or adversarial
    inputs, changing no weight, and the order of its batches is no matter."""
    if not runs_backward(model, loop):
        return False
    return not (_reads_grad(model, loop) and not _loop_does(model, loop, "step"))


def _reads_grad(model: SemanticModel, loop: cst.CSTNode) -> bool:
    return any(isinstance(node, cst.Attribute) and node.attr.value == "grad" for node in subtree(loop.body))


def runs_backward(model: SemanticModel, loop: cst.CSTNode) -> bool:
    """A call in the loop's own body runs backward (see `dplint.training.backprops`:
    `loss.backward()`, `scaler.scale(l).backward()`, `accelerator.backward(l)`,
    `torch.autograd.backward`), or a function it calls does."""
    return _loop_does(model, loop, "backward")


def call_runs_backward(model: SemanticModel, call: cst.Call) -> bool:
    """The call is a backward itself, or its function (or one it calls, 3 deep) runs one."""
    return any(backprop.site.node is call for backprop in backprops(model)) or \
        _callee_does(model, call, 3, "backward", False)


def _direct_sites(model: SemanticModel, what: str) -> list:
    """The call sites that run backward, or that step an optimizer (a `.step(...)` call)."""
    if what == "backward":
        return [backprop.site for backprop in backprops(model)]
    return [site for site in model.calls if isinstance(site.node.func, cst.Attribute) and site.node.func.attr.value == "step"]


def _loop_does(model: SemanticModel, loop: cst.CSTNode, what: str) -> bool:
    scope = model.scope(loop)
    if any(loop in site.loops and site.scope is scope for site in _direct_sites(model, what)):
        return True
    inside = [site.node for site in model.calls if loop in site.loops and site.scope is scope]
    # Functions the calls resolve to first; methods found by name (parsing other files) last.
    return any(_callee_does(model, call, 3, what, False) for call in inside) or any(
        _callee_does(model, call, 3, what, True) for call in inside)


def _callee_does(model: SemanticModel, call: cst.Call, depth: int, what: str, by_name: bool) -> bool:
    """`self._step(batch)` whose body (or its callees', 3 deep) runs backward (or steps);
    `by_name`: also a method call on an object the code can't type (see `project_methods`)."""
    if depth <= 0:
        return False
    callee = model.flow.callee(call) or partial_callee(model, call)
    function = callee.function if callee is not None and isinstance(callee.node, cst.FunctionDef) else None
    if function is None:
        if by_name and callee is None and isinstance(call.func, cst.Attribute) and model.qualified_name(call.func) is None:
            # `model.optimize_parameters(step)` on an object built by a factory that picks
            # one of several classes: a method every class of the project trains in.
            methods = project_methods(model, call.func.attr.value)
            return bool(methods) and all(_function_does(other, method, depth, what) for other, method in methods)
        return False
    return _function_does(callee.model, function, depth, what)


def _function_does(other: SemanticModel, function: cst.FunctionDef, depth: int, what: str) -> bool:
    memo = other.flow.__dict__.setdefault("_function_does", {})
    key = (function, what)
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion
    scope = other.scope(function.body)
    found = any(site.scope is scope for site in _direct_sites(other, what)) or any(
        site.scope is scope and _callee_does(other, site.node, depth - 1, what, False) for site in other.calls
    )
    memo[key] = found
    return found


# Beyond this many definitions, a method name is too common to stand for one behaviour.
MAX_METHODS_NAMED = 8


def project_methods(model: SemanticModel, name: str) -> list[tuple[SemanticModel, cst.FunctionDef]]:
    """(model, method) for every method called `name` that a class of the project defines
    (this file included), abstract stubs aside; empty without a project, for a private or
    dunder name, or when more than MAX_METHODS_NAMED are found. For calls on an object
    whose class the code picks at run time (`define_model(opt).optimize_parameters()`)."""
    project = model.project
    if project is None or name.startswith("_"):
        return []
    own = os.path.abspath(model.path)
    files = project.project_files(own)
    index = _method_index(project, files)
    memo = project.__dict__.setdefault("_methods_named", {})
    key = (files, own, name)
    if key not in memo:
        found: list = []
        defining = index.get(name, {})
        if sum(defining.values()) > 2 * MAX_METHODS_NAMED:
            memo[key] = []  # too common a name: no need to parse the files to know
            return []
        for path in {*defining, own}:
            other = model if path == own else project.model_for(path)
            if other is None:
                continue
            found += [(other, node) for node in other.functions.get(name, ())
                      if isinstance(other.parent(other.parent(node)), cst.ClassDef) and not _is_stub(node)]
        memo[key] = found if len(found) <= MAX_METHODS_NAMED else []
    return memo[key]


_INDENTED_DEF = re.compile(r"^[ \t]+(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


def _method_index(project, files: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Method name -> {project file: how many indented `def`s of that name it holds}, read once."""
    memo = project.__dict__.setdefault("_method_index", {})
    if files not in memo:
        index: dict[str, dict[str, int]] = {}
        for path in files:
            for name in _INDENTED_DEF.findall(project.file_text(path) or ""):
                counts = index.setdefault(name, {})
                counts[path] = counts.get(path, 0) + 1
        memo[files] = index
    return memo[files]


def _is_stub(function: cst.FunctionDef) -> bool:
    """A body of only a docstring, `pass`, `...` or `raise NotImplementedError`: an abstract
    method that the classes which run it override."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else (function.body,)
    for statement in body:
        if is_docstring(statement):
            continue
        small = statement.body if isinstance(statement, cst.SimpleStatementLine) else ()
        for part in small:
            if isinstance(part, cst.Pass) or isinstance(part, cst.Expr) and isinstance(part.value, cst.Ellipsis):
                continue
            raised = part.exc.func if isinstance(part, cst.Raise) and isinstance(part.exc, cst.Call) else getattr(part, "exc", None)
            if isinstance(part, cst.Raise) and raised is not None and dotted_name(raised) == "NotImplementedError":
                continue
            return False
        if not small:
            return False
    return True


def epoch_count_loop(model: SemanticModel, loop: cst.CSTNode) -> Optional[str]:
    """The loop variable of `for epoch in range(...)` (or `tqdm(range(...))`, `trange(...)`):
    a name holding the epoch number. None for any other loop, and for `_`, which declares
    its value unused."""
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name) or loop.target.value == "_":
        return None
    counter = loop.iter
    if isinstance(counter, cst.Call) and model.qualified_name(counter.func) in TQDM_NAMES:
        counter = argument(counter, 0, "iterable")
    if not isinstance(counter, cst.Call) or any(arg.star for arg in counter.args):
        return None
    if model.qualified_name(counter.func) in TRANGE_NAMES:
        return loop.target.value
    if builtin_name(model, counter.func) == "range" and not any(arg.keyword for arg in counter.args):
        return loop.target.value
    return None
