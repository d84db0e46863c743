"""torch's own error for a misuse dplint knows, raised at a line with no finding: verify names
the rule it matches and says that the static check missed it."""

from __future__ import annotations

import json

import pytest

from .support import needs_torch
from dplint.rule import Finding, Position, Severity
from dplint.runtime_check.unflagged import rule_for, unflagged_errors
from dplint.runtime_check.verdicts import RunView

STRIP = ('RuntimeError: Error(s) in loading state_dict for Net: Missing key(s) in state_dict: "fc.weight". '
         'Unexpected key(s) in state_dict: "module.fc.weight".')


def test_torchs_messages_name_their_rules():
    assert rule_for(STRIP) == "strip-module"
    assert rule_for("ValueError: sampler option is mutually exclusive with shuffle") == "sampler-shuffle"
    assert rule_for("AttributeError: 'DistributedDataParallel' object has no attribute 'embed'") == "attribute-through-wrapper"
    assert rule_for("AttributeError: 'DataParallel' object has no attribute 'step'") == "optimizer-in-dataparallel"
    assert rule_for("AttributeError: 'Sequential' object has no attribute 'module'") == "module-on-bare-model"
    assert rule_for("RuntimeError: Error(s) in loading state_dict for Net: size mismatch for fc.weight") is None


TEXT = "\n".join(f"line_{n} = {n}" for n in range(1, 21)) + "\n"


def finding(code: str, name: str, row: int) -> Finding:
    return Finding(code, name, "m", Severity.ERROR, "train.py", Position(row, 1), Position(row, 5))


def test_an_error_at_a_line_without_the_rules_finding_is_reported_once():
    recovered = {"kind": "recovered", "line": 12, "error": "ValueError: sampler option is mutually exclusive with shuffle"}
    load = {"kind": "load", "line": 15, "error": "RuntimeError: Error(s) in loading state_dict for Net: Missing key(s)...",
            "prefixed": 2, "missing": ["fc.weight"]}
    runs = {"original": RunView("original", {0: [recovered, load], 1: [recovered]}),
            "fixed": RunView("fixed", {0: [recovered]})}
    found = unflagged_errors(TEXT, [finding("DPL006", "save-wrapped-state-dict", 12)], runs)
    assert [(item.line, item.code, item.runs) for item in found] == [(12, "DPL007", ("original", "fixed")),
                                                                   (15, "DPL004", ("original",))]
    assert found[0].describe() == (
        "line 12: ValueError: sampler option is mutually exclusive with shuffle (original and fixed run) is torch's "
        "error for sampler-shuffle (DPL007), but dplint did not flag this line: the static check missed it"
    )
    # flagged there: the finding explains it
    assert [item.line for item in unflagged_errors(TEXT, [finding("DPL007", "sampler-shuffle", 12)], runs)] == [15]


def test_an_optimizer_method_through_the_wrapper_is_flagged_where_the_wrapper_is_built():
    error = {"kind": "recovered", "line": 18, "error": "AttributeError: 'DataParallel' object has no attribute 'step'"}
    runs = {"original": RunView("original", {0: [error]})}
    assert unflagged_errors(TEXT, [finding("DPL010", "optimizer-in-dataparallel", 4)], runs) == []
    assert [item.code for item in unflagged_errors(TEXT, [], runs)] == ["DPL010"]


PRETRAINED = """\
import torch
import torch.nn as nn

net = nn.Linear(4, 2)
net.load_state_dict(torch.load("pretrained.pt"))  # saved by another script, from a DataParallel
model = nn.DataParallel(net)
torch.save(model.state_dict(), "ckpt.pt")
"""


@pytest.mark.runtime
@needs_torch
def test_a_load_dplint_cannot_see_through_is_named_strip_module(tmp_path):
    import torch
    import torch.nn as nn

    from dplint.runtime_check.cli import render_text, to_json
    from dplint.runtime_check.runner import VerifyOptions, verify

    torch.save(nn.DataParallel(nn.Linear(4, 2)).state_dict(), tmp_path / "pretrained.pt")
    script = tmp_path / "train.py"
    script.write_text(PRETRAINED)
    report = verify(str(script), [], VerifyOptions(timeout=240.0))
    assert [result.finding.code for result in report.results] == ["DPL006"]  # no DPL004: the file is not this script's
    (missed,) = [line for line in render_text(report).splitlines() if line.startswith("missed:")]
    assert missed.startswith("missed:   line 5: RuntimeError: Error(s) in loading state_dict for Linear:")
    assert missed.endswith("is torch's error for strip-module (DPL004), but dplint did not flag this line: "
                           "the static check missed it")
    (entry,) = json.loads(json.dumps(to_json(report)))["unflagged"]
    assert (entry["line"], entry["code"], entry["rule"], entry["runs"]) == (5, "DPL004", "strip-module", ["original", "fixed"])
