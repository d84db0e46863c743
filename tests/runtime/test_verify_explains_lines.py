"""Every line verify's report quotes is the user's line: the runs of its modified copies (the
fixed copy, a copy with one bug left) are renumbered back, lines a fix added included."""

from __future__ import annotations

import pytest

from .support import needs_torch
from dplint.runtime_check.lines import LineMap
from dplint.runtime_check.runner import renumbered
from dplint.runtime_check.verdicts import RunView

ORIGINAL = """\
import torch
import torch.nn as nn

plain = nn.Linear(4, 2)
plain.load_state_dict(torch.load("ckpt.pt"))
loss = plain(torch.ones(4)).sum()
loss.backward()
"""
FIXED = """\
import torch
import torch.nn as nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

plain = nn.Linear(4, 2)
state_dict = torch.load("ckpt.pt")
consume_prefix_in_state_dict_if_present(state_dict, "module.")
plain.load_state_dict(state_dict)
loss = plain(torch.ones(4)).sum()
loss.backward()
"""


def test_back_is_the_inverse_of_line_and_added_lines_belong_to_the_line_after_them():
    line_map = LineMap(ORIGINAL, FIXED)
    assert line_map.line(5) == range(6, 9)  # the load, with the two lines the fix put above it
    # the added import goes with the (blank) line it was inserted before
    assert [line_map.back(row) for row in range(1, 11)] == [1, 2, 3, 3, 4, 5, 5, 5, 6, 7]
    assert line_map.back_lines(line_map.line(5)) == range(5, 6)
    assert line_map.back_lines(range(0)) == range(0)


def test_a_copys_events_and_stack_lines_are_renumbered_to_the_users():
    view = RunView("fixed", {0: [
        {"kind": "line", "line": 3, "seq": 1},  # the import only the fix added
        {"kind": "load", "line": 8, "seq": 2},
        {"kind": "backward", "line": 10, "seq": 3},
        {"kind": "end", "status": "finished", "line": None, "seq": 4, "stuck": True,
         "hung_in": "__del__ (train.py:9)"},
    ]})
    back = renumbered(view, FIXED, ORIGINAL)
    assert [event.get("line") for event in back.events[0]] == [3, 5, 7, None]
    assert back.events[0][-1]["hung_in"] == "__del__ (train.py:6)"
    torch_frame = {"kind": "end", "status": "finished", "seq": 1, "hung_in": "barrier (torch/distributed/distributed_c10d.py:5356)"}
    assert renumbered(RunView("fixed", {0: [torch_frame]}), FIXED, ORIGINAL).events[0][0]["hung_in"] == torch_frame["hung_in"]


SHIFTED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 2)
torch.save(nn.DataParallel(net).state_dict(), "ckpt.pt")
plain = nn.Linear(4, 2)
plain.load_state_dict(torch.load("ckpt.pt"))
model = nn.DataParallel(plain)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.MSELoss()
for step in range(2):
    outputs = model(torch.randn(8, 4))
    loss = criterion(outputs.cpu(), torch.zeros(8, 2))
    loss.backward()
    optimizer.step()
"""


@pytest.mark.runtime
@needs_torch
def test_evidence_from_the_fixed_copy_quotes_the_users_lines(tmp_path):
    """The strip-module fix adds an import at the top and two lines above the load: the fixed
    copy's load is at line 11 and its backward at line 18, the user's at 8 and 15."""
    from dplint.runtime_check.cli import render_text
    from dplint.runtime_check.runner import VerifyOptions, verify

    script = tmp_path / "train.py"
    script.write_text(SHIFTED)
    report = verify(str(script), [], VerifyOptions(timeout=240.0, select=frozenset({"DPL003", "DPL004"})))
    results = {result.finding.code: result for result in report.results}
    assert results["DPL004"].fixed == "line 8: Linear.load_state_dict loaded all 2 keys"
    assert results["DPL003"].fixed.startswith(
        "no automatic fix for this finding; loss on cpu (backward() at line 15), parameters on cpu")
    assert "line 18" not in render_text(report) and "line 11" not in render_text(report)
