"""Causes found on held-out repositories for DPL011 / DPL012 / DPL017: a value returned on
one rank only, a backward retried on the reduced loss, a per-process file name, a method of
a callable object (this file or a project class of another file)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from conftest import lint
from dplint.distributed import called_functions, returns_value_on_some_ranks
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def model_of(code: str) -> SemanticModel:
    model = analysed(cst.parse_module(code), "example.py")
    model.text = code
    return model


def function(model: SemanticModel, name: str) -> cst.FunctionDef:
    return next(node for node in model.nodes() if isinstance(node, cst.FunctionDef) and node.name.value == name)


def codes(code: str, select: str) -> list[tuple[int, str]]:
    return [(finding.location.row, finding.code) for finding in lint(code, select=[select])]


SOME_RANKS = (
    "def on_main(rank, x):\n"
    "    if rank == 0:\n"
    "        return x.item()\n"
    "    return None\n"
    "def after_exit(rank, x):\n"
    "    if rank != 0:\n"
    "        return\n"
    "    return x\n"
    "def falls_off(is_master, x):\n"
    "    if is_master:\n"
    "        return x\n"
    "def every_rank(local_rank, m):\n"
    "    if local_rank == -1:\n"
    "        return m\n"
    "    return wrap(m)\n"
    "def uniform(args, ds):\n"
    "    if args.local_rank != -1:\n"
    "        return sampler_for(ds)\n"
    "    return None\n"
    "def no_rank(loader):\n"
    "    if loader is None:\n"
    "        return None\n"
    "    return 1\n"
)


def test_returns_value_on_some_ranks():
    model = model_of(SOME_RANKS)
    answers = {name: returns_value_on_some_ranks(model, function(model, name))
               for name in ("on_main", "after_exit", "falls_off", "every_rank", "uniform", "no_rank")}
    assert answers == {"on_main": True, "after_exit": True, "falls_off": True, "every_rank": False, "uniform": False,
                       "no_rank": False}


def test_a_collective_under_a_test_of_a_main_rank_result_is_flagged():
    code = (
        "import torch.distributed as dist\n"
        "def score(rank, x):\n"
        "    if rank == 0:\n"
        "        return x\n"
        "def main(rank, x):\n"
        "    dist.init_process_group('nccl')\n"
        "    best = score(rank, x)\n"
        "    if best is not None:\n"
        "        dist.barrier()\n"
    )
    assert (9, "DPL017") in codes(code, "DPL017")


def test_instance_call_runs_dunder_call():
    code = (
        "class Keeper:\n"
        "    def __call__(self, x):\n"
        "        return x\n"
        "class Plain:\n"
        "    def run(self):\n"
        "        return 1\n"
        "keep = Keeper()\n"
        "plain = Plain()\n"
        "keep(1)\n"
        "plain(2)\n"
        "Keeper(3)\n"
    )
    model = model_of(code)
    calls = [node for node in model.nodes() if isinstance(node, cst.Call) and isinstance(node.func, cst.Name)]
    found = {model.code(call): [f.name.value for f in called_functions(model, call.func, call)] for call in calls}
    assert found["keep(1)"] == ["__call__"]
    assert found["plain(2)"] == []
    assert found["Keeper(3)"] == []


def test_retry_that_only_logs_is_still_flagged_and_a_mean_retry_is_not():
    template = (
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return (self.fc(x) - x).pow(2).mean()\n"
        "net = nn.DataParallel(Net().cuda())\n"
        "loss = net(x)\n"
        "try:\n"
        "    loss.backward()\n"
        "except {caught}:\n"
        "    {handler}\n"
    )
    retried = template.format(caught="RuntimeError", handler="loss.mean().backward()")
    logged = template.format(caught="RuntimeError", handler="raise")
    other_error = template.format(caught="KeyError", handler="loss.mean().backward()")
    bare = template.replace("except {caught}:", "except:").format(handler="loss.sum().backward()")
    assert codes(retried, "DPL012") == []
    assert codes(bare, "DPL012") == []
    assert codes(logged, "DPL012") == [(6, "DPL012")]
    assert codes(other_error, "DPL012") == [(6, "DPL012")]


def test_save_to_a_per_process_name_is_not_flagged():
    code = (
        "import os, uuid, torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "torch.save(x, f'dump-{uuid.uuid4().hex}.pt')\n"
        "torch.save(x, 'dump-%d.pt' % os.getpid())\n"
        "torch.save(x, 'dump.pt')\n"
    )
    assert codes(code, "DPL011") == [(5, "DPL011")]


def project(cli, root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (root / name).write_text(text)
    result = cli("check", "--no-cache", "--select", "DPL011", "--output-format", "concise", ".", cwd=root)
    return [line.split(" ")[0] for line in result.stdout.decode().splitlines() if ": DPL" in line]


SAVER = (
    "import torch\n"
    "class Saver:\n"
    "    def __init__(self, accelerator=None, folder='out'):\n"
    "        self.accelerator = accelerator\n"
    "        self.folder = folder\n"
    "    def dump(self, net):\n"
    "        if self.accelerator is None:\n"
    "            torch.save(net.state_dict(), self.folder + '/plain.pt')\n"
    "        else:\n"
    "            self._write(self.accelerator.unwrap_model(net))\n"
    "    def _write(self, net):\n"
    "        torch.save(net.state_dict(), self.folder + '/net.pt')\n"
)


def test_project_method_through_self_call_is_followed(cli, tmp_path):
    run = (
        "from accelerate import Accelerator\n"
        "from saver import Saver\n"
        "accelerator = Accelerator()\n"
        "saver = Saver(accelerator)\n"
        "for epoch in range(3):\n"
        "    saver.dump(net)\n"
    )
    assert project(cli, tmp_path, {"saver.py": SAVER, "run.py": run}) == ["saver.py:12:9:"]


def test_project_method_called_on_one_rank_or_given_the_rank_is_clean(cli, tmp_path):
    run = (
        "from accelerate import Accelerator\n"
        "from saver import Saver\n"
        "accelerator = Accelerator()\n"
        "saver = Saver(accelerator)\n"
        "ranked = Saver(accelerator, folder=f'out{accelerator.process_index}')\n"
        "for epoch in range(3):\n"
        "    if accelerator.is_main_process:\n"
        "        saver.dump(net)\n"
        "    ranked.dump(net)\n"
    )
    assert project(cli, tmp_path, {"saver.py": SAVER, "run.py": run}) == []


def test_a_keyword_named_like_the_function_is_not_handing_it_on():
    code = (
        "import torch.distributed as dist\n"
        "def load(evaluate=False):\n"
        "    if rank not in (-1, 0):\n"
        "        dist.barrier()\n"
        "    data = read()\n"
        "    if rank == 0:\n"
        "        dist.barrier()\n"
        "def evaluate():\n"
        "    load(evaluate=True)\n"
        "def main():\n"
        "    dist.init_process_group('nccl')\n"
        "    load(evaluate=False)\n"
        "    if rank in (-1, 0):\n"
        "        evaluate()\n"
    )
    assert (7, "DPL017") in codes(code, "DPL017")


def test_project_object_built_on_one_rank_is_clean(cli, tmp_path):
    run = (
        "import torch.distributed as dist\n"
        "from saver import Saver\n"
        "dist.init_process_group('nccl')\n"
        "saver = None\n"
        "if dist.get_rank() == 0:\n"
        "    saver = Saver()\n"
        "for epoch in range(3):\n"
        "    if saver is not None:\n"
        "        saver.dump(net)\n"
    )
    assert project(cli, tmp_path, {"saver.py": SAVER, "run.py": run}) == []
