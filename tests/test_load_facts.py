"""dplint.load_facts: each fact about a `load_state_dict` call, asked directly, with the
near-miss that must not count."""

from __future__ import annotations

import libcst as cst
import pytest

from dplint import load_facts
from dplint.checkpoints import checkpoint_facts
from dplint.flow import analysed


def last_load(code: str):
    model = analysed(cst.parse_module("import torch\n" + code))
    return model, checkpoint_facts(model).loads[-1]


@pytest.mark.parametrize("code, read", [
    ("r = net.load_state_dict(sd, strict=False)\nprint(r)\n", True),
    ("missing, unexpected = net.load_state_dict(sd, strict=False)\nassert not unexpected\n", True),
    ("_ = net.load_state_dict(sd, strict=False)\n", False),
    ("r = net.load_state_dict(sd, strict=False)\n", False),
    ("net.load_state_dict(sd, strict=False)\n", False),
])
def test_result_is_read(code, read):
    model, load = last_load(code)
    assert load_facts.result_is_read(model, load.call) is read


@pytest.mark.parametrize("before, matched", [
    ("print(set(net.state_dict()) - set(sd))\n", True),
    ("own = net.state_dict()\nown.update(sd)\nsd = own\n", True),
    ("sd = {k: v for k, v in sd.items() if k in net.state_dict()}\n", True),
    ("own = net.state_dict()\nmerge(sd, own)\n", True),
    ("check_layout(net, sd)\n", True),  # code that cannot be read, given the model and the dict
    ("print(len(net.state_dict()) - len(sd))\n", False),  # counts are no comparison
    ("print(net, sd)\n", False),  # Python's own print compares nothing
    ("own = net.state_dict()\nmerge(sd, len(own))\n", False),
    ("print(set(other.state_dict()) - set(sd))\n", False),  # another model's keys
])
def test_keys_matched_to_target(before, matched):
    model, load = last_load("sd = torch.load('a.pt')\n" + before + "net.load_state_dict(sd, strict=False)\n")
    assert load_facts.keys_matched_to_target(model, load) is matched


def test_keys_compared_after_the_load_only_where_it_ran():
    after = "net.load_state_dict(sd, strict=False)\n{guard}print(set(net.state_dict()) - set(sd))\n"
    model, load = last_load("sd = torch.load('a.pt')\n" + after.format(guard=""))
    assert load_facts.keys_matched_to_target(model, load)
    model, load = last_load("sd = torch.load('a.pt')\n" + after.format(guard="if verbose:\n    "))
    assert not load_facts.keys_matched_to_target(model, load)


@pytest.mark.parametrize("code, live", [
    ("teacher.load_state_dict(copy.deepcopy(student.state_dict()), strict=False)\n", True),
    ("def shrink(big, small):\n    new = {}\n    for k, p in big.state_dict().items():\n        new[k] = p[:4]\n"
     "    small.load_state_dict(new, strict=False)\n", True),
    ("def shrink(big, small):\n    new = {}\n    for k, p in big.state_dict().items():\n        new[k] = p[:4]\n"
     "    new.update(torch.load('f'))\n    small.load_state_dict(new, strict=False)\n", False),  # a file's keys too
    ("small.load_state_dict(torch.load('f'), strict=False)\n", False),
])
def test_holds_live_tensors(code, live):
    model, load = last_load(code)
    assert load_facts.holds_live_tensors(model, load) is live


@pytest.mark.parametrize("handler, reported", [
    ("except RuntimeError as e:\n    print(e)\n    net.load_state_dict(sd, strict=False)\n", True),
    ("except RuntimeError:\n    print('retrying')\n    net.load_state_dict(sd, strict=False)\n", False),
])
def test_mismatch_raised_by_strict_load(handler, reported):
    model, load = last_load("try:\n    net.load_state_dict(sd)\n" + handler)
    assert load_facts.mismatch_raised_by_strict_load(model, load) is reported


@pytest.mark.parametrize("url, published", [
    ("'https://example.org/r50.pth'", True),
    ("'https://example.org/' + name", True),
    ("URLS[name]", True),
    ("args.weights", False),
    ("LOCAL[name]", False),
])
def test_published_weights(url, published):
    model, load = last_load(
        "from torch.hub import load_state_dict_from_url\n"
        "URLS = {'a': 'https://example.org/a.pth'}\nLOCAL = {'a': '/data/a.pth'}\n"
        f"def build(net, name, args):\n    net.load_state_dict(load_state_dict_from_url({url}), strict=False)\n")
    assert load_facts.published_weights(model, load) is published


@pytest.mark.parametrize("code, factory", [
    ("def resnet(pretrained=False):\n    net = Net()\n    if pretrained:\n"
     "        net.load_state_dict(torch.load(URL), strict=False)\n", True),
    ("def build(args):\n    net = Net()\n    if args.pretrained:\n"
     "        net.load_state_dict(torch.load(args.pretrained), strict=False)\n", False),  # the user's own file
    ("def build(path):\n    net = Net()\n    net.load_state_dict(torch.load(path), strict=False)\n", False),
])
def test_pretrained_initialisation(code, factory):
    model, load = last_load(code)
    assert load_facts.pretrained_initialisation(model, load.call, load.bare_class) is factory


@pytest.mark.parametrize("imports, other", [
    ("import paddle\n", True),
    ("import paddle\nimport torch.nn\n", False),
    ("import numpy\n", False),
])
def test_other_framework_only(imports, other):
    model = analysed(cst.parse_module(imports + "net.load_state_dict(sd, strict=False)\n"))
    assert load_facts.other_framework_only(model) is other


def test_strict_parameters_follow_helpers():
    model = analysed(cst.parse_module(
        "import torch\n"
        "def inner(net, sd, strict=True):\n    net.load_state_dict(sd, strict=strict)\n"
        "def outer(net, path, exact=True):\n    inner(net, torch.load(path), strict=exact)\n"
        "def kept(net, path, exact=True):\n    return inner(net, torch.load(path), strict=exact)\n"
        "outer(net, 'a.pt', exact=False)\nouter(None, 'a.pt', exact=False)\n"))
    functions = {f.name.value: f for f in model.module.body if isinstance(f, cst.FunctionDef)}
    def always(model, load):
        return True
    assert set(load_facts.strict_parameters(model, functions["outer"], 3, always)) == {"exact"}
    assert load_facts.strict_parameters(model, functions["outer"], 1, always) == {}  # one level only
    assert load_facts.strict_parameters(model, functions["kept"], 3, always) == {}  # result handed back
    first, none_target = [site.node for site in model.calls if model.code(site.node.func) == "outer"]
    assert [model.code(load.target) for _, load in load_facts.loads_given_strict(model, first, 3, always)] == ["net"]
    # `outer(None, ...)` passes None on to `inner`'s target, but only a target of the called
    # function itself is known to be left None: the load two levels down is still reached.
    assert len(load_facts.loads_given_strict(model, none_target, 3, always)) == 1
