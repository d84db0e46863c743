"""strict-false-load (DPL005) stays silent where the mismatch is reported without the returned
keys (a strict load of the same dict whose error is read, a key comparison by hand after the
load) and speaks where that report does not cover the non-strict load."""

from __future__ import annotations

import pytest

from conftest import lint

HEADER = "import torch\n\n\ndef load(net, path, flag=False):\n    sd = torch.load(path)\n"


def _lines(body: str) -> list[int]:
    return [f.location.row for f in lint(HEADER + body, select=["DPL005"])]


@pytest.mark.parametrize(
    "body",
    [
        # the strict load's error is re-raised after a message
        "    try:\n        net.load_state_dict(sd)\n    except RuntimeError:\n        print('retry')\n"
        "        net.load_state_dict(sd, strict=False)\n        raise\n",
        # strict=True spelled out, error formatted into the message
        "    try:\n        net.load_state_dict(sd, strict=True)\n    except Exception as e:\n"
        "        print(f'{e}')\n        net.load_state_dict(sd, strict=False)\n",
        # key names taken before the load, compared with the model's after it
        "    names = list(sd)\n    net.load_state_dict(sd, strict=False)\n"
        "    print(set(net.state_dict()).difference(names))\n",
        # key names compared before the load
        "    names = sd.keys()\n    print(set(names) - set(net.state_dict()))\n    net.load_state_dict(sd, strict=False)\n",
        # the comparison sits in the test of a branch: the test always runs
        "    net.load_state_dict(sd, strict=False)\n    if set(sd) != set(net.state_dict()) and set(sd) - set(net.state_dict()):\n"
        "        print('differ')\n",
    ],
)
def test_silent_when_the_mismatch_is_reported(body):
    assert _lines(body) == []


@pytest.mark.parametrize(
    "body, line",
    [
        # the later strict load is in a loop body that may not run
        ("    net.load_state_dict(sd, strict=False)\n    for _ in range(int(flag)):\n        try:\n"
         "            net.load_state_dict(sd)\n        except RuntimeError as e:\n            print(e)\n", 6),
        # the later strict load targets another module
        ("    net.load_state_dict(sd, strict=False)\n    try:\n        net.head.load_state_dict(sd)\n"
         "    except RuntimeError as e:\n        print(e)\n", 6),
        # the comparison is inside a nested function that nobody calls
        ("    net.load_state_dict(sd, strict=False)\n    def report():\n"
         "        print(set(sd) - set(net.state_dict()))\n", 6),
        # the retry reads another error than the strict load's
        ("    try:\n        net.load_state_dict(sd)\n    except RuntimeError as e:\n        pass\n"
         "    try:\n        net.load_state_dict(sd, strict=False)\n    except RuntimeError as e:\n        print(e)\n", 11),
    ],
)
def test_flagged_when_the_report_does_not_cover_the_load(body, line):
    assert _lines(body) == [line]
