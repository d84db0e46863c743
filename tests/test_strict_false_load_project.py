"""strict-false-load (DPL005) where the reason to stay silent lies in another file of the
project: a table of published weight addresses imported from a sibling module, and a helper
module that collects a network's own normalisation buffers."""

from __future__ import annotations

from pathlib import Path

PACKAGE_INIT = ""

RELEASES = '''\
PUBLISHED = {
    "small": "https://downloads.example.org/seg/small-0a1b.pth",
    "large": "https://downloads.example.org/seg/large-2c3d.pth",
}
LOCAL = {"small": "/data/weights/small.pth"}
'''

LOADER = '''\
import torch
from torch.hub import load_state_dict_from_url

from .releases import LOCAL, PUBLISHED


def start_from_release(net, size):
    net.load_state_dict(load_state_dict_from_url(PUBLISHED[size]), strict=False)


def start_from_local(net, size):
    net.load_state_dict(load_state_dict_from_url(LOCAL[size]), strict=False)
'''

STATS = '''\
def running_stats(net):
    kept = {}
    for prefix, layer in net.named_modules():
        for key, tensor in layer.named_buffers(recurse=False):
            kept[prefix + "." + key] = tensor
    return kept


def stats_from_disk(net, path):
    import torch

    kept = torch.load(path)
    for prefix, layer in net.named_modules():
        pass
    return kept
'''

SYNC = '''\
import torch.distributed as dist

from .stats import running_stats, stats_from_disk


def broadcast_stats(net):
    stats = running_stats(net)
    for tensor in stats.values():
        dist.broadcast(tensor, src=0)
    net.load_state_dict(stats, strict=False)


def restore_stats(net, path):
    net.load_state_dict(stats_from_disk(net, path), strict=False)
'''


def write_project(root: Path) -> None:
    package = root / "segkit"
    package.mkdir()
    for name, text in {"__init__.py": PACKAGE_INIT, "releases.py": RELEASES, "loader.py": LOADER,
                       "stats.py": STATS, "sync.py": SYNC}.items():
        (package / name).write_text(text)


def test_imported_tables_and_helpers_decide(cli, tmp_path):
    write_project(tmp_path)
    result = cli("check", "--no-cache", "--select", "DPL005", "--output-format", "concise", ".", cwd=tmp_path)
    flagged = sorted(line.split(" ")[0] for line in result.stdout.decode().splitlines() if "DPL005" in line)
    # The table of a sibling file holding only web addresses is fixed; one holding a local
    # path is not. A helper returning the network's own buffers makes a self-reload; one
    # returning a file it read does not.
    assert flagged == ["segkit/loader.py:12:5:", "segkit/sync.py:14:5:"], result.stdout.decode()
