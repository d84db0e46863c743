"""DPL012 scalar-gather: a DataParallel module whose forward returns a 0-d loss, back-propagated as is."""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional

import libcst as cst

from dplint.checkpoints import resolve
from dplint.rule import Applicability, Edit, Example, Fix, Rule, Severity, Violation
from dplint.flow import class_method
from dplint.semantic import SemanticModel, Wrapping, argument, children_of, keyword_arg, literal_value, method_call, own_returns, peel_self_returning
from dplint.training import AUTOGRAD_BACKWARD, FUNCTIONAL_LOSS_NAMES, backprops, construction_argument, held_wrapper
from dplint.wrappers import indexed_values, wrapper_kind

# What a loss's `reduction=` makes of it: a 0-d mean or sum ("none" keeps the batch dimension).
REDUCTIONS = {"mean": "mean", "batchmean": "mean", "sum": "sum"}
# `size_average=` / `reduce=` (deprecated) override `reduction`: then we can't tell.
LEGACY_REDUCTION_ARGS = ("size_average", "reduce")
# `x.mean()` / `torch.sum(x)` keep a 0-d result with only these keywords.
WHOLE_TENSOR_KEYWORDS = {"dtype"}
# Positional arguments that cannot be the (deprecated) `size_average`/`reduce` or `reduction`:
# the tensors, and for CTC the lengths. More than these and we can't tell the reduction.
# (torch 2.13 signatures; `mse_loss(input, target, size_average)`, `huber_loss(input, target, reduction)`.)
FUNCTIONAL_POSITIONAL = {
    "binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 3, "cosine_embedding_loss": 3,
    "cross_entropy": 3, "ctc_loss": 4, "gaussian_nll_loss": 3, "margin_ranking_loss": 3,
    "multilabel_soft_margin_loss": 3, "nll_loss": 3, "triplet_margin_loss": 3,
    "triplet_margin_with_distance_loss": 3,
}
# Loss modules whose first positional parameter is `weight` (for the others it is `size_average`).
WEIGHT_FIRST_LOSSES = {"CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"}
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
MAX_DEPTH = 6
MAX_STEPS = 256  # expressions walked back from one back-propagated root


class ScalarGather(Rule):
    """
    ## What it does
    Flags the call of an `nn.DataParallel` wrapper whose gathered result is back-propagated
    as it is -- `loss = dp(x); loss.backward()`, `dp(x).backward()`,
    `scaler.scale(loss).backward()`, a part of it (`l1, l2 = dp(x)`,
    `out = dp(x); out["loss"].backward()`, `preds, losses = dp(x); losses[0]`: the gather
    maps over tuples, lists and dicts, nested too), or a term of a sum
    (`loss = dp_criterion(out, y) + 0.5 * aux`).

    The evidence is the call site: `backward()` without a gradient only works on a
    one-element tensor, so each replica returns a one-element loss there, and the gather
    makes a vector of them. The wrapped module's `forward`, where the rule can read it,
    either names the reduction (then the fix appends it) or refutes the call site:

    - it names it when every return the call site allows gives a 0-d loss in the part that
      is used: one of torch's `*Loss` modules with a mean or sum reduction,
      `F.cross_entropy(out, y)`, `(out - y).pow(2).mean()`, `self.criterion(out, y)`, a
      helper (function or method, of this file or another) whose every return is one, a
      sum or scaling of them; a return the call site rules out does not count
      (`preds, losses = dp(x)` cannot be the `return preds, stds, anchors` path);
    - it refutes it when no allowed return can be a one-element loss: each keeps a
      dimension (`x.mean(dim=0)`, `reduction="none"`, an input of `forward` returned as
      is), is a container, or is unpacked otherwise; or the module is a torch loss with
      `reduction="none"`, or indexed (`dp_loss(x, y)[0]`). Then the rule says nothing.
    - Otherwise (a module built by a registry or a config, another library, a forward
      whose loss is built in ways not followed, such as `total += ...` in a loop), the
      call site alone is the evidence, and nothing is fixed.

    The wrapper is found on every path where it is held: a name, a `self.x` attribute set in
    another method or by a project base class (`if len(device_ids) > 1: self.model =
    nn.DataParallel(self.model)` in another file's `BaseTrainer.__init__`), a parameter whose callers (in this file or another) pass it, a function
    (of this file or another) that returns `nn.DataParallel(...)`, a helper that returns its
    argument, an element taken by a literal index from a list or `nn.ModuleList` built by a
    display and `append` statements (`criteria[1]`), or a subclass of `nn.DataParallel` of
    the project that keeps torch's `forward` and `gather`, or of mmcv (`MMDataParallel`) or
    PyG (`torch_geometric.nn.DataParallel`), which gather as torch does.

    Silent when `device_ids` names one device, when the result is reduced (`.mean()`,
    `.sum()`, `torch.mean`) before `backward()` -- also on some path only
    (`if n_gpu > 1: loss = loss.mean()`: the author handles the gather), or in the handler
    of a `try:` around the `backward()` that catches its RuntimeError (`except
    RuntimeError: loss.mean().backward()`: a retry on the reduced loss) -- when it goes
    through a call the rule does not know (`reduce_loss(dp(x))`), when it is
    back-propagated with an explicit gradient, when the module's `forward` refutes the call
    site (above), for an element of a list changed otherwise than by `append` statements in
    the block that built it, and for project subclasses that define their own `forward` or
    `gather` (PyTorch-Encoding's `DataParallelModel` returns the replicas' outputs
    ungathered). A file that neither names `DataParallel` nor imports a definition that
    does is not read (the pre-filter): a training function handed the wrapper by a caller
    in another file is only checked when its own file or imports name it.

    ## Why is this bad?
    With 2+ GPUs, `DataParallel.forward` runs one replica per GPU and gathers their outputs
    along dimension 0. Each replica returns a 0-d tensor, and gathering scalars
    (torch 2.13 `torch/nn/parallel/_functions.py`, `Gather.forward`) warns

        UserWarning: Was asked to gather along dimension 0, but all input tensors were
        scalars; will instead unsqueeze and return a vector.

    and returns a vector of one loss per GPU. `loss.backward()` on it then raises
    `RuntimeError: grad can be implicitly created only for scalar outputs` (and `loss.item()`
    fails too). On the CPU or one GPU `DataParallel` calls the module directly and returns the
    0-d loss, so the script works in development and breaks on the multi-GPU machine.

    ## Example
    ```python
    class Net(nn.Module):
        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y)

    model = nn.DataParallel(Net().cuda())
    loss = model(x, y)
    loss.backward()
    ```

    Use instead:
    ```python
    loss = model(x, y).mean()
    loss.backward()
    ```

    ## Fix safety
    The fix reduces at the call site (`loss = model(x, y).mean()`) rather than at the
    `backward()` call, so that every later use of the name (`loss.item()`, logging, the
    backward) sees one number, as on a single device. It appends `.mean()` to the call, or
    `.sum()` when the forward returns a sum (`.sum()`, `reduction="sum"`): the mean of the
    replicas' means (or the sum of their sums) is the loss of the whole batch, as one device
    computes it (for the mean, exactly when the batch splits evenly across the GPUs). It is
    safe: on one device the 0-d result's `.mean()`/`.sum()` is the same value with the same
    gradient, and with 2+ GPUs the code it changes raises today. It is offered only when the
    whole result is back-propagated and the forward names its reduction; a part of the
    result (a tuple has no `.mean()`) or a module out of sight is reported, not fixed.
    """

    code = "DPL012"
    name = "scalar-gather"
    severity = Severity.WARNING
    summary = "DataParallel forward returns a 0-d loss: a vector on 2+ GPUs, backward() raises"
    fix_applicability = Applicability.SAFE
    tokens = (("DataParallel", "backward"),)  # the gathered loss is back-propagated

    VALID = (
        # Already reduced at the call site.
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return F.cross_entropy(self.fc(x), y)\n"
        "model = nn.DataParallel(Net())\n"
        "loss = model(x, y).mean()\n"
        "loss.backward()\n",
        # The forward returns logits; the loss is computed after the gather.
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "model = nn.DataParallel(Net())\n"
        "loss = nn.CrossEntropyLoss()(model(x), y)\n"
        "loss.backward()\n",
        # reduction="none" keeps the batch dimension: the gather concatenates it.
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return F.cross_entropy(self.fc(x), y, reduction='none')\n"
        "model = nn.DataParallel(Net())\n"
        "model(x, y).mean().backward()\n",
        # A module out of sight, its gathered losses averaged on the multi-GPU path.
        "import torch.nn as nn\n"
        "from transformers import AutoModel\n"
        "model = nn.DataParallel(AutoModel.from_pretrained(name))\n"
        "loss = model(**batch)[0]\n"
        "if n_gpu > 1:\n"
        "    loss = loss.mean()\n"
        "loss.backward()\n",
    )
    INVALID = (
        # A wrapped criterion kept in an nn.ModuleList and taken out by index; its forward's
        # losses are summed in a loop (not followed): the call site is the evidence.
        Example(
            "import torch.nn as nn\n"
            "from losses import PairLoss\n"
            "criteria = nn.ModuleList([nn.CrossEntropyLoss()])\n"
            "criteria.append(nn.DataParallel(PairLoss()))\n"
            "pair, _ = criteria[1](a, b)\n"
            "(criteria[0](logits, y) + pair).backward()\n",
            expected=None,
        ),
        # A module from a registry: backward() on its gathered output is the evidence (no fix:
        # whether its losses are means or sums is out of sight).
        Example(
            "import torch.nn as nn\n"
            "from models import build_model\n"
            "model = nn.DataParallel(build_model(cfg)).cuda()\n"
            "loss_rec, loss_kl = model(x)\n"
            "(loss_rec + loss_kl).backward()\n",
            expected=None,
        ),
        # The wrapper comes from a same-file helper and lives in an attribute.
        Example(
            "import torch.nn as nn\n"
            "import torch.nn.functional as F\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x, y):\n"
            "        return F.mse_loss(self.fc(x), y)\n"
            "def parallel(m):\n"
            "    return nn.DataParallel(m).cuda()\n"
            "class Trainer:\n"
            "    def __init__(self):\n"
            "        self.model = parallel(Net())\n"
            "    def step(self, x, y):\n"
            "        loss = self.model(x, y)\n"
            "        loss.backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "import torch.nn.functional as F\n"
                "class Net(nn.Module):\n"
                "    def forward(self, x, y):\n"
                "        return F.mse_loss(self.fc(x), y)\n"
                "def parallel(m):\n"
                "    return nn.DataParallel(m).cuda()\n"
                "class Trainer:\n"
                "    def __init__(self):\n"
                "        self.model = parallel(Net())\n"
                "    def step(self, x, y):\n"
                "        loss = self.model(x, y).mean()\n"
                "        loss.backward()\n"
            ),
        ),
        Example(
            "import torch.nn as nn\n"
            "import torch.nn.functional as F\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x, y):\n"
            "        return F.cross_entropy(self.fc(x), y)\n"
            "model = nn.DataParallel(Net().cuda())\n"
            "loss = model(x, y)\n"
            "loss.backward()\n",
            expected=(
                "import torch.nn as nn\n"
                "import torch.nn.functional as F\n"
                "class Net(nn.Module):\n"
                "    def forward(self, x, y):\n"
                "        return F.cross_entropy(self.fc(x), y)\n"
                "model = nn.DataParallel(Net().cuda())\n"
                "loss = model(x, y).mean()\n"
                "loss.backward()\n"
            ),
        ),
        Example(
            "import torch\n"
            "from torch.nn import DataParallel\n"
            "class WithLoss(torch.nn.Module):\n"
            "    def __init__(self, net):\n"
            "        super().__init__()\n"
            "        self.net = net\n"
            "        self.criterion = torch.nn.MSELoss(reduction='sum')\n"
            "    def forward(self, x, y):\n"
            "        loss = self.criterion(self.net(x), y)\n"
            "        return loss\n"
            "wrapped = DataParallel(WithLoss(net))\n"
            "scaler.scale(wrapped(\n"
            "    x, y)).backward()\n",
            expected=(
                "import torch\n"
                "from torch.nn import DataParallel\n"
                "class WithLoss(torch.nn.Module):\n"
                "    def __init__(self, net):\n"
                "        super().__init__()\n"
                "        self.net = net\n"
                "        self.criterion = torch.nn.MSELoss(reduction='sum')\n"
                "    def forward(self, x, y):\n"
                "        loss = self.criterion(self.net(x), y)\n"
                "        return loss\n"
                "wrapped = DataParallel(WithLoss(net))\n"
                "scaler.scale(wrapped(\n"
                "    x, y).sum()).backward()\n"
            ),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        flagged: set[cst.Call] = set()
        for backprop in backprops(model):
            if _has_explicit_gradient(backprop.site.node, backprop.site.qualified_name):
                continue  # `loss.backward(torch.ones_like(loss))` works on a vector
            if _retried_reduced(model, backprop.site.node):
                continue  # `try: loss.backward()` / `except RuntimeError: loss.mean().backward()`
            for root in backprop.roots:
                for call, element, anchor in _gathered_results(model, root, backprop.site.node):
                    if call in flagged:
                        continue
                    verdict = _verdict(model, call, element)
                    if verdict is None:
                        continue
                    flagged.add(call)
                    yield _violation(call, element, anchor, *verdict)


def _violation(call: cst.Call, element: object, anchor: cst.CSTNode,
               class_name: Optional[str], reduction: Optional[str]) -> Violation:
    gather = (
        "with 2+ GPUs nn.DataParallel gathers one per GPU into a vector (\"Was asked to gather along "
        "dimension 0, but all input tensors were scalars\") and `backward()` raises `RuntimeError: grad "
        "can be implicitly created only for scalar outputs`; on one device nothing shows."
    )
    if class_name is not None:
        what = f"`{class_name}.forward` returns a 0-d loss" + ("" if element == WHOLE else " in its result")
        advice = f" Reduce the gathered losses here with `.{reduction}()`"
    else:
        # The module comes from code the project does not show: the call site is the evidence.
        what = (
            "the result of this DataParallel call is back-propagated as it is, so each replica returns "
            "a one-element loss"
        )
        advice = " Reduce the gathered losses (`.mean()`, or `.sum()` for summed losses) before `backward()`"
    fix = None
    if element == WHOLE and reduction is not None:
        fix = Fix(
            Applicability.SAFE,
            f"Append `.{reduction}()` to the DataParallel call",
            (Edit(call, cst.Call(func=cst.Attribute(value=call, attr=cst.Name(reduction)))),),
        )
    return Violation(node=anchor, message=f"{what}: {gather}{advice}", fix=fix)


# What `backward()` on a vector raises (`RuntimeError: grad can be implicitly created only for
# scalar outputs`) is caught by a handler of these.
CATCHES_RUNTIME_ERROR = {"RuntimeError", "Exception", "BaseException"}


def _retried_reduced(model: SemanticModel, backward: cst.Call) -> bool:
    """The backward sits in a `try:` whose handler catches the RuntimeError a gathered vector
    raises and reduces there (`except RuntimeError: loss = loss.mean(); loss.backward()`): the
    author handles the gather."""
    child: cst.CSTNode = backward
    for ancestor in model.ancestors(backward):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        in_body, child = isinstance(ancestor, cst.Try) and child is ancestor.body, ancestor
        if not in_body:
            continue
        for handler in ancestor.handlers:
            if _catches_runtime_error(handler.type) and _holds_reduction(model, handler.body):
                return True
    return False


def _holds_reduction(model: SemanticModel, node: cst.CSTNode) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if _is_reduction(model, current):
            return True
        stack.extend(children_of(current))
    return False


def _catches_runtime_error(caught: Optional[cst.BaseExpression]) -> bool:
    if caught is None:
        return True  # a bare `except:`
    if isinstance(caught, cst.Tuple):
        return any(_catches_runtime_error(element.value) for element in caught.elements)
    name = caught.attr.value if isinstance(caught, cst.Attribute) else getattr(caught, "value", None)
    return name in CATCHES_RUNTIME_ERROR


def _has_explicit_gradient(call: cst.Call, qualified_name: Optional[str]) -> bool:
    if qualified_name == AUTOGRAD_BACKWARD:
        return argument(call, 1, "grad_tensors") is not None
    return argument(call, 0, "gradient") is not None


# Which part of a forward's result reaches backward: a path of keys from the gathered result
# (`()` is all of it; `(1, 0)` is `out[1][0]`: DataParallel gathers nested tuples, lists and
# dicts element by element), or a part we cannot name.
class _Part:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Unpacked(NamedTuple):
    """`a, b = dp(x)`: element `index` of a result unpacked into `count` names (a forward
    path that returns a display of another length cannot be the one that ran)."""
    index: int
    count: int


WHOLE: tuple = ()
SOME_PART = _Part("SOME_PART")
INFEASIBLE = _Part("INFEASIBLE")  # a return the call site's unpacking rules out


def _deeper(key: object, part: object) -> object:
    """The part of `x` used when `part` of `x[key]` is used."""
    return SOME_PART if key is SOME_PART or part is SOME_PART else (key, *part)


REDUCING_CALLS = {"torch.mean", "torch.sum"}


def _gathered_results(model: SemanticModel, root: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[cst.Call, object, cst.CSTNode]]:
    """The calls whose gathered result `root` back-propagates as it is, with the part of it used
    and where to report (the call; `out["loss"]` for an element taken by subscript, where the
    reduction belongs):
    through names (every binding that may reach), tuple unpacking and subscripts of the result
    (`a, b = dp(x)`, `out["loss"]`: DataParallel gathers each element alike), `scaler.scale(...)`
    and arithmetic (`nll(out, y) + 0.5 * aux`: a vector plus a number is still a vector); never
    through a reduction (`.mean()`), and not at all when some binding on the way reduces
    (`if n_gpu > 1: loss = loss.mean()`: the author handles the gather)."""
    found: list[tuple[cst.Call, object, cst.CSTNode]] = []
    stack: list[tuple[cst.BaseExpression, cst.CSTNode, object, Optional[cst.CSTNode]]] = [(root, at, WHOLE, None)]
    seen: set[int] = set()
    for _ in range(MAX_STEPS):
        if not stack:
            break
        expr, where, part, anchor = stack.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        if isinstance(expr, cst.Call):
            method = method_call(expr)
            if method is not None and method[1] == "scale" and len(expr.args) == 1:
                stack.append((expr.args[0].value, where, part, anchor))
            elif not _is_reduction(model, expr):
                found.append((expr, part, anchor or expr))
            continue
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply) and (
            _is_zero(expr.left) or _is_zero(expr.right)
        ):
            continue  # `0 * pred[0]`: a term that only keeps the graph connected, not the loss
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
            stack.extend(((expr.right, where, part, anchor), (expr.left, where, part, anchor)))  # left first
            continue
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            stack.append((expr.expression, where, part, anchor))
            continue
        if isinstance(expr, cst.Subscript):
            stack.append((expr.value, where, _deeper(_subscript_part(expr), part), anchor or expr))
            continue
        key = model.binding_key(expr, where)
        if key is None or key in ("True", "False", "None"):
            continue
        reaching = model.flow.reaching(key, where)
        if any(binding.value is not None and _is_reduction(model, binding.value) for binding, _ in reaching):
            return []
        for binding, _ in reversed(reaching):
            if binding.value is not None:
                stack.append((binding.value, binding.node, part, anchor))
            elif isinstance(binding.node, cst.Assign):  # `a, b = dp(x)`, `out, loss = out`
                stack.append((binding.node.value, binding.node, _deeper(_unpacked_part(model, binding), part), anchor))
    return found


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value.replace("_", "")) == 0


def _is_reduction(model: SemanticModel, call: cst.BaseExpression) -> bool:
    """`x.mean()`, `x.sum(0)`, `torch.mean(x)`: whatever the gather made of x, it is reduced."""
    if not isinstance(call, cst.Call):
        return False
    method = method_call(call)
    return (method is not None and method[1] in ("mean", "sum")) or model.qualified_name(call.func) in REDUCING_CALLS


def _subscript_part(subscript: cst.Subscript) -> object:
    if len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index):
        try:
            key = literal_value(subscript.slice[0].slice.value)
        except ValueError:
            return SOME_PART
        if isinstance(key, (int, str)) and not isinstance(key, bool):
            return key
    return SOME_PART


def _unpacked_part(model: SemanticModel, binding) -> object:
    """`a, b = dp(x)`: the index of the bound name among the targets."""
    for target in binding.node.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)):
            elements = target.target.elements
            if any(isinstance(e, cst.StarredElement) for e in elements):
                return SOME_PART
            for index, element in enumerate(elements):
                if model.binding_key(element.value, binding.node) == binding.key:
                    return Unpacked(index, len(elements))
    return SOME_PART


def _verdict(model: SemanticModel, call: cst.Call, element: object) -> Optional[tuple[Optional[str], Optional[str]]]:
    """(class name, reduction) to report `call`, or None to stay silent. The class name is None
    when the module's forward does not show a 0-d loss and the call site alone is the evidence."""
    constructions = _data_parallel_constructions(model, call)
    if not constructions:
        return None
    proven: Optional[tuple[str, str]] = None
    for cmodel, inner, at in constructions:
        forward = _forward_returns(cmodel, inner, at, element)
        if forward is DISPROVEN:
            return None  # what reaches backward cannot be this module's loss: say nothing
        if forward is not None and proven is None:
            proven = forward
    return proven if proven is not None else (None, None)


DISPROVEN = _Part("DISPROVEN")
BATCH = "batch"  # a returned tensor that keeps a dimension: not a 0-d loss


def _data_parallel_constructions(model: SemanticModel, call: cst.Call) -> list[tuple[SemanticModel, Optional[cst.BaseExpression], cst.CSTNode]]:
    """(model, wrapped module expression, where) for each DataParallel construction that
    `call.func` holds on some path and that gathers over more than one device."""
    wrapping = held_wrapper(model, call.func)
    if wrapping is not None and wrapping.kind == "DP" and _single_device(model, wrapping):
        return []  # `device_ids` seen from this call (a factory's parameter mapped to its argument)
    found, wrappers = [], 0
    for value in _values_through_indexing(model, call.func, call):
        built = value.expr
        if not value.known or not isinstance(built, cst.Call):
            continue
        cmodel = value.model
        # DataParallel and the classes derived from it (mmcv's `MMDataParallel`, PyG's, the
        # project's) scatter and gather as torch's does, unless a project class overrides it.
        kind = wrapper_kind(cmodel, built.func)
        if kind is not None:
            wrappers += 1
        if kind == "DP" and not _overrides_gather(cmodel, built):
            device_ids = cmodel.value_at(argument(built, 1, "device_ids"), built)
            if not (isinstance(device_ids, (cst.List, cst.Tuple)) and len(device_ids.elements) == 1):
                found.append((cmodel, argument(built, 0, "module"), built))
    if not found and not wrappers:
        # Factories and parameters the flow model does not follow (see `held_wrapper`).
        if wrapping is not None and wrapping.kind == "DP":
            found.append((model, wrapping.inner, wrapping.call))
    return found


def _values_through_indexing(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> list:
    """`Flow.values_at`, and what a literal index of a list or `nn.ModuleList` holds
    (`criterion = criterions[1]` with `criterions.append(nn.DataParallel(kd_loss))`)."""
    values = []
    for value in model.flow.values_at(expr, at):
        held = indexed_values(value.model, value.expr) if isinstance(value.expr, cst.Subscript) else None
        values.extend(held if held is not None else (value,))
    return values


def _overrides_gather(model: SemanticModel, built: cst.Call) -> bool:
    """A project subclass of DataParallel with its own `forward` or `gather`: it may not gather."""
    callee = model.flow.callee(built)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return False
    return any(class_method(callee.node, name) is not None for name in ("forward", "gather"))


def _single_device(model: SemanticModel, wrapping: Wrapping) -> bool:
    """`device_ids=[0]`: DataParallel calls the module directly, nothing is gathered."""
    device_ids = construction_argument(model, wrapping, 1, "device_ids")
    return isinstance(device_ids, (cst.List, cst.Tuple)) and len(device_ids.elements) == 1


def _forward_returns(model: SemanticModel, inner: Optional[cst.BaseExpression], at: cst.CSTNode, element: object):
    """(class name, "mean" | "sum") when the wrapped module's forward returns a 0-d loss (in
    `element` of its result) on every path the call site allows; DISPROVEN when what reaches
    backward cannot be its loss (a torch loss with `reduction="none"` or indexed like a
    container, a forward whose every return the call site's unpacking rules out); None when
    it cannot be told (another library, a registry, a forward that builds its loss in ways
    not followed): then the call site is the evidence."""
    verdicts = [_module_returns(value, element) for value in model.flow.values_at(inner, at)]
    if DISPROVEN in verdicts:
        return DISPROVEN
    return next((v for v in verdicts if v is not None), None)


def _module_returns(value, element: object):
    model, module = value.model, value.expr
    if not value.known or not isinstance(module, cst.Call):
        return None
    torch_loss = model.qualified_name(module.func) or ""
    if torch_loss.startswith("torch.nn.") and torch_loss.endswith("Loss"):
        # `nn.DataParallel(nn.NLLLoss(weight=w))`: torch's losses reduce to 0-d unless told not to.
        if element != WHOLE or _literal_keyword(module, "reduction") == "none":
            return DISPROVEN  # one tensor, indexed (`dp_loss(x, y)[0]`) or batch-shaped
        weight_first = torch_loss.rsplit(".", 1)[1] in WEIGHT_FIRST_LOSSES
        reduction = _loss_reduction(module) if _positional_count(module) <= weight_first else None
        return (torch_loss.rsplit(".", 1)[1], reduction) if reduction is not None else None
    if isinstance(module.func, cst.Name) and module.func.value in model.classes:
        class_def = model.classes[module.func.value]
        if any(b.node is not class_def for b in model.bindings.get(module.func.value, ())):
            return None  # the class name is rebound: which class runs is unclear
    callee = model.flow.callee(module)
    if callee is None or not isinstance(callee.node, cst.ClassDef):
        return None
    forward = class_method(callee.node, "forward")
    returns = own_returns(forward) if forward is not None else []
    if not returns or element is SOME_PART:
        return None  # inherited, returns nothing on some path, or a part we cannot name
    reductions = set()
    for statement in returns:
        returned = _element(callee.model, statement.value, statement, element)
        if returned is not INFEASIBLE:
            reductions.add(_reduction(callee.model, returned, statement, MAX_DEPTH) if returned is not None else None)
    # A return that cannot reach backward as it is (unpacked otherwise, a container, a tensor
    # that keeps a dimension: backward() would raise on one device too) is not the path that ran.
    reductions.discard(BATCH)
    if not reductions:
        return DISPROVEN
    if None in reductions:
        return None
    return callee.node.name.value, "sum" if reductions == {"sum"} else "mean"


def _literal_keyword(call: cst.Call, name: str) -> object:
    found = keyword_arg(call, name)
    try:
        return literal_value(found.value) if found is not None else None
    except ValueError:
        return None


def _element(model: SemanticModel, returned: Optional[cst.BaseExpression], at: cst.CSTNode, element: tuple):
    """The part `element` of a returned expression, through tuple / list / dict displays (names
    followed); None when it cannot be told, INFEASIBLE when the call site's unpacking rules
    this return out (`return logits, stds, anchors` unpacked into two names raises)."""
    expr = returned
    for key in element:
        value, at, _ = resolve(model, expr, at)
        expr = None
        if isinstance(value, (cst.Tuple, cst.List)) and not isinstance(key, str):
            items = value.elements
            if any(isinstance(item, cst.StarredElement) for item in items):
                return None
            if isinstance(key, Unpacked) and len(items) != key.count:
                return INFEASIBLE
            index = key.index if isinstance(key, Unpacked) else key
            if -len(items) <= index < len(items):
                expr = items[index].value
        elif isinstance(value, cst.Dict) and isinstance(key, str):
            expr = _dict_item(value, key)
        if expr is None:
            return None
    if isinstance(resolve(model, expr, at)[0], (cst.Tuple, cst.List, cst.Dict)):
        return INFEASIBLE  # a container reaches backward: not the path that runs
    return expr


def _dict_item(display: cst.Dict, key: str) -> Optional[cst.BaseExpression]:
    for item in display.elements:
        if not isinstance(item, cst.DictElement):
            return None
        try:
            if literal_value(item.key) == key:
                return item.value
        except ValueError:
            return None
    return None


def _reduction(model: SemanticModel, expr: Optional[cst.BaseExpression], at: cst.CSTNode, depth: int) -> Optional[str]:
    """"mean" / "sum" when `expr` is a 0-d loss or reduction; BATCH when it keeps a dimension
    (`x.mean(dim=0)`, `reduction="none"`); None when we can't tell."""
    if expr is None or depth <= 0:
        return None
    if isinstance(expr, (cst.Name, cst.Attribute)):
        if _forward_input(model, expr, at):
            return BATCH  # DataParallel scatters the forward's tensors along the batch dimension
        value, value_at, _ = resolve(model, expr, at)
        return None if value is None or value is expr else _reduction(model, value, value_at, depth - 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, ARITHMETIC):
        sides = [_reduction(model, side, at, depth - 1) for side in (expr.left, expr.right)]
        if BATCH in sides:
            return BATCH  # a vector stays one whatever it is added to or scaled by
        numbers = [isinstance(side, (cst.Integer, cst.Float)) for side in (expr.left, expr.right)]
        if all(side is not None or number for side, number in zip(sides, numbers)) and any(sides):
            kinds = {side for side in sides if side is not None}
            return kinds.pop() if len(kinds) == 1 else "mean"
        return None
    if not isinstance(expr, cst.Call):
        return None
    name = model.qualified_name(expr.func)
    if name in FUNCTIONAL_LOSS_NAMES:
        required = FUNCTIONAL_POSITIONAL.get(name.rsplit(".", 1)[1], 2)
        return _loss_reduction(expr) if _positional_count(expr) <= required else None
    if name in ("torch.mean", "torch.sum"):
        positional = [arg for arg in expr.args if arg.keyword is None]
        if len(positional) == 1 and not positional[0].star and _only_whole_tensor_keywords(expr):
            return name.rsplit(".", 1)[1]
        return BATCH if _reduces_a_dimension(expr, 1) else None
    method = method_call(expr)
    if method is not None and method[1] in ("mean", "sum"):
        positional = [arg for arg in expr.args if arg.keyword is None]
        if not positional and _only_whole_tensor_keywords(expr):
            return method[1]
        return BATCH if _reduces_a_dimension(expr, 0) else None
    loss_module = peel_self_returning(resolve(model, expr.func, expr)[0])
    if isinstance(loss_module, cst.Call):
        class_name = model.qualified_name(loss_module.func) or ""
        if class_name.startswith("torch.nn.") and class_name.endswith("Loss"):
            weight_first = class_name.rsplit(".", 1)[1] in WEIGHT_FIRST_LOSSES
            return _loss_reduction(loss_module) if _positional_count(loss_module) <= weight_first else None
    callee = model.flow.callee(expr)
    if callee is not None and isinstance(callee.node, cst.FunctionDef):
        # `return self.gaussian_nll(mu, sigma, y)`, a helper whose every return is a 0-d loss
        return _returns_reduce(callee.model, callee.model.flow.own_returns(callee.node), depth - 1)
    return None


def _forward_input(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`return x, loss` in `def forward(self, x, y)`: a parameter of a `forward`, unchanged."""
    key = model.binding_key(expr, at)
    binding = model.binding_at(key, at) if key is not None else None
    if binding is None or not isinstance(binding.node, cst.Param):
        return False
    function = model.parent(model.parent(binding.node))
    return isinstance(function, cst.FunctionDef) and function.name.value == "forward" and binding.node.star == ""


def _returns_reduce(model: SemanticModel, returns: list, depth: int) -> Optional[str]:
    """"mean" / "sum" when every one of a function's `return`s is a 0-d loss, else None."""
    kinds = {_reduction(model, statement.value, statement, depth) for statement in returns}
    if kinds == {BATCH}:
        return BATCH
    if not kinds or None in kinds or BATCH in kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mean"


def _loss_reduction(call: cst.Call) -> Optional[str]:
    """The reduction a loss function call or loss module construction asks for ("mean" by default)."""
    if any(keyword_arg(call, legacy) is not None for legacy in LEGACY_REDUCTION_ARGS) or any(arg.star for arg in call.args):
        return None
    reduction = keyword_arg(call, "reduction")
    if reduction is None:
        return "mean"
    try:
        value = literal_value(reduction.value)
    except ValueError:
        return None
    return BATCH if value == "none" else REDUCTIONS.get(value)


def _reduces_a_dimension(call: cst.Call, tensor_arguments: int) -> bool:
    """`x.sum(1)`, `x.mean(dim=0)`, `torch.mean(x, 0)`: a reduction along a dimension, which
    keeps the others (the batch among them)."""
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return len(positional) > tensor_arguments or keyword_arg(call, "dim") is not None


def _positional_count(call: cst.Call) -> int:
    return sum(1 for arg in call.args if arg.keyword is None)


def _only_whole_tensor_keywords(call: cst.Call) -> bool:
    return all(arg.keyword is None or arg.keyword.value in WHOLE_TENSOR_KEYWORDS for arg in call.args)
