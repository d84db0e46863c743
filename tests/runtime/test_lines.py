"""Which lines a finding covers, and where they went in the fixed copy (no torch, no runs)."""

from __future__ import annotations

from .support import RUNTIME_FIXTURES
from dplint.runtime_check.lines import LineMap, statement_lines

SOURCE = """\
import torch

def main(model, loader):
    for epoch in range(2):
        for x in loader:
            loss = model(
                x,
            )
    torch.save(model.state_dict(), "a.pt")
"""


def test_statement_lines():
    assert statement_lines(SOURCE, 7) == range(6, 9)  # inside a multi-line call: the whole statement
    assert statement_lines(SOURCE, 5) == range(5, 6)  # a `for` header, not its body
    assert statement_lines(SOURCE, 9) == range(9, 10)
    assert statement_lines("def (:\n", 1) == range(1, 2)  # unparsable: just the rows


def test_unchanged_and_inserted_lines():
    fixed = SOURCE.replace("import torch\n", "import torch\nimport os\n")
    line_map = LineMap(SOURCE, fixed)
    assert line_map.line(1) == range(1, 2)
    assert line_map.line(9) == range(10, 11)


def test_a_fix_that_inserts_statements_keeps_them_with_the_line_they_fix():
    original = (RUNTIME_FIXTURES / "all_misuses.py").read_text()
    lines = original.splitlines()
    assert lines[95].startswith("    finetune.load_state_dict(") and lines[96].startswith("    state = {k.lstrip(")
    fixed_lines = lines[:95] + [
        '    state_dict = torch.load("checkpoint.pt", map_location=device)',
        '    consume_prefix_in_state_dict_if_present(state_dict, "module.")',
        "    finetune.load_state_dict(state_dict, strict=False)",
        '    state = dict(torch.load("checkpoint.pt", map_location=device))',
        '    consume_prefix_in_state_dict_if_present(state, "module.")',
    ] + lines[97:]
    line_map = LineMap(original, "\n".join(fixed_lines) + "\n")
    assert line_map.line(96) == range(96, 99)  # the load, with the two lines inserted above it
    assert line_map.line(97) == range(99, 101)  # the strip, with the line after it
    assert line_map.line(98) == range(101, 102)


def test_a_deleted_line_maps_to_nothing():
    fixed = SOURCE.replace('    torch.save(model.state_dict(), "a.pt")\n', "")
    assert LineMap(SOURCE, fixed).line(9) == range(0)
    assert LineMap(SOURCE, fixed).lines(range(9, 10)) == range(0)
