"""Issue 29: what dplint tells the user about a fix is what the fix really does."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

import dplint.cli
from conftest import ROOT


def readme_fix_column() -> dict[str, str]:
    rows = re.findall(r"^\| (DPL\d+) \| [\w-]+ \| [^|]+ \| ([^|]+) \|", (ROOT / "README.md").read_text(), re.MULTILINE)
    return {code: fix.strip() for code, fix in rows}


def test_the_fix_safety_of_dpl006_and_dpl015_agrees_in_rules_json_and_readme():
    text = CliRunner().invoke(dplint.cli.main, ["rules"]).output
    listed = json.loads(CliRunner().invoke(dplint.cli.main, ["rules", "--output-format", "json"]).output)
    as_json = {rule["code"]: rule["fix"] for rule in listed}
    readme = readme_fix_column()
    for code, safety in [("DPL006", "safe when the load is fixed too, else unsafe"),
                         ("DPL015", "safe when wrapped on every path, else unsafe")]:
        (line,) = [line for line in text.splitlines() if line.startswith(code)]
        assert f"fix: {safety} " in line
        assert as_json[code] == safety
        assert readme[code] == safety


CONDITIONAL_WRAP = (
    "import torch\n"
    "import torch.nn as nn\n"
    "model = Net()\n"
    "if torch.cuda.device_count() > 1:\n"
    "    model = nn.DataParallel(model)\n"
    "print(model.width)\n"
)


def test_dpl015_advises_what_is_right_on_both_paths_where_the_wrap_is_conditional():
    from conftest import fix, lint

    (finding,) = [f for f in lint(CONDITIONAL_WRAP) if f.code == "DPL015"]
    assert 'read it from the wrapped model where there is one, `getattr(model, "module", model).width`' in finding.message
    assert "model.module.width" not in finding.message
    assert finding.fix_applicability.value == "unsafe"
    fixed = fix(CONDITIONAL_WRAP)
    assert fixed.endswith('print(getattr(model, "module", model).width)\n')
    assert fix(fixed) == fixed
    assert fix(CONDITIONAL_WRAP, unsafe=False) == CONDITIONAL_WRAP


def test_dpl015_keeps_module_where_the_model_is_wrapped_on_every_path():
    from conftest import fix, lint

    code = CONDITIONAL_WRAP.replace("if torch.cuda.device_count() > 1:\n    ", "")
    (finding,) = [f for f in lint(code) if f.code == "DPL015"]
    assert finding.message.endswith("read it from the wrapped model, `model.module.width`")
    assert fix(code, unsafe=False).endswith("print(model.module.width)\n")
