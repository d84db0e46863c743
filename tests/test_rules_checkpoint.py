"""The checkpoint rules: DPL004 strip-module, DPL005 strict-false-load, DPL006
save-wrapped-state-dict, DPL013 hand-rolled-strip, and the shared analysis in dplint/checkpoints.py.

Exact positions, severities and fixed text, odd formatting (comments, multi-line calls, CRLF,
tabs), and the torch behaviour the messages quote (re-checked on the installed torch).
"""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import fix, lint
from dplint.checkpoints import bare_model_class, checkpoint_facts, literal_path
from dplint.semantic import SemanticModel
from dplint.flow import analysed

CHECKPOINT_RULES = ["DPL004", "DPL005", "DPL006", "DPL013"]


def found(code: str, select=CHECKPOINT_RULES) -> list[tuple[int, int, str, str]]:
    return [(f.location.row, f.location.column, f.code, f.severity.value) for f in lint(code, select=select)]


def fixed(code: str, *codes: str) -> str:
    return fix(code, only=frozenset(codes))


DP_SAVE = (
    "import torch\n"
    "import torch.nn as nn\n"
    "\n"
    "model_dp = nn.DataParallel(nn.Linear(4, 2))\n"
    'torch.save(model_dp.state_dict(), "dp.pt")\n'
)


# ---------------------------------------------------------------- DPL004 strip-module
def test_strip_module_quotes_torch_error_and_origin():
    code = DP_SAVE + "net = nn.Linear(4, 2)\nnet.load_state_dict(torch.load('dp.pt'))\n"
    (finding,) = [f for f in lint(code) if f.code == "DPL004"]
    assert (finding.location.row, finding.location.column) == (7, 1)
    assert (finding.end_location.row, finding.end_location.column) == (7, 41)
    assert finding.message == (
        "`net` is a bare model but gets the checkpoint 'dp.pt' that line 5 saves from `model_dp.state_dict()` "
        "of a DataParallel, whose keys all start with `module.`: torch raises `RuntimeError: Error(s) in "
        "loading state_dict for Linear: Missing key(s) in state_dict: ... Unexpected key(s) in state_dict: "
        '"module.…`; strip the prefix with `consume_prefix_in_state_dict_if_present(state_dict, "module.")`'
    )


def test_strip_module_strict_false_says_nothing_loads():
    code = DP_SAVE + "net = nn.Linear(4, 2)\nresult = net.load_state_dict(torch.load('dp.pt'), strict=False)\nprint(result)\n"
    (finding,) = [f for f in lint(code) if f.code == "DPL004"]
    assert "with `strict=False` it loads nothing and says nothing" in finding.message


def test_strip_module_follows_keys_of_a_saved_dict():
    code = (
        "import os\nimport torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from models import Net\n"
        "ddp = DDP(Net())\n"
        'torch.save({"model": ddp.state_dict(), "step": 1}, os.path.join("ckpt", "last.pt"))\n'
        'ckpt = torch.load("ckpt/./last.pt")\n'
        "net = Net()\n"
        'net.load_state_dict(ckpt["model"])\n'
        'net.load_state_dict(ckpt["ema"])\n'
    )
    assert found(code, ["DPL004"]) == [(9, 1, "DPL004", "error")]


def test_strip_module_links_one_path_variable_in_a_file():
    code = (
        "import os\nimport torch\nimport torch.nn as nn\n"
        "def run(args):\n"
        "    path = os.path.join(args.out, 'best.pt')\n"
        "    dp = nn.DataParallel(nn.Linear(2, 2))\n"
        "    torch.save(dp.state_dict(), path)\n"
        "    fresh = nn.Linear(2, 2)\n"
        "    fresh.load_state_dict(torch.load(path))\n"
        "def other(path):\n"
        "    nn.Linear(2, 2).load_state_dict(torch.load(path))\n"
    )
    assert found(code, ["DPL004"]) == [(9, 5, "DPL004", "error")]
    (finding,) = lint(code, select=["DPL004"])
    assert "the checkpoint `path` that line 7 saves" in finding.message


@pytest.mark.parametrize(
    "code",
    [
        # The target may itself be a wrapper: a parameter, a deep copy, an imported factory.
        DP_SAVE + "def load(model):\n    model.load_state_dict(torch.load('dp.pt'))\n",
        DP_SAVE + "import copy\nema = copy.deepcopy(model_dp)\nema.load_state_dict(model_dp.state_dict())\n",
        DP_SAVE + "from zoo import get_model\nm = get_model()\nm.load_state_dict(torch.load('dp.pt'))\n",
        # Loading back into the wrapper itself is right.
        DP_SAVE + "model_dp.load_state_dict(torch.load('dp.pt'))\n",
        # A different file, or different keys.
        DP_SAVE + "nn.Linear(4, 2).load_state_dict(torch.load('other.pt'))\n",
        DP_SAVE + "nn.Linear(4, 2).load_state_dict(torch.load('dp.pt')['model'])\n",
        # A local factory that wraps.
        DP_SAVE + "def build():\n    return nn.DataParallel(nn.Linear(4, 2))\nbuild().load_state_dict(torch.load('dp.pt'))\n",
        # The prefix was already consumed.
        DP_SAVE
        + "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present as strip\n"
        + "ckpt = {'model': torch.load('dp.pt')}\n"
        + "strip(ckpt['model'], 'module.')\n"
        + "nn.Linear(4, 2).load_state_dict(ckpt['model'])\n",
    ],
)
def test_strip_module_stays_silent_where_it_cannot_tell(code):
    assert [f for f in lint(code) if f.code == "DPL004"] == []


def test_strip_module_knows_local_classes_and_factories():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "class Net(nn.Module):\n    pass\n"
        "def build():\n    net = Net()\n    return net.to('cpu')\n"
        "dp = nn.DataParallel(build())\n"
        "copy_ = build()\n"
        "copy_.load_state_dict(dp.state_dict())\n"
    )
    (finding,) = lint(code, select=["DPL004"])
    assert (finding.location.row, finding.location.column) == (10, 1)
    assert "loading state_dict for Net:" in finding.message
    assert "(line 10)" not in finding.message  # the state dict is on the same line


def test_strip_module_fix_hoists_multiline_argument_with_comment():
    code = DP_SAVE + (
        "\n"
        "def evaluate():\n"
        "    net = nn.Linear(4, 2)\n"
        "    net.load_state_dict(\n"
        "        torch.load(\n"
        '            "dp.pt",\n'
        '            map_location="cpu",\n'
        "        ),  # the weights\n"
        "        strict=True,\n"
        "    )\n"
    )
    assert fixed(code, "DPL004") == (
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "\n"
        "model_dp = nn.DataParallel(nn.Linear(4, 2))\n"
        'torch.save(model_dp.state_dict(), "dp.pt")\n'
        "\n"
        "def evaluate():\n"
        "    net = nn.Linear(4, 2)\n"
        "    state_dict = torch.load(\n"
        '            "dp.pt",\n'
        '            map_location="cpu",\n'
        "        )\n"
        '    consume_prefix_in_state_dict_if_present(state_dict, "module.")\n'
        "    net.load_state_dict(\n"
        "        state_dict,  # the weights\n"
        "        strict=True,\n"
        "    )\n"
    )


def test_strip_module_fix_keeps_crlf_and_tabs():
    code = (
        "import torch\r\n"
        "import torch.nn as nn\r\n"
        "def main():\r\n"
        "\tdp = nn.DataParallel(nn.Linear(2, 2))\r\n"
        "\tif True:\r\n"
        "\t\tbare = nn.Linear(2, 2)\r\n"
        "\t\tbare.load_state_dict(dp.state_dict())  # copy\r\n"
    )
    assert fixed(code, "DPL004") == (
        "import torch\r\n"
        "import torch.nn as nn\r\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\r\n"
        "def main():\r\n"
        "\tdp = nn.DataParallel(nn.Linear(2, 2))\r\n"
        "\tif True:\r\n"
        "\t\tbare = nn.Linear(2, 2)\r\n"
        "\t\tstate_dict = dp.state_dict()\r\n"
        '\t\tconsume_prefix_in_state_dict_if_present(state_dict, "module.")\r\n'
        "\t\tbare.load_state_dict(state_dict)  # copy\r\n"
    )


def test_strip_module_fix_adds_the_import_once_and_avoids_taken_names():
    code = (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from models import Net\n"
        "state_dict = None\n"
        "ddp = DDP(Net())\n"
        "Net().load_state_dict(ddp.state_dict())\n"
        "Net().load_state_dict(ddp.state_dict())\n"
    )
    assert fixed(code, "DPL004") == (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from models import Net\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "state_dict = None\n"
        "ddp = DDP(Net())\n"
        "state_dict_1 = ddp.state_dict()\n"
        'consume_prefix_in_state_dict_if_present(state_dict_1, "module.")\n'
        "Net().load_state_dict(state_dict_1)\n"
        "state_dict_1 = ddp.state_dict()\n"
        'consume_prefix_in_state_dict_if_present(state_dict_1, "module.")\n'
        "Net().load_state_dict(state_dict_1)\n"
    )


def test_strip_module_import_goes_above_a_load_right_after_the_imports():
    code = "import torch\nfrom models import Net\nNet().load_state_dict(torch.nn.DataParallel(Net()).state_dict())\n"
    assert fixed(code, "DPL004") == (
        "import torch\n"
        "from models import Net\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "state_dict = torch.nn.DataParallel(Net()).state_dict()\n"
        'consume_prefix_in_state_dict_if_present(state_dict, "module.")\n'
        "Net().load_state_dict(state_dict)\n"
    )


def test_strip_module_fix_reuses_an_existing_import_alias():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present as strip_prefix\n"
        "dp = nn.DataParallel(nn.Linear(2, 2))\n"
        "sd = dp.state_dict()\n"
        "nn.Linear(2, 2).load_state_dict(sd)\n"
    )
    assert fixed(code, "DPL004") == code.replace(
        "nn.Linear(2, 2).load_state_dict(sd)\n", 'strip_prefix(sd, "module.")\nnn.Linear(2, 2).load_state_dict(sd)\n'
    )


def test_strip_module_fix_is_unsafe_when_the_variable_is_read_later():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "dp = nn.DataParallel(nn.Linear(2, 2))\n"
        "ckpt = {'model': dp.state_dict()}\n"
        "sd = dp.state_dict()\n"
        "nn.Linear(2, 2).load_state_dict(sd)\n"
        "print(len(sd))\n"
    )
    (finding,) = lint(code, select=["DPL004"])
    assert finding.fix_applicability.value == "unsafe"
    assert fix(code, unsafe=False, only=frozenset({"DPL004"})) == code


def test_strip_module_fix_keyed_reuse_is_safe_when_other_keys_are_read():
    code = (
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom models import Net\n"
        "ddp = DDP(Net())\n"
        "torch.save({'model': ddp.state_dict(), 'epoch': 3}, 'c.pt')\n"
        "ckpt = torch.load('c.pt')\n"
        "Net().load_state_dict(ckpt['model'])\n"
        "epoch = ckpt['epoch']\n"
    )
    (finding,) = lint(code, select=["DPL004"])
    assert finding.fix_applicability.value == "safe"
    assert fixed(code, "DPL004").endswith(
        "ckpt = torch.load('c.pt')\n"
        "consume_prefix_in_state_dict_if_present(ckpt['model'], \"module.\")\n"
        "Net().load_state_dict(ckpt['model'])\n"
        "epoch = ckpt['epoch']\n"
    )


@pytest.mark.parametrize(
    "line",
    [
        "x = Net().load_state_dict(ddp.state_dict()) if ok else None\n",  # runs conditionally
        "a = 1; Net().load_state_dict(ddp.state_dict())\n",  # not alone on its line
        "if ok: Net().load_state_dict(ddp.state_dict())\n",
    ],
)
def test_strip_module_flags_but_does_not_fix_odd_places(line):
    code = "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom models import Net\nddp = DDP(Net())\n" + line
    (finding,) = lint(code, select=["DPL004"])
    assert finding.fix_applicability is None
    assert fixed(code, "DPL004") == code


# ---------------------------------------------------------------- DPL005 strict-false-load
def test_strict_false_load_positions_and_display_only_fix():
    code = (
        "model.load_state_dict(sd, strict=False)  # partial\n"
        "_ = model.load_state_dict(sd, False)\n"
        "unused = model.load_state_dict(\n"
        "    sd,\n"
        "    strict=False,\n"
        ")\n"
        "kept = model.load_state_dict(sd, strict=False)\n"
        "log(kept)\n"
        "missing, unexpected = model.load_state_dict(sd, strict=False)\n"
        "assert not missing\n"
        "model.load_state_dict(sd, strict=True)\n"
        "optimizer.load_state_dict(sd)\n"
    )
    results = lint(code, select=["DPL005"])
    assert [(f.location.row, f.location.column, f.end_location.row) for f in results] == [(1, 1, 1), (2, 5, 2), (3, 10, 6)]
    assert {f.fix_applicability.value for f in results} == {"display"}
    assert all(f.edits == [] for f in results)
    assert fix(code) == code


@pytest.mark.parametrize(
    "before",
    [
        "missing = set(net.state_dict()) - set(sd)\nprint(missing)\n",
        "own = net.state_dict()\nprint([k for k in sd if k not in own])\n",
        "own = net.state_dict().keys()\nassert all(k in own for k in sd)\n",
    ],
)
def test_strict_false_load_silent_when_keys_were_compared_first(before):
    code = "import torch\nsd = torch.load('a.pt')\n" + before + "net.load_state_dict(sd, strict=False)\n"
    assert found(code, ["DPL005"]) == []


def test_strict_false_load_silent_for_a_dict_built_from_the_model():
    code = (
        "import torch\n"
        "def load(model, path):\n"
        "    pretrained = torch.load(path)['model']\n"
        "    own = model.state_dict()\n"
        "    own.update({k: v for k, v in pretrained.items() if k in own})\n"
        "    model.load_state_dict(own, strict=False)\n"
        "    model.load_state_dict({k: v for k, v in pretrained.items() if k in model.state_dict()}, strict=False)\n"
    )
    assert found(code, ["DPL005"]) == []
    # Another model's keys prove nothing about this one (line 7); another live module's own
    # state dict (line 6, `teacher.state_dict()` updated) is no checkpoint: silent.
    other = code.replace("own = model.state_dict()", "own = teacher.state_dict()").replace(
        "if k in model.state_dict()", "if k in teacher.state_dict()")
    assert found(other, ["DPL005"]) == [(7, 5, "DPL005", "warning")]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("net.load_state_dict(load_url(model_urls['resnet50']), strict=False)\n", []),
        ("net.load_state_dict(torch.hub.load_state_dict_from_url('https://x/r50.pth'), strict=False)\n", []),
        ("net.load_state_dict(torch.hub.load_state_dict_from_url(args.finetune), strict=False)\n", [(5, 1)]),
        ("net.load_state_dict(student.module.state_dict(), strict=False)\n", []),
        ("check_keys(net, sd)\nnet.load_state_dict(sd, strict=False)\n", []),
        ("sd = intersect_dicts(sd, net.state_dict(), exclude=['anchor'])\nnet.load_state_dict(sd, strict=False)\n", []),
        ("own = net.state_dict()\nfor k in ['head.weight', 'head.bias']:\n    if k in sd and sd[k].shape != own[k].shape:\n"
         "        del sd[k]\nnet.load_state_dict(sd, strict=False)\n", [(9, 1)]),
    ],
)
def test_strict_false_load_known_keys_and_partial_checks(line, expected):
    code = "import torch\nfrom torch.utils.model_zoo import load_url\nsd = torch.load('a.pt')\nmodel_urls = {}\n" + line
    assert [(row, column) for row, column, _, _ in found(code, ["DPL005"])] == expected


def test_strict_false_load_silent_when_a_loop_fills_the_dict_from_the_model_keys():
    code = (
        "import torch\n"
        "def load(model, full):\n"
        "    meta = model.state_dict()\n"
        "    sharded = {}\n"
        "    for name, tensor in full.items():\n"
        "        like = meta.get(name)\n"
        "        sharded[name] = shard(tensor, like)\n"
        "    model.load_state_dict(sharded, strict=False, assign=True)\n"
    )
    assert found(code, ["DPL005"]) == []
    assert found(code.replace("meta.get(name)", "None"), ["DPL005"]) == [(8, 5, "DPL005", "warning")]


def test_save_wrapped_of_a_parameter_whose_only_caller_passes_a_wrapper():
    code = (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def save(model, path):\n"
        "    torch.save(model.state_dict(), path)\n"
        "def main(net):\n"
        "    save(DDP(net), 'a.pt')\n"
    )
    assert found(code, ["DPL006"]) == [(4, 16, "DPL006", "warning")]
    # Callers differ: the helper's parameter is not known there, but the hand-over of the
    # wrapper to a function that saves its state_dict() is.
    two_callers = code + "    save(net, 'b.pt')\n"
    assert found(two_callers, ["DPL006"]) == [(6, 10, "DPL006", "warning")]


@pytest.mark.parametrize(
    "before, expected",
    [
        # Key sets of both, intersected or differenced, before the load: compared.
        ("print(set(net.state_dict()) & set(sd))\n", []),
        ("print(set(sd.keys()) ^ set(net.state_dict().keys()))\n", []),
        ("print(set(sd).intersection(net.state_dict()))\n", []),
        ("own = net.state_dict()\nprint(set(sd).difference(own))\n", []),
        # Each checkpoint key looked up in the model's own dict (KeyError for a key it lacks).
        ("sd = {k: v for k, v in sd.items() if net.state_dict()[k].shape == v.shape}\n", []),
        # Counts are no comparison of keys; neither is the checkpoint's own key list, nor a
        # loop that only stores into the model's dict.
        ("print(len(net.state_dict()) - len(sd))\n", [(4, 1)]),
        ("print(set(sd) & set(sd))\n", [(4, 1)]),
        ("for k in sd:\n    print(k, net.state_dict)\n", [(5, 1)]),
        ("own = net.state_dict()\nfor k, v in sd.items():\n    own[k] = v\n", [(6, 1)]),
    ],
)
def test_strict_false_load_key_sets_and_lookups_before_the_load(before, expected):
    code = "import torch\nsd = torch.load('a.pt')\n" + before + "net.load_state_dict(sd, strict=False)\n"
    assert [(row, column) for row, column, _, _ in found(code, ["DPL005"])] == expected


@pytest.mark.parametrize(
    "test, expected",
    [
        ("cfg.pretrained", []),  # a factory's published weights: the head may differ
        ("'imagenet' in cfg.pretrain_file", []),
        ("'Net' in cfg.pretrain_file", [(6, 9)]),  # a checkpoint of this very model
        ("'net' in cfg.PRETRAIN_FILE and training", [(6, 9)]),
    ],
)
def test_strict_false_load_pretrained_file_of_the_target_class(test, expected):
    code = (
        "import torch\nfrom models import Net\n"
        "def build(cfg, training):\n"
        "    net = Net()\n"
        f"    if {test}:\n"
        "        net.load_state_dict(torch.load(cfg.pretrain_file), strict=False)\n"
        "    return net\n"
    )
    assert [(row, column) for row, column, _, _ in found(code, ["DPL005"])] == expected


def test_strict_false_load_unrelated_statement_before_is_not_a_check():
    code = "import torch\nsd = torch.load('a.pt')\nprint(len(sd), net.state_dict)\nnet.load_state_dict(sd, strict=False)\n"
    assert found(code, ["DPL005"]) == [(4, 1, "DPL005", "warning")]


# ------------------------------------------------------------ DPL006 save-wrapped-state-dict
def test_save_wrapped_fix_is_unsafe_without_a_load_back():
    (finding,) = lint(DP_SAVE, select=["DPL006"])
    assert (finding.location.row, finding.location.column) == (5, 12)
    assert finding.fix_applicability.value == "unsafe"
    assert fix(DP_SAVE, unsafe=False) == DP_SAVE
    assert fixed(DP_SAVE, "DPL006") == DP_SAVE.replace("model_dp.state_dict()", "model_dp.module.state_dict()")


def test_save_wrapped_trainer_attribute_with_load_back_is_safe():
    code = (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "\n"
        "class Trainer:\n"
        "    def __init__(self, net, rank):\n"
        "        self.model = DDP(net.to(rank), device_ids=[rank])\n"
        "\n"
        "    def save(self):\n"
        "        torch.save(self.model.state_dict(), 'trainer.pt')  # every epoch\n"
        "\n"
        "    def load(self):\n"
        "        self.model.load_state_dict(torch.load('trainer.pt', map_location='cpu'))\n"
    )
    (finding,) = lint(code, select=["DPL006"])
    assert (finding.location.row, finding.location.column, finding.fix_applicability.value) == (9, 20, "safe")
    assert fix(code, unsafe=False) == code.replace("self.model.state_dict()", "self.model.module.state_dict()").replace(
        "self.model.load_state_dict(", "self.model.module.load_state_dict("
    )


def test_save_wrapped_fix_is_unsafe_when_a_load_target_is_unknown():
    code = DP_SAVE + "def restore(model):\n    model.load_state_dict(torch.load('dp.pt'))\nmodel_dp.load_state_dict(torch.load('dp.pt'))\n"
    (finding,) = lint(code, select=["DPL006"])
    assert finding.fix_applicability.value == "unsafe"
    assert len(finding.edits) == 2  # the save and the load back into the wrapper


def test_save_wrapped_conditional_wrapper_has_no_fix():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "model = nn.Linear(2, 2)\n"
        "if torch.cuda.device_count() > 1:\n"
        "    model = nn.DataParallel(model)\n"
        "else:\n"
        "    pass\n"
        "torch.save(model.state_dict(), 'm.pt')\n"
    )
    (finding,) = lint(code, select=["DPL006"])
    assert (finding.location.row, finding.location.column) == (8, 12)
    assert finding.fix_applicability is None
    assert "wrapped only on some paths" in finding.message


def test_save_wrapped_under_the_same_branch_is_fixable():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "def main(multi):\n"
        "    if multi:\n"
        "        model = nn.DataParallel(nn.Linear(2, 2))\n"
        "        torch.save(\n"
        "            model.state_dict(),\n"
        "            'm.pt',\n"
        "        )\n"
    )
    assert fixed(code, "DPL006") == code.replace("model.state_dict()", "model.module.state_dict()")


def test_save_wrapped_through_a_variable_is_flagged_where_the_state_dict_is_taken():
    code = DP_SAVE.replace('torch.save(model_dp.state_dict(), "dp.pt")\n', 'sd = model_dp.state_dict()\ntorch.save(sd, "dp.pt")\n')
    (finding,) = lint(code, select=["DPL006"])
    assert (finding.location.row, finding.location.column, finding.fix_applicability.value) == (5, 6, "unsafe")


MULTI = (
    "import torch\n"
    "import torch.nn as nn\n"
    "multi = torch.cuda.device_count() > 1\n"
    "net = nn.Linear(4, 2)\n"
    "if multi:\n"
    "    net = nn.DataParallel(net)\n"
)


@pytest.mark.parametrize(
    "save, expected",
    [
        # The branch of the same test where the model is bare: right.
        ("if multi:\n    torch.save(net.module.state_dict(), 'a.pt')\nelse:\n    torch.save(net.state_dict(), 'a.pt')\n", []),
        ("if not multi:\n    torch.save(net.state_dict(), 'a.pt')\n", []),
        ("torch.save((net.module if multi else net).state_dict(), 'a.pt')\n", []),
        ("torch.save(net.state_dict() if not multi else net.module.state_dict(), 'a.pt')\n", []),
        ("core = net.module if isinstance(net, nn.DataParallel) else net\ntorch.save(core.state_dict(), 'a.pt')\n", []),
        ("core = net.module if hasattr(net, 'module') else net\ntorch.save(core.state_dict(), 'a.pt')\n", []),
        # The wrapped branch, and code after both: flagged.
        ("if multi:\n    torch.save(net.state_dict(), 'a.pt')\n", [(8, 16, "DPL006", "warning")]),
        ("torch.save(net.state_dict(), 'a.pt')\n", [(7, 12, "DPL006", "warning")]),
    ],
)
def test_save_wrapped_judged_per_path(save, expected):
    assert found(MULTI + save, ["DPL006"]) == expected


def test_save_wrapped_on_the_wrapped_branch_is_fixable():
    code = MULTI + "if multi:\n    torch.save(net.state_dict(), 'a.pt')\n"
    assert fixed(code, "DPL006") == code.replace("torch.save(net.state_dict()", "torch.save(net.module.state_dict()")


def test_save_wrapped_through_a_builder_and_an_attribute():
    from dplint.rules.save_wrapped_state_dict import _BUILDER_LOOP  # the rule's own example setup

    code = (
        _BUILDER_LOOP
        + "        torch.save(self.model.state_dict(), 'loop.pt')\n"
        "wrapped = build(nn.Linear(2, 2))\n"
        "torch.save({'model': wrapped.state_dict()}, 'b.pt')\n"
    )
    assert found(code, ["DPL006"]) == [(9, 20, "DPL006", "warning"), (11, 22, "DPL006", "warning")]


def test_strip_module_silent_on_the_bare_branch():
    code = MULTI + (
        "torch.save(net.state_dict(), 'a.pt')\n"
        "fresh = nn.Linear(4, 2)\n"
        "if not multi:\n"
        "    fresh.load_state_dict(net.state_dict())\n"
    )
    assert [f for f in found(code, ["DPL004"])] == []
    wrapped_branch = code.replace("if not multi:", "if multi:")
    assert found(wrapped_branch, ["DPL004"]) == [(10, 5, "DPL004", "error")]


def test_save_through_a_same_file_helper_links_save_and_load():
    code = (
        "import torch\n"
        "import torch.nn as nn\n"
        "def save_checkpoint(state, path):\n"
        "    torch.save(state, path)\n"
        "class Keeper:\n"
        "    def keep(self, weights):\n"
        "        torch.save({'net': weights}, 'keep.pt')\n"
        "ddp = nn.DataParallel(nn.Linear(2, 2))\n"
        "save_checkpoint({'model': ddp.state_dict(), 'epoch': 1}, 'ckpt.pt')\n"
        "Keeper().keep(ddp.state_dict())\n"
        "fresh = nn.Linear(2, 2)\n"
        "fresh.load_state_dict(torch.load('ckpt.pt')['model'])\n"
        "fresh.load_state_dict(torch.load('keep.pt')['net'])\n"
        "fresh.load_state_dict(torch.load('ckpt.pt')['epoch'])\n"
    )
    assert found(code, ["DPL004", "DPL006"]) == [
        (9, 27, "DPL006", "warning"),
        (10, 15, "DPL006", "warning"),
        (12, 1, "DPL004", "error"),
        (13, 1, "DPL004", "error"),
    ]
    assert "`save_checkpoint(...)` saves `ddp.state_dict()`" in [f.message for f in lint(code, select=["DPL006"])][0]


def test_save_through_a_star_args_forwarding_helper():
    code = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def save_on_master(*args, **kwargs):\n"
        "    if dist.get_rank() == 0:\n"
        "        torch.save(*args, **kwargs)\n"
        "model = DDP(net)\n"
        "save_on_master({'model': model.state_dict()}, out + '/checkpoint.pth')\n"
        "save_on_master({'model': model.module.state_dict()}, out + '/checkpoint.pth')\n"
        "save_on_master(f=out + '/c.pth', obj=model.state_dict())\n"
    )
    assert found(code, ["DPL006", "DPL011"]) == [(8, 26, "DPL006", "warning"), (10, 38, "DPL006", "warning")]


def test_path_shapes_for_matching_across_files():
    from dplint.checkpoints import path_shape

    code = (
        "import os\n"
        "a = f'{out}/last.pt'\n"
        "b = os.path.join(args.dir, 'last.pt')\n"
        "c = args.dir + '/last.pt'\n"
        "d = f'{run}.pt'\n"
        "e = 'last.pt'\n"
        "f = os.path.join(args.dir, name)\n"
    )
    model = analysed(cst.parse_module(code))
    assigns = [s.body[0] for s in model.module.body[1:]]
    assert [path_shape(model, a.value, a) for a in assigns] == ["*/last.pt", "*/last.pt", "*/last.pt", None, None, None]


def test_helper_that_saves_something_else_is_not_a_save_of_the_argument():
    code = (
        "import torch\n"
        "import torch.nn as nn\n"
        "def log(weights, path):\n"
        "    torch.save({'n': len(weights)}, path)\n"
        "ddp = nn.DataParallel(nn.Linear(2, 2))\n"
        "log(ddp.state_dict(), 'n.pt')\n"
    )
    assert found(code, ["DPL006"]) == []


def test_save_wrapped_with_crlf_and_tabs():
    code = "import torch\r\nimport torch.nn as nn\r\nif True:\r\n\tdp = nn.DataParallel(nn.Linear(2, 2))\r\n\ttorch.save({'m': dp.state_dict()}, 'x.pt')\r\n"
    assert fixed(code, "DPL006") == code.replace("dp.state_dict()", "dp.module.state_dict()")


# ---------------------------------------------------------------- DPL013 hand-rolled-strip
def test_hand_rolled_strip_severities():
    # Strips guarded per key (lines 5, 7, 8) remove exactly the prefix: correct, not flagged.
    code = (
        "import torch\n"
        "sd = torch.load('m.pt')\n"
        "a = {k.lstrip('module.'): v for k, v in sd.items()}\n"
        "b = {k[7:]: v for k, v in sd.items()}\n"
        "c = {k[7:] if k.startswith('module.') else k: v for k, v in sd.items()}\n"
        "d = {k.replace('module.', ''): v for k, v in sd.items()}\n"
        "e = {k.replace('module.', '', 1) if k.startswith('module.') else k: v for k, v in sd.items()}\n"
        "f = {(k[7:] if 'module.' in k else k): v for k, v in sd.items()}\n"
        "for key in sd.keys():\n"
        "    new_key = key[len('module.'):]\n"
    )
    assert found(code, ["DPL013"]) == [
        (3, 6, "DPL013", "error"),
        (4, 6, "DPL013", "warning"),
        (6, 6, "DPL013", "warning"),
        (10, 15, "DPL013", "warning"),
    ]


def test_hand_rolled_strip_lstrip_fact_in_message():
    code = "import torch\nsd = torch.load('m.pt')\nsd = {k.lstrip('module.'): v for k, v in sd.items()}\n"
    (finding,) = lint(code, select=["DPL013"])
    assert '`"module.mlp.w".lstrip("module.")` is `"p.w"`' in finding.message


@pytest.mark.parametrize(
    "line",
    [
        "x = {k.replace('_orig_mod.', ''): v for k, v in sd.items()}\n",
        "x = {k[10:]: v for k, v in sd.items()}\n",
        "x = {k[7:]: v for k, v in sd.items() if k.startswith('encoder')}\n",
        "x = [k[7:] for k in sorted(sd)]\n",  # not the mapping itself
        "x = {k.strip('module.'): v for k, v in sd.items()}\n",
        "x = {name[7:]: v for k, v in sd.items()}\n",  # not the key variable
        # Another prefix that happens to start with "module." (timm's fastvit does this).
        "x = {k.replace('module.visual.trunk.', ''): v for k, v in sd.items() if k.startswith('module.visual.trunk')}\n",
    ],
)
def test_hand_rolled_strip_near_misses(line):
    code = "import torch\nsd = torch.load('m.pt')\n" + line
    assert found(code, ["DPL013"]) == []


@pytest.mark.parametrize(
    "line, expected",
    [
        # split / partition at the wrapper's prefix
        ("x = {(k.split('module.', 1)[1] if k.startswith('module.') else k): v for k, v in sd.items()}\n", []),
        ("x = {k.split('module.')[-1]: v for k, v in sd.items()}\n", [(3, 6, "warning")]),
        ("x = {k.partition('module.')[2] if k.startswith('module.') else k: v for k, v in sd.items()}\n", []),
        # the first component dropped: per key under a `module` guard (correct), or after a first-key check
        ("x = {'.'.join(k.split('.')[1:]): v for k, v in sd.items() if k.startswith('module.')}\n", []),
        ("x = {k.split('.', 1)[1] if k.startswith('module') else k: v for k, v in sd.items()}\n", []),
        ("s = 1 if list(sd)[0].startswith('module') else 0\nx = {'.'.join(k.split('.')[s:]): v for k, v in sd.items()}\n",
         [(4, 6, "warning")]),
        # an exact test of the first key decides for every key (a wrapper's keys all carry it);
        # without the dot it is not exact (`module_list.` of a bare Darknet matches)
        ("if next(iter(sd)).startswith('module.'):\n    x = {k.partition('.')[2]: v for k, v in sd.items()}\n", []),
        ("if next(iter(sd)).startswith('module'):\n    x = {k.partition('.')[2]: v for k, v in sd.items()}\n",
         [(4, 10, "warning")]),
        # renamed in place over a copy of the keys
        ("for k in list(sd.keys()):\n    if k.startswith('module.'):\n        sd[k[len('module.'):]] = sd.pop(k)\n",
         []),
        ("for k in list(sd):\n    sd[k[7:]] = sd.pop(k)\n", [(4, 8, "warning")]),
        # a name cut in a loop, then used as the new key
        ("new = {}\nfor k, v in sd.items():\n    name = k[7:]\n    new[name] = v\n", [(5, 12, "warning")]),
    ],
)
def test_hand_rolled_strip_spellings(line, expected):
    code = "import torch\nsd = torch.load('m.pt')\n" + line
    assert [(row, column, severity) for row, column, _, severity in found(code, ["DPL013"])] == expected


def test_hand_rolled_strip_prefix_passed_as_a_parameter():
    code = (
        "import torch\n"
        "def without_lead(sd, lead):\n"
        "    cut = lambda name: name.partition(lead)[2]\n"
        "    return {cut(n): t for n, t in sd.items()}\n"
        "net.load_state_dict(without_lead(torch.load('a.pt'), 'module.'))\n"
    )
    assert found(code, ["DPL013"]) == [(3, 24, "DPL013", "warning")]
    # Another caller passes another prefix: the parameter is not the wrapper's prefix.
    assert found(code + "enc.load_state_dict(without_lead(torch.load('b.pt'), 'encoder.'))\n", ["DPL013"]) == []
    as_def = code.replace("    cut = lambda name: name.partition(lead)[2]\n",
                          "    def cut(name):\n        return name.split(lead, 1)[1]\n")
    assert found(as_def, ["DPL013"]) == [(4, 16, "DPL013", "warning")]


@pytest.mark.parametrize(
    "line",
    [
        # `module.` inside the key: only a sub-module was wrapped.
        "x = {k.replace('module.', ''): v for k, v in sd.items() if k.startswith('backbone.module.')}\n",
        "x = {k.split('module.', 1)[1]: v for k, v in sd.items() if k.startswith('encoder.module.')}\n",
        # Another first component, nothing says `module`.
        "x = {'.'.join(k.split('.')[1:]): v for k, v in sd.items() if k.startswith('backbone.')}\n",
        "x = {'.'.join(k.split('.')[1:]): v for k, v in sd.items()}\n",
        "x = {k.split('.', 1)[1]: v for k, v in sd.items()}\n",
        "x = {k.split('.')[1]: v for k, v in sd.items()}\n",
        "x = {k.split('module.')[0]: v for k, v in sd.items()}\n",
    ],
)
def test_hand_rolled_strip_other_prefixes_stay_clean(line):
    code = "import torch\nsd = torch.load('m.pt')\n" + line
    assert found(code, ["DPL013"]) == []


def test_hand_rolled_strip_unguarded_slice_needs_a_known_state_dict():
    code = "def f(table):\n    return {k[7:]: v for k, v in table.items()}\n"
    assert found(code, ["DPL013"]) == []
    assert found(code.replace("table.items()", "table.state_dict().items()"), ["DPL013"]) == [(2, 13, "DPL013", "warning")]


def test_hand_rolled_strip_fix_shapes_with_odd_formatting():
    code = (
        "import torch\r\n"
        "def load(path):\r\n"
        "\tckpt = torch.load(path)\r\n"
        "\tweights = {  # strip DataParallel's prefix\r\n"
        "\t\tk[7:]: v\r\n"
        "\t\tfor k, v in ckpt['model'].items()\r\n"
        "\t}\r\n"
        "\tfor k, v in ckpt['ema'].items():\r\n"
        "\t\tprint(k[7:])\r\n"
        "\treturn weights\r\n"
    )
    assert fixed(code, "DPL013") == (
        "import torch\r\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\r\n"
        "def load(path):\r\n"
        "\tckpt = torch.load(path)\r\n"
        "\tweights = dict(ckpt['model'])\r\n"
        '\tconsume_prefix_in_state_dict_if_present(weights, "module.")\r\n'
        "\tfor k, v in ckpt['ema'].items():\r\n"
        "\t\tprint(k[7:])\r\n"
        "\treturn weights\r\n"
    )
    results = lint(code, select=["DPL013"])
    assert [(f.location.row, f.fix_applicability and f.fix_applicability.value) for f in results] == [(5, "unsafe"), (9, None)]


@pytest.mark.parametrize(
    "line",
    [
        "sd = {k[7:]: v.cpu() for k, v in sd.items()}\n",  # changes values
        "a = b = {k[7:]: v for k, v in sd.items()}\n",
        "use({k[7:]: v for k, v in sd.items()})\n",
    ],
)
def test_hand_rolled_strip_no_fix_where_the_shape_differs(line):
    code = "import torch\nsd = torch.load('m.pt')\n" + line
    (finding,) = lint(code, select=["DPL013"])
    assert finding.fix_applicability is None


# ------------------------------------------------------------ all four, fixing together
def test_fixing_all_rules_converges_and_is_idempotent():
    code = DP_SAVE + (
        "net = nn.Linear(4, 2)\n"
        "sd = torch.load('dp.pt')\n"
        "sd = {k[7:]: v for k, v in sd.items()}\n"
        "net.load_state_dict(torch.load('dp.pt'), strict=False)\n"
    )
    once = fix(code)
    assert once == (
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
        "\n"
        "model_dp = nn.DataParallel(nn.Linear(4, 2))\n"
        'torch.save(model_dp.module.state_dict(), "dp.pt")\n'
        "net = nn.Linear(4, 2)\n"
        "sd = torch.load('dp.pt')\n"
        'consume_prefix_in_state_dict_if_present(sd, "module.")\n'
        "state_dict = torch.load('dp.pt')\n"
        'consume_prefix_in_state_dict_if_present(state_dict, "module.")\n'
        "net.load_state_dict(state_dict, strict=False)\n"
    )
    assert fix(once) == once
    assert [f.code for f in lint(once, select=CHECKPOINT_RULES)] == ["DPL005"]


# ------------------------------------------------------------ shared analysis
def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(code))


@pytest.mark.parametrize(
    "expr, expected",
    [
        ('"ckpt/model.pt"', "ckpt/model.pt"),
        ('os.path.join("ckpt", "model.pt")', "ckpt/model.pt"),
        ('os.path.join("ckpt", "sub", "..", "model.pt")', "ckpt/model.pt"),
        ('"./ckpt/" "model.pt"', "ckpt/model.pt"),
        ("CKPT", "runs/x.pt"),
        ('f"ckpt/{epoch}.pt"', None),
        ('os.path.join(out, "model.pt")', None),
        ('b"model.pt"', None),
        ('""', None),
    ],
)
def test_literal_path(expr, expected):
    model = model_of(f'import os\nCKPT = os.path.join("runs", "x.pt")\np = {expr}\n')
    value = model.module.body[-1].body[0].value
    assert literal_path(model, value, value) == expected


@pytest.mark.parametrize(
    "setup, expected",
    [
        ("m = nn.Linear(2, 2)", "Linear"),
        ("m = torchvision.models.resnet18()", ""),
        ("m = Net().cuda()", "Net"),
        ("m = nn.DataParallel(Net()).module", ""),
        ("m = nn.DataParallel(Net())", None),
        ("m = copy.deepcopy(x)", None),
        ("m = make()", None),
        ("m = torch.optim.SGD(p, lr=1)", None),
        ("m = MyDataParallel(Net())", None),
    ],
)
def test_bare_model_class(setup, expected):
    code = f"import copy\nimport torch\nimport torchvision\nimport torch.nn as nn\nfrom models import Net, MyDataParallel, make\n{setup}\nm.load_state_dict(sd)\n"
    model = model_of(code)
    (load,) = checkpoint_facts(model).loads
    assert bare_model_class(model, load.target, load.call) == expected


# ------------------------------------------------------------ torch, re-checked
@pytest.mark.runtime
def test_torch_behaves_as_the_messages_say(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    wrapped = torch.nn.DataParallel(net).state_dict()
    assert all(key.startswith("module.") for key in wrapped)
    bare = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    with pytest.raises(RuntimeError) as error:
        bare.load_state_dict(wrapped)
    text = str(error.value)
    assert text.startswith("Error(s) in loading state_dict for Sequential:")
    assert 'Missing key(s) in state_dict: "0.weight"' in text
    assert 'Unexpected key(s) in state_dict: "module.0.weight"' in text
    before = bare[0].weight.detach().clone()
    result = bare.load_state_dict(wrapped, strict=False)
    assert len(result.missing_keys) == 6 and len(result.unexpected_keys) == 7  # num_batches_tracked not missing
    assert torch.equal(bare[0].weight, before)  # nothing loaded
    consume_prefix_in_state_dict_if_present(wrapped, "module.")
    assert bare.load_state_dict(wrapped).missing_keys == []
    assert "" in wrapped._metadata and "0" in wrapped._metadata  # _metadata renamed too
    plain = bare.state_dict()
    consume_prefix_in_state_dict_if_present(plain, "module.")
    assert list(plain) == list(bare.state_dict())  # a no-op without the prefix
    assert "module.mlp.w".lstrip("module.") == "p.w"


@pytest.mark.runtime
def test_strip_module_example_raises_before_and_runs_after_the_fix(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from dplint.rules.strip_module import StripModule

    monkeypatch.chdir(tmp_path)
    example = StripModule.INVALID[0]
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "module\.weight"'):
        exec(compile(example.code, "before.py", "exec"), {})
    exec(compile(example.expected, "after.py", "exec"), {})


# ---------------------------------------------------------------- helpers, shapes, temporary files
@pytest.mark.parametrize(
    "expr, expected",
    [
        ('os.path.join(out, "checkpoint_{}.tar".format(epoch))', "*/checkpoint_*.tar"),
        ('log_dir + "/segnet_best"', "*/segnet_best"),
        ('f"{out}/{epoch}"', None),  # the file name says nothing
        ('f"{out}/ep_{epoch}.pt"', None),  # a stem of 3 characters: too common
        ('os.path.join(out, "{}.pt".format(epoch))', None),
    ],
)
def test_path_shapes_of_formatted_and_extensionless_names(expr, expected):
    from dplint.checkpoints import path_shape

    model = model_of(f"import os\np = {expr}\n")
    assign = model.module.body[1].body[0]
    assert path_shape(model, assign.value, assign) == expected


def test_helper_path_is_read_with_the_callers_arguments():
    code = (
        "import torch\n"
        "import torch.nn as nn\n"
        "def write_state(state, log_dir, suffix=''):\n"
        "    torch.save(state, log_dir + '/segnet' + suffix)\n"
        "def fit(log_dir):\n"
        "    net = nn.DataParallel(nn.Linear(2, 2))\n"
        "    write_state({'weights': net.state_dict()}, log_dir, suffix='_best')\n"
    )
    (save,) = checkpoint_facts(model_of(code)).saves
    assert (save.path.shape, save.keys, save.through_helper) == ("*/segnet_best", ("weights",), True)


@pytest.mark.parametrize(
    "body, expected",
    [
        # Unwraps DataParallel only: a DDP reaches the else branch.
        ("    if isinstance(net, nn.DataParallel):\n        torch.save(net.module.state_dict(), 'w.pt')\n"
         "    else:\n        torch.save(net.state_dict(), 'w.pt')\n", [(8, 20, "DPL006", "warning")]),
        # Any wrapper is unwrapped.
        ("    if hasattr(net, 'module'):\n        torch.save(net.module.state_dict(), 'w.pt')\n"
         "    else:\n        torch.save(net.state_dict(), 'w.pt')\n", []),
        ("    if isinstance(net, (nn.DataParallel, DDP)):\n        net = net.module\n"
         "    torch.save(net.state_dict(), 'w.pt')\n", []),
    ],
)
def test_helper_that_saves_a_parameters_state_dict(body, expected):
    code = (
        "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        f"def store(net):\n{body}"
        "def run(rank):\n"
        "    store(DDP(nn.Linear(2, 2).cuda(rank), device_ids=[rank]))\n"
    )
    assert found(code, ["DPL006"]) == expected


def test_wrapper_handed_to_a_plain_saving_helper_is_reported_at_the_hand_over():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "def save_model(model, path):\n"
        "    torch.save({'model': model.state_dict()}, path)\n"
        "net = nn.DataParallel(nn.Linear(2, 2))\n"
        "save_model(net, 'm.pt')\n"
        "save_model(net.module, 'inner.pt')\n"
    )
    (finding,) = lint(code, select=["DPL006"])
    assert (finding.location.row, finding.location.column) == (6, 12)
    assert "`save_model(...)` saves `model.state_dict()`, and `net` is a DataParallel here" in finding.message


def test_project_dataparallel_subclass_and_batchnorm_converter_keep_the_wrapper():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "class CallbackParallel(nn.DataParallel):\n    pass\n"
        "net = CallbackParallel(nn.Linear(2, 2))\n"
        "torch.save(net.state_dict(), 'a.pt')\n"
        "other = nn.DataParallel(nn.Linear(2, 2))\n"
        "other = nn.SyncBatchNorm.convert_sync_batchnorm(other)\n"
        "torch.save(other.state_dict(), 'b.pt')\n"
    )
    assert [row for row, *_ in found(code, ["DPL006"])] == [6, 9]


@pytest.mark.parametrize(
    "path, expected",
    [
        ("os.path.join(tempfile.gettempdir(), 'sync.ckpt')", []),
        ("tempfile.mkdtemp() + '/sync.ckpt'", []),
        ("os.path.join(out_dir, 'sync.ckpt')", [(7, 16, "DPL006", "warning")]),
    ],
)
def test_temporary_round_trip_into_the_wrapper_is_silent(path, expected):
    code = (
        "import os\nimport tempfile\nimport torch\nimport torch.nn as nn\n"
        "def sync(out_dir):\n"
        "    ddp = nn.DataParallel(nn.Linear(2, 2))\n"
        f"    torch.save(ddp.state_dict(), {path})\n"
        f"    ddp.load_state_dict(torch.load({path}))\n"
    )
    assert found(code, ["DPL006"]) == expected


def test_strict_false_silent_when_a_method_compares_the_keys_with_the_target():
    code = (
        "import torch\nimport torch.nn as nn\n"
        "class Detector:\n"
        "    def __init__(self, path):\n"
        "        self.net = nn.Linear(2, 2)\n"
        "        sd = torch.load(path)\n"
        "        self.{helper}(sd)\n"
        "        self.net.load_state_dict(sd, strict=False)\n"
        "    def compare(self, sd):\n"
        "        print(set(self.net.state_dict()) - set(sd))\n"
        "    def count(self, sd):\n"
        "        print(len(sd))\n"
    )
    assert found(code.replace("{helper}", "compare"), ["DPL005"]) == []
    assert [row for row, *_ in found(code.replace("{helper}", "count"), ["DPL005"])] == [8]


def test_hand_rolled_replace_silent_where_a_submodule_is_wrapped_in_place():
    loop = "sd = {k.replace('module.', ''): v for k, v in torch.load('m.pt').items()}\n"
    head = "import torch\nimport torch.nn as nn\nmodel = Net()\n"
    assert found(head + "model.encoder = nn.DataParallel(model.encoder)\n" + loop, ["DPL013"]) == []
    assert [row for row, *_ in found(head + "model = nn.DataParallel(model)\n" + loop, ["DPL013"])] == [5]


def test_strict_false_silent_for_a_copy_of_a_live_state_dict():
    code = (
        "import copy\nimport torch.nn as nn\n"
        "a, b = nn.Linear(2, 2), nn.Linear(2, 2)\n"
        "b.load_state_dict(copy.deepcopy(a.state_dict()), strict=False)\n"
        "b.load_state_dict(dict(a.state_dict()), strict=False)\n"
    )
    assert found(code, ["DPL005"]) == []
