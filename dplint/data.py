"""Shared knowledge of the input pipeline: which expressions are DataLoaders and samplers."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from dplint.semantic import (
    DATA_LOADER,
    DISTRIBUTED_SAMPLER,
    SemanticModel,
    argument,
    peel_self_returning,
)

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


def is_loader_call(model: SemanticModel, call: cst.Call) -> bool:
    return model.qualified_name(call.func) == DATA_LOADER


def sampler_call(model: SemanticModel, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None) -> Optional[cst.Call]:
    """The torch sampler construction an expression holds (inline or through names), or None."""
    value = peel_self_returning(model.value_at(expr, at))
    if isinstance(value, cst.Call) and model.qualified_name(value.func) in TORCH_SAMPLERS:
        return value
    return None


def loader_sampler(model: SemanticModel, loader: cst.Call) -> Optional[cst.Call]:
    """The sampler construction passed to a DataLoader call, or None when unknown or absent."""
    return sampler_call(model, argument(loader, *LOADER_SAMPLER), loader)


def is_distributed_sampler(model: SemanticModel, call: Optional[cst.Call]) -> bool:
    return call is not None and model.qualified_name(call.func) == DISTRIBUTED_SAMPLER
