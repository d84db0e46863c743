"""DPL001/002/003/010/012 following values across functions, classes, branches and files.

Each test pairs a shape that real training code uses with its near-miss: the pattern must be
found where the value really gets (back-propagation through a helper's return, a Lightning
step, a loss module; a wrapper held in an attribute, a parameter, a helper's result, a
project subclass), and nothing must be said where the path does not exist.
"""

from __future__ import annotations

import libcst as cst

from conftest import fix, lint
from dplint.semantic import SemanticModel
from dplint.training import exclusive_paths, feeds_backward, held_wrapper, implicit_roots
from dplint.flow import analysed


def found(code: str, rule: str) -> list[tuple[int, int]]:
    return [(f.location.row, f.location.column) for f in lint(code) if f.code == rule]


def fixed(code: str, rule: str) -> str:
    result = fix(code, unsafe=True, only=frozenset({rule}))
    cst.parse_module(result)
    assert fix(result, unsafe=True, only=frozenset({rule})) == result  # idempotent
    return result


# ------------------------------------------------------------------ DPL003 loss-on-cpu
class TestLossOnCpuFlow:
    def test_host_copy_held_in_a_name_is_flagged_at_the_copy_without_fix(self):
        code = (
            "import torch\n"
            "import torch.nn.functional as F\n"
            "for x, y in loader:\n"
            "    out = model(x.to('cuda'))\n"
            "    out_host = out.float().cpu()\n"
            "    loss = F.smooth_l1_loss(out_host, y)\n"
            "    loss.backward()\n"
        )
        assert found(code, "DPL003") == [(5, 16)]
        assert fixed(code, "DPL003") == code

    def test_copy_held_in_a_name_in_a_cpu_only_script_is_silent(self):
        code = "import torch.nn.functional as F\nout_host = model(x).cpu()\nF.mse_loss(out_host, y).backward()\n"
        assert found(code, "DPL003") == []

    def test_name_rebound_to_the_device_copy_is_silent(self):
        code = (
            "import torch.nn.functional as F\n"
            "out = model(x.cuda())\n"
            "out_host = out.cpu()\n"
            "out_host = out\n"
            "F.mse_loss(out_host, y).backward()\n"
        )
        assert found(code, "DPL003") == []

    def test_copy_on_one_branch_is_flagged(self):
        code = (
            "import torch.nn.functional as F\n"
            "pred = model(x.cuda())\n"
            "if use_host_loss:\n"
            "    pred = pred.cpu()\n"
            "F.mse_loss(pred, y).backward()\n"
        )
        assert found(code, "DPL003") == [(4, 12)]

    def test_tuple_unpacked_loss_result(self):
        code = (
            "import torch\n"
            "host = torch.device('cpu')\n"
            "model.cuda()\n"
            "loss, acc = model.loss(emb.to(host), labels)\n"
            "loss.backward()\n"
        )
        assert found(code, "DPL003") == [(4, 24)]

    def test_helper_returning_the_loss_to_a_backward_caller(self):
        code = (
            "import torch.nn.functional as F\n"
            "def term(pred, target):\n"
            "    return F.l1_loss(pred, target)\n"
            "def train_step(model, x, y):\n"
            "    out = model(x.cuda())\n"
            "    loss = term(out.cpu(), y)\n"
            "    loss.backward()\n"
            "def evaluate(model, x, y):\n"
            "    return term(model(x).cpu(), y).item()\n"
        )
        assert found(code, "DPL003") == [(6, 17)]  # not the copy in evaluate()

    def test_helper_loss_used_only_for_validation_is_silent(self):
        code = (
            "import torch.nn.functional as F\n"
            "def host_loss(out, y):\n"
            "    return F.cross_entropy(out.cpu(), y.cpu())\n"
            "def validate(model, loader):\n"
            "    return sum(host_loss(model(x), y).item() for x, y in loader)\n"
        )
        assert found(code, "DPL003") == []

    def test_lightning_training_step_return_is_back_propagated(self):
        code = (
            "import lightning.pytorch as pl\n"
            "import torch.nn.functional as F\n"
            "class M(pl.LightningModule):\n"
            "    def shared(self, batch):\n"
            "        x, y = batch\n"
            "        return F.mse_loss(self(x).cpu(), y.cpu()), 0\n"
            "    def training_step(self, batch, batch_idx):\n"
            "        loss, acc = self.shared(batch)\n"
            "        return {'loss': loss, 'acc': acc}\n"
            "    def validation_step(self, batch, batch_idx):\n"
            "        x, y = batch\n"
            "        return F.l1_loss(self(x).cpu(), y.cpu())\n"
        )
        assert found(code, "DPL003") == [(6, 27), (6, 42)]

    def test_lightning_subclass_through_a_base_of_the_file(self):
        code = (
            "import pytorch_lightning as pl\n"
            "import torch.nn.functional as F\n"
            "class Base(pl.LightningModule):\n"
            "    pass\n"
            "class M(Base):\n"
            "    def training_step(self, batch, batch_idx):\n"
            "        return F.mse_loss(self(batch[0]).cpu(), batch[1].cpu())\n"
        )
        assert len(found(code, "DPL003")) == 2

    def test_a_class_with_training_step_that_is_no_lightning_module_is_silent(self):
        code = (
            "import torch.nn.functional as F\n"
            "class Evaluator:\n"
            "    def training_step(self, batch):\n"
            "        return F.mse_loss(batch[0].cpu(), batch[1].cpu())\n"
        )
        assert found(code, "DPL003") == []

    def test_loss_module_forward(self):
        code = (
            "import torch.nn as nn\n"
            "class HostL1Loss(nn.Module):\n"
            "    def forward(self, pred, target):\n"
            "        return nn.functional.l1_loss(pred.cpu(), target.cpu()).cuda()\n"
            "class Head(nn.Module):\n"
            "    def forward(self, pred, target):\n"
            "        return nn.functional.l1_loss(pred.cpu(), target.cpu())\n"
        )
        assert found(code, "DPL003") == [(4, 38), (4, 50)]  # `Head` is no loss module

    def test_loss_module_called_by_a_training_loop(self):
        code = (
            "import torch.nn as nn\n"
            "class Dice(nn.Module):\n"
            "    def forward(self, logits, mask):\n"
            "        p = logits.sigmoid().cpu()\n"
            "        return 1 - (2 * (p * mask).sum() + 1) / (p.sum() + mask.sum() + 1)\n"
            "criterion = nn.BCEWithLogitsLoss()\n"
            "dice = Dice()\n"
            "for x, m in loader:\n"
            "    out = model(x)\n"
            "    loss = criterion(out, m) + nn.functional.l1_loss(dice(out, m), zero)\n"
            "    loss.backward()\n"
        )
        # the dice term's host copy is back-propagated through the module's forward
        model = _model(code)
        assert feeds_backward(model, _call(model, "logits.sigmoid().cpu()"))
        assert feeds_backward(model, _call(model, "model(x)"))

    def test_autograd_grad_differentiates_its_outputs(self):
        code = (
            "import torch\n"
            "criterion = torch.nn.MSELoss()\n"
            "for x, y in loader:\n"
            "    loss = criterion(model(x.cuda()).cpu(), y)\n"
            "    grads = torch.autograd.grad(loss, model.parameters())\n"
        )
        assert found(code, "DPL003") == [(4, 22)]

    def test_self_attribute_loss_of_an_optimize_parameters_method(self):
        code = (
            "import torch.nn as nn\n"
            "class Pix2Pix:\n"
            "    def __init__(self):\n"
            "        self.criterionL1 = nn.L1Loss()\n"
            "    def forward(self):\n"
            "        self.fake_B = self.netG(self.real_A)\n"
            "    def backward_G(self):\n"
            "        self.loss_G = self.criterionL1(self.fake_B.cpu(), self.real_B.cpu())\n"
            "        self.loss_G.backward()\n"
            "    def optimize_parameters(self):\n"
            "        self.forward()\n"
            "        self.backward_G()\n"
        )
        assert found(code, "DPL003") == [(8, 40), (8, 59)]


# ---------------------------------------------------------------- DPL001 wrapper-train
class TestWrapperTrainFlow:
    def test_alias_of_the_inner_module(self):
        code = (
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def run(net, distributed):\n"
            "    core = net\n"
            "    if distributed:\n"
            "        net = DDP(net)\n"
            "        core = net.module\n"
            "    core.train()\n"
        )
        (finding,) = [f for f in lint(code) if f.code == "DPL001"]
        assert (finding.location.row, finding.location.column) == (7, 5)
        assert "`net.training` goes stale" in finding.message
        assert fixed(code, "DPL001") == code

    def test_unwrapping_into_the_same_name_is_silent(self):
        code = (
            "import torch.nn as nn\n"
            "model = nn.DataParallel(model)\n"
            "model = model.module\n"
            "model.eval()\n"
        )
        assert found(code, "DPL001") == []

    def test_self_returning_helper_keeps_the_wrapper(self):
        code = (
            "import torch\n"
            "import torch.nn as nn\n"
            "def on_gpu(module):\n"
            "    return module.cuda() if torch.cuda.is_available() else module\n"
            "model = on_gpu(nn.DataParallel(net))\n"
            "model.module.train()\n"
        )
        assert found(code, "DPL001") == [(6, 1)]
        assert fixed(code, "DPL001").endswith("model.train()\n")

    def test_helper_that_returns_something_else_is_silent(self):
        code = (
            "import torch.nn as nn\n"
            "def unwrap_or_wrap(module):\n"
            "    return module.module if hasattr(module, 'module') else nn.Identity()\n"
            "model = unwrap_or_wrap(nn.DataParallel(net))\n"
            "model.module.train()\n"
        )
        assert found(code, "DPL001") == []

    def test_deepspeed_engine_module_is_silent(self):
        code = (
            "import deepspeed\n"
            "from torch.nn.parallel import DistributedDataParallel\n"
            "engine, opt, _, _ = deepspeed.initialize(model=net)\n"
            "engine.module.train()\n"
        )
        assert found(code, "DPL001") == []


# ---------------------------------------------------------------- DPL002 wrapper-bypass
class TestWrapperBypassFlow:
    def test_wrapper_parameter_passed_by_every_caller(self):
        code = (
            "import torch.nn as nn\n"
            "def step(model, x, y):\n"
            "    criterion(model.module(x), y).backward()\n"
            "dp = nn.DataParallel(net)\n"
            "step(dp, a, b)\n"
            "step(dp, c, d)\n"
        )
        assert found(code, "DPL002") == [(3, 15)]

    def test_epoch_function_defined_after_its_caller(self):
        code = (
            "import torch.nn as nn\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def main_worker(gpu, args):\n"
            "    model = build()\n"
            "    if args.distributed:\n"
            "        model = DDP(model.cuda(gpu), device_ids=[gpu])\n"
            "    else:\n"
            "        model = nn.DataParallel(model).cuda()\n"
            "    for epoch in range(args.epochs):\n"
            "        train(loader, model, epoch)\n"
            "def train(loader, model, epoch):\n"
            "    model.module.train()\n"
            "    for x, y in loader:\n"
            "        criterion(model(x), y).backward()\n"
        )
        assert found(code, "DPL001") == [(12, 5)]
        assert fixed(code, "DPL001").endswith("    model.train()\n    for x, y in loader:\n        criterion(model(x), y).backward()\n")

    def test_callers_that_pass_different_things_are_silent(self):
        code = (
            "import torch.nn as nn\n"
            "def step(model, x, y):\n"
            "    criterion(model.module(x), y).backward()\n"
            "step(nn.DataParallel(net), a, b)\n"
            "step(holder, c, d)\n"
        )
        assert found(code, "DPL002") == []

    def test_function_passed_as_a_value_is_silent(self):
        code = (
            "import torch.nn as nn\n"
            "def step(model, x, y):\n"
            "    criterion(model.module(x), y).backward()\n"
            "step(nn.DataParallel(net), a, b)\n"
            "hooks.append(step)\n"
        )
        assert found(code, "DPL002") == []

    def test_returned_wrapper_makes_its_argument_the_inner_model(self):
        code = (
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def wrap(net, rank):\n"
            "    net = net.to(rank)\n"
            "    return DDP(net, device_ids=[rank])\n"
            "model = wrap(net, 0)\n"
            "criterion(net(x), y).backward()\n"
        )
        assert found(code, "DPL002") == [(6, 11)]
        assert fixed(code, "DPL002").endswith("criterion(model(x), y).backward()\n")

    def test_same_test_on_two_ifs_excludes_the_path(self):
        code = (
            "import torch.nn as nn\n"
            "if multi_gpu:\n"
            "    dp = nn.DataParallel(net)\n"
            "for x, y in loader:\n"
            "    if not multi_gpu:\n"
            "        out = net(x)\n"
            "    else:\n"
            "        out = dp(x)\n"
            "    criterion(out, y).backward()\n"
        )
        assert found(code, "DPL002") == []

    def test_another_test_does_not_exclude_the_path(self):
        code = (
            "import torch.nn as nn\n"
            "if multi_gpu:\n"
            "    dp = nn.DataParallel(net)\n"
            "if debug:\n"
            "    out = net(x)\n"
            "    criterion(out, y).backward()\n"
        )
        assert found(code, "DPL002") == [(5, 11)]

    def test_forward_stored_in_an_attribute_and_back_propagated_in_another_method(self):
        code = (
            "import torch.nn as nn\n"
            "class Model:\n"
            "    def __init__(self, net):\n"
            "        self.netG = nn.DataParallel(net)\n"
            "    def forward(self):\n"
            "        self.fake = self.netG.module(self.real)\n"
            "    def backward_G(self):\n"
            "        self.loss = self.crit(self.fake, self.target)\n"
            "        self.loss.backward()\n"
        )
        assert found(code, "DPL002") == [(6, 21)]

    def test_wrapper_from_a_project_file(self, cli, tmp_path):
        (tmp_path / "pyproject.toml").write_text("")
        (tmp_path / "parallel.py").write_text(
            "import torch\n"
            "from torch.nn.parallel import DistributedDataParallel\n"
            "def init_net(net, rank):\n"
            "    return DistributedDataParallel(net.to(rank), device_ids=[rank])\n"
            "class GatherDP(torch.nn.DataParallel):\n"
            "    pass\n"
        )
        (tmp_path / "train.py").write_text(
            "from parallel import GatherDP, init_net\n"
            "def fit(net, other, x, y, rank):\n"
            "    model = init_net(net, rank)\n"
            "    dp = GatherDP(other)\n"
            "    loss = crit(net(x), y) + crit(dp.module(x), y)\n"
            "    loss.backward()\n"
            "    return model\n"
        )
        result = cli("check", "--no-cache", "--select", "DPL002", "--output-format", "concise", ".", cwd=tmp_path)
        found_lines = [line.split(" ")[0] for line in result.stdout.decode().splitlines() if " DPL002 " in line]
        assert found_lines == ["train.py:5:17:", "train.py:5:35:"]


class TestRealShapes:
    """Shapes measured on the project's real-world benchmark (written fresh, not copied)."""

    def test_unwrapped_alias_by_isinstance_of_a_global_wrapper(self):
        code = (
            "from torch.nn.parallel import DistributedDataParallel\n"
            "def train_epoch(loader):\n"
            "    for x, y in loader:\n"
            "        policy = model.module if isinstance(model, DistributedDataParallel) else model\n"
            "        out = policy(x)\n"
            "        loss = crit(out, y)\n"
            "        loss.backward()\n"
            "if __name__ == '__main__':\n"
            "    model = build()\n"
            "    if distributed:\n"
            "        model = DistributedDataParallel(model, device_ids=[rank])\n"
            "    train_epoch(loader)\n"
        )
        assert found(code, "DPL002") == [(5, 15)]
        assert fixed(code, "DPL002") == code  # an alias: no fix

    def test_method_of_the_inner_module_feeding_the_loss(self):
        code = (
            "import torch.nn as nn\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "def step(head, feats, target):\n"
            "    pred = head.module.predict_action(feats)\n"
            "    params = sum(p.pow(2).sum() for p in head.module.parameters())\n"
            "    return nn.L1Loss()(pred, target) + 1e-4 * params\n"
            "head = DDP(Head(), device_ids=[0])\n"
            "loss = step(head, f, t)\n"
            "loss.backward()\n"
        )
        (finding,) = [f for f in lint(code) if f.code == "DPL002"]
        assert (finding.location.row, finding.location.column) == (4, 12)
        assert "call the forward through `head`" in finding.message
        assert fixed(code, "DPL002") == code

    def test_alias_only_on_the_path_without_backward(self):
        code = (
            "import torch.nn as nn\n"
            "class Trainer:\n"
            "    def __init__(self, net):\n"
            "        self.net = nn.DataParallel(net)\n"
            "    def run_epoch(self, phase, loader):\n"
            "        net = self.net\n"
            "        if phase == 'train':\n"
            "            net.train()\n"
            "        else:\n"
            "            net = self.net.module\n"
            "            net.eval()\n"
            "        for batch in loader:\n"
            "            loss = net(batch).mean()\n"
            "            if phase == 'train':\n"
            "                loss.backward()\n"
        )
        assert found(code, "DPL002") == []
        assert found(code, "DPL001") == []  # the alias is what the function runs: its mode matters

    def test_alias_whose_mode_is_set_while_the_wrapper_runs(self):
        code = (
            "import torch.nn as nn\n"
            "def fit(net, loader):\n"
            "    dp = nn.DataParallel(net)\n"
            "    core = dp.module\n"
            "    core.train()\n"
            "    for x in loader:\n"
            "        dp(x).sum().backward()\n"
        )
        assert found(code, "DPL001") == [(5, 5)]

    def test_dataparallel_torch_loss_in_a_sum(self):
        code = (
            "import torch\n"
            "import torch.nn as nn\n"
            "class Trainer:\n"
            "    def __init__(self, w):\n"
            "        self.criterion = nn.NLLLoss(weight=w).cuda()\n"
            "        if torch.cuda.device_count() > 1:\n"
            "            self.criterion = nn.DataParallel(self.criterion).cuda()\n"
            "    def fit(self, model, loader):\n"
            "        self.epoch(model, loader, criterion=self.criterion)\n"
            "    def epoch(self, model, loader, criterion):\n"
            "        for x, y in loader:\n"
            "            out = model(x)\n"
            "            loss = criterion(torch.log(out), y) + 0.5 * aux(out)\n"
            "            scaler.scale(loss).backward()\n"
        )
        assert found(code, "DPL012") == [(13, 20)]
        assert "criterion(torch.log(out), y).mean() + 0.5" in fixed(code, "DPL012")

    def test_reduced_sum_is_silent(self):
        code = (
            "import torch.nn as nn\n"
            "crit = nn.DataParallel(nn.MSELoss())\n"
            "loss = (crit(a, b) + crit(c, d)).mean()\n"
            "loss.backward()\n"
        )
        assert found(code, "DPL012") == []


# -------------------------------------------------- DPL010 / DPL012 through helpers
def test_optimizer_wrapped_by_a_helper_is_reported_at_the_call_without_fix():
    code = (
        "import torch\n"
        "import torch.nn as nn\n"
        "def to_gpus(m):\n"
        "    return nn.DataParallel(m)\n"
        "model = to_gpus(net)\n"
        "opt = to_gpus(torch.optim.SGD(model.parameters(), lr=0.1))\n"
    )
    assert found(code, "DPL010") == [(6, 7)]
    assert fixed(code, "DPL010") == code


def test_scalar_gather_through_an_attribute_and_a_helper():
    code = (
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return F.cross_entropy(self.fc(x), y)\n"
        "def parallel(m, ids):\n"
        "    return nn.DataParallel(m, device_ids=ids)\n"
        "class T:\n"
        "    def __init__(self):\n"
        "        self.one = parallel(Net(), [0])\n"
        "        self.many = parallel(Net(), [0, 1])\n"
        "    def step(self, x, y):\n"
        "        self.one(x, y).backward()\n"
        "        self.many(x, y).backward()\n"
    )
    # `device_ids` is the helper's parameter: what each call passes decides (one device: no gather)
    assert found(code, "DPL012") == [(14, 9)]


# -------------------------------------------------------------- dplint/training.py
def _model(code: str) -> SemanticModel:
    return analysed(cst.parse_module(code))


def _call(model: SemanticModel, text: str):
    return next(site.node for site in model.calls if model.code(site.node) == text)


def test_held_wrapper_follows_attributes_parameters_and_helpers():
    code = (
        "import torch.nn as nn\n"
        "def keep(m):\n"
        "    return m\n"
        "class T:\n"
        "    def __init__(self, net):\n"
        "        self.w = keep(nn.DataParallel(net))\n"
        "    def run(self):\n"
        "        return self.w\n"
    )
    model = _model(code)
    (ret,) = [node for node in model.nodes() if isinstance(node, cst.Return) and model.code(node.value) == "self.w"]
    assert held_wrapper(model, ret.value).kind == "DP"


def test_exclusive_paths_reads_the_same_test_and_its_negation():
    code = "if a.multi:\n    x = 1\nif not a.multi:\n    y = 2\nif a.multi:\n    z = 3\n"
    model = _model(code)
    first, second, third = [n for n in model.nodes() if isinstance(n, cst.Assign)]
    assert exclusive_paths(model, first, second)
    assert not exclusive_paths(model, first, third)


def test_implicit_roots_need_a_lightning_base_or_a_loss_module():
    code = (
        "import torch.nn as nn\n"
        "from torch.nn.modules.loss import _Loss\n"
        "class A(_Loss):\n"
        "    def forward(self, x):\n"
        "        return x.sum()\n"
        "class B(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.mean()\n"
    )
    model = _model(code)
    assert [model.code(root) for root in implicit_roots(model)] == ["x.sum()"]
