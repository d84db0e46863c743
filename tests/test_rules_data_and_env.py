"""DPL008 missing-set-epoch and DPL009 late-cuda-visible-devices: exact findings, severities,
fixes on odd formatting, and the cases where they must stay silent or offer no fix."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import FIXTURES, fix, lint
from dplint.cuda import IMPORT, INIT, MAY_INIT, CudaTimeline
from dplint.engine import lint_source, rules_for
from dplint.registry import selected_codes
from dplint.flow import analysed

SET_EPOCH = frozenset({"DPL008"})
VISIBLE = frozenset({"DPL009"})


def findings(code: str, rule: str) -> list[tuple[int, int, str, bool]]:
    """(row, column, severity, has a fix) of one rule's findings; the rule must not crash."""
    result = lint_source(code, "example.py", rules_for(selected_codes([rule])))
    assert not result.errors, result.errors
    return [
        (f.location.row, f.location.column, f.severity.value, bool(f.edits))
        for f in result.findings
        if f.code == rule
    ]


# ---------------------------------------------------------------------------- DPL008
LOADER = (
    "import torch\n"
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "sampler = DistributedSampler(ds)\n"
    "loader = DataLoader(ds, batch_size=8, sampler=sampler)\n"
)
TRAIN = "        loss_fn(model(x), y).backward()\n"


def test_set_epoch_finding_points_at_the_sampler_and_names_the_loop():
    code = LOADER + "for epoch in range(3):\n    for x, y in loader:\n" + TRAIN
    (finding,) = [f for f in lint(code) if f.code == "DPL008"]
    assert (finding.location.row, finding.location.column) == (3, 11)
    assert (finding.end_location.row, finding.end_location.column) == (3, 33)
    assert "every epoch of the loop at line 5 repeats the same order" in finding.message
    assert finding.fix_message == "Call `sampler.set_epoch(epoch)` at the start of each epoch"


@pytest.mark.parametrize(
    "loop, fixable",
    [
        ("for epoch in range(3):\n", True),
        ("for epoch in range(start, stop, 1):\n", True),
        ("for epoch in trange(10, desc='epochs'):\n", True),
        ("for epoch in tqdm(range(10), disable=rank != 0):\n", True),
        ("for _ in range(3):\n", False),  # `_` says the value is unused: no fix
        ("for epoch in epochs:\n", False),  # not known to count epochs
        ("for epoch, lr in enumerate(schedule):\n", False),
        ("while True:\n", False),
    ],
)
def test_set_epoch_fix_needs_a_counting_loop_variable(loop, fixable):
    code = "from tqdm import tqdm, trange\n" + LOADER + loop + "    for x, y in loader:\n" + TRAIN
    assert findings(code, "DPL008") == [(4, 11, "error", fixable)]


def test_set_epoch_no_fix_with_two_candidate_loops_or_a_maybe_none_sampler():
    nested = LOADER + "for run in range(2):\n    for epoch in range(3):\n        for x in loader:\n" + "    " + TRAIN
    assert findings(nested, "DPL008") == [(3, 11, "error", False)]
    maybe_none = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds) if distributed else None\n"
        "loader = DataLoader(ds, shuffle=sampler is None, sampler=sampler)\n"
        "for epoch in range(3):\n    for x, y in loader:\n" + TRAIN
    )
    assert findings(maybe_none, "DPL008") == [(2, 11, "error", False)]
    rebuilt_each_epoch = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "for epoch in range(3):\n"
        "    sampler = DistributedSampler(ds)\n"
        "    for x, y in DataLoader(ds, sampler=sampler):\n" + TRAIN
    )
    assert findings(rebuilt_each_epoch, "DPL008") == [(3, 15, "error", False)]


def test_set_epoch_sampler_chosen_in_a_branch():
    loop = "for epoch in range(3):\n    for x, y in loader:\n" + TRAIN
    if_else = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "if args.distributed:\n"
        "    sampler = DistributedSampler(ds)\n"
        "else:\n"
        "    sampler = None\n"
        "loader = DataLoader(ds, shuffle=(sampler is None), sampler=sampler)\n"
    )
    # Flagged; `sampler.set_epoch` (or `loader.sampler.set_epoch`) would raise without DDP.
    assert findings(if_else + loop, "DPL008") == [(3, 15, "error", False)]
    guarded = loop.replace("    for x, y", "    if args.distributed:\n        sampler.set_epoch(epoch)\n    for x, y")
    assert findings(if_else + guarded, "DPL008") == []
    none_first = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = None\n"
        "if args.distributed:\n"
        "    sampler = DistributedSampler(ds)\n"
        "loader = DataLoader(ds, shuffle=(sampler is None), sampler=sampler)\n"
    )
    assert findings(none_first + loop, "DPL008") == [(4, 15, "error", False)]


def test_set_epoch_not_needed_when_rebuilt_with_a_new_seed_each_epoch():
    code = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "for epoch in range(3):\n"
        "    sampler = DistributedSampler(ds, seed=args.seed + epoch)\n"
        "    for x, y in DataLoader(ds, sampler=sampler):\n" + TRAIN
    )
    assert findings(code, "DPL008") == []
    assert findings(code.replace("args.seed + epoch", "42"), "DPL008") == [(3, 15, "error", False)]


@pytest.mark.parametrize(
    "code",
    [
        # shuffle off (a config value is flagged: tests/test_data_epoch_samplers.py)
        LOADER.replace("DistributedSampler(ds)", "DistributedSampler(ds, None, None, False)"),
        LOADER.replace("DistributedSampler(ds)", "DistributedSampler(ds, **sampler_kwargs)"),
        # the sampler or its loader escapes into code the file can't see
        LOADER + "loader = accelerator.prepare(loader)\n",
        LOADER + "hooks.append(sampler)\n",
        LOADER + "def make():\n    return sampler\n",
        # set_epoch, or the epoch attribute, reached some other way
        LOADER + "loader.sampler.epoch = 3\n",
        LOADER + "set_epoch = getattr(loader.sampler, 'set_epoch', None)\n",
        # not torch's sampler
        LOADER.replace("from torch.utils.data import DataLoader, DistributedSampler",
                       "from torch.utils.data import DataLoader\nfrom mylib import DistributedSampler"),
    ],
)
def test_set_epoch_silent_where_the_file_cannot_tell(code):
    body = "for epoch in range(3):\n    for x, y in loader:\n" + TRAIN
    assert findings(code + body, "DPL008") == []


def test_set_epoch_asking_for_another_attribute_keeps_the_sampler_in_view():
    # hasattr() only asks; the epoch is set by a call, and here none follows the test.
    body = "for epoch in range(3):\n    for x, y in loader:\n" + TRAIN
    for probe in ("if hasattr(loader, 'batch_sampler'):\n    pass\n",
                  "if hasattr(loader.sampler, 'set_epoch'):\n    pass\n"):
        assert findings(LOADER + probe + body, "DPL008") == [(3, 11, "error", True)]
    # getattr() hands the method (or the value) out: it may be called where the file can't see.
    asks_epoch = LOADER + "start = getattr(loader.sampler, 'epoch', 0)\n"
    assert findings(asks_epoch + body, "DPL008") == []


def test_set_epoch_trainer_attribute_read_outside_its_class_is_an_escape():
    code = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "class Trainer:\n"
        "    def __init__(self, ds):\n"
        "        self.loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
        "    def fit(self):\n"
        "        for epoch in range(3):\n"
        "            for x in self.loader:\n"
        "                self.model(x).sum().backward()\n"
    )
    assert findings(code, "DPL008") == [(4, 46, "error", True)]
    assert findings(code + "trainer = Trainer(ds)\nhook(trainer.loader)\n", "DPL008") == []


@pytest.mark.parametrize(
    "ok_fixture, set_epoch_line, fixed_line",
    [
        ("ok_set_epoch_via_loader.py", "train_loader.sampler.set_epoch(epoch)", None),
        ("ok_batch_sampler.py", "loader.batch_sampler.sampler.set_epoch(epoch)", "batches.sampler.set_epoch(epoch)"),
        ("ok_eval_sampler.py", "train_sampler.set_epoch(epoch)", None),
    ],
)
def test_near_misses_are_flagged_without_their_set_epoch(ok_fixture, set_epoch_line, fixed_line):
    """The near-misses are near: remove their set_epoch and they are flagged and fixed back
    (through the shortest name that reaches the sampler)."""
    text = (FIXTURES / "missing-set-epoch" / ok_fixture).read_text()
    line = "        " + set_epoch_line + "\n"
    assert line in text
    broken = text.replace(line, "")
    assert [f.code for f in lint(broken)] == ["DPL008"]
    assert fix(broken, only=SET_EPOCH) == text.replace(set_epoch_line, fixed_line or set_epoch_line)


def test_set_epoch_fix_keeps_comments_crlf_and_tabs():
    code = (
        "from torch.utils.data import DataLoader, DistributedSampler\r\n"
        "def main(ds):\r\n"
        "\tsampler = DistributedSampler(ds)  # shuffles\r\n"
        "\tloader = DataLoader(ds, sampler=sampler)\r\n"
        "\tfor epoch in range(\r\n"
        "\t\t\t3):  # epochs\r\n"
        "\t\t# train\r\n"
        "\t\tfor x in loader:  # batches\r\n"
        "\t\t\tmodel(x).sum().backward()\r\n"
    )
    assert findings(code, "DPL008") == [(3, 12, "error", True)]
    fixed = fix(code, only=SET_EPOCH)
    assert fixed == code.replace("\t\t# train\r\n", "\t\t# train\r\n\t\tsampler.set_epoch(epoch)\r\n")
    cst.parse_module(fixed)


def test_set_epoch_module_level_names_used_inside_a_function_are_followed():
    # The function reads the module's `loader` when it runs: the global it holds last.
    code = LOADER + "def train():\n    for epoch in range(3):\n        for x, y in loader:\n    " + TRAIN + "train()\n"
    assert findings(code, "DPL008") == [(3, 11, "error", True)]
    fixed = fix(code, only=SET_EPOCH)
    assert "    for epoch in range(3):\n        sampler.set_epoch(epoch)\n" in fixed
    with_epoch = code.replace("    for epoch in range(3):\n", "    for epoch in range(3):\n        loader.sampler.set_epoch(epoch)\n")
    assert findings(with_epoch, "DPL008") == []
    rebound = LOADER + "def train(loader):\n    for epoch in range(3):\n        for x, y in loader:\n    " + TRAIN
    assert findings(rebound, "DPL008") == []  # its own `loader`, from callers it never has


def test_set_epoch_follows_same_file_helpers_but_not_unknown_code():
    helper = (
        "def run_epoch(net, batches):\n"
        "    for x, y in batches:\n"
        "        loss_fn(net(x), y).backward()\n"
    )
    loop = "for epoch in range(3):\n    run_epoch(model, loader)\n"
    # The helper is in the file: it iterates and trains; nothing calls set_epoch.
    assert findings(LOADER + helper + loop, "DPL008") == [(3, 11, "error", False)]
    # It calls set_epoch on what it is given.
    sets_epoch = helper.replace("    for x, y", "    batches.sampler.set_epoch(0)\n    for x, y")
    assert findings(LOADER + sets_epoch + loop, "DPL008") == []
    # An imported helper is code the file cannot see into: silent.
    assert findings(LOADER + "from engine import run_epoch\n" + loop, "DPL008") == []


def test_sampler_shuffle_on_one_path_only_gets_a_guarded_fix():
    code = (
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "sampler = DistributedSampler(ds) if ddp else None\n"
        "loader = DataLoader(ds, shuffle=True, sampler=sampler)\n"
    )
    assert fix(code, select=["DPL007"]) == code.replace("shuffle=True", "shuffle=sampler is None")
    inline = "from torch.utils.data import DataLoader, DistributedSampler\nloader = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds) if ddp else None)\n"
    assert findings(inline, "DPL007") == [(2, 25, "error", False)]  # flagged, no fix: not a name


# ---------------------------------------------------------------------------- DPL009
def test_fixture_severities():
    folder = FIXTURES / "late-cuda-visible-devices"
    severities = {
        path.name: [f.severity.value for f in lint(path.read_text(), str(path)) if f.code == "DPL009"]
        for path in sorted(folder.glob("bad_*.py"))
    }
    assert severities == {
        "bad_gpu_flag_after_cuda_check.py": ["error"],
        "bad_legacy_async_copy.py": ["error"],
        "bad_method_builds_model_first.py": ["error"],
        "bad_notebook_export.py": ["error"],
        "bad_resume_checkpoint_first.py": ["warning"],
        "bad_single_gpu_pinned_after_parallel_branch.py": ["warning"],  # on the paths with several ids
    }


HEAD = "import os\nimport torch\n"
WRITE = "os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"


@pytest.mark.parametrize(
    "before, severity, said",
    [
        # Only `import torch` (and calls that do not initialise CUDA) before: the value takes effect.
        ("", None, ""),
        ("torch.device('cuda:1')\ntorch.manual_seed(0)\ntorch.cuda.manual_seed_all(0)\n", None, ""),
        # device_count() counts through NVML: no initialisation, the later write takes effect.
        ("n = torch.cuda.device_count()\n", None, ""),
        ("ok = torch.cuda.is_available()\n", "error", "after `torch.cuda.is_available()` (line 3) initialised CUDA"),
        ("torch.cuda.set_device(0)\n", "error", "`torch.cuda.set_device()`"),
        ("x = torch.ones(2).cuda()\n", "error", "`.cuda()`"),
        ("x = torch.ones(2).to('cuda:0')\n", "error", '`.to("cuda")`'),
        ("x = torch.ones(2).to(device=torch.device('cuda', 1))\n", "error", '`.to("cuda")`'),
        ("x = torch.zeros(2, device=f'cuda:{rank}')\n", "error", '`torch.zeros(..., device="cuda")`'),
        ("m = torch.nn.DataParallel(net)\n", "error", "`nn.DataParallel(...)` (its constructor calls `torch.cuda.is_available()`)"),
        # A branch, a loop body, a `try` body may not run: on the paths that run it, the value is
        # ignored (a warning).
        ("if args.gpu:\n    torch.cuda.set_device(0)\n", "warning", "`torch.cuda.set_device()` (line 4) initialised CUDA on the paths"),
        ("for r in ranks:\n    torch.cuda.set_device(r)\n", "warning", "on the paths that run it"),
        ("try:\n    torch.cuda.set_device(0)\nexcept RuntimeError:\n    pass\n", "warning", "on the paths that run it"),
        # `torch.load` restores a GPU checkpoint's tensors onto the GPU (no `map_location`).
        ("ckpt = torch.load('last.pt')\n", "warning", "`torch.load(...)` (line 3), which restores tensors saved from a GPU"),
        ("ckpt = torch.load('last.pt', map_location='cpu')\n", None, ""),
        ("ckpt = torch.load('last.pt', map_location='cuda:0')\n", "error", "map_location"),
        ("d = 'cuda' if torch.cuda.is_available() else 'cpu'\n", "error", "`torch.cuda.is_available()`"),
        ("d = args.cpu or torch.cuda.is_available()\n", None, ""),
        ("if torch.cuda.is_available():\n    pass\n", "error", "`torch.cuda.is_available()`"),
        ("with torch.cuda.device(0):\n    torch.cuda.synchronize()\n", "error", "`torch.cuda.synchronize()`"),
    ],
)
def test_visible_devices_severity_follows_what_certainly_ran_first(before, severity, said):
    code = HEAD + before + WRITE
    found = [f for f in lint(code) if f.code == "DPL009"]
    if severity is None:
        assert found == []
        return
    assert [(f.location.row, f.location.column, f.severity.value) for f in found] == [
        (code.count("\n"), 1, severity)
    ]
    assert said in found[0].message
    assert "import torch` initialis" not in found[0].message  # never claims the import initialises


def test_visible_devices_follows_calls_into_functions_of_the_file():
    code = (
        "import os\n"
        "import torch\n"
        "def pick_gpu():\n"
        "    torch.cuda.set_device(0)\n"
        "def setup():\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
        "def main():\n"
        "    pick_gpu()\n"
        "    setup()\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    assert findings(code, "DPL009") == [(6, 5, "error", False)]
    # A decorator may skip the body: unknown. An early return skips the call on some paths.
    decorated = code.replace("def pick_gpu():", "@rank_zero_only\ndef pick_gpu():")
    assert findings(decorated, "DPL009") == []
    early_return = code.replace("def pick_gpu():\n", "def pick_gpu():\n    if cpu:\n        return\n")
    assert findings(early_return, "DPL009") == [(8, 5, "warning", False)]
    # A function body on its own starts from what was certain at its `def`.
    defined_after_init = "import os\nimport torch\ntorch.cuda.init()\ndef setup():\n    os.putenv('CUDA_VISIBLE_DEVICES', '1')\n"
    assert findings(defined_after_init, "DPL009") == [(5, 5, "error", False)]


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\nimport torch\ntorch.cuda.set_device(0)\n",
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",  # no torch at all
        "import os\nimport torch\nenv = dict(os.environ)\nenv['CUDA_VISIBLE_DEVICES'] = '1'\n",
        "import os\nimport torch\ntorch.cuda.init()\nos.environ['CUDA_DEVICE_ORDER'] = 'PCI_BUS_ID'\n",
        "import os\nimport torch\ntorch.cuda.init()\nprint(os.environ['CUDA_VISIBLE_DEVICES'])\n",
        "import os\nimport torch\ntorch.cuda.init()\nos.environ.pop('CUDA_VISIBLE_DEVICES', None)\n",
        "import os\ndef main():\n    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n    import torch\n    torch.cuda.init()\n",
        # a launcher: the children it starts next get the new value
        "import os, subprocess\nimport torch\nstate = torch.load('init.pt')\n"
        "for gpu in range(n):\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(gpu)\n    subprocess.Popen(['python', 'train.py'])\n",
        "import os\nimport torch\nimport torch.multiprocessing as mp\ntorch.cuda.init()\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\nmp.spawn(worker, nprocs=2)\n",
    ],
)
def test_visible_devices_silent(code):
    assert findings(code, "DPL009") == []


@pytest.mark.parametrize(
    "code, row, column",
    [
        ("import os\nimport torch\nstate = torch.load('init.pt')\nif True: os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n", 4, 10),
        ("import os\nimport torch\nstate = torch.load('init.pt')\nclass C:\n    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n", 5, 5),
        ("import os\nimport torch\nstate = torch.load('init.pt')\nf = lambda: os.putenv('CUDA_VISIBLE_DEVICES', '1')\n", 4, 13),
        ("import os\nimport torch\nstate = torch.load('init.pt')\nx = [os.environ.update(CUDA_VISIBLE_DEVICES=str(i)) for i in range(2)]\n", 4, 6),
    ],
)
def test_visible_devices_odd_places_flag_without_a_fix(code, row, column):
    assert findings(code, "DPL009") == [(row, column, "warning", False)]


@pytest.mark.parametrize(
    "write, movable",
    [
        ("os.environ.update({'CUDA_VISIBLE_DEVICES': '1', 'OMP_NUM_THREADS': '4'})\n", True),
        ("os.environ.update(CUDA_VISIBLE_DEVICES='1')\n", True),
        ("os.environ.setdefault('CUDA_VISIBLE_DEVICES', '1')\n", True),
        ("os.putenv('CUDA_VISIBLE_DEVICES', '1')\n", True),
        ("KEY = 'CUDA_VISIBLE_DEVICES'\nos.environ[KEY] = '1'\n", False),  # KEY is bound after torch
    ],
)
def test_visible_devices_every_spelling_of_the_write(write, movable):
    code = HEAD + "torch.cuda.init()\n" + write
    assert findings(code, "DPL009") == [(code.count("\n"), 1, "error", movable)]


def test_visible_devices_from_os_import_environ():
    code = "from os import environ\nimport torch\ntorch.cuda.init()\nenviron['CUDA_VISIBLE_DEVICES'] = '1'\n"
    assert findings(code, "DPL009") == [(4, 1, "error", True)]
    assert fix(code, only=VISIBLE) == (
        "from os import environ\nenviron['CUDA_VISIBLE_DEVICES'] = '1'\nimport torch\ntorch.cuda.init()\n"
    )
    later = "import torch\nfrom os import environ\nenviron['CUDA_VISIBLE_DEVICES'] = '1'\n"
    assert findings(later, "DPL009") == []  # only `import torch` before it: takes effect


def test_visible_devices_fix_adds_import_os_keeps_comments_and_crlf():
    code = (
        "#!/usr/bin/env python\r\n"
        '"""Doc."""\r\n'
        "import torch  # the first torch import\r\n"
        "import os\r\n"
        "state = torch.load('init.pt')\r\n"
        "# pin the job to the spare GPU\r\n"
        "os.environ[\r\n"
        "    'CUDA_VISIBLE_DEVICES'\r\n"
        "] = '3'  # spare\r\n"
        "\r\n"
        "\r\n"
        "def main():\r\n"
        "\tpass\r\n"
    )
    expected = (
        "#!/usr/bin/env python\r\n"
        '"""Doc."""\r\n'
        "import os\r\n"
        "# pin the job to the spare GPU\r\n"
        "os.environ[\r\n"
        "    'CUDA_VISIBLE_DEVICES'\r\n"
        "] = '3'  # spare\r\n"
        "import torch  # the first torch import\r\n"
        "import os\r\n"
        "state = torch.load('init.pt')\r\n"
        "\r\n"
        "\r\n"
        "def main():\r\n"
        "\tpass\r\n"
    )
    assert findings(code, "DPL009") == [(7, 1, "warning", True)]
    assert fix(code, only=VISIBLE) == expected
    assert findings(expected, "DPL009") == []


@pytest.mark.parametrize(
    "code",
    [
        # the value needs something bound after `import torch`
        "import os\nimport torch\nGPU = '1'\nos.environ['CUDA_VISIBLE_DEVICES'] = GPU\n",
        "import os\nimport torch\nos.environ['CUDA_VISIBLE_DEVICES'] = str(torch.cuda.device_count() - 1)\n",
        "import os\nimport torch\nimport sys\nos.environ['CUDA_VISIBLE_DEVICES'] = sys.argv[1]\n",
        # code between the two places reads the environment
        "import os\nimport torch\nprint(os.environ.get('CUDA_VISIBLE_DEVICES'))\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        # not at the top level: moving it would change when (or whether) it runs
        "import os\nimport torch\nif args.gpu:\n    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        "import os\nimport torch\nif __name__ == '__main__':\n    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        "import os\nimport torch\ndef main():\n    os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        # shares its line, or the first torch import is inside a block
        "import os\nimport torch\nx = 1; os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        "import os\ntry:\n    import torch\nexcept ImportError:\n    torch = None\nimport torch.nn\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
        "import os as _os\nimport torch\nprint(1)\nimport os as _os\n_os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
    ],
)
def test_visible_devices_no_fix_when_moving_is_not_provably_safe(code):
    code = _after_a_load(code)
    found = [f for f in lint(code) if f.code == "DPL009"]
    assert len(found) == 1 and not found[0].edits
    assert fix(code, only=VISIBLE) == code


def _after_a_load(code: str) -> str:
    """The same write, after a `torch.load()` just before it (a warning, so there is a finding)."""
    lines = code.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if "CUDA_VISIBLE_DEVICES'] =" in line)
    indent = lines[last][: len(lines[last]) - len(lines[last].lstrip())]
    lines.insert(last, indent + "state = torch.load('init.pt')\n")
    return "".join(lines)


def test_visible_devices_names_bound_before_the_import_may_move():
    code = "import os\nGPUS = ['2', '3']\nimport torch\nstate = torch.load('init.pt')\nos.environ['CUDA_VISIBLE_DEVICES'] = ','.join(GPUS)\n"
    assert fix(code, only=VISIBLE) == code  # a call: not moved
    code = "import os\nGPU = '2'\nimport torch\nstate = torch.load('init.pt')\nos.environ['CUDA_VISIBLE_DEVICES'] = f'{GPU},3'\n"
    assert fix(code, only=VISIBLE) == (
        "import os\nGPU = '2'\nos.environ['CUDA_VISIBLE_DEVICES'] = f'{GPU},3'\nimport torch\nstate = torch.load('init.pt')\n"
    )


def test_two_writes_keep_their_order_when_moved():
    code = HEAD + "state = torch.load('init.pt')\nos.environ.setdefault('CUDA_VISIBLE_DEVICES', '0')\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
    assert fix(code, only=VISIBLE) == (
        "import os\nos.environ.setdefault('CUDA_VISIBLE_DEVICES', '0')\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '1'\nimport torch\nstate = torch.load('init.pt')\n"
    )


def test_timeline_records_each_run_order():
    module = cst.parse_module(
        "import torch\n"
        "def f():\n"
        "    x = 1\n"
        "torch.load('init.pt')\n"
        "torch.cuda.init()\n"
        "f()\n"
    )
    timeline = CudaTimeline(analysed(module))
    statement = module.body[1].body.body[0]
    assert [[event.kind for event in state] for state in timeline.states(statement)] == [
        [IMPORT],  # the body on its own, from its `def`
        [IMPORT, MAY_INIT, INIT],  # called at the end
    ]
