"""DPL012: parts of the gathered result followed through nested subscripts and unpacking,
returns the call site rules out, and wrappers taken out of a list by index."""

from __future__ import annotations

from conftest import fix, lint

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def found(code: str) -> list[tuple[int, int]]:
    return [(f.location.row, f.location.column) for f in lint(code) if f.code == "DPL012"]


NET = HEAD + (
    "class Net(nn.Module):\n"
    "    def nll(self, out, y):\n"
    "        return F.cross_entropy(out, y)\n"
    "    def forward(self, x, y=None):\n"
    "        out = self.fc(x)\n"
    "        if y is None:\n"
    "            return out, x, x\n"
    "        return out, [self.nll(out, y), out.pow(2).mean()]\n"
    "dp = nn.DataParallel(Net())\n"
)


def test_an_element_of_a_returned_list_through_a_helper():
    code = NET + "out, losses = dp(x, y)\nloss = losses[0] + 0.1 * losses[1]\nloss.backward()\n"
    assert found(code) == [(14, 8)]
    assert fix(code, unsafe=True, only=frozenset({"DPL012"})) == code  # a part: reported, not fixed


def test_unpacked_from_a_name_and_subscripted_twice():
    code = NET + "res = dp(x, y)\n_, losses = res\nres[1][0].backward()\n"
    assert found(code) == [(15, 1)]


def test_the_part_that_is_the_batch_is_silent():
    code = NET + "out, losses = dp(x, y)\nF.cross_entropy(out, y).backward()\n"
    assert found(code) == []


def test_a_return_that_the_unpacking_rules_out_does_not_count():
    # The three-element return (a batch at index 1) cannot be unpacked into two names: the
    # forward names the loss from its other return.
    code = NET + "a, b = dp(x, y)\nb[0].backward()\n"
    assert found(code) == [(14, 1)]
    assert [f.message for f in lint(code) if f.code == "DPL012"][0].startswith("`Net.forward` returns a 0-d loss")


def test_a_wrapped_criterion_taken_from_a_module_list_by_index():
    code = HEAD + (
        "crits = nn.ModuleList([nn.CrossEntropyLoss()])\n"
        "crits.append(nn.DataParallel(nn.MSELoss()))\n"
        "loss = crits[0](logits, y) + crits[1](pred, target)\n"
        "loss.backward()\n"
    )
    assert found(code) == [(6, 30)]


def test_an_index_whose_element_is_not_wrapped_is_silent():
    code = HEAD + (
        "crits = [nn.CrossEntropyLoss(), nn.DataParallel(nn.MSELoss())]\n"
        "loss = crits[0](logits, y)\n"
        "loss.backward()\n"
    )
    assert found(code) == []
