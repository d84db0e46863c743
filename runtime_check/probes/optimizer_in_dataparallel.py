"""DPL010 optimizer-in-dataparallel: what a DataParallel built around an optimizer does:
`zero_grad()` clears nothing, `step()` raises AttributeError, `state_dict()` is empty."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import observe_wrappers
from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL010"
NAME = "optimizer-in-dataparallel"


def install(context) -> None:
    observe_wrappers(context)
    if not context.once("optimizer-wrapper"):
        return
    import torch
    import torch.nn as nn

    recorder = context.recorder
    original_getattr, original_zero_grad = nn.DataParallel.__getattr__, nn.DataParallel.zero_grad

    def wrapped_optimizer(wrapper):
        inner = wrapper.__dict__.get("module")
        return inner if isinstance(inner, torch.optim.Optimizer) else None

    def __getattr__(self, name):
        try:
            return original_getattr(self, name)
        except AttributeError as error:
            optimizer = wrapped_optimizer(self)
            if optimizer is None or not hasattr(optimizer, name):
                raise
            line = recorder.script_line()
            recorder.emit("optimizer-wrapper-attr", line=line, name=name, error=f"AttributeError: {error}")
            recorder.emit("recovered", line=line, error=f"AttributeError: {error}",
                          what=f"wrapper.{name} (verify used the optimizer's own)")
            return getattr(optimizer, name)

    def zero_grad(self, *args, **kwargs):
        result = original_zero_grad(self, *args, **kwargs)
        optimizer = wrapped_optimizer(self)
        if optimizer is not None:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            recorder.emit(
                "optimizer-wrapper-zero-grad", line=recorder.script_line(),
                wrapper_params=sum(1 for _ in self.parameters()),
                grads_left=sum(1 for g in grads if bool(g.detach().abs().sum() > 0)),
            )
        return result

    nn.DataParallel.__getattr__, nn.DataParallel.zero_grad = __getattr__, zero_grad


def describe(case: Case, run: RunView) -> tuple[bool, str]:
    wraps = [e for e in run.all("wrap") if e["inner_is_optimizer"] and e["rank"] == (run.ranks or [0])[0]]
    if not wraps:
        return False, "no optimizer was wrapped"
    first = wraps[0]
    parts = [f"{'DataParallel' if first['wrapper'] == 'DP' else 'DDP'} wrapped a {first['inner_type']} (line {first['line']})"]
    zeroes = [e for e in run.all("optimizer-wrapper-zero-grad") if e["rank"] == first["rank"]]
    if zeroes:
        left = max(e["grads_left"] for e in zeroes)
        parts.append(f"wrapper.zero_grad() cleared nothing ({left} gradients stayed non-zero and accumulate)")
    attrs = [e for e in run.all("optimizer-wrapper-attr") if e["rank"] == first["rank"]]
    if attrs:
        parts.append(f"wrapper.{attrs[0]['name']} raised {attrs[0]['error']} (verify used the optimizer's own)")
    return True, "; ".join(parts)


def judge(case: Case) -> Judgement:
    bad_original, original = describe(case, case.original)
    bad_fixed, fixed = describe(case, case.fixed)
    if not bad_original:
        if not case.original.executed(case.original_lines):
            return Judgement(Verdict.NOT_REACHED, original, fixed)
        return Judgement(Verdict.NOT_REPRODUCED, original, fixed)
    if not bad_fixed:
        steps = [e for e in case.fixed.all("step") if e["rank"] == (case.fixed.ranks or [0])[0]]
        fixed = f"the optimizer is used directly: {len(steps)} optimizer steps ran"
    return decide(case, bad_original, bad_fixed, original, fixed)
