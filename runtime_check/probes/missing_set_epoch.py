"""DPL008 missing-set-epoch: the epoch and the first indices of every DistributedSampler
iteration, per rank. The bug: two epochs in the same order while shuffle=True."""

from __future__ import annotations

from dplint.runtime_check.verdicts import Case, Judgement, RunView, Verdict, decide

CODE = "DPL008"
NAME = "missing-set-epoch"
SHOWN = 4  # indices quoted in the evidence


def install(context) -> None:
    if not context.once("samplers"):
        return
    from torch.utils.data import DistributedSampler

    recorder = context.recorder
    original_init, original_iter = DistributedSampler.__init__, DistributedSampler.__iter__
    created = [0]

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._dplint_created = (created[0], recorder.script_line())
        created[0] += 1

    def __iter__(self):
        indices = list(original_iter(self))
        number, created_at = getattr(self, "_dplint_created", (None, None))
        recorder.emit(
            "sampler", line=recorder.script_line(), created_at=created_at, number=number,
            epoch=self.epoch, shuffle=self.shuffle, first=indices[:8], count=len(indices),
        )
        return iter(indices)

    DistributedSampler.__init__, DistributedSampler.__iter__ = __init__, __iter__


def orders(case: Case, run: RunView) -> list[dict]:
    """Rank 0's iterations of the flagged sampler (or of every shuffling one)."""
    found = case.near(run, "sampler", ("line", "created_at")) or run.all("sampler")
    first = run.ranks[0] if run.ranks else 0
    return [e for e in found if e["shuffle"] and e["rank"] == first]


def describe(events: list[dict]) -> tuple[bool, str]:
    a, b = events[0], events[1]
    same = a["first"] == b["first"]
    shown = lambda e: "[" + ", ".join(map(str, e["first"][:SHOWN])) + ", ...]"
    if same:
        return True, (
            f"rank 0: epochs 1 and 2 both started {shown(a)} (sampler.epoch stayed {a['epoch']}, line {a['line']}): "
            "every epoch repeats one order"
        )
    return False, f"rank 0: epoch 1 started {shown(a)}, epoch 2 {shown(b)} (sampler.epoch {a['epoch']} then {b['epoch']})"


def judge(case: Case) -> Judgement:
    original, fixed = orders(case, case.original), orders(case, case.fixed)
    if len(original) < 2:
        return Judgement(Verdict.NOT_REACHED, f"the shuffling sampler ran {len(original)} epoch(s); two are needed",
                         "" if len(fixed) < 2 else describe(fixed)[1])
    bad_original, original_text = describe(original)
    if len(fixed) < 2:
        return decide(case, bad_original, True, original_text, f"the sampler ran {len(fixed)} epoch(s) in the fixed copy")
    bad_fixed, fixed_text = describe(fixed)
    return decide(case, bad_original, bad_fixed, original_text, fixed_text)
