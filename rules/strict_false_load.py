"""DPL005 strict-false-load: `load_state_dict(..., strict=False)` whose returned keys are ignored."""

from __future__ import annotations

import os
from typing import Iterator

import libcst as cst

from dplint.checkpoints import StateDictLoad, checkpoint_facts, enclosing_def
from dplint.load_facts import (
    holds_live_tensors,
    is_false,
    is_load_state_dict,
    keys_matched_to_target,
    loads_given_strict,
    mismatch_raised_by_strict_load,
    only_a_parameter,
    other_framework_only,
    parameter_default,
    pretrained_initialisation,
    published_weights,
    result_is_read,
    target_left_none,
)
from dplint.rule import Applicability, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument


class StrictFalseLoad(Rule):
    """
    ## What it does
    Flags `model.load_state_dict(state_dict, strict=False)` whose result (the missing and
    unexpected keys) is thrown away: the call is a statement of its own, or its result is
    assigned to names that are never read.

    `strict` may be decided elsewhere. A call that passes a literal False to a parameter that
    a function of this file or the project hands on as `strict` to such a load (directly or
    through up to two more functions: `self.load_network(net, path, strict=False)`) is
    reported at that call, with the helper's load named. A load whose `strict` is a parameter
    defaulting to False is reported at the load when some call (in this file or the project)
    leaves the parameter out, with the first such call named. Silent when the helper returns
    or reads the result, when no call is seen, and for a call that passes None as the load's
    target (that load does not run).

    Silent, whatever the spelling, when the program already makes a mismatch visible or
    impossible (each fact is defined in `dplint/load_facts.py`):
    - the keys are matched to the target's: the dict is built from or filtered by the target's
      own `state_dict()`, handed with it (or with the target) to a function that compares them,
      or its key set is compared with the target's before the load, or after it wherever the
      load ran (`missing = set(model.state_dict()) - set(sd)`; counting keys is no comparison);
    - the dict holds live tensors of this process (`deepcopy(student.state_dict())`, a dict
      filled only from a module's `named_parameters()`), not a file's;
    - a strict load of the same dict into the same target raises on a mismatch and its error
      reaches the user (the non-strict load is the retry in a handler that reads the error);
    - the dict is published weights from a fixed web address (`load_url(model_urls["r50"])`),
      whose keys are known;
    - the load is a model factory's `pretrained` initialisation (`if pretrained:`), which
      drops the new head on purpose, unless the tested value is the user's own checkpoint path;
    - the file's `load_state_dict` is another array framework's (paddle, megengine, ...).
    Silent too when `strict` is not known to be False.

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
    # Every finding is a `load_state_dict(...)` of this file or a call of it passing `False`.
    anchor_tokens = ("load_state_dict", "False")

    VALID = (
        "missing, unexpected = model.load_state_dict(sd, strict=False)\n"
        "assert not unexpected, unexpected\n",
        "result = model.load_state_dict(sd, strict=False)\n"
        'print("missing keys:", result.missing_keys)\n',
        "model.load_state_dict(sd)\n"
        "model.load_state_dict(sd, strict=True)\n",
        # The keys are compared with the model's before the load.
        "own = model.state_dict()\n"
        "print('not in the model:', [k for k in sd if k not in own])\n"
        "model.load_state_dict(sd, strict=False)\n",
        # The dict is built from the model itself.
        "own = model.state_dict()\n"
        "own.update({k: v for k, v in pretrained.items() if k in own})\n"
        "model.load_state_dict(own, strict=False)\n",
        # Published weights from a table of fixed web addresses, picked by name.
        "from torch.hub import load_state_dict_from_url\n"
        "URLS = {'b0': 'https://example.org/b0.pth', 'b1': 'https://example.org/b1.pth'}\n"
        "def load(net, name):\n"
        "    net.load_state_dict(load_state_dict_from_url(URLS[name]), strict=False)\n",
        # strict is not known to be False here.
        "def load(model, sd, strict):\n"
        "    model.load_state_dict(sd, strict=strict)\n",
        # The helper hands the keys back to the caller.
        "def load(model, sd, strict=True):\n"
        "    return model.load_state_dict(sd, strict=strict)\n"
        "print(load(net, sd, strict=False))\n",
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
        Example(
            "def load(model, path, strict=True):\n"
            "    model.load_state_dict(torch.load(path), strict=strict)\n"
            "load(net, 'last.pt', strict=False)\n"
        ),
        # The default (False) is taken by a call that leaves `strict` out.
        Example(
            "def load(model, path, strict=False):\n"
            "    model.load_state_dict(torch.load(path), strict=strict)\n"
            "load(net, 'last.pt')\n"
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        if other_framework_only(model):
            return
        for load in checkpoint_facts(model).loads:
            if load.strict_false and unchecked_load(model, load):
                yield Violation(
                    node=load.call,
                    message=("`load_state_dict(..., strict=False)` returns the missing and unexpected keys, and they "
                             "are ignored here: " + _CONSEQUENCE),
                    fix=Fix(Applicability.DISPLAY, _CHECK.format(strict="False", extra="")),
                )
        for load, parameter, caller_model, call in _strict_false_by_default(model):
            yield Violation(
                node=load.call,
                message=(f"`strict={parameter}` is False here: `{parameter}` defaults to False and "
                         f"`{caller_model.code(call.func)}(...)` ({_location(model, caller_model, call)}) leaves it "
                         "out, and the returned missing and unexpected keys are ignored: " + _CONSEQUENCE),
                fix=Fix(Applicability.DISPLAY, _CHECK.format(strict="...", extra=" (or default the parameter to True)")),
            )
        for call, other, load in _strict_false_through_helper(model):
            yield Violation(
                node=call,
                message=(f"`strict=False` passed here reaches `{other.code(load.target)}.load_state_dict(..., strict=...)` "
                         f"({_location(model, other, load.call)}), whose returned missing and unexpected keys are "
                         "ignored: " + _CONSEQUENCE),
                fix=Fix(Applicability.DISPLAY,
                        "Have the helper return (or check) what `load_state_dict(..., strict=False)` returns, and "
                        "inspect `missing_keys` and `unexpected_keys` here"),
            )


_CONSEQUENCE = ("a checkpoint whose keys do not match (such as `module.`-prefixed keys from DataParallel/DDP) "
                "loads nothing and nobody notices")
_CHECK = ("Check the result: `result = model.load_state_dict(..., strict={strict})`, then inspect "
          "`result.missing_keys` and `result.unexpected_keys`{extra}")


def unchecked_load(model: SemanticModel, load: StateDictLoad) -> bool:
    """Nothing shows a key mismatch of this load: its result is thrown away, and no fact of
    `load_facts` makes a mismatch visible or impossible."""
    if result_is_read(model, load.call):
        return False
    return not (keys_matched_to_target(model, load) or holds_live_tensors(model, load)
                or published_weights(model, load) or mismatch_raised_by_strict_load(model, load)
                or pretrained_initialisation(model, load.call, load.bare_class))


# Packages whose functions are no project helper (`nn.Linear(4, 2, bias=False)`).
_LIBRARIES = {"torch", "torchvision", "numpy", "timm", "transformers", "builtins", "os", "argparse", "logging"}


def _strict_false_through_helper(model: SemanticModel) -> Iterator[tuple[cst.Call, SemanticModel, StateDictLoad]]:
    """(call, the helper's model, the helper's load) for each call of this file that passes a
    literal False to a parameter that reaches an unchecked load's `strict` (`load_facts.
    loads_given_strict`, up to three functions deep); not in a pretrained factory branch."""
    for site in model.calls:
        call = site.node
        if not any(is_false(arg.value) for arg in call.args) or is_load_state_dict(call):
            continue  # a `load_state_dict` call of its own is judged where it stands
        if (site.qualified_name or "").split(".")[0] in _LIBRARIES:
            continue
        for other, load in loads_given_strict(model, call, 3, unchecked_load):
            if not pretrained_initialisation(model, call, None):
                yield call, other, load
                break


def _strict_false_by_default(model: SemanticModel) -> Iterator[tuple[StateDictLoad, str, SemanticModel, cst.Call]]:
    """(load, parameter, caller's model, call) for each unchecked load of this file whose
    `strict` is a parameter of its function (never rebound) defaulting to False, with the first
    call of that function (in this file or the project) that leaves it out: that call loads with
    strict=False as surely as one passing the literal."""
    for load in checkpoint_facts(model).loads:
        strict = argument(load.call, 1, "strict")
        function = enclosing_def(model, load.call)
        if not isinstance(strict, cst.Name) or not isinstance(function, cst.FunctionDef):
            continue
        default = parameter_default(function, strict.value)
        if default is None or not is_false(default) or not only_a_parameter(model, function, strict.value):
            continue
        if not unchecked_load(model, load):
            continue
        for caller_model, call, bound in model.flow.all_call_sites(function) or ():
            passed = caller_model.flow.parameter_argument(call, function, strict.value, bound)
            if passed is default and not pretrained_initialisation(caller_model, call, None) \
                    and not target_left_none(caller_model, call, model, function, bound, load):
                yield load, strict.value, caller_model, call
                break


def _location(model: SemanticModel, other: SemanticModel, node: cst.CSTNode) -> str:
    """`line 7` in the same file, else `base_model.py:122` relative to this file's folder."""
    line = other.position(node)[0].line
    if other is model:
        return f"line {line}"
    return f"{os.path.relpath(other.path, os.path.dirname(os.path.abspath(model.path)) or '.')}:{line}"
