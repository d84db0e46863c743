from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # file modes do not stop root
# The smallest misuse with a safe fix (DPL007), for tests about files rather than rules.
MISUSE = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
)
MISUSE_FIXED = MISUSE.replace("shuffle=True, ", "")


def ctrl_c_as_in_a_terminal() -> None:
    """A child's SIGINT as a terminal delivers it (`preexec_fn`): pytest run in the background
    of a script (`cmd &` without job control) passes SIGINT on ignored, and dplint rightly keeps
    an ignored SIGINT ignored, so a Ctrl-C test would wait for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def lint(code: str, path: str = "example.py", select=None):
    """Findings for a piece of code, with every rule (or the selected ones) enabled."""
    from dplint.engine import lint_source, rules_for
    from dplint.registry import selected_codes

    result = lint_source(code, path, rules_for(selected_codes(select)))
    assert not result.errors, result.errors  # a crashing rule must not pass for a silent one
    return result.findings


def fix(code: str, path: str = "example.py", unsafe: bool = True, select=None, only=None):
    """The text after fixing (all rules, unsafe fixes too, by default)."""
    from dplint.engine import fix_source, rules_for
    from dplint.registry import selected_codes

    result = fix_source(code, path, rules_for(selected_codes(select)), unsafe=unsafe, only_codes=only)
    assert not result.errors, result.errors
    return result.text


def run_cli(*args: str, input: bytes | None = None, cwd: str | os.PathLike | None = None):
    """Run the real `dplint` command in a subprocess; returns CompletedProcess (text)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "dplint", *args],
        input=input,
        capture_output=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def cli():
    return run_cli


SLOW_TESTS = os.environ.get("DPLINT_SLOW_TESTS", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` run only with DPLINT_SLOW_TESTS=1 (CI runs the default set), so that the README's
    test command stays short on a developer's machine. They are deselected, not skipped, so that
    session-wide work planned from the collected tests (tests/runtime: the verify runs) leaves
    them out too."""
    if SLOW_TESTS:
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]
