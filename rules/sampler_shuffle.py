"""DPL007 sampler-shuffle: `DataLoader(shuffle=True, sampler=...)` raises at construction."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.data import LOADER_SHUFFLE, is_loader_call, loader_argument, sampler_with_true_shuffle
from dplint.fixes import without_argument
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import DISTRIBUTED_SAMPLER, SemanticModel, keyword_arg, peel_self_returning


class SamplerShuffle(Rule):
    """
    ## What it does
    Flags a `DataLoader` (torch's, or PyG's `torch_geometric.loader.DataLoader`, MONAI's
    `monai.data.DataLoader` or timm's `MultiEpochsDataLoader`, which hand both arguments on
    to it; also such a class held by a parameter that no caller changes, `klass=DataLoader`)
    given a torch sampler (such as a `DistributedSampler` or MONAI's subclass of it,
    or an instance of a project class derived from `Sampler`, made in this file or another)
    and a `shuffle=` that is provably true on the same path: `shuffle=True`, a name bound
    to `True`, or an expression such as `shuffle=(sampler is not None)`.

    Every binding that can reach the arguments is followed with the branch conditions it
    holds under, and conditions that are the same test are judged together:
    `sampler = DistributedSampler(ds) if distributed else None` with `shuffle=True` is
    flagged (it raises when `distributed`), while `shuffle=(sampler is None)`,
    `shuffle=not distributed`, or a `shuffle` set to False in the branch that sets the
    sampler is right. Samplers are also followed through helpers that return them (of the
    same file, or of another project file when checked as a project) and parameters whose
    only caller, in this file or another file of the project, passes them; the branch
    conditions of different `if` statements with the same test are kept apart from other
    tests (an earlier `if multi_scale:` does not hide a later `if world_size > 1:`). A
    `shuffle` that comes in through `**options` is read from the dict literals bound to the
    name and from what is merged into it earlier in the same function
    (`if use_cuda: options.update(cuda_options)`), each under its branch conditions; that
    finding is on `**options`, without an automatic fix. It stays silent when `shuffle` is
    unknown (a config value, a parameter whose callers differ, a `**kwargs` dict it cannot
    read or that may lose the entry: `options.pop("shuffle")`, `del options["shuffle"]`),
    when the sampler is unknown, and for any other library's `DataLoader`.

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
    today. When the sampler is set only on some paths (it may be None), removing `shuffle`
    would stop the other paths from shuffling: the fix then turns `shuffle=True` into
    `shuffle=<sampler> is None` (only when the sampler is passed as a name), which keeps
    them as they are. `shuffle=False` is fine and never flagged. A `shuffle` passed by position is not
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
            sampler = sampler_with_true_shuffle(model, call)
            if sampler is None:
                continue
            shuffle = loader_argument(model, call, "shuffle")
            distributed = sampler.model.qualified_name(peel_self_returning(sampler.expr).func) == DISTRIBUTED_SAMPLER
            which = "the DistributedSampler already shuffles" if distributed else "the sampler decides the order"
            if sampler.conditions:
                which += " (on the path where the sampler is set)"
            shuffle_arg = keyword_arg(call, LOADER_SHUFFLE[1])
            if shuffle is None:  # it comes in through `**kwargs`: reported there, no automatic fix
                spread = next(arg for arg in call.args if arg.star == "**")
                yield Violation(
                    node=spread,
                    message=(
                        f"DataLoader gets a sampler and a true `shuffle` through `**{model.code(spread.value)}`: "
                        "it raises `ValueError: sampler option is mutually exclusive with shuffle`; "
                        f"{which}, so keep `shuffle` out of the keyword arguments of this loader"
                    ),
                )
                continue
            yield Violation(
                node=shuffle_arg if shuffle_arg is not None else shuffle,
                message=(
                    "DataLoader gets a sampler and a true `shuffle`: it raises "
                    "`ValueError: sampler option is mutually exclusive with shuffle`; "
                    f"{which}, so drop `shuffle=`"
                ),
                fix=self._fix(model, call, shuffle_arg, conditional=bool(sampler.conditions)),
            )

    @staticmethod
    def _fix(model: SemanticModel, call: cst.Call, shuffle_arg: cst.Arg | None, conditional: bool) -> Fix | None:
        if shuffle_arg is None:
            return None
        if conditional:
            # The sampler may be None: without `shuffle=` that path would stop shuffling.
            # `shuffle=True` -> `shuffle=<sampler> is None` keeps it, and only there.
            sampler = loader_argument(model, call, "sampler")
            literal_true = isinstance(shuffle_arg.value, cst.Name) and shuffle_arg.value.value == "True"
            if not (isinstance(sampler, cst.Name) and literal_true):
                return None
            return Fix(
                Applicability.SAFE,
                f"Shuffle only where there is no sampler: `shuffle={sampler.value} is None`",
                (Edit(shuffle_arg.value, f"{sampler.value} is None"),),
            )
        return Fix(
            Applicability.SAFE,
            "Remove the `shuffle=` argument",
            (Edit(call, call.with_changes(args=without_argument(call.args, shuffle_arg))),),
        )

