"""verify on a script that stops itself before a finding's line (an argparse usage error, a
message before `sys.exit(1)`): the verdict shows the exit status and the last lines of the
script's stderr, which say why."""

from __future__ import annotations

import io

import pytest

from .support import needs_torch
from dplint.runtime_check.harness import StderrTail
from dplint.runtime_check.runner import not_reached_reason
from dplint.runtime_check.verdicts import RunView


def test_stderr_tail_passes_writes_through_and_keeps_the_last_lines():
    stream = io.StringIO()
    tail = StderrTail(stream)
    for number in range(12):
        tail.write(f"line {number}\n")
    tail.write("no newline yet")
    assert stream.getvalue().endswith("line 11\nno newline yet")
    assert tail.lines() == [f"line {n}" for n in range(3, 12)] + ["no newline yet"]
    assert tail.getvalue() == stream.getvalue()  # anything else is the stream's own


def test_an_exit_before_the_line_quotes_the_scripts_stderr():
    view = RunView("original", {0: [
        {"kind": "line", "line": 3, "seq": 1},
        {"kind": "end", "status": "exit", "code": 1, "error": None, "line": None, "seq": 2,
         "stderr": ["error: data.csv not found; run prepare.py first"]},
    ]})
    assert view.stop_reason() == "rank 0 exited with status 1"
    assert not_reached_reason(view, 11, None) == (
        'rank 0 exited with status 1; its stderr ended with: "error: data.csv not found; run prepare.py first"; '
        "the script stopped itself before this line (the arguments it expects go after --)"
    )


USAGE = """\
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
args = parser.parse_args()
model = nn.DataParallel(nn.Linear(4, 2))
torch.save(model.state_dict(), args.data)
"""


@pytest.mark.runtime
@needs_torch
def test_a_usage_error_before_the_finding_is_shown(tmp_path):
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "train.py"
    script.write_text(USAGE)
    report = verify(str(script), [], VerifyOptions(timeout=240.0))
    (result,) = report.results
    assert result.verdict.value == "not-reached"
    assert result.original == (
        'line 10 never ran: rank 0 exited with status 2; its stderr ended with: "usage: train.py [-h] --data DATA | '
        'train.py: error: the following arguments are required: --data"; the script stopped itself before this '
        "line (the arguments it expects go after --)"
    )
