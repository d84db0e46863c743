"""A variant that hangs after another ran in the same process is run again, first in a fresh
launch, before its timeout counts: the variants share a process (torch is imported once), and
what one left behind (a process group made again in one process, a patched module) may be what
hangs the next. Only a hang the variant shows on its own is reported."""

from __future__ import annotations

import pytest

from .support import needs_torch

# The original raises at the finding's line; the fixed copy would finish, but in a process where
# a run already happened it waits forever, as a fresh process never does.
SECOND_RUN_HANGS = '''\
import builtins
import time

import torch
import torch.nn as nn

model = nn.Linear(2, 2)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
if getattr(builtins, "_an_earlier_run_was_here", False):
    time.sleep(3600)
builtins._an_earlier_run_was_here = True
torch.save(model.module.state_dict(), "model.pt")
'''

ALWAYS_HANGS = SECOND_RUN_HANGS.replace('getattr(builtins, "_an_earlier_run_was_here", False)', "True")


@pytest.mark.runtime
@needs_torch
def test_a_variant_that_hangs_only_after_another_is_judged_by_its_fresh_run(tmp_path):
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "train.py"
    script.write_text(SECOND_RUN_HANGS)
    report = verify(str(script), [], VerifyOptions(timeout=15.0))
    assert not report.runs["fixed"].timed_out
    (result,) = report.results
    assert (result.finding.code, result.verdict.value) == ("DPL016", "confirmed")
    assert "the same code ran without an error (finished)" in result.fixed, result.fixed


@pytest.mark.slow
@pytest.mark.runtime
@needs_torch
def test_a_variant_that_hangs_on_its_own_too_is_reported_as_timed_out(tmp_path):
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "train.py"
    script.write_text(ALWAYS_HANGS)
    report = verify(str(script), [], VerifyOptions(timeout=8.0))
    assert report.runs["original"].timed_out
