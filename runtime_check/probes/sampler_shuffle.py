"""DPL007 sampler-shuffle: the ValueError DataLoader raises for a sampler with shuffle=True."""

from __future__ import annotations

from dplint.runtime_check.probes.shared import describe as describe_error
from dplint.runtime_check.verdicts import Case, Judgement, Verdict, decide

CODE = "DPL007"
NAME = "sampler-shuffle"
MESSAGE = "mutually exclusive with shuffle"


def install(context) -> None:
    if not context.once("loaders"):
        return
    from torch.utils.data import DataLoader

    recorder = context.recorder
    original = DataLoader.__init__

    def __init__(self, dataset, *args, **kwargs):
        line = recorder.script_line()
        error = None
        try:
            original(self, dataset, *args, **kwargs)
        except ValueError as caught:
            if MESSAGE not in str(caught):
                raise
            error = describe_error(caught)
            recorder.emit("recovered", line=line, error=error, what="DataLoader(shuffle=...) (verify dropped shuffle)")
            # DataLoader(dataset, batch_size, shuffle, ...): drop the shuffle and build it again.
            if "shuffle" in kwargs:
                kwargs["shuffle"] = None
            else:
                args = (args[0], None, *args[2:])
            original(self, dataset, *args, **kwargs)
        recorder.emit("loader", line=line, error=error, sampler=type(self.sampler).__name__)

    DataLoader.__init__ = __init__


def describe(event: dict) -> str:
    if event["error"]:
        return f"line {event['line']}: DataLoader raised {event['error']}"
    return f"line {event['line']}: DataLoader built with a {event['sampler']}, no error"


def judge(case: Case) -> Judgement:
    original = case.near(case.original, "loader")
    fixed = case.near(case.fixed, "loader")
    if not original:
        return Judgement(Verdict.NOT_REACHED, "no DataLoader was built at the flagged line",
                         describe(fixed[0]) if fixed else "no DataLoader built")
    fixed_text = describe(fixed[0]) if fixed else "no DataLoader was built at the fixed line"
    return decide(case, bool(original[0]["error"]), not fixed or bool(fixed[0]["error"]), describe(original[0]), fixed_text)
