"""verify on a script whose ranks deadlock before a finding's line: every rank blocked in a
collective or a barrier (their stacks say where) ends the run early, as a deadlock naming each
rank's line, and the verdict does not ask for a longer --timeout."""

from __future__ import annotations

import time

import pytest

from .support import needs_torch
from dplint.runtime_check.runner import blocked_in_collective, latest_frames, not_reached_reason
from dplint.runtime_check.verdicts import RunView

TORCH = "/venv/lib/python3.11/site-packages/torch"
HARNESS = '  File "/work/runtime_check/harness.py", line 169 in run_variant\n'


def dump(*frames: str) -> str:
    """A stack as faulthandler writes it on SIGUSR1 (most recent call first)."""
    return "Stack (most recent call first):\n" + "".join(frames) + HARNESS


def frames_of(tmp_path, text: str) -> list:
    stacks = tmp_path / "stacks.txt"
    stacks.write_text(text)
    return latest_frames(str(stacks))


def test_a_rank_in_a_barrier_called_from_the_script_is_blocked_there(tmp_path):
    computing = dump('  File "/tmp/v0/root/train.py", line 5 in <module>\n')
    in_barrier = dump(
        f'  File "{TORCH}/distributed/distributed_c10d.py", line 5356 in barrier\n',
        f'  File "{TORCH}/distributed/c10d_logger.py", line 83 in wrapper\n',
        '  File "/tmp/v0/root/train.py", line 9 in main\n',
        '  File "/tmp/v0/root/train.py", line 20 in <module>\n',
    )
    # the last dump counts: the rank moved on from where it computed
    assert blocked_in_collective(frames_of(tmp_path, computing + in_barrier), "/tmp/v1/root/train.py") == ("barrier", 9)
    assert blocked_in_collective(frames_of(tmp_path, computing), "/tmp/v1/root/train.py") is None
    # in torch, but not waiting for other ranks: a long forward is no deadlock
    forward = dump(f'  File "{TORCH}/nn/modules/linear.py", line 125 in forward\n',
                   '  File "/tmp/v0/root/train.py", line 12 in <module>\n')
    assert blocked_in_collective(frames_of(tmp_path, forward), "/tmp/v0/root/train.py") is None


def deadlocked_run() -> RunView:
    view = RunView("original")
    for rank, (call, line) in enumerate([("barrier", 9), ("all_reduce", 11)]):
        view.events[rank] = [
            {"kind": "start", "seq": 1},
            {"kind": "line", "line": line, "seq": 2},
            {"kind": "end", "status": "deadlock", "error": None, "line": line, "call": call, "seq": 3, "blocked_for": 12},
        ]
    return view


def test_a_deadlock_says_where_each_rank_waits_and_that_time_would_not_help():
    view = deadlocked_run()
    assert view.stop_reason() == (
        "deadlocked: every rank was blocked in a collective or a barrier (rank 0 in barrier() at line 9, "
        "rank 1 in all_reduce() at line 11); verify stopped it after 12 s without progress"
    )
    assert view.error is None
    reason = not_reached_reason(view, 14, None)
    assert reason.endswith("the script cannot get past it, so a longer --timeout would not reach this line either")
    assert "a longer --timeout (now" not in reason


DEADLOCK = """\
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.Linear(4, 2)
if rank == 0:
    dist.barrier()
total = torch.ones(3)
dist.all_reduce(total)
torch.save(model.state_dict(), "ckpt.pt")
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.runtime
@needs_torch
def test_a_deadlocked_script_is_stopped_early_and_the_verdict_names_the_lines(tmp_path):
    """Rank 0 waits in a barrier only it reaches, rank 1 in the all_reduce after it: both
    ranks are stopped after the deadlock grace, not after the 120 s timeout."""
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "deadlock.py"
    script.write_text(DEADLOCK)
    began = time.monotonic()
    report = verify(str(script), [], VerifyOptions(deadlock_grace=2.0, timeout=120.0))
    took = time.monotonic() - began
    assert took < 90, f"verify waited {took:.0f} s"
    where = "(rank 0 in barrier() at line 9, rank 1 in all_reduce() at line 11)"
    assert where in report.runs["original"].stop_reason()
    verdicts = {result.finding.code: result for result in report.results}
    assert verdicts["DPL017"].verdict.value == "confirmed"
    assert where in verdicts["DPL017"].original
    save = verdicts["DPL011"]
    assert save.verdict.value == "not-reached"
    assert save.original.startswith("line 12 never ran: deadlocked: every rank was blocked in a collective")
    assert "would not reach this line either" in save.original
