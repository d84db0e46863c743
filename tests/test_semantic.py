"""The shared semantic model: imports, bindings, scopes and wrappers."""

from __future__ import annotations

import libcst as cst

from dplint.semantic import SemanticModel, method_call
from dplint.flow import analysed


def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(code))


def method_calls(model: SemanticModel, method: str):
    return [site.node for site in model.calls if (method_call(site.node) or (None, None))[1] == method]


def test_qualified_names_follow_imports_and_aliases():
    model = model_of(
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.utils.data.distributed import DistributedSampler\n"
        "a = nn.DataParallel(m)\n"
        "b = DDP(m)\n"
        "c = torch.nn.parallel.data_parallel.DataParallel(m)\n"
        "d = DistributedSampler(ds)\n"
        "e = unknown.DataParallel(m)\n"
    )
    assert [site.qualified_name for site in model.calls] == [
        "torch.nn.DataParallel",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.DataParallel",
        "torch.utils.data.DistributedSampler",
        None,
    ]


def test_rebinding_makes_the_name_the_wrapper():
    model = model_of(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = Net()\n"
        "model = DDP(model.to(0))\n"
        "model.train()\n"
    )
    (wrapping,) = model.wrappings
    assert (wrapping.inner_key, wrapping.wrapper_key, wrapping.rebinds) == ("model", "model", True)
    (train,) = method_calls(model, "train")
    receiver = train.func.value
    assert model.wrapping_of_inner(receiver, train) is None
    assert model.wrapping_bound_to(receiver, train) is wrapping


def test_inner_model_used_after_wrapping_into_another_name():
    model = model_of(
        "import torch.nn as nn\n"
        "model = Net()\n"
        "model.train()\n"  # before the wrapping: nothing to say
        "model_dp = nn.DataParallel(model).cuda()\n"
        "def step():\n"
        "    model.eval()\n"  # the module-level model, wrapped above
        "def other(model):\n"
        "    model.eval()\n"  # a parameter: unknown
    )
    before, in_step, in_other = method_calls(model, "train") + method_calls(model, "eval")
    assert model.wrapping_of_inner(before.func.value, before) is None
    assert model.wrapping_of_inner(in_step.func.value, in_step).wrapper_key == "model_dp"
    assert model.wrapping_of_inner(in_other.func.value, in_other) is None


def test_self_attributes_in_trainer_classes():
    model = model_of(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "class Trainer:\n"
        "    def __init__(self, net):\n"
        "        self.net = net\n"
        "        self.ddp = DDP(self.net)\n"
        "    def fit(self):\n"
        "        self.net.train()\n"
        "        self.ddp.train()\n"
    )
    inner_call, wrapper_call = method_calls(model, "train")
    assert model.wrapping_of_inner(inner_call.func.value, inner_call).wrapper_key == "self.ddp"
    assert model.wrapping_bound_to(wrapper_call.func.value, wrapper_call).wrapper_key == "self.ddp"


def test_conditional_wrapper_expression():
    model = model_of(
        "import torch.nn as nn\n"
        "net = nn.DataParallel(model) if n_gpu > 1 else model\n"
        "net.train()\n"
    )
    (wrapping,) = model.wrappings
    assert wrapping.wrapper_key == "net" and wrapping.inner_key == "model"
    (train,) = method_calls(model, "train")
    assert model.wrapping_bound_to(train.func.value, train) is wrapping


def test_no_grad_contexts_and_decorators():
    model = model_of(
        "import torch\n"
        "with torch.no_grad():\n"
        "    a()\n"
        "@torch.inference_mode()\n"
        "def evaluate():\n"
        "    b()\n"
        "with torch.set_grad_enabled(False):\n"
        "    c()\n"
        "d()\n"
    )
    assert {site.node.func.value: site.in_no_grad for site in model.calls if isinstance(site.node.func, cst.Name)} == {
        "a": True, "b": True, "c": True, "d": False,
    }


def test_function_locals_shadow_globals():
    model = model_of(
        "x = 1\n"
        "def f():\n"
        "    y = x\n"
        "    x = 2\n"  # x is local to f: the read above sees no binding (UnboundLocalError)
        "def g():\n"
        "    return x\n"
    )
    f_read = model.module.body[1].body.body[0].body[0].value
    g_read = model.module.body[2].body.body[0].body[0].value
    assert model.value_at(f_read) is None
    assert model.code(model.value_at(g_read)) == "1"


def test_wrapper_moved_after_wrapping_is_still_the_wrapper():
    model = model_of(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(model)\n"
        "model = model.to(device)\n"
        "model.train()\n"
    )
    (train,) = method_calls(model, "train")
    assert model.wrapping_bound_to(train.func.value, train) is model.wrappings[0]


def test_comprehension_variables_are_bound_before_the_element():
    model = model_of("k = 'outer'\nnew = {k[7:]: v for k, v in sd.items()}\n")
    element_k = model.module.body[1].body[0].value.key.value
    assert model.binding_at("k", element_k).node is model.module.body[1].body[0].value
    assert model.value_at(element_k) is None  # unknown, never the outer 'outer'


def test_positions_equal_libcst_position_provider_on_every_fixture_node():
    """dplint computes positions in its own codegen pass (cheaper); they must be LibCST's."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    from conftest import FIXTURES

    scripts = sorted(FIXTURES.rglob("*.py"))
    assert len(scripts) > 50
    for script in scripts:
        text = script.read_text()
        text += "\r\nx = (1,\r\n  2)  # crlf tail\r\n"
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue  # a pre-3.7 script kept for the parse fallback (`x.cuda(async=True)`)
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        model = analysed(module)
        for node, code_range in expected.items():
            assert model.position(node) == (code_range.start, code_range.end), (script.name, type(node).__name__)
