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


def orders(case: Case, run: RunView) -> dict[int, list[dict]]:
    """rank -> its iterations of the flagged sampler (or of every shuffling one)."""
    found = case.near(run, "sampler", ("line", "created_at")) or run.all("sampler")
    by_rank: dict[int, list[dict]] = {}
    for event in found:
        if event["shuffle"]:
            by_rank.setdefault(event["rank"], []).append(event)
    return by_rank


def shown(event: dict) -> str:
    return "[" + ", ".join(map(str, event["first"][:SHOWN])) + ", ...]"


def describe(by_rank: dict[int, list[dict]]) -> tuple[bool, str]:
    """(did every rank repeat its order?, evidence) from the first two epochs of each rank."""
    repeated = {rank: events[0]["first"] == events[1]["first"] for rank, events in by_rank.items()}
    first_rank = min(by_rank)
    a, b = by_rank[first_rank][:2]
    ranks = "every rank" if len(by_rank) > 1 else f"rank {first_rank}"
    if all(repeated.values()):
        starts = "; ".join(f"rank {rank} {shown(events[0])}" for rank, events in sorted(by_rank.items()))
        return True, (
            f"on {ranks} epochs 1 and 2 started alike ({starts}; sampler.epoch stayed {a['epoch']}, "
            f"loop at line {a['line']}): every epoch repeats one order"
        )
    if any(repeated.values()):
        same = ", ".join(str(rank) for rank, value in sorted(repeated.items()) if value)
        return True, f"rank(s) {same} started epochs 1 and 2 alike ({shown(a)}); the others did not"
    return False, (
        f"on {ranks} epoch 2 started in a new order (rank {first_rank}: {shown(a)} then {shown(b)}; "
        f"sampler.epoch {a['epoch']} then {b['epoch']})"
    )


def judge(case: Case) -> Judgement:
    original = {r: e for r, e in orders(case, case.original).items() if len(e) >= 2}
    fixed = {r: e for r, e in orders(case, case.fixed).items() if len(e) >= 2}
    if not original:
        return Judgement(Verdict.NOT_REACHED, "the shuffling sampler did not run two epochs on any rank",
                         describe(fixed)[1] if fixed else "the sampler did not run two epochs")
    bad_original, original_text = describe(original)
    if not fixed:
        return decide(case, bad_original, True, original_text, "the sampler did not run two epochs in the fixed copy")
    bad_fixed, fixed_text = describe(fixed)
    return decide(case, bad_original, bad_fixed, original_text, fixed_text)
