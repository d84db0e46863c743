"""Observers several probes share; each installs once per run (harness side, under torch).

Recovery: where the original script would stop on an error a probe is looking for (the
ValueError of sampler-shuffle, the RuntimeError of a `module.`-prefixed load, ...), the
observer records the error with kind "recovered" and lets the run go on as if the line
had not failed, so one run can show every later finding too. The report says so.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping

from dplint.runtime_check.probes import ProbeContext

PREFIX = "module."


def describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}"


# ------------------------------------------------------------------------ wrappers
def observe_wrappers(context: ProbeContext) -> None:
    """DataParallel / DDP constructions, and every forward of a wrapped module: through the
    wrapper or straight to the inner model, with the `.training` flags; after every
    optimizer step, a checksum of each DDP model's parameters (to compare ranks)."""
    if not context.once("wrappers"):
        return
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook

    recorder = context.recorder

    def wrappers() -> list[tuple[str, int, weakref.ref]]:
        return context.state.setdefault("wrappers", [])

    inside = [0]  # depth of wrapper forwards running (a global: DP runs replicas in threads)

    def patch(cls, kind: str) -> None:
        original_init, original_forward = cls.__init__, cls.forward

        def __init__(self, module, *args, **kwargs):
            line = recorder.script_line()
            number = len(wrappers())
            is_optimizer = isinstance(module, torch.optim.Optimizer)
            recorder.emit(
                "wrap", line=line, wrapper=kind, number=number,
                inner_type=type(module).__name__, inner_is_optimizer=is_optimizer,
            )
            try:
                original_init(self, module, *args, **kwargs)
            except AttributeError as error:
                if not (is_optimizer and kind == "DP"):
                    raise
                # DataParallel(optimizer) on one GPU calls optimizer.to(): build it the way
                # the CPU path does, so the run goes on to show what the wrapper does.
                recorder.emit("recovered", line=line, error=describe(error), what="DataParallel(optimizer)")
                nn.Module.__init__(self)
                self.module, self.device_ids, self.output_device, self.dim = module, [], None, 0
                self.src_device_obj = torch.device("cpu")
            wrappers().append((kind, number, weakref.ref(self)))
            if isinstance(module, nn.Module):
                module.register_forward_pre_hook(inner_hook(kind, number, weakref.ref(self)))

        def forward(self, *args, **kwargs):
            inside[0] += 1
            try:
                output = original_forward(self, *args, **kwargs)
            finally:
                inside[0] -= 1
            if kind == "DP" and isinstance(output, torch.Tensor):
                recorder.emit("dp-output", line=recorder.script_line(), ndim=output.dim(),
                              shape=list(output.shape), grad=torch.is_grad_enabled())
            return output

        cls.__init__, cls.forward = __init__, forward

    def inner_hook(kind: str, number: int, wrapper_ref):
        def hook(module, inputs):
            wrapper = wrapper_ref()
            if wrapper is None:
                return
            submodules = list(module.modules())[1:]
            recorder.emit(
                "forward", line=recorder.script_line(), wrapper=kind, number=number,
                via_wrapper=inside[0] > 0, grad=torch.is_grad_enabled(),
                wrapper_training=wrapper.training, inner_training=module.training,
                submodules=len(submodules), submodules_training=sum(m.training for m in submodules),
            )

        return hook

    patch(nn.DataParallel, "DP")
    patch(DistributedDataParallel, "DDP")

    def after_step(optimizer, args, kwargs):
        steps = context.state.setdefault("steps", [0])
        steps[0] += 1
        sums = {}
        for kind, number, ref in wrappers():
            wrapper = ref()
            if kind != "DDP" or wrapper is None:
                continue
            with torch.no_grad():
                params = [p.detach().double() for p in wrapper.module.parameters()]
                sums[str(number)] = [float(sum(p.sum() for p in params)), float(sum((p * p).sum() for p in params))]
        recorder.emit("step", line=recorder.script_line(), n=steps[0], checksums=sums)

    register_optimizer_step_post_hook(after_step)


# ----------------------------------------------------------------- state dict loads
def observe_loads(context: ProbeContext) -> None:
    """Every `Module.load_state_dict`: strict or not, missing / unexpected keys, and whether
    it loaded nothing. A key-mismatch RuntimeError is recorded and the load skipped."""
    if not context.once("loads"):
        return
    import torch.nn as nn
    from torch.nn.modules.module import _IncompatibleKeys

    recorder = context.recorder
    original = nn.Module.load_state_dict

    def load_state_dict(self, state_dict, *args, **kwargs):
        line = recorder.script_line()
        strict = kwargs.get("strict", args[0] if args else True)
        try:
            given = [str(key) for key in state_dict.keys()]
            expected = list(self.state_dict().keys())
        except Exception:
            return original(self, state_dict, *args, **kwargs)
        given_set, expected_set = set(given), set(expected)
        # torch does not report a missing BatchNorm `num_batches_tracked` (old checkpoints lack it)
        missing = [k for k in expected if k not in given_set and not k.endswith("num_batches_tracked")]
        unexpected = [k for k in given if k not in expected_set]
        fields = dict(
            line=line, module=type(self).__name__, strict=bool(strict),
            given=len(given), expected=len(expected), missing=missing[:5], missing_count=len(missing),
            unexpected=unexpected[:5], unexpected_count=len(unexpected),
            loaded=len(given_set & expected_set),
            prefixed=sum(k.startswith(PREFIX) for k in given),
        )
        try:
            result = original(self, state_dict, *args, **kwargs)
        except RuntimeError as error:
            if not str(error).startswith("Error(s) in loading state_dict"):
                raise
            recorder.emit("load", error=describe(error), **fields)
            recorder.emit("recovered", line=line, error=describe(error), what="load_state_dict (skipped)")
            return _IncompatibleKeys(missing, unexpected)
        recorder.emit("load", error=None, **fields)
        return result

    nn.Module.load_state_dict = load_state_dict


# ---------------------------------------------------------------------------- saves
def state_dict_in(obj):
    """The state dict a saved object is or holds (one level down: {"model": sd, ...})."""
    import torch

    def is_state_dict(value) -> bool:
        return (
            isinstance(value, Mapping)
            and len(value) > 0
            and all(isinstance(key, str) for key in value)
            and any(isinstance(item, torch.Tensor) for item in value.values())
        )

    if is_state_dict(obj):
        return obj
    if isinstance(obj, Mapping):
        inner = [value for value in obj.values() if is_state_dict(value)]
        if inner:
            return max(inner, key=len)
    return None


def observe_saves(context: ProbeContext) -> None:
    """Every `torch.save`: which rank, which path, how many keys carry `module.`."""
    if not context.once("saves"):
        return
    import torch
    import torch.serialization

    recorder = context.recorder
    original = torch.save

    def save(obj, f, *args, **kwargs):
        state = state_dict_in(obj)
        keys = [str(key) for key in state] if state is not None else []
        path = os.path.abspath(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else None
        recorder.emit(
            "save", line=recorder.script_line(), path=path, keys=len(keys),
            prefixed=sum(key.startswith(PREFIX) for key in keys), sample=keys[:2],
        )
        return original(obj, f, *args, **kwargs)

    torch.save = save
    torch.serialization.save = save


# ------------------------------------------------------------------------ backward
def graph_facts(grad_fn) -> tuple[int, set]:
    """(device copies, parameter devices) in an autograd graph: ToCopyBackward nodes are
    `.cpu()` / `.to()` moves; AccumulateGrad nodes hold the parameters."""
    copies, devices, seen, stack = 0, set(), set(), [grad_fn]
    while stack and len(seen) < 500:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = node.name()
        if name.startswith("ToCopyBackward"):
            copies += 1
        variable = getattr(node, "variable", None)
        if variable is not None:
            devices.add(str(variable.device))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return copies, devices


def observe_backward(context: ProbeContext) -> None:
    """Every `Tensor.backward()`: the loss's device and value, the device copies in its
    graph and the parameters' devices. A backward of a non-scalar without a gradient (the
    vector DataParallel gathers from 0-d losses) is recorded, then done on its mean."""
    if not context.once("backward"):
        return
    import torch

    recorder = context.recorder
    original = torch.Tensor.backward

    def backward(self, gradient=None, *args, **kwargs):
        line = recorder.script_line()
        copies, devices = graph_facts(self.grad_fn)
        value = round(float(self.detach()), 6) if self.numel() == 1 else None
        recorder.emit(
            "backward", line=line, device=str(self.device), ndim=self.dim(), value=value,
            copies=copies, param_devices=sorted(devices),
        )
        try:
            return original(self, gradient, *args, **kwargs)
        except RuntimeError as error:
            if gradient is not None or "grad can be implicitly created only for scalar outputs" not in str(error):
                raise
            recorder.emit("backward-error", line=line, error=describe(error), shape=list(self.shape))
            recorder.emit("recovered", line=line, error=describe(error), what="backward() of a vector (verify used its mean)")
            return original(self.mean(), None, *args, **kwargs)

    torch.Tensor.backward = backward


# --------------------------------------------------- evidence text (runner side, no torch)
def quoted(items, limit: int = 2) -> str:
    items = list(items)
    shown = ", ".join(f'"{item}"' for item in items[:limit])
    return shown + (", ..." if len(items) > limit else "")


def describe_load(event: dict) -> str:
    call = "load_state_dict" if event["strict"] else "load_state_dict(strict=False)"
    where = f"line {event['line']}: {event['module']}.{call}"
    if event.get("error"):
        return (
            f"{where} raised RuntimeError: Missing key(s) {quoted(event['missing']) or 'none'}; "
            f"Unexpected key(s) {quoted(event['unexpected']) or 'none'} (verify skipped the load and went on)"
        )
    if not (event["missing_count"] or event["unexpected_count"]):
        return f"{where} loaded all {event['expected']} keys"
    return (
        f"{where} loaded {event['loaded']} of {event['expected']} keys and raised nothing: "
        f"missing {quoted(event['missing']) or 'none'}; unexpected {quoted(event['unexpected']) or 'none'}"
    )


def load_is_silent_mismatch(event: dict) -> bool:
    return not event.get("error") and bool(event["missing_count"] or event["unexpected_count"])
