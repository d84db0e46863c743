"""DPL010 optimizer-in-dataparallel, DPL011 unguarded-rank-save, DPL012 scalar-gather, and
dplint/distributed.py.

The generic tests cover each rule's VALID/INVALID examples and its fixtures; these pin exact
positions, fixes under awkward formatting (comments, multi-line calls, CRLF, one-line
statements), the precision choices (what must stay silent) and the rank-guard analysis.
"""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import fix, lint
from dplint.distributed import every_rank_reaches, is_multi_process, is_rank_guarded, mentions_rank
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def found(code: str, rule: str) -> list[tuple[int, int]]:
    return [(f.location.row, f.location.column) for f in lint(code) if f.code == rule]


def messages(code: str, rule: str) -> list[str]:
    return [f.message for f in lint(code) if f.code == rule]


def fixed(code: str, rule: str, unsafe: bool = True) -> str:
    result = fix(code, unsafe=unsafe, only=frozenset({rule}))
    cst.parse_module(result)
    assert fix(result, unsafe=unsafe, only=frozenset({rule})) == result  # idempotent
    return result


DP = "import torch\nimport torch.nn as nn\n"
DIST = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"


# ------------------------------------------------------------ DPL010 optimizer-in-dataparallel
class TestOptimizerInDataParallel:
    def test_multiline_wrapper_with_comments_is_unwrapped(self):
        code = DP + (
            "opt = torch.optim.SGD(params, lr=0.1)\n"
            "wrapped = nn.parallel.DataParallel(  # all GPUs\n"
            "    opt,\n"
            "    device_ids=[0, 1],\n"
            ")\n"
        )
        assert found(code, "DPL010") == [(4, 11)]
        assert fixed(code, "DPL010") == DP + "opt = torch.optim.SGD(params, lr=0.1)\nwrapped = opt\n"

    def test_unsafe_only(self):
        code = DP + "opt = torch.optim.SGD(params, lr=0.1)\nopt = nn.DataParallel(opt)\nopt.zero_grad()\n"
        assert fixed(code, "DPL010", unsafe=False) == code
        assert fixed(code, "DPL010") == DP + "opt = torch.optim.SGD(params, lr=0.1)\nopt.zero_grad()\n"

    def test_crlf_and_trailing_comment(self):
        code = "import torch\r\nopt = torch.optim.Adam(p)\r\nopt = torch.nn.DataParallel(opt)  # why not\r\nopt.step()\r\n"
        assert found(code, "DPL010") == [(3, 7)]
        assert fixed(code, "DPL010") == "import torch\r\nopt = torch.optim.Adam(p)\r\nopt.step()\r\n"

    def test_one_line_statements_are_not_deleted_but_unwrapped(self):
        code = DP + "opt = torch.optim.Adam(p); opt = nn.DataParallel(opt)\n"
        assert found(code, "DPL010") == [(3, 34)]
        assert fixed(code, "DPL010") == DP + "opt = torch.optim.Adam(p); opt = opt\n"

    def test_self_returning_chain_goes_with_the_wrapper(self):
        code = DP + "class T:\n    def __init__(self, p):\n        self.opt = torch.optim.Adam(p)\n        self.opt = nn.DataParallel(self.opt).cuda().to('cuda:0')\n        self.lr = 1\n"
        assert found(code, "DPL010") == [(6, 20)]
        assert fixed(code, "DPL010") == DP + "class T:\n    def __init__(self, p):\n        self.opt = torch.optim.Adam(p)\n        self.lr = 1\n"

    def test_ddp_in_a_function_and_submodule_spellings(self):
        code = (
            "from torch.optim.adam import Adam\n"
            "from torch.nn.parallel.distributed import DistributedDataParallel\n"
            "def build(model, rank):\n"
            "    base = Adam(model.parameters())\n"
            "    opt = base\n"
            "    return DistributedDataParallel(opt, device_ids=[rank])\n"
        )
        assert found(code, "DPL010") == [(6, 12)]
        assert "'Adam' object has no attribute 'named_parameters'" in messages(code, "DPL010")[0]
        assert fixed(code, "DPL010").endswith("    return opt\n")

    def test_zero_redundancy_optimizer(self):
        code = (
            "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
            "import torch.nn as nn\n"
            "opt = nn.DataParallel(ZeroRedundancyOptimizer(p, optimizer_class=A))\n"
        )
        assert found(code, "DPL010") == [(3, 7)]

    @pytest.mark.parametrize(
        "code",
        [
            # A scheduler is not an optimizer.
            DP + "sched = torch.optim.lr_scheduler.StepLR(opt, 5)\nsched = nn.DataParallel(sched)\n",
            # An unknown factory.
            DP + "from mylib import make_optimizer\nopt = make_optimizer(p)\nopt = nn.DataParallel(opt)\n",
            # Not torch's optim.
            "import torch.nn as nn\nfrom transformers.optimization import Adafactor\nopt = nn.DataParallel(Adafactor(p))\n",
            # The name was rebound to a module before the wrapping.
            DP + "opt = torch.optim.SGD(p, lr=1)\nopt = nn.Linear(2, 2)\nopt = nn.DataParallel(opt)\n",
        ],
    )
    def test_silent(self, code):
        assert found(code, "DPL010") == []


# ------------------------------------------------------------ DPL011 unguarded-rank-save
SAVE = "torch.save(state, 'ckpt.pt')"


class TestUnguardedRankSave:
    def test_module_level_save_position(self):
        assert found(DIST + SAVE + "\n", "DPL011") == [(4, 1)]

    def test_ddp_alone_makes_a_multi_process_script(self):
        code = "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(net)\n" + SAVE + "\n"
        assert found(code, "DPL011") == [(4, 1)]

    def test_no_process_group_no_finding(self):
        assert found("import torch\nimport torch.distributed as dist\n" + SAVE + "\n", "DPL011") == []

    @pytest.mark.parametrize(
        "guarded",
        [
            "if rank == 0:\n    " + SAVE,
            "if dist.get_rank() == 0:\n    " + SAVE,
            "if args.local_rank in (-1, 0):\n    " + SAVE,
            "if args.local_rank in [-1, 0] and epoch % 5 == 0:\n    " + SAVE,
            "if is_main_process():\n    " + SAVE,
            "if accelerator.is_main_process:\n    " + SAVE,
            "if trainer.is_global_zero:\n    " + SAVE,
            "if xm.is_master_ordinal():\n    " + SAVE,
            "if int(os.environ['RANK']) == 0:\n    " + SAVE,
            "if args.gpu == 0:\n    " + SAVE,
            "if rank != 0:\n    pass\nelse:\n    " + SAVE,
            "is_master = dist.get_rank() == 0\nif is_master:\n    " + SAVE,
            "flag = args.local_rank <= 0\nif flag:\n    " + SAVE,
            "def should_write():\n    return dist.get_rank() == 0\nif should_write():\n    " + SAVE,
            SAVE + " if rank == 0 else None",
            "rank == 0 and " + SAVE,
            "def f():\n    if not is_master:\n        return\n    " + SAVE + "\nf()",
            "def f():\n    if dist.get_rank() > 0: return\n    " + SAVE + "\nf()",
            "import sys\nif local_rank != 0:\n    sys.exit(0)\n" + SAVE,
            "for epoch in range(3):\n    if rank:\n        continue\n    " + SAVE,
            "@rank_zero_only\ndef f():\n    " + SAVE + "\nf()",
            "@utils.master_only\ndef f():\n    " + SAVE + "\nf()",
        ],
    )
    def test_guards(self, guarded):
        assert found(DIST + guarded + "\n", "DPL011") == []

    @pytest.mark.parametrize(
        "unguarded, position",
        [
            ("if epoch % 10 == 0:\n    " + SAVE, (5, 5)),
            ("if rank == 0:\n    print('saving')\n" + SAVE, (6, 1)),
            ("if rank != 0:\n    dist.barrier()\n" + SAVE, (6, 1)),
            ("with open('ckpt.pt', 'wb') as f:\n    torch.save(state, f)", (5, 5)),
            ("try:\n    " + SAVE + "\nexcept OSError:\n    pass", (5, 5)),
        ],
    )
    def test_unguarded(self, unguarded, position):
        assert found(DIST + unguarded + "\n", "DPL011") == [position]

    def test_helper_called_guarded_and_unguarded(self):
        code = DIST + (
            "def save(state):\n"
            "    torch.save(state, 'ckpt.pt')\n"
            "if rank == 0:\n"
            "    save(state)\n"
            "def loop():\n"
            "    for step in range(3):\n"
            "        save(state)\n"
            "loop()\n"
        )
        assert found(code, "DPL011") == [(5, 5)]
        assert "through `save()` on line 10, called on every rank" in messages(code, "DPL011")[0]

    def test_helper_never_called_or_only_guarded_is_silent(self):
        helper = DIST + "def save(state):\n    torch.save(state, 'ckpt.pt')\n"
        assert found(helper, "DPL011") == []
        assert found(helper + "if dist.get_rank() == 0:\n    save(s)\n", "DPL011") == []

    def test_helper_defined_after_its_caller(self):
        code = DIST + "def main():\n    write(s)\ndef write(s):\n    " + SAVE + "\nmain()\n"
        assert found(code, "DPL011") == [(7, 5)]

    def test_method_called_through_self_and_an_instance(self):
        code = DIST + (
            "class Trainer:\n"
            "    def save(self):\n"
            "        torch.save(self.model.state_dict(), 'model.pt')\n"
            "    def fit(self):\n"
            "        for epoch in range(3):\n"
            "            self.save()\n"
            "trainer = Trainer()\n"
            "trainer.fit()\n"
        )
        assert found(code, "DPL011") == [(6, 9)]
        assert "through `self.save()` on line 9" in messages(code, "DPL011")[0]
        guarded = code.replace("            self.save()\n", "            if self.rank == 0:\n                self.save()\n")
        assert found(guarded, "DPL011") == []
        uncalled = code.replace("trainer.fit()\n", "")
        assert found(uncalled, "DPL011") == []

    def test_spawned_worker_runs_on_every_rank(self):
        code = (
            "import torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"
            "def worker(rank, world):\n"
            "    dist.init_process_group('gloo', rank=rank, world_size=world)\n"
            "    " + SAVE + "\n"
            "mp.spawn(worker, args=(2,), nprocs=2)\n"
        )
        assert found(code, "DPL011") == [(6, 5)]
        assert "through" not in messages(code, "DPL011")[0]

    def test_recursion_terminates(self):
        code = DIST + "def f(n):\n    if n:\n        f(n - 1)\n    " + SAVE + "\n"
        assert found(code, "DPL011") == []  # only called by itself: can't tell who starts it

    @pytest.mark.parametrize(
        "save",
        [
            "torch.save(state, f'ckpt_rank{rank}.pt')",
            "torch.save(state, os.path.join(out, 'ckpt_{}.pt'.format(dist.get_rank())))",
            "path = f'{out}/shard{args.local_rank}.pt'\ntorch.save(state, path)",
            "with open(f'part{rank}.pt', 'wb') as f:\n    torch.save(state, f)",
            "buf = io.BytesIO()\ntorch.save(state, buf)",
            "torch.save(state, io.BytesIO())",
            "torch.save(*args)",
            "def write(state, path):\n    torch.save(state, path)\nwrite(state, f'r{rank}.pt')",
        ],
    )
    def test_per_rank_or_private_targets(self, save):
        assert found(DIST + "import io, os\n" + save + "\n", "DPL011") == []

    def test_helper_default_path_is_shared(self):
        code = DIST + "def write(state, path='last.pt'):\n    torch.save(state, path)\nwrite(state)\n"
        assert found(code, "DPL011") == [(5, 5)]

    @pytest.mark.parametrize(
        "guarded",
        [
            # A guard held in an attribute set elsewhere in the file.
            "class T:\n    def __init__(self, rank):\n        self.writes_files = rank == 0\n"
            "    def end(self):\n        if self.writes_files:\n            " + SAVE + "\nT(0).end()",
            "args.save_logs = args.logs and is_main_process()\nif args.save_logs:\n    " + SAVE,
            # Any assignment of the name, not only the last.
            "chief = False\nif dist.is_initialized():\n    chief = dist.get_rank() == 0\nelse:\n    chief = True\n"
            "if chief:\n    " + SAVE,
            "writer = SummaryWriter() if args.rank == 0 else None\nif writer is not None:\n    " + SAVE,
            "if comm.is_main_process():\n    " + SAVE,
            "if utils.get_rank() == 0:\n    " + SAVE,
            "if self.global_rank == 0:\n    " + SAVE,
            "def save_model():\n    if not backend.is_root_worker():\n        return\n    " + SAVE + "\nsave_model()",
        ],
    )
    def test_guards_held_in_names_and_attributes(self, guarded):
        assert found(DIST + guarded + "\n", "DPL011") == []

    @pytest.mark.parametrize(
        "test",
        ["args.node_rank == 0", "node_rank == 0", "args.nr == 0", "accelerator_cfg.machine_rank == 0",
         "int(os.environ['NODE_RANK']) == 0"],
    )
    def test_node_rank_is_not_a_rank_check(self, test):
        assert found(DIST + "import os\nif " + test + ":\n    " + SAVE + "\n", "DPL011") == [(6, 5)]

    def test_function_that_starts_the_group_runs_on_every_rank(self):
        # The spawn happens in another file (or under a condition): the worker still runs per rank.
        worker = (
            "import torch\nimport torch.distributed as dist\n"
            "def worker(gpu, args):\n"
            "    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n"
            "    train(args)\n"
            "    " + SAVE + "\n"
        )
        assert found(worker, "DPL011") == [(6, 5)]
        through_setup = (
            "import torch\nimport torch.distributed as dist\n"
            "def setup(rank, world):\n    dist.init_process_group('gloo', rank=rank, world_size=world)\n"
            "def run(rank, world):\n    setup(rank, world)\n    " + SAVE + "\n"
        )
        assert found(through_setup, "DPL011") == [(7, 5)]
        assert found(worker.replace("    " + SAVE, "    if gpu == 0:\n        " + SAVE), "DPL011") == []

    @pytest.mark.parametrize(
        "start",
        [
            "import deepspeed\ndeepspeed.init_distributed()\n",
            "from accelerate import Accelerator\naccelerator = Accelerator()\n",
            "import utils\nutils.init_distributed_mode(args)\n",
            "from mmcv.runner import init_dist\ninit_dist('pytorch')\n",
            "import os\nlocal_rank = int(os.environ['LOCAL_RANK'])\n",
            "parser.add_argument('--local_rank', type=int, default=-1)\nif args.local_rank != -1:\n    pass\n",
            "torch.cuda.set_device(args.local_rank)\n",
            "from torch.utils.data.distributed import DistributedSampler\nsampler = DistributedSampler(ds)\n",
        ],
    )
    def test_multi_process_started_by_other_libraries(self, start):
        code = "import torch\n" + start + SAVE + "\n"
        assert found(code, "DPL011") == [(code.count("\n"), 1)]
        assert found(code.replace(SAVE, "if is_main_process():\n    " + SAVE), "DPL011") == []

    def test_multi_process_words_alone_are_not_enough(self):
        assert found("import torch\nfrom utils import init_model\ninit_model()\n" + SAVE + "\n", "DPL011") == []

    def test_no_fix(self):
        code = DIST + SAVE + "\n"
        assert fixed(code, "DPL011") == code
        assert [f.fix_applicability for f in lint(code) if f.code == "DPL011"] == [None]


# ------------------------------------------------------------ DPL012 scalar-gather
def loss_net(returns: str, extra: str = "") -> str:
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "class Net(nn.Module):\n"
        f"    def forward(self, x, y):\n{extra}"
        f"        return {returns}\n"
    )


class TestScalarGather:
    def test_inline_backward_and_multiline_call(self):
        code = loss_net("F.nll_loss(x, y)") + (
            "dp = nn.DataParallel(Net())\n"
            "dp(\n"
            "    x,  # inputs\n"
            "    y,\n"
            ").backward()\n"
        )
        assert found(code, "DPL012") == [(8, 1)]
        assert fixed(code, "DPL012", unsafe=False) == loss_net("F.nll_loss(x, y)") + (
            "dp = nn.DataParallel(Net())\n"
            "dp(\n"
            "    x,  # inputs\n"
            "    y,\n"
            ").mean().backward()\n"
        )

    def test_inside_a_loop_in_a_function_with_crlf(self):
        code = loss_net("(x - y).pow(2).mean()") + (
            "def train(net, batches):\n"
            "    model = nn.DataParallel(net)\n"
            "    model = nn.DataParallel(Net().cuda())\n"
            "    for x, y in batches:\n"
            "        out = model(x, y)\n"
            "        loss = out\n"
            "        loss.backward()\n"
            "        loss.backward()\n"
        ).replace("\n", "\r\n")
        assert found(code, "DPL012") == [(11, 15)]
        assert "out = model(x, y).mean()\r\n" in fixed(code, "DPL012")

    def test_wrapper_held_by_self(self):
        code = loss_net("F.cross_entropy(x, y)") + (
            "class Trainer:\n"
            "    def __init__(self):\n"
            "        self.model = nn.DataParallel(Net())\n"
            "    def step(self, x, y):\n"
            "        loss = self.model(x, y)\n"
            "        loss.backward()\n"
        )
        assert found(code, "DPL012") == [(11, 16)]

    @pytest.mark.parametrize(
        "returns, reduction",
        [
            ("F.cross_entropy(x, y)", "mean"),
            ("F.kl_div(x, y, reduction='batchmean')", "mean"),
            ("F.l1_loss(x, y, reduction='sum')", "sum"),
            ("torch.sum(x)", "sum"),
            ("x.sum(dtype=torch.float32)", "sum"),
            ("torch.mean(x)", "mean"),
            ("nn.CrossEntropyLoss(w)(x, y)", "mean"),
            ("F.mse_loss(x, y, reduction='sum') + 0.5 * x.abs().mean()", "mean"),
            ("x.sum() - y.sum()", "sum"),
        ],
    )
    def test_zero_d_returns(self, returns, reduction):
        code = loss_net(returns) + "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nloss.backward()\n"
        assert found(code, "DPL012") == [(8, 8)]
        assert f"loss = dp(x, y).{reduction}()\n" in fixed(code, "DPL012")

    def test_criterion_bound_in_init(self):
        code = (
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.loss_fn = nn.BCEWithLogitsLoss()\n"
            "    def forward(self, x, y):\n"
            "        loss = self.loss_fn(x, y)\n"
            "        return loss\n"
            "model = Net()\nmodel = model.cuda()\nmodel = nn.DataParallel(model)\n"
            "loss = model(x, y)\nloss.backward()\n"
        )
        assert found(code, "DPL012") == [(12, 8)]

    @pytest.mark.parametrize(
        "returns",
        [
            "x.mean(dim=0)",
            "x.sum(1)",
            "torch.mean(x, 0)",
            "F.cross_entropy(x, y, reduction='none')",
            "F.cross_entropy(x, y, reduction='none') * 2",
            "(F.cross_entropy(x, y), x)",
            "x",
        ],
    )
    def test_a_forward_that_keeps_a_dimension_refutes_the_call_site(self, returns):
        # backward() without a gradient would raise on one device too: not what runs.
        code = loss_net(returns) + "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nloss.backward()\n"
        assert found(code, "DPL012") == []

    @pytest.mark.parametrize(
        "returns",
        [
            "F.mse_loss(x, y, size_average=False)",
            "F.mse_loss(x, y, False)",
            "nn.MSELoss(False)(x, y)",
            "F.cross_entropy(x, y, reduction=mode)",
            "self.compute_loss(x, y)",
            "self.scale * F.cross_entropy(x, y)",
        ],
    )
    def test_a_forward_not_followed_leaves_the_call_site_as_evidence(self, returns):
        # backward() without a gradient: each replica returns one element; which reduction
        # is unknown, so nothing is fixed.
        code = loss_net(returns) + "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nloss.backward()\n"
        assert found(code, "DPL012") == [(8, 8)]
        assert fixed(code, "DPL012") == code

    def test_a_branch_returning_the_input_is_not_the_one_that_ran(self):
        code = loss_net("F.cross_entropy(x, y)", extra="        if y is None:\n            return x\n")
        code += "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nloss.backward()\n"
        assert found(code, "DPL012") == [(10, 8)]
        assert "loss = dp(x, y).mean()\n" in fixed(code, "DPL012")

    @pytest.mark.parametrize(
        "usage",
        [
            "dp = nn.DataParallel(Net(), device_ids=[0])\ndp(x, y).backward()\n",
            "dp = nn.DataParallel(Net())\ndp(x, y).backward(torch.ones(2))\n",
            "dp = nn.DataParallel(Net())\nloss = dp(x, y)\nloss = loss.mean()\nloss.backward()\n",
            "dp = nn.DataParallel(Net())\nloss = dp.module(x, y)\nloss.backward()\n",
            "dp = nn.DataParallel(Net())\nlosses = [dp(x, y)]\nprint(losses)\n",
            "from torch.nn.parallel import DistributedDataParallel as DDP\ndp = DDP(Net())\ndp(x, y).backward()\n",
        ],
    )
    def test_silent_usages(self, usage):
        assert found(loss_net("F.cross_entropy(x, y)") + usage, "DPL012") == []

    def test_class_rebound_or_without_forward_is_judged_by_the_call_site(self):
        rebound = loss_net("F.cross_entropy(x, y)") + "Net = make_net()\ndp = nn.DataParallel(Net())\ndp(x, y).backward()\n"
        assert found(rebound, "DPL012") == [(9, 1)]
        assert fixed(rebound, "DPL012") == rebound
        no_forward = "import torch.nn as nn\nclass Net(Base):\n    pass\ndp = nn.DataParallel(Net())\ndp(x).backward()\n"
        assert found(no_forward, "DPL012") == [(5, 1)]


# ------------------------------------------------------------ dplint/distributed.py
def model_of(code: str) -> SemanticModel:
    return analysed(cst.parse_module(code))


def save_calls(model: SemanticModel) -> list[cst.Call]:
    return [site.node for site in model.calls if site.qualified_name == "torch.save"]


class TestDistributedModel:
    def test_is_multi_process(self):
        assert is_multi_process(model_of(DIST))
        assert is_multi_process(model_of("from torch.distributed import init_process_group as ipg\nipg('gloo')\n"))
        assert not is_multi_process(model_of(DP + "m = nn.DataParallel(net)\n"))

    def test_mentions_rank(self):
        model = model_of("a = rank == 0\nb = epoch == 0\nc = a\nd = os.environ['LOCAL_RANK']\n")
        values = [statement.body[0].value for statement in model.module.body]
        assert [mentions_rank(model, value) for value in values] == [True, False, True, True]

    def test_attribute_objects_are_not_followed(self):
        # `model.training` does not involve a rank, even though `model` was built with one.
        model = model_of("model = DDP(net, device_ids=[rank])\nflag = model.training\n")
        assert not mentions_rank(model, model.module.body[1].body[0].value)

    def test_guard_and_route(self):
        model = model_of(
            "import torch\n"
            "def inner():\n    torch.save(s, 'a.pt')\n"
            "def outer():\n    inner()\n"
            "if rank == 0:\n    torch.save(s, 'b.pt')\n"
            "outer()\n"
        )
        in_function, guarded = save_calls(model)
        assert not is_rank_guarded(model, in_function) and is_rank_guarded(model, guarded)
        route = every_rank_reaches(model, in_function)
        assert route is not None and [model.code(call) for call in route.calls] == ["inner()", "outer()"]
        assert every_rank_reaches(model, guarded) is None
