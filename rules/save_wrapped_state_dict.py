"""DPL006 save-wrapped-state-dict: `torch.save(wrapper.state_dict(), ...)` writes `module.` keys."""

from __future__ import annotations

import re

from typing import Iterator, Optional

import libcst as cst

from dplint.checkpoints import SavedWrapperStateDict, checkpoint_facts, contained_wrapper, wrapper_kind_name
from dplint.project import owns
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel


# A builder of this file returns the wrapper; it is held in an attribute and saved in another method.
_BUILDER_LOOP = (
    "import torch\nimport torch.nn as nn\n"
    "def build(net):\n"
    "    return nn.DataParallel(net).cuda()\n"
    "class Loop:\n"
    "    def __init__(self, net):\n"
    "        self.model = build(net)\n"
    "    def save(self):\n"
)


class SaveWrappedStateDict(Rule):
    """
    ## What it does
    Flags `torch.save` of a `nn.DataParallel` / `DistributedDataParallel` wrapper's
    `state_dict()`, directly or inside a saved dict (`{"model": ddp.state_dict(), ...}`) or
    list (`[ddp.state_dict(), optimizer.state_dict(), step]`).

    The wrapper is followed per path: through every assignment that reaches the save, a
    same-file function that returns it (`model = build(net)` with `return DDP(net)`), an
    attribute set in another method (`self.model = DDP(...)` in `__init__`, saved in
    `save()`, or by a project base class's constructor and saved in a subclass), and the
    branch conditions around the save. On a branch where the model is bare
    it stays silent (an alias bound on a branch that never wrapped, `else: plain = model`, is
    the bare model): `if multi_gpu: model = DP(model)` ... `if multi_gpu: save(model.module
    .state_dict()) else: save(model.state_dict())`, `(model.module if multi_gpu else
    model).state_dict()`, and `m.module if isinstance(m, DP) else m` (or `hasattr(m,
    "module")`). Each arm of `m.module.state_dict() if <test> else m.state_dict()` is judged
    on its own path: when the test is not what decided the wrap (`device_count() > 1` on a
    model wrapped on every machine, the DDP flag while a DataParallel is built on the other
    path), the else arm saves the wrapper's keys and is flagged. Where the model is wrapped
    only on some paths, the arm is flagged only when its test is one the wrap's branches took
    (spelled the same: `cfg.n_gpu > 1` around the wrap and `self.cfg.n_gpu > 1` around the save
    are not matched, so it stays silent). Saved wrapped on some paths only (a save after `if multi_gpu:` wrapped), it is
    flagged without a fix. Silent when the model is a parameter with several callers, or an
    unknown object, and, for a wrapper built in another file under that file's own test, on an
    arm of an `if` whose other arm reads `.module` of the same object (`if self.devices: save(
    net.module.state_dict()) else: save(net.state_dict())`): the code tells its own paths apart.

    A state dict handed to a function that saves that parameter counts as saved: a function or
    class method of this file or, when dplint checks a project, of the file it is imported
    from (`Saver(out).dump(ddp.state_dict(), step)` with `torch.save({"weights": weights, ...},
    path)` in `dump`). The finding is on the `state_dict()` call, where the fix goes. So does a
    wrapper handed to a function that saves the parameter's `state_dict()` (`save_model(model,
    ...)` with `torch.save({"model": model.state_dict()}, f)`): reported where the wrapper is
    handed over, or, when the helper unwraps some wrapper kinds but not this one (`if
    isinstance(model, nn.DataParallel): ... else: torch.save(model.state_dict(), f)` given a
    DistributedDataParallel), at the helper's `state_dict()` call. A project class derived
    from `DataParallel` / `DistributedDataParallel` is that wrapper, and batch-norm
    converters (`convert_sync_batchnorm(m)`, `convert_model(m)`) keep it. One helper may
    hand the state dict on to another (`def fine_tune(net): write_checkpoint({"w":
    net.state_dict()}, p)` with `def write_checkpoint(obj, p): torch.save(obj, p)`): every
    caller of `fine_tune` that passes a wrapper is reported, however many callers there are
    (the ones passing a bare model are not), as is a wrapper held in a name or `self.x` bound
    to what a function of the file returns (`self.netG, start = load_network()`). A factory
    whose wrap depends on an argument the call leaves at its empty default (`def init_net(net,
    gpu_ids=[]): if len(gpu_ids) > 0: net = DataParallel(net)`, or `kwargs.get("gpu_ids",
    [])` of a `**kwargs` the call does not fill) returns the bare model on that call. A
    callable object counts as a helper (`early_stopping(loss, model, path)` runs `__call__`,
    which hands `model` on to `self.save_checkpoint(model, path)`); reported, as for a function,
    at the save when the object is called from one place, else where the wrapper is handed
    over, once (not again at a caller whose wrapper the inner call already shows). In a
    subclass, `self.model = self._build_model()` written in the base class's constructor runs
    the subclass's own `_build_model`.

    A model that holds a wrapper is flagged too, without a fix: one whose sub-module was
    replaced by its wrapper in place (`model.encoder = nn.DataParallel(model.encoder)`, then
    `torch.save(model.state_dict())` or a helper saving it: keys `encoder.module.…`), and an
    `AveragedModel` (EMA/SWA) built around a wrapper (`AveragedModel(dp)`: keys
    `module.module.…`, where an `AveragedModel` of the bare model has `module.…`). Silent when
    the sub-module is saved through its own `.module.state_dict()`, when the owner is another
    object than the one saved, or when the `AveragedModel` gets the unwrapped model
    (`net.module if isinstance(net, nn.DataParallel) else net`); a sub-module held in
    `self.x.encoder` is not followed.

    Silent when the same dict, list or tuple also holds the wrapper's unwrapped weights
    (`{"state_dict": net.state_dict(), "best_state_dict": net.module.state_dict()}`): the
    wrapper's keys are kept on purpose, for a resume into the same wrapper. Silent, too, when
    the file reads the checkpoint back only into the same wrapper (wrapped on every path) and
    also saves that wrapper's `.module.state_dict()` elsewhere: a resume file in the wrapper's
    format beside a bare export.

    Silent for a checkpoint in the temporary folder (`tempfile.gettempdir()`,
    `NamedTemporaryFile`) that the file reads back only into a wrapper: it does not outlive the
    run.

    ## Why is this bad?
    The wrapper keeps the model as its attribute `module`, so every key of its state dict
    starts with `module.`. The checkpoint then loads only into the same kind of wrapper; an
    evaluation or export script that builds the bare model gets (torch 2.13):

        RuntimeError: Error(s) in loading state_dict for Net:
            Missing key(s) in state_dict: "fc.weight", ...
            Unexpected key(s) in state_dict: "module.fc.weight", ...

    or, with `strict=False`, silently loads nothing. `wrapper.module.state_dict()` has the
    model's own keys: it loads into the bare model, and into a wrapper through
    `wrapper.module.load_state_dict(...)`.

    ## Example
    ```python
    model = DDP(Net().to(rank), device_ids=[rank])
    ...
    torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pt")
    ```

    Use instead:
    ```python
    torch.save({"model": model.module.state_dict(), "epoch": epoch}, "last.pt")
    ```

    ## Fix safety
    The fix saves `wrapper.module.state_dict()`. When this file loads the same checkpoint path
    back into the wrapper, the same fix changes that load to `wrapper.module.load_state_dict`,
    and then it is safe. Otherwise it is unsafe: code elsewhere may load the checkpoint into a
    wrapper and would then need `.module` too. No fix is offered when the model is wrapped only
    on some paths (`if world_size > 1: model = DDP(model)`): `.module` would not exist on the
    others.
    """

    code = "DPL006"
    name = "save-wrapped-state-dict"
    severity = Severity.WARNING
    summary = "`torch.save(wrapper.state_dict())`: the checkpoint's keys carry `module.`"
    fix_applicability = Applicability.SAFE
    fix_safety = "safe when the load is fixed too, else unsafe"
    # every flagged save is of a DataParallel or DistributedDataParallel's state_dict()
    tokens = (("DataParallel", "state_dict"),)

    VALID = (
        "import torch\nimport torch.nn as nn\n"
        "model = nn.DataParallel(nn.Linear(2, 2))\n"
        'torch.save(model.module.state_dict(), "m.pt")\n',
        # A bare model, and an optimizer: no prefix.
        "import torch\nimport torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        'torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, "m.pt")\n',
        # Wrapped or not, dplint can't tell: say nothing.
        "import torch\nimport torch.nn as nn\n"
        "def save(model):\n"
        '    torch.save(model.state_dict(), "m.pt")\n',
        # The `else` of the same test that wraps: the model is bare there.
        "import torch\nimport torch.nn as nn\n"
        "multi = torch.cuda.device_count() > 1\n"
        "model = nn.Linear(2, 2)\n"
        "if multi:\n"
        "    model = nn.DataParallel(model)\n"
        "if multi:\n"
        '    torch.save(model.module.state_dict(), "m.pt")\n'
        "else:\n"
        '    torch.save(model.state_dict(), "m.pt")\n',
    )
    INVALID = (
        # Returned by a builder of this file, held in an attribute, saved in another method.
        Example(
            _BUILDER_LOOP + '        torch.save(self.model.state_dict(), "loop.pt")\n',
            expected=_BUILDER_LOOP + '        torch.save(self.model.module.state_dict(), "loop.pt")\n',
        ),
        Example(
            "import torch\n"
            "import torch.nn as nn\n"
            "model_dp = nn.DataParallel(nn.Linear(2, 2))\n"
            'torch.save(model_dp.state_dict(), "m.pt")  # weights\n',
            expected=(
                "import torch\n"
                "import torch.nn as nn\n"
                "model_dp = nn.DataParallel(nn.Linear(2, 2))\n"
                'torch.save(model_dp.module.state_dict(), "m.pt")  # weights\n'
            ),
        ),
        # Saved and loaded back into the wrapper: both sides change together.
        Example(
            "import os\n"
            "import torch\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            'CKPT = os.path.join("runs", "last.pt")\n'
            "model = DDP(Net())\n"
            "if resume:\n"
            '    model.load_state_dict(torch.load(CKPT)["model"])\n'
            "torch.save(\n"
            '    {"model": model.state_dict(), "epoch": 3},\n'
            '    "runs/last.pt",\n'
            ")\n",
            expected=(
                "import os\n"
                "import torch\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                'CKPT = os.path.join("runs", "last.pt")\n'
                "model = DDP(Net())\n"
                "if resume:\n"
                '    model.module.load_state_dict(torch.load(CKPT)["model"])\n'
                "torch.save(\n"
                '    {"model": model.module.state_dict(), "epoch": 3},\n'
                '    "runs/last.pt",\n'
                ")\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        reported = set()
        for save in checkpoint_facts(model).saves:
            state_dict = save.state_dict
            if state_dict.helper_parameter is not None:
                yield from self._helper_parameter(model, save, reported)
                continue
            if state_dict.call in reported or _temporary_round_trip(model, save):
                continue
            reported.add(state_dict.call)
            receiver = model.code(state_dict.receiver)
            if _unwrapped_copy_beside(model, state_dict.call, receiver) or _resume_round_trip(model, save, receiver):
                continue
            if not state_dict.every_path and not owns(model, state_dict.wrapping.call) \
                    and _other_arm_unwraps(model, save.save, state_dict.receiver):
                continue
            kind = wrapper_kind_name(state_dict.wrapping)
            conditional = not state_dict.every_path
            writer = f"`{model.code(save.save.func)}(...)` saves" if save.through_helper else "`torch.save` writes"
            contained = contained_wrapper(state_dict.wrapping)
            if contained is not None:
                message = f"{writer} `{receiver}.state_dict()` of " + _contained_keys(contained, kind, conditional)
                yield Violation(state_dict.call, message, None)
                continue
            message = (
                f"{writer} `{receiver}.state_dict()` of a {kind}: every key starts with `module.`, so the "
                'checkpoint does not load into a bare model (`Unexpected key(s) in state_dict: "module.…`)'
            )
            if conditional:
                message += (
                    "; the model is wrapped only on some paths, so the keys depend on how the script ran: save "
                    f"the unwrapped model's `state_dict()` (`{receiver}.module` when wrapped)"
                )
            else:
                message += f"; save `{receiver}.module.state_dict()`"
            yield Violation(state_dict.call, message, None if conditional else self._fix(model, save, receiver))

    @staticmethod
    def _helper_parameter(model: SemanticModel, save: SavedWrapperStateDict, reported: set) -> Iterator[Violation]:
        """A wrapper handed to a helper that saves its parameter's `state_dict()`: reported in
        the helper when it unwraps other wrapper kinds (its test is what to mend), else where
        the wrapper is handed over."""
        state_dict = save.state_dict
        node = state_dict.call if state_dict.helper_unwraps else state_dict.receiver
        if node in reported:
            return
        reported.add(node)
        kind = wrapper_kind_name(state_dict.wrapping)
        parameter = state_dict.helper_parameter
        helper = model.code(save.save.func)
        contained = contained_wrapper(state_dict.wrapping)
        if contained is not None:
            message = (
                f"`{helper}(...)` saves `{parameter}.state_dict()`, and `{model.code(state_dict.receiver)}` is "
                + _contained_keys(contained, kind, not state_dict.every_path)
            )
            yield Violation(node, message, None)
            return
        if state_dict.helper_unwraps:
            message = (
                f"`{parameter}.state_dict()` is saved as is when `{parameter}` is a {kind}, which the test above "
                f"does not unwrap (`{helper}(...)` passes one): every key starts with `module.`, so the checkpoint "
                f"does not load into a bare model; unwrap every wrapper kind (`{parameter}.module` when "
                f'`hasattr({parameter}, "module")`)'
            )
        else:
            message = (
                f"`{helper}(...)` saves `{parameter}.state_dict()`, and `{model.code(state_dict.receiver)}` is a {kind} "
                "here: every key starts with `module.`, so the checkpoint does not load into a bare model "
                f"(`Unexpected key(s) in state_dict: \"module.…`); pass the unwrapped model (`.module` when wrapped)"
            )
        yield Violation(node, message, None)

    @staticmethod
    def _fix(model: SemanticModel, save: SavedWrapperStateDict, receiver: str) -> Optional[Fix]:
        edits = [Edit(save.state_dict.receiver, f"{receiver}.module")]
        loads_into_wrapper = 0
        safe = not save.via_name
        for load in checkpoint_facts(model).loads:
            if save not in checkpoint_facts(model).wrapper_saves_of(load.loaded):
                continue
            if load.target_is_wrapper is not None and load.target_wrapped_on_every_path:
                edits.append(Edit(load.target, f"{model.code(load.target)}.module"))
                loads_into_wrapper += 1
            elif not load.target_is_bare:  # loaded into something unknown: it may need the prefix
                safe = False
        safe = safe and loads_into_wrapper > 0
        return Fix(
            Applicability.SAFE if safe else Applicability.UNSAFE,
            f"Save `{receiver}.module.state_dict()`" + (" and load it back through `.module`" if loads_into_wrapper else ""),
            tuple(edits),
        )


def _contained_keys(contained: tuple[str, str, bool], kind: str, conditional: bool) -> str:
    """The message's end for a model that holds a wrapper (torch 2.13's real key names)."""
    shape, attribute, every = contained
    conditional = conditional or not every
    if shape == "submodule":
        text = (
            f"a model whose sub-module `{attribute}` was replaced by a {kind}: its keys read `{attribute}.module.…` instead of "
            f"`{attribute}.…`, so the checkpoint does not load into the model built without that wrapper "
            f'(`Unexpected key(s) in state_dict: "{attribute}.module.…`)'
        )
        advice = f"save with `{attribute}` unwrapped (its `.module`), or load it back the same way on every run"
    else:
        text = (
            f"an `AveragedModel` built around a {kind}: its keys read `module.module.…`, so the checkpoint does not "
            "load into an `AveragedModel` of the bare model (keys `module.…`)"
        )
        advice = "build the `AveragedModel` around the unwrapped model (the wrapper's `.module`)"
    if conditional:
        return text + "; it is wrapped only on some paths, so the keys depend on how the script ran: " + advice
    return text + "; " + advice


def _temporary_round_trip(model: SemanticModel, save: SavedWrapperStateDict) -> bool:
    """A checkpoint in the temporary folder that this file reads back only into a wrapper (or
    not at all): it does not outlive the run, so no bare model ever loads its keys."""
    if not save.path.temporary:
        return False
    facts = checkpoint_facts(model)
    return all(load.target_is_wrapper is not None for load in facts.loads if save in facts.wrapper_saves_of(load.loaded))


def _unwrapped_copy_beside(model: SemanticModel, call: cst.Call, receiver: str) -> bool:
    """`{"state_dict": net.state_dict(), "best_state_dict": net.module.state_dict()}`: the same
    dict, list or tuple also holds the wrapper's unwrapped weights, so the wrapper's keys are
    kept on purpose (a resume entry read back into the same wrapper)."""
    element = model.parent(call)
    container = model.parent(element) if isinstance(element, (cst.DictElement, cst.Element)) else None
    if not isinstance(container, (cst.Dict, cst.List, cst.Tuple)):
        return False
    for other in container.elements:
        value = getattr(other, "value", None)
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "state_dict"
            and isinstance(value.func.value, cst.Attribute)
            and value.func.value.attr.value == "module"
            and model.code(value.func.value.value) == receiver
        ):
            return True
    return False


def _other_arm_unwraps(model: SemanticModel, save: cst.Call, receiver: cst.BaseExpression) -> bool:
    """`if len(self.gpu_ids) > 0: save(net.module.state_dict()) else: save(net.state_dict())`:
    the save is in one arm of an `if` whose other arm reads `.module` of the same object, so
    the code itself tells its wrapped path from its bare one. Asked only where the wrapper is
    built in another file under that file's own test, which cannot be compared with this one."""
    root = receiver
    while isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute):
        root = root.func.value  # `net.cpu()` -> `net`
    unwrapped = f"{model.code(root)}.module"
    child: cst.CSTNode = save
    for ancestor in model.ancestors(save):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.If):
            arms = [ancestor.body, ancestor.orelse]
            if child in arms:
                other = arms[1 - arms.index(child)]
                return other is not None and unwrapped in model.code(other)
        child = ancestor
    return False


def _resume_round_trip(model: SemanticModel, save: SavedWrapperStateDict, receiver: str) -> bool:
    """A resume file in the wrapper's format, on purpose: this file reads the checkpoint back
    only into the same wrapper (wrapped on every path), and also saves the wrapper's unwrapped
    weights (`receiver.module.state_dict()`) for everyone else."""
    facts = checkpoint_facts(model)
    loads = [load for load in facts.loads if save in facts.wrapper_saves_of(load.loaded)]
    if not loads or not all(load.target_is_wrapper is not None and load.target_wrapped_on_every_path for load in loads):
        return False
    # `model.module.state_dict()`, or a sub-module's (`model.module.student.state_dict()`)
    return re.search(re.escape(receiver) + r"\.module(?:\.\w+)*\.state_dict\(\)", model.text) is not None
