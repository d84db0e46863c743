"""strict-false-load (DPL005) through a project helper that forwards its `strict` parameter
to `load_state_dict` and drops the result: reported at the call that passes the literal
False, in whichever file that call is; silent where the helper is out of sight."""

from __future__ import annotations

from pathlib import Path

NETWORKS = '''\
import torch


class Checkpointed:
    def load_weights(self, net, path, strict=True):
        net.load_state_dict(torch.load(path, map_location="cpu"), strict=strict)

    def load_weights_reported(self, net, path, strict=True):
        return net.load_state_dict(torch.load(path, map_location="cpu"), strict=strict)


def load_into(net, path, strict=True):
    net.load_state_dict(torch.load(path)["state"], strict=strict)
'''

TRAIN = '''\
import torch.nn as nn
from thirdparty import restore

from kit.networks import Checkpointed, load_into


class Pix2Pix(Checkpointed):
    def __init__(self, resume):
        self.gen = nn.Linear(3, 3)
        self.load_weights(self.gen, resume, strict=False)
        print(self.load_weights_reported(self.gen, resume, strict=False))


def finetune(path):
    head = nn.Linear(3, 1)
    load_into(head, path, False)
    load_into(head, path)
    restore(head, path, strict=False)
'''


def write_project(root: Path) -> None:
    package = root / "kit"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "networks.py").write_text(NETWORKS)
    (package / "train.py").write_text(TRAIN)


def test_false_reported_where_passed(cli, tmp_path):
    write_project(tmp_path)
    result = cli("check", "--no-cache", "--select", "DPL005", "--output-format", "concise", ".", cwd=tmp_path)
    out = result.stdout.decode()
    flagged = sorted(line.split(" ")[0] for line in out.splitlines() if "DPL005" in line)
    # The base-class method of another file and a module function imported by name; not
    # the helper that returns the keys, a call leaving strict at its default, or a helper
    # of a package that is not in the project.
    assert flagged == ["kit/train.py:10:9:", "kit/train.py:16:5:"], out
    assert "networks.py:6" in out and "networks.py:13" in out, out
