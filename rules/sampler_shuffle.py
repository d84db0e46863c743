"""DPL007 sampler-shuffle: `DataLoader(shuffle=True, sampler=...)` raises at construction."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.data import LOADER_SAMPLER, LOADER_SHUFFLE, is_distributed_sampler, is_loader_call, loader_sampler
from dplint.fixes import without_argument
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument, keyword_arg, static_truth


class SamplerShuffle(Rule):
    """
    ## What it does
    Flags a `DataLoader` given both a sampler (such as a `DistributedSampler`) and a
    `shuffle=` argument that is provably true: `shuffle=True`, a name bound to `True`, or
    an expression such as `shuffle=(sampler is not None)`.

    ## Why is this bad?
    `DataLoader.__init__` refuses the combination for any sampler and any truthy shuffle
    (torch 2.13, `torch/utils/data/dataloader.py` ~374):

        ValueError: sampler option is mutually exclusive with shuffle

    The script crashes before the first batch, typically only in the multi-GPU branch that
    adds the sampler. A `DistributedSampler` shuffles by itself (`shuffle=True` is its
    default), so the loader's `shuffle` is not needed.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
    ```

    Use instead:
    ```python
    sampler = DistributedSampler(dataset)  # shuffles; call sampler.set_epoch(epoch) each epoch
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    ```

    ## Fix safety
    The fix removes the `shuffle=` argument; it is safe because the code it changes raises
    today. `shuffle=False` is fine and never flagged. A `shuffle` passed by position is not
    fixed (removing it would shift the arguments after it).
    """

    code = "DPL007"
    name = "sampler-shuffle"
    severity = Severity.ERROR
    summary = "DataLoader with a sampler and a truthy shuffle raises ValueError"
    fix_applicability = Applicability.SAFE
    tokens = (("DataLoader", "Sampler"),)  # torch's samplers are all named *Sampler; shuffle may be positional

    VALID = (
        # shuffle=False beside a sampler is allowed.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "s = DistributedSampler(ds)\n"
        "loader = DataLoader(ds, shuffle=False, sampler=s)\n",
        # The usual guard: shuffle only when there is no sampler.
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds)\n"
        "loader = DataLoader(ds, shuffle=(sampler is None), sampler=sampler)\n",
        # Unknown sampler (a parameter): say nothing.
        "from torch.utils.data import DataLoader\n"
        "def make(ds, sampler):\n"
        "    return DataLoader(ds, shuffle=True, sampler=sampler)\n",
        # Not torch's DataLoader.
        "from mylib import DataLoader, DistributedSampler\n"
        "loader = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds))\n",
    )
    INVALID = (
        Example(
            "import torch\n"
            "sampler = torch.utils.data.distributed.DistributedSampler(ds)\n"
            "loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, sampler=sampler)\n",
            expected=(
                "import torch\n"
                "sampler = torch.utils.data.distributed.DistributedSampler(ds)\n"
                "loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler)\n"
            ),
        ),
        Example(
            "from torch.utils.data import DataLoader as DL, DistributedSampler\n"
            "sampler = DistributedSampler(ds)\n"
            "loader = DL(ds, sampler=sampler, shuffle=(sampler is not None))\n",
            expected=(
                "from torch.utils.data import DataLoader as DL, DistributedSampler\n"
                "sampler = DistributedSampler(ds)\n"
                "loader = DL(ds, sampler=sampler)\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for site in model.calls:
            call = site.node
            if not is_loader_call(model, call):
                continue
            shuffle = argument(call, *LOADER_SHUFFLE)
            if shuffle is None or static_truth(model, shuffle, call) is not True:
                continue
            sampler = loader_sampler(model, call)
            if sampler is None:
                continue
            which = "the DistributedSampler already shuffles" if is_distributed_sampler(model, sampler) else "the sampler decides the order"
            shuffle_arg = keyword_arg(call, LOADER_SHUFFLE[1])
            yield Violation(
                node=shuffle_arg if shuffle_arg is not None else shuffle,
                message=(
                    "DataLoader gets a sampler and a true `shuffle`: it raises "
                    "`ValueError: sampler option is mutually exclusive with shuffle`; "
                    f"{which}, so drop `shuffle=`"
                ),
                fix=self._fix(call, shuffle_arg),
            )

    @staticmethod
    def _fix(call: cst.Call, shuffle_arg: cst.Arg | None) -> Fix | None:
        if shuffle_arg is None:
            return None
        return Fix(
            Applicability.SAFE,
            "Remove the `shuffle=` argument",
            (Edit(call, call.with_changes(args=without_argument(call.args, shuffle_arg))),),
        )

