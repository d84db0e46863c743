"""Issue 29: the import a fix adds goes where isort (ruff's `I001`, with its defaults) wants it,
so a file that was isort-clean stays so after `dplint fix`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, fix

IMPORT = "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present"
LOAD = (
    "\n\n"
    "model_dp = torch.nn.DataParallel(torch.nn.Linear(4, 2))\n"
    'torch.save(model_dp.state_dict(), "dp.pt")\n'
    "net = torch.nn.Linear(4, 2)\n"
    'net.load_state_dict(torch.load("dp.pt", map_location="cpu"))\n'
)


def ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (the `test` extra has it)")
    return [found]


def isort_clean(text: str, tmp_path: Path) -> bool:
    script = tmp_path / "script.py"
    script.write_text(text)
    result = subprocess.run([*ruff(), "check", "--select", "I001", "--isolated", "--quiet", str(script)],
                            capture_output=True, text=True, cwd=tmp_path)
    return result.returncode == 0


HEADS = {
    "torch imports after it": (
        "import os\n\nimport torch\nfrom torch.nn.parallel import DistributedDataParallel\nfrom torch.utils.data import DataLoader\n",
        "import os\n\nimport torch\n" + IMPORT + "\nfrom torch.nn.parallel import DistributedDataParallel\n"
        "from torch.utils.data import DataLoader\n",
    ),
    "only `import` lines before it": (
        "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel\n",
        "import torch\nimport torch.nn as nn\n" + IMPORT + "\nfrom torch.nn.parallel import DistributedDataParallel\n",
    ),
    "last of its group, other groups after": (
        "import torch\nfrom torch.cuda.amp import autocast\nfrom torch.nn.parallel import DistributedDataParallel\n"
        "\nfrom mypackage.nets import Net\n",
        "import torch\nfrom torch.cuda.amp import autocast\n" + IMPORT
        + "\nfrom torch.nn.parallel import DistributedDataParallel\n\nfrom mypackage.nets import Net\n",
    ),
    "joined to an import from the same module": (
        "import torch\nfrom torch.nn.modules.utils import _pair\nfrom torch.nn.parallel import DistributedDataParallel\n",
        "import torch\nfrom torch.nn.modules.utils import _pair, consume_prefix_in_state_dict_if_present\n"
        "from torch.nn.parallel import DistributedDataParallel\n",
    ),
}


@pytest.mark.parametrize("head, expected", HEADS.values(), ids=HEADS.keys())
def test_the_added_import_is_placed_as_isort_would(head, expected, tmp_path):
    code = head + LOAD
    fixed = fix(code, select=["DPL004"])
    assert fixed.startswith(expected + "\n\n"), fixed
    assert "consume_prefix_in_state_dict_if_present(" in fixed
    assert fix(fixed, select=["DPL004"]) == fixed
    if isort_clean(code, tmp_path):
        assert isort_clean(fixed, tmp_path), fixed


@pytest.mark.parametrize("fixed_file", sorted(FIXTURES.glob("*/*.py.fixed")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_isort_clean_fixture_stays_isort_clean_after_fix(fixed_file, tmp_path):
    script = fixed_file.with_suffix("")
    before = script.read_text()
    if IMPORT in before or IMPORT not in fixed_file.read_text() or not isort_clean(before, tmp_path):
        pytest.skip("the fix adds no import to an isort-clean script")
    assert isort_clean(fixed_file.read_text(), tmp_path)
