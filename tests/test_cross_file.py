"""strip-module across files: a checkpoint saved from a wrapper in one script and loaded into a
bare model in another, linked by its literal path (or `os.path.join` of literals) in one run.

`fixtures/cross-file/` is the two-file project: train.py saves `model.state_dict()` of a
DataParallel to "checkpoints/sentiment.pt"; evaluate.py loads
`os.path.join("checkpoints", "sentiment.pt")` into a bare `SentimentNet`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import FIXTURES, ROOT
from dplint.rules.strip_module import StripModule

PROJECT = FIXTURES / "cross-file"
CROSS_MESSAGE = (
    "`model` is a bare model but gets the checkpoint 'checkpoints/sentiment.pt' that {train}:30 saves from "
    "`model.state_dict()` of a DataParallel, whose keys all start with `module.`: torch raises `RuntimeError: "
    "Error(s) in loading state_dict for SentimentNet: Missing key(s) in state_dict: ... Unexpected key(s) in "
    'state_dict: "module.…`; strip the prefix with `consume_prefix_in_state_dict_if_present(state_dict, "module.")`'
)


def lines(result) -> list[str]:
    return result.stdout.decode().splitlines()


def test_cli_links_the_save_and_the_load(cli):
    result = cli("check", "--no-cache", "fixtures/cross-file/", cwd=ROOT)
    assert result.returncode == 1, result.stderr
    out = lines(result)
    assert out[0] == "fixtures/cross-file/evaluate.py:13:5: DPL004 error " + CROSS_MESSAGE.format(train="fixtures/cross-file/train.py")
    assert out[1].startswith("fixtures/cross-file/train.py:30:16: DPL006 warning `torch.save` writes `model.state_dict()`")
    assert out[2:] == ["Found 2 problems.", "No fixes available (1 hidden fixes can be enabled with --unsafe-fixes)."]


def test_cli_json_cross_file_finding_has_positions_and_no_fix(cli):
    result = cli("check", "--no-cache", "--output-format", "json", "--select", "strip-module", "cross-file", cwd=FIXTURES)
    assert result.returncode == 1, result.stderr
    (finding,) = json.loads(result.stdout)
    assert finding["filename"] == "cross-file/evaluate.py"
    assert (finding["code"], finding["name"], finding["severity"]) == ("DPL004", "strip-module", "error")
    assert finding["location"] == {"row": 13, "column": 5}
    assert finding["end_location"] == {"row": 13, "column": 103}
    assert finding["fix"] is None
    assert finding["message"] == CROSS_MESSAGE.format(train="cross-file/train.py")


def test_each_file_alone_has_no_link(cli):
    result = cli("check", "--no-cache", "--select", "DPL004", "fixtures/cross-file/evaluate.py", cwd=ROOT)
    assert (result.returncode, lines(result)) == (0, ["All checks passed!"])
    result = cli("check", "--no-cache", "--ignore", "strip-module", "fixtures/cross-file/", cwd=ROOT)
    assert [line.split(" ")[1] for line in lines(result)[:-2]] == ["DPL006"]


def test_cached_facts_still_link(cli, tmp_path):
    for _ in range(2):  # the second run reads both files from the cache
        result = cli("check", "--cache-dir", str(tmp_path / "cache"), "--select", "DPL004", "fixtures/cross-file/", cwd=ROOT)
        assert lines(result)[0].startswith("fixtures/cross-file/evaluate.py:13:5: DPL004 "), result.stdout


def test_fixing_the_save_removes_the_link(cli, tmp_path):
    shutil.copytree(PROJECT, tmp_path / "project")
    result = cli("fix", "--no-cache", "--unsafe-fixes", "project", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    train = (tmp_path / "project" / "train.py").read_text()
    assert 'torch.save(model.module.state_dict(), "checkpoints/sentiment.pt")' in train
    assert (tmp_path / "project" / "evaluate.py").read_text() == (PROJECT / "evaluate.py").read_text()


SAVER = (
    "import torch\n"
    "import torch.nn as nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "model = DDP(nn.Linear(2, 2))\n"
    "torch.save({{'model': {saved}, 'step': 0}}, {path})\n"
)
LOADER = (
    "import os\n"
    "import torch\n"
    "from nets import Net\n"
    "net = Net()\n"
    "ckpt = torch.load({path}, map_location='cpu')\n"
    "net.load_state_dict(ckpt[{key!r}]){comment}\n"
)


def write_project(folder: Path, saved="model.state_dict()", save_path="'ckpt/last.pt'", load_path="os.path.join('ckpt', 'last.pt')", key="model", comment="", fillers=0):
    folder.mkdir()
    (folder / "a_train.py").write_text(SAVER.format(saved=saved, path=save_path))
    (folder / "b_eval.py").write_text(LOADER.format(path=load_path, key=key, comment=comment))
    for index in range(fillers):
        (folder / f"c_util_{index}.py").write_text("import torch\nstate_dict = torch.load\n")
    return folder


def cross_findings(cli, folder: Path, *args: str) -> list[str]:
    result = cli("check", "--no-cache", "--select", "DPL004", *args, folder.name, cwd=folder.parent)
    return [line.split(" DPL004 ")[0] + " " + line.split(" that ")[1].split(" saves")[0] for line in lines(result)[:-1]]


def test_link_by_keys_and_path(cli, tmp_path):
    assert cross_findings(cli, write_project(tmp_path / "p1")) == ["p1/b_eval.py:6:1: p1/a_train.py:5"]
    assert cross_findings(cli, write_project(tmp_path / "p2", key="optimizer")) == []
    assert cross_findings(cli, write_project(tmp_path / "p3", load_path="'ckpt/best.pt'")) == []
    assert cross_findings(cli, write_project(tmp_path / "p4", saved="model.module.state_dict()")) == []
    assert cross_findings(cli, write_project(tmp_path / "p5", save_path="args.out")) == []


def test_link_respects_a_suppression_on_the_load(cli, tmp_path):
    folder = write_project(tmp_path / "p", comment="  # noqa: DPL004")
    assert cross_findings(cli, folder) == []


def test_link_through_a_process_pool(cli, tmp_path):
    folder = write_project(tmp_path / "many", fillers=8)
    assert cross_findings(cli, folder, "--jobs", "2") == ["many/b_eval.py:6:1: many/a_train.py:5"]


def test_check_project_names_the_first_saving_file_and_skips_its_own():
    save = {"path": "m.pt", "keys": [], "line": 3, "column": 0, "wrapper": "DataParallel", "receiver": "dp"}
    load = {
        "path": "m.pt", "keys": [], "line": 7, "column": 4, "end_line": 7, "end_column": 30,
        "target": "net", "class": None, "strict_false": True,
    }
    facts = {"z.py": {"saves": [save], "loads": []}, "b.py": {"saves": [save], "loads": [load]}, "a.py": {"saves": [save], "loads": []}}
    (finding,) = StripModule.check_project(facts)
    assert (finding.filename, finding.location.row, finding.location.column, finding.end_location.column) == ("b.py", 7, 5, 31)
    assert "that a.py:3 saves from `dp.state_dict()` of a DataParallel" in finding.message
    assert "with `strict=False` it loads nothing" in finding.message
    assert list(StripModule.check_project({"b.py": {"saves": [save], "loads": [load]}})) == []
