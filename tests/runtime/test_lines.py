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


def test_two_findings_whose_fixes_coincide_are_judged_against_the_fixed_run():
    # loss_on_cpu.py: `criterion(outputs.cpu(), targets.cpu())` holds two DPL003 findings whose
    # fixes both rewrite the call; each one's "before" copy (the other's fix applied) is the
    # whole fixed copy. It must run as FIXED: the judges read the fixed run under that label,
    # and a missing FIXED run fell back to the original (a fix-failed verdict on an H200).
    from dplint.engine import fix_is_wanted, fix_source, lint_source, rules_for
    from dplint.registry import selected_codes
    from dplint.runtime_check.runner import FIXED, ORIGINAL, plan_variants

    script = RUNTIME_FIXTURES / "loss_on_cpu.py"
    text = script.read_text()
    rules = rules_for(selected_codes())
    findings = lint_source(text, str(script), rules).findings
    fixed_text = fix_source(text, str(script), rules, unsafe=True).text
    variants, before = plan_variants(text, fixed_text, findings, [f for f in findings if fix_is_wanted(f, unsafe=True)])
    assert [f.code for f in findings] == ["DPL003", "DPL003"]
    assert sorted(variants) == [FIXED, ORIGINAL]
    assert variants[FIXED].text == fixed_text and ".cpu()" not in fixed_text.split("criterion(")[-1].split("\n")[0]
    assert [before[id(f)] for f in findings] == [FIXED, FIXED]
