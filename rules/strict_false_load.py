"""DPL005 strict-false-load: `load_state_dict(..., strict=False)` whose returned keys are ignored."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from dplint.checkpoints import checkpoint_facts, name_is_read
from dplint.rule import Applicability, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel


class StrictFalseLoad(Rule):
    """
    ## What it does
    Flags `model.load_state_dict(state_dict, strict=False)` whose result (the missing and
    unexpected keys) is thrown away: the call is a statement of its own, or its result is
    assigned to names that are never read.

    ## Why is this bad?
    With `strict=False`, `load_state_dict` raises nothing when keys do not match; it returns
    `_IncompatibleKeys(missing_keys=[...], unexpected_keys=[...])` and loads only the keys that
    match. A checkpoint saved from a `DataParallel` / `DDP` wrapper (every key prefixed with
    `module.`) loaded into a bare model matches no key at all (torch 2.13):

        _IncompatibleKeys(missing_keys=['fc.weight', 'fc.bias'],
                          unexpected_keys=['module.fc.weight', 'module.fc.bias'])

    so the model silently keeps its random initialisation, and training or evaluation goes on
    with it. Checking the returned keys is the only signal.

    ## Example
    ```python
    model.load_state_dict(torch.load("pretrained.pt"), strict=False)
    ```

    Use instead:
    ```python
    result = model.load_state_dict(torch.load("pretrained.pt"), strict=False)
    assert not result.unexpected_keys, result.unexpected_keys  # and inspect result.missing_keys
    ```

    ## Fix safety
    No automatic fix: only the author knows which keys may legitimately be missing (a new
    head) or unexpected. The suggestion is displayed only.
    """

    code = "DPL005"
    name = "strict-false-load"
    severity = Severity.WARNING
    summary = "`load_state_dict(..., strict=False)` with the returned missing/unexpected keys ignored"
    fix_applicability = Applicability.DISPLAY
    tokens = (("load_state_dict", "False"),)  # strict=False, by keyword or position

    VALID = (
        "missing, unexpected = model.load_state_dict(sd, strict=False)\n"
        "assert not unexpected, unexpected\n",
        "result = model.load_state_dict(sd, strict=False)\n"
        'print("missing keys:", result.missing_keys)\n',
        "model.load_state_dict(sd)\n"
        "model.load_state_dict(sd, strict=True)\n",
        # strict is not known to be False here.
        "def load(model, sd, strict):\n"
        "    model.load_state_dict(sd, strict=strict)\n",
    )
    INVALID = (
        Example("backbone.load_state_dict(torch.load('resnet.pt'), strict=False)\n"),
        Example(
            "def restore(self, state):\n"
            "    _ = self.model.load_state_dict(state, False)\n"
            "    incompatible = self.ema.load_state_dict(\n"
            "        state,\n"
            "        strict=False,  # new head\n"
            "    )\n",
            count=2,
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        for load in checkpoint_facts(model).loads:
            if not load.strict_false or not _result_ignored(model, load.call):
                continue
            yield Violation(
                node=load.call,
                message=(
                    "`load_state_dict(..., strict=False)` returns the missing and unexpected keys, and they are "
                    "ignored here: a checkpoint whose keys do not match (such as `module.`-prefixed keys from "
                    "DataParallel/DDP) loads nothing and nobody notices"
                ),
                fix=Fix(
                    Applicability.DISPLAY,
                    "Check the result: `result = model.load_state_dict(..., strict=False)`, then inspect "
                    "`result.missing_keys` and `result.unexpected_keys`",
                ),
            )


def _result_ignored(model: SemanticModel, call: cst.Call) -> bool:
    """The call is a statement of its own, or assigned only to names that are never read."""
    parent = model.parent(call)
    if isinstance(parent, cst.Expr):
        return True
    if not isinstance(parent, cst.Assign) or parent.value is not call:
        return False
    names: list[cst.Name] = []
    for target in parent.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)):
            values = [element.value for element in target.target.elements]
        else:
            values = [target.target]
        for value in values:
            if not isinstance(value, cst.Name):
                return False
            names.append(value)
    return all(name.value == "_" or not name_is_read(model, name) for name in names)
