"""The README's `repo: local` pre-commit hook checks the files the shipped hooks check
(`.pre-commit-hooks.yaml`): notebooks too."""

from __future__ import annotations

import re

import yaml

from conftest import ROOT


def _local_hook() -> dict:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "repo: local" in b)
    return yaml.safe_load(block)["repos"][0]["hooks"][0]


def test_local_hook_checks_the_file_types_the_shipped_hook_checks():
    shipped = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    local = _local_hook()
    assert local["types_or"] == shipped["dplint"]["types_or"]
    assert "jupyter" in local["types_or"]
    assert local["entry"] == shipped["dplint"]["entry"]
