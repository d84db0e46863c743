"""Installed, `rules/` and `runtime_check/` must live under the `dplint` package, and every
sub-package must be listed for setuptools (a forgotten one silently goes missing from wheels)."""

from __future__ import annotations

import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_package_dir_maps_top_level_folders_under_dplint():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"dplint": "dplint", "dplint.rules": "rules", "dplint.runtime_check": "runtime_check"}
    assert not any(name.split(".")[0] != "dplint" for name in config["packages"])


def test_every_subpackage_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    for import_name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            name = ".".join([import_name, *relative.parts])
            assert name in listed, f"{name} ({init.parent}) is missing from [tool.setuptools] packages"


def test_static_path_never_imports_torch(cli):
    """`dplint check` on a torch script must not import torch (nor the script)."""
    code = (
        "import sys\n"
        "from dplint.cli import main\n"  # not `python -m dplint`, whose hard exit would not come back here
        "sys.argv = ['dplint', 'check', '--no-cache', %r]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n"
    ) % str(ROOT / "fixtures" / "clean" / "ddp_train.py")
    import subprocess

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().endswith("ok"), result.stderr
