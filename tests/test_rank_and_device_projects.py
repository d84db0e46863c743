"""Rank and device rules across the files of a project: DPL014 with the process group started
by a helper of another file, DPL011's evidence of several processes, DPL009 through a class
chosen in a branch and built in another file."""

from __future__ import annotations

from pathlib import Path

from conftest import lint


def check(cli, root: Path, files: dict[str, str], select: str) -> list[str]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = cli("check", "--no-cache", "--select", select, "--output-format", "concise", ".", cwd=root)
    return [line.split(" ")[0] + " " + line.split(" ")[1] for line in result.stdout.decode().splitlines() if ": DPL" in line]


GROUP_HELPER = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "\n"
    "def start_group(index, world, ranks):\n"
    "    dist.init_process_group('nccl', init_method='tcp://localhost:23456', world_size=world, rank=ranks[index])\n"
    "    return dist.get_rank()\n"
    "\n"
    "def gather_sizes(sizes):\n"
    "    buffer = torch.zeros(len(sizes)).cuda()\n"
    "    dist.all_reduce(buffer)\n"
    "    return buffer\n"
)
WORKER = (
    "import torch\n"
    "import torch.multiprocessing as mp\n"
    "from comms import start_group\n"
    "\n"
    "def worker(index, world, ranks):\n"
    "    start_group(index, world, ranks)\n"
    "    torch.cuda.set_device(index)\n"
    "    net = torch.nn.Linear(3, 3).cuda()\n"
    "\n"
    "mp.spawn(worker, args=(2, [0, 1]), nprocs=2)\n"
)


def test_group_helper_whose_callers_select_the_device_is_clean(cli, tmp_path):
    assert check(cli, tmp_path, {"comms.py": GROUP_HELPER, "train.py": WORKER}, "DPL014") == []


def test_group_helper_with_a_caller_that_selects_no_device_is_flagged(cli, tmp_path):
    files = {"comms.py": GROUP_HELPER, "train.py": WORKER.replace("    torch.cuda.set_device(index)\n", "")}
    assert check(cli, tmp_path, files, "DPL014") == ["comms.py:5:5: DPL014"]


def dpl011_lines(code: str) -> list[int]:
    return [f.location.row for f in lint(code, select=["DPL011"])]


SAVE = "torch.save(net.state_dict(), 'net.pt')\n"


def test_local_rank_option_declared_only_is_no_evidence_of_several_processes():
    declared = "import torch\nparser.add_argument('--local_rank', type=int, default=-1)\nargs = parser.parse_args()\n"
    assert dpl011_lines(declared + SAVE) == []
    assert dpl011_lines(declared + "logger.info('rank %s', args.local_rank)\n" + SAVE) == []
    assert dpl011_lines(declared + "print('rank {}'.format(args.local_rank))\n" + SAVE) == []
    used = declared + "device = torch.device('cuda', args.local_rank)\n" + SAVE
    assert dpl011_lines(used) == [5]
    tested = declared + "if args.local_rank != -1:\n    torch.cuda.set_device(0)\n" + SAVE
    assert dpl011_lines(tested) == [6]


GPU_UTILS = (
    "import os\n"
    "\n"
    "\n"
    "def use_gpus(ids):\n"
    "    os.environ['CUDA_VISIBLE_DEVICES'] = ids\n"
    "\n"
    "\n"
    "def setup(opts):\n"
    "    use_gpus(opts.gpus)\n"
)
TRAIN_AFTER_INIT = (
    "import torch\n"
    "from gpu_utils import use_gpus\n"
    "\n"
    "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    "use_gpus('1')\n"
)


def test_visible_devices_written_by_another_files_helper_after_cuda_started(cli, tmp_path):
    found = check(cli, tmp_path, {"gpu_utils.py": GPU_UTILS, "train.py": TRAIN_AFTER_INIT}, "DPL009")
    assert found == ["gpu_utils.py:5:5: DPL009"]
    result = cli("check", "--no-cache", "--select", "DPL009", ".", cwd=tmp_path)
    assert "(in train.py:4, before that file calls `use_gpus()`, defined on line 4) initialised CUDA" in result.stdout.decode()


def test_visible_devices_helper_reached_through_a_function_of_its_file(cli, tmp_path):
    train = TRAIN_AFTER_INIT.replace("use_gpus", "setup").replace("setup('1')", "setup(opts)")
    assert check(cli, tmp_path, {"gpu_utils.py": GPU_UTILS, "train.py": train}, "DPL009") == ["gpu_utils.py:5:5: DPL009"]


def test_visible_devices_helper_called_before_cuda_starts_is_clean(cli, tmp_path):
    train = (
        "import torch\n"
        "from gpu_utils import use_gpus\n"
        "\n"
        "use_gpus('1')\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    )
    assert check(cli, tmp_path, {"gpu_utils.py": GPU_UTILS, "train.py": train}, "DPL009") == []
