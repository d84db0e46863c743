"""DPL001 wrapper-train, DPL002 wrapper-bypass, DPL003 loss-on-cpu, DPL012 scalar-gather, DPL009
late-cuda-visible-devices, and dplint/training.py.

The generic tests cover each rule's VALID/INVALID examples and its fixtures; these pin the
fixes under awkward formatting (comments, multi-line calls, CRLF, tabs), the precision
choices (what must stay silent) and the shared training-step analysis.
"""

from __future__ import annotations

import subprocess
import sys

import libcst as cst
import pytest

from conftest import fix, lint
from dplint.rule import Severity
from dplint.training import backprops, feeds_backward
from dplint.flow import analysed


def found(code: str, rule: str) -> list[tuple[int, int]]:
    return [(f.location.row, f.location.column) for f in lint(code) if f.code == rule]


def fixed(code: str, rule: str, unsafe: bool = True) -> str:
    result = fix(code, unsafe=unsafe, only=frozenset({rule}))
    cst.parse_module(result)
    assert fix(result, unsafe=unsafe, only=frozenset({rule})) == result  # idempotent
    return result


DP = "import torch.nn as nn\n"
DDP = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


# ------------------------------------------------------------------ DPL001 wrapper-train
class TestWrapperTrain:
    def test_crlf_and_trailing_comment_are_kept(self):
        code = "import torch.nn as nn\r\nmodel_dp = nn.DataParallel(model)\r\nmodel.train()  # back to training\r\n"
        assert found(code, "DPL001") == [(3, 1)]
        assert fixed(code, "DPL001") == (
            "import torch.nn as nn\r\nmodel_dp = nn.DataParallel(model)\r\nmodel_dp.train()  # back to training\r\n"
        )

    def test_tabs(self):
        code = DP + "def run(model):\n\tmodel_dp = nn.DataParallel(model)\n\tif True:\n\t\tmodel.eval()\t# eval\n"
        assert found(code, "DPL001") == [(5, 3)]
        assert fixed(code, "DPL001") == (
            DP + "def run(model):\n\tmodel_dp = nn.DataParallel(model)\n\tif True:\n\t\tmodel_dp.eval()\t# eval\n"
        )

    def test_parenthesised_multiline_call(self):
        code = DP + "model_dp = nn.DataParallel(model)\n(\n    model  # the inner one\n    .train(\n        True,\n    )\n)\n"
        assert found(code, "DPL001") == [(4, 5)]
        assert fixed(code, "DPL001") == (
            DP + "model_dp = nn.DataParallel(model)\n(\n    model_dp  # the inner one\n    .train(\n        True,\n    )\n)\n"
        )

    def test_module_form_keeps_comment_inside_the_call(self):
        code = DDP + "ddp = DDP(model)\nddp.module.eval(  # validation\n)\n"
        assert found(code, "DPL001") == [(3, 1)]
        assert fixed(code, "DPL001") == DDP + "ddp = DDP(model)\nddp.eval(  # validation\n)\n"

    def test_message_states_what_torch_does(self):
        (finding,) = [f for f in lint(DP + "model_dp = nn.DataParallel(model)\nmodel.train()\n") if f.code == "DPL001"]
        assert finding.severity is Severity.INFO
        assert "only `model_dp.training` goes stale" in finding.message
        assert "already follows `model`'s mode" in finding.message
        for folklore in ("replica", "stay in eval", "dropout", "BatchNorm"):
            assert folklore not in finding.message

    def test_conditional_wrapper_without_fallback_is_silent(self):
        code = DP + "if n_gpu > 1:\n    model_dp = nn.DataParallel(model)\nmodel.train()\n"
        assert found(code, "DPL001") == []

    def test_wrapper_in_try_or_loop_is_not_certain(self):
        in_try = DP + "try:\n    model_dp = nn.DataParallel(model)\nexcept RuntimeError:\n    pass\nmodel.train()\n"
        in_loop = DP + "while retry:\n    model_dp = nn.DataParallel(model)\nmodel.train()\n"
        assert found(in_try, "DPL001") == []
        assert found(in_loop, "DPL001") == []

    def test_wrapper_in_the_same_branch_is_certain(self):
        code = DP + "if n_gpu > 1:\n    model_dp = nn.DataParallel(model)\n    model.train()\n"
        assert fixed(code, "DPL001") == DP + "if n_gpu > 1:\n    model_dp = nn.DataParallel(model)\n    model_dp.train()\n"

    def test_other_function_or_rebound_names_are_silent(self):
        other_function = DP + "model_dp = nn.DataParallel(model)\ndef evaluate():\n    model.eval()\n"
        wrapper_rebound = DP + "model_dp = nn.DataParallel(model)\nmodel_dp = None\nmodel.train()\n"
        inner_rebound = DP + "model_dp = nn.DataParallel(model)\nmodel = build()\nmodel.train()\n"
        for code in (other_function, wrapper_rebound, inner_rebound):
            assert found(code, "DPL001") == [], code

    def test_trainer_attribute_set_outside_init_is_silent(self):
        code = (
            DP + "class Trainer:\n"
            "    def __init__(self, net):\n"
            "        self.net = net\n"
            "    def setup(self):\n"
            "        self.dp = nn.DataParallel(self.net)\n"
            "    def fit(self):\n"
            "        self.net.train()\n"
        )
        assert found(code, "DPL001") == []


# ----------------------------------------------------------------- DPL002 wrapper-bypass
class TestWrapperBypass:
    def test_multiline_call_with_comments(self):
        code = DDP + (
            "ddp = DDP(model)\n"
            "loss = criterion(\n"
            "    model(  # forward\n"
            "        inputs,\n"
            "    ),  # logits\n"
            "    targets,\n"
            ")\n"
            "loss.backward()\n"
        )
        assert found(code, "DPL002") == [(4, 5)]
        assert fixed(code, "DPL002") == code.replace("    model(  # forward", "    ddp(  # forward")

    def test_crlf_and_tabs(self):
        code = DDP + "def train(model, loader):\r\n\tddp = DDP(model)\r\n\tfor x, y in loader:\r\n\t\tout = model(x)\t# logits\r\n\t\tcriterion(out, y).backward()\r\n"
        assert found(code, "DPL002") == [(5, 9)]
        assert fixed(code, "DPL002") == code.replace("out = model(x)", "out = ddp(x)")

    def test_module_form_fix(self):
        code = DDP + "ddp = DDP(model)\nfor x, y in loader:\n    (ddp.module)(x).sum().backward()\n"
        assert found(code, "DPL002") == [(4, 5)]
        assert fixed(code, "DPL002") == DDP + "ddp = DDP(model)\nfor x, y in loader:\n    (ddp)(x).sum().backward()\n"

    def test_severity_follows_the_wrapper(self):
        ddp = DDP + "w = DDP(model)\nmodel(x).sum().backward()\n"
        dp = DP + "w = nn.DataParallel(model)\nmodel(x).sum().backward()\n"
        (ddp_finding,) = [f for f in lint(ddp) if f.code == "DPL002"]
        (dp_finding,) = [f for f in lint(dp) if f.code == "DPL002"]
        assert ddp_finding.severity is Severity.ERROR
        assert "all-reduce does not run" in ddp_finding.message and "drift apart" in ddp_finding.message
        assert dp_finding.severity is Severity.WARNING
        assert "one GPU only" in dp_finding.message

    def test_fix_is_unsafe(self):
        code = DDP + "w = DDP(model)\nmodel(x).sum().backward()\n"
        assert fixed(code, "DPL002", unsafe=False) == code
        assert fixed(code, "DPL002") == DDP + "w = DDP(model)\nw(x).sum().backward()\n"

    @pytest.mark.parametrize(
        "body",
        [
            # evaluation under the grad-disabling contexts and decorators
            "with torch.no_grad():\n    loss = model(x).sum()\nloss.backward()\n",
            "with torch.inference_mode():\n    out = model(x)\n",
            "with torch.set_grad_enabled(False):\n    model(x).sum().backward()\n",
            "@torch.no_grad()\ndef ev():\n    loss = model(x).sum()\n    loss.backward()\n",
            # the inner output does not carry gradient into the loss
            "target = model(x).detach()\nloss = criterion(student(x), target)\nloss.backward()\n",
            "criterion(student(x), model(x).data).backward()\n",
            # the backward is in another function
            "out = model(x)\ndef step():\n    criterion(out, y).backward()\n",
            # a logged sample in the training loop, never back-propagated
            "for x, y in loader:\n    criterion(w(x), y).backward()\n    sample = model(x0)\n",
        ],
    )
    def test_silent(self, body):
        code = "import torch\nw = torch.nn.parallel.DistributedDataParallel(model)\n" + body
        assert found(code, "DPL002") == []

    def test_flows_through_tuples_attributes_and_augmented_assignment(self):
        code = DDP + (
            "w = DDP(model)\n"
            "logits, aux = model(x)\n"
            "loss = criterion(logits, y)\n"
            "loss += 0.1 * aux.mean()\n"
            "scaler.scale(loss / 2).backward()\n"
        )
        assert found(code, "DPL002") == [(3, 15)]

    def test_trainer_attribute_bound_in_another_method_is_silent(self):
        code = DDP + (
            "class T:\n"
            "    def __init__(self, m):\n"
            "        self.model = m\n"
            "        self.ddp = DDP(self.model)\n"
            "    def step(self, x):\n"
            "        self.model(x).sum().backward()\n"
            "    def unwrap_for_export(self):\n"
            "        self.model = self.ddp\n"
        )
        assert found(code, "DPL002") == []


# -------------------------------------------------------------------- DPL003 loss-on-cpu
CE = "import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\n"


class TestLossOnCpu:
    def test_multiline_call_comments_crlf(self):
        code = CE.replace("\n", "\r\n") + (
            "loss = criterion(\r\n"
            "    logits.cpu(),  # predictions\r\n"
            "    labels.to('cpu'),\r\n"
            ")\r\n"
            "loss.backward()\r\n"
        )
        assert found(code, "DPL003") == [(4, 5), (5, 5)]
        assert fixed(code, "DPL003") == CE.replace("\n", "\r\n") + (
            "loss = criterion(\r\n    logits,  # predictions\r\n    labels,\r\n)\r\nloss.backward()\r\n"
        )

    def test_tabs_and_method_chains(self):
        code = CE + "for x, y in loader:\n\tloss = criterion(net(x).float().cpu()[:, :10], y.cpu().long())\n\tloss.backward()\n"
        assert found(code, "DPL003") == [(4, 19), (4, 49)]
        assert fixed(code, "DPL003") == CE + "for x, y in loader:\n\tloss = criterion(net(x).float()[:, :10], y.long())\n\tloss.backward()\n"

    def test_parentheses_are_kept(self):
        code = CE + "criterion((out).cpu(), (y.cpu())).backward()\n"
        assert fixed(code, "DPL003") == CE + "criterion((out), (y)).backward()\n"

    def test_comment_inside_the_move_blocks_the_fix(self):
        code = CE + "criterion(out.cpu(  # host\n), y.cpu()).backward()\n"
        assert found(code, "DPL003") == [(3, 11), (4, 4)]
        assert fixed(code, "DPL003") == code

    def test_fix_is_unsafe(self):
        code = CE + "criterion(out.cpu(), y.cpu()).backward()\n"
        assert fixed(code, "DPL003", unsafe=False) == code
        assert fixed(code, "DPL003") == CE + "criterion(out, y).backward()\n"

    def test_message_states_the_cost_not_a_wrong_result(self):
        (finding,) = [f for f in lint(CE + "criterion(out.cpu(), y).backward()\n") if f.code == "DPL003"]
        assert finding.severity is Severity.WARNING
        assert "the loss and gradients are the same" in finding.message
        assert "blocking device-to-host copy" in finding.message

    @pytest.mark.parametrize(
        "backward",
        [
            "loss.backward()",
            "scaler.scale(loss).backward()",
            "accelerator.backward(loss)",
            "torch.autograd.backward([loss])",
            "(loss / accumulation_steps).backward()",
        ],
    )
    def test_backward_forms(self, backward):
        code = "import torch\n" + CE + f"loss = criterion(out.cpu(), y)\n{backward}\n"
        assert found(code, "DPL003") == [(4, 18)]

    def test_apex_and_deepspeed(self):
        apex = CE + "from apex import amp\nloss = criterion(out.cpu(), y)\nwith amp.scale_loss(loss, opt) as scaled:\n    scaled.backward()\n"
        deepspeed = CE + (
            "import deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=net)\n"
            "loss = criterion(engine(x).cpu(), y)\nengine.backward(loss)\n"
        )
        assert found(apex, "DPL003") == [(4, 18)]
        assert found(deepspeed, "DPL003") == [(5, 18)]

    @pytest.mark.parametrize(
        "body",
        [
            # metrics on host copies after backward()
            "loss = criterion(out, y)\nloss.backward()\nlogged = criterion(out.detach().cpu(), y.cpu()).item()\n",
            # the model's input, not the loss's
            "criterion(net(x.cpu()), y).backward()\n",
            # not a loss: a call nothing says is one, and a forward through a model
            "score = helper(out.cpu(), y.cpu())\nloss = criterion(out, y) + 0 * score\nloss.backward()\n",
            "loss = net(x.cpu(), y.cpu())\nloss.backward()\n",
            # CTC's integer targets and lengths may have to be on the CPU
            "ctc = nn.CTCLoss()\nctc(log_probs, targets.cpu(), in_lens.cpu(), tgt_lens.cpu()).backward()\n",
            # a CPU device variable in a script that never uses an accelerator
            "dev = torch.device('cpu')\ncriterion(out.to(dev), y.to(dev)).backward()\n",
            # a device that is the CPU on one path only
            "dev = 'cpu'\nif torch.cuda.is_available():\n    dev = 'cuda'\ncriterion(out.to(dev), y).backward()\n",
            # `.to(other)` with a tensor or a dtype
            "criterion(out.to(y), y.to(torch.long)).backward()\n",
        ],
    )
    def test_silent(self, body):
        assert found("import torch\n" + CE + body, "DPL003") == []

    def test_cpu_device_variable_in_a_cuda_script(self):
        code = "import torch\n" + CE + "HOST = torch.device('cpu')\nnet.cuda()\ncriterion(out.to(HOST), y.to(HOST)).backward()\n"
        assert found(code, "DPL003") == [(6, 11), (6, 25)]
        assert fixed(code, "DPL003") == code.replace("out.to(HOST), y.to(HOST)", "out, y")

    def test_no_fix_when_an_input_stays_on_the_host(self):
        left_on_host = CE + "criterion(out.cpu(), labels).backward()\n"
        weight_on_host = "import torch.nn.functional as F\nF.cross_entropy(out.cpu(), y.cpu(), weight=w).backward()\n"
        twice = CE + "criterion(out.cpu().float().cpu(), y.cpu()).backward()\n"
        assert found(left_on_host, "DPL003") == [(3, 11)]
        assert found(weight_on_host, "DPL003") == [(2, 17), (2, 28)]
        for code in (left_on_host, weight_on_host, twice):
            assert fixed(code, "DPL003") == code

    def test_options_and_literals_do_not_block_the_fix(self):
        code = "import torch.nn.functional as F\nF.cross_entropy(out.cpu(), y.cpu(), None, reduction=mode, label_smoothing=0.1).backward()\n"
        assert fixed(code, "DPL003") == code.replace("out.cpu(), y.cpu()", "out, y")

    def test_ctc_log_probs_is_flagged(self):
        code = CE + "import torch.nn.functional as F\nF.ctc_loss(lp.cpu(), t.cpu(), il, tl).backward()\n"
        assert found(code, "DPL003") == [(4, 12)]


# --------------------------------------------------------------- dplint/training.py
def test_backprops_and_what_feeds_them():
    module = cst.parse_module(
        "import torch\n"
        "from accelerate import Accelerator\n"
        "accelerator = Accelerator()\n"
        "out, aux = net(x)\n"
        "unused = net(z)\n"
        "loss = crit(out, y)\n"
        "loss += aux.mean()\n"
        "accelerator.backward(loss)\n"
    )
    model = analysed(module)
    (backprop,) = backprops(model)
    assert [model.code(root) for root in backprop.roots] == ["loss"]
    calls = {model.code(site.node): site.node for site in model.calls}
    assert feeds_backward(model, calls["net(x)"])
    assert feeds_backward(model, calls["aux.mean()"])
    assert not feeds_backward(model, calls["net(z)"])


def test_static_path_never_imports_torch():
    script = (
        "import sys\n"
        "from dplint.engine import lint_source, rules_for\n"
        "code = open('fixtures/wrapper-bypass/bad_ddp_inner_forward.py').read()\n"
        "result = lint_source(code, 'x.py', rules_for(['DPL001', 'DPL002', 'DPL003']))\n"
        "assert [f.code for f in result.findings] == ['DPL002'], result\n"
        "assert 'torch' not in sys.modules\n"
    )
    from conftest import ROOT

    completed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


# ------------------------------------------------------------------ DPL012 scalar-gather
LOSS_NET = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    "class Net(nn.Module):\n"
    "    def forward(self, x, y):\n"
    "        return {returns}\n"
)


class TestScalarGatherParts:
    def test_an_element_of_a_returned_tuple(self):
        code = LOSS_NET.format(returns="F.l1_loss(x, y), x") + (
            "dp = nn.DataParallel(Net())\nloss, out = dp(x, y)\nloss.backward()\n"
        )
        assert found(code, "DPL012") == [(8, 13)]
        assert fixed(code, "DPL012") == code  # a tuple has no `.mean()`: reported, not fixed
        per_sample = LOSS_NET.format(returns="x, F.l1_loss(x, y)") + (
            "dp = nn.DataParallel(Net())\nloss, out = dp(x, y)\nloss.backward()\n"
        )
        assert found(per_sample, "DPL012") == []  # element 0 is the batch: proven not a loss

    def test_a_dict_entry_is_reported_where_it_is_taken(self):
        code = LOSS_NET.format(returns="{'loss': F.mse_loss(x, y), 'out': x}") + (
            "dp = nn.DataParallel(Net())\nout = dp(x, y)\nloss = out['loss']\nloss.backward()\n"
        )
        assert found(code, "DPL012") == [(9, 8)]

    def test_reduced_on_some_path_is_left_to_the_author(self):
        code = LOSS_NET.format(returns="F.mse_loss(x, y)") + (
            "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nif n_gpu > 1:\n    loss = loss.mean()\nloss.backward()\n"
        )
        assert found(code, "DPL012") == []

    def test_a_module_out_of_sight_is_judged_by_the_call_site(self):
        code = (
            "import torch.nn as nn\nfrom mmcv.parallel import MMDataParallel\nfrom registry import build_net\n"
            "class Runner:\n"
            "    def __init__(self, cfg):\n"
            "        self.net = MMDataParallel(build_net(cfg), device_ids=range(cfg.gpus)).cuda()\n"
            "    def step(self, batch):\n"
            "        output = self.net(batch)\n"
            "        loss = output['loss']\n"
            "        loss.backward()\n"
        )
        assert found(code, "DPL012") == [(9, 16)]
        one_gpu = code.replace("device_ids=range(cfg.gpus)", "device_ids=[0]")
        assert found(one_gpu, "DPL012") == []
        logits = code.replace("        loss = output['loss']\n", "        loss = criterion(output, batch)\n")
        assert found(logits, "DPL012") == []  # the loss is computed after the gather

    def test_a_subclass_that_does_not_gather_is_silent(self):
        code = (
            "import torch.nn as nn\nfrom models import build\n"
            "class KeepReplicas(nn.DataParallel):\n"
            "    def gather(self, outputs, device):\n"
            "        return outputs\n"
            "dp = KeepReplicas(build())\nlosses = dp(x)\nlosses.backward()\n"
        )
        assert found(code, "DPL012") == []
        assert found(code.replace("    def gather", "    def other"), "DPL012") == [(7, 10)]


# ------------------------------------------------------------ DPL009 late-cuda-visible-devices
def late_write(before: str) -> list[tuple[int, str]]:
    code = "import os\nimport torch\n" + before + "os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
    return [(f.location.row, f.severity.value) for f in lint(code) if f.code == "DPL009"]


@pytest.mark.parametrize(
    "before, severity",
    [
        # torch 2.13: GradScaler and autocast built for CUDA ask torch.cuda.is_available().
        ("scaler = torch.cuda.amp.GradScaler()\n", "error"),
        ("scaler = torch.amp.GradScaler('cuda')\n", "error"),
        ("scaler = torch.amp.GradScaler('cuda', enabled=args.amp)\n", "warning"),  # only when enabled
        ("scaler = torch.amp.GradScaler('cuda', enabled=False)\n", None),
        ("scaler = torch.amp.GradScaler('cpu')\n", None),
        ("ctx = torch.autocast('cuda', dtype=torch.float16)\n", "error"),
        ("ctx = torch.autocast(device_type='cpu')\n", None),
        # A checkpoint restored where it was saved; mapped, it is CUDA only when mapped there.
        ("state = torch.load('last.pt')\n", "warning"),
        ("state = torch.load('last.pt', map_location=lambda s, loc: s)\n", None),
        ("state = torch.load('last.pt', map_location=torch.device('cuda', 0))\n", "error"),
        # Methods and constructors of the file run in call order.
        ("class Net:\n    def __init__(self):\n        self.w = torch.zeros(3).cuda()\nnet = Net()\n", "error"),
        ("class Net:\n    def __init__(self):\n        self.w = None\n    def to_gpu(self):\n        self.w = torch.zeros(3).cuda()\n"
         "net = Net()\n", None),
        ("class Net:\n    def to_gpu(self):\n        self.w = torch.zeros(3).cuda()\nnet = Net()\nnet.to_gpu()\n", "error"),
    ],
)
def test_late_visible_devices_after(before, severity):
    lines = ("import os\nimport torch\n" + before).count("\n") + 1
    assert late_write(before) == ([(lines, severity)] if severity else [])


def test_late_visible_devices_reports_the_call_chain_of_a_helper():
    code = (
        "import os\nimport torch\n"
        "def report():\n"
        "    if torch.cuda.device_count() == 0:\n"
        "        return 'cpu'\n"
        "    return torch.cuda.get_device_name(0)\n"
        "def main():\n"
        "    print(report())\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
        "main()\n"
    )
    (finding,) = [f for f in lint(code) if f.code == "DPL009"]
    # device_count() runs on every path; get_device_name() only when a GPU is there.
    assert (finding.location.row, finding.severity.value) == (9, "warning")
    assert "`torch.cuda.get_device_name()` (line 6) initialised CUDA on the paths that run it" in finding.message
