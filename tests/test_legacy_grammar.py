"""Old grammar (`async` as a name, dplint/legacy.py) and DPL009's conditional process starts."""

from __future__ import annotations

import pytest

from conftest import fix, lint
from dplint.legacy import rewrite_async_names

OLD = (
    "import os\n"
    "\n"
    "import torch\n"
    "\n"
    "print(torch.cuda.is_available())\n"
    'os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n'
    "batch = torch.zeros(4, 3)\n"
    "if torch.cuda.is_available():\n"
    "    batch = batch.cuda(async=True)\n"
)


def found(code: str):
    return [(f.location.row, f.location.column, f.code, f.severity.value) for f in lint(code)]


def test_old_grammar_file_is_analysed_not_a_parse_error():
    assert found(OLD) == [(6, 1, "DPL009", "error")]


def test_old_grammar_positions_stay_exact_and_messages_say_async():
    code = (
        "import os, torch\n"
        "async = torch.cuda.is_available()\n"
        "x = torch.zeros(2).cuda(async=async); os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
    )
    (finding,) = [f for f in lint(code) if f.code == "DPL009"]
    assert (finding.location.row, finding.location.column) == (3, 39)
    assert "asyn_" not in finding.message


def test_old_grammar_gets_no_fix_and_fixing_leaves_it_alone():
    assert all(f.fix_applicability is None and not f.edits for f in lint(OLD))
    assert fix(OLD, unsafe=True) == OLD


@pytest.mark.parametrize(
    "code",
    [
        "async def f():\n    async with a as b:\n        async for x in b:\n            await x\n",
        "x = 1\n",
        "print 'python 2'\n",
    ],
)
def test_rewrite_leaves_keywords_and_other_files_alone(code):
    assert rewrite_async_names(code) is None


def test_rewrite_keeps_length_and_picks_an_unused_placeholder():
    code = "asyn_ = 1\nx.cuda(async=True)  # async\nasync def f(): pass\n"
    text, placeholder = rewrite_async_names(code)
    assert placeholder != "asyn_" and len(text) == len(code)
    assert text == code.replace("cuda(async=", f"cuda({placeholder}=")


def test_python2_file_is_still_a_parse_error():
    code = "import torch\nimport os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\nprint 'hi'\nx.cuda(async=True)\n"
    assert [f.code for f in lint(code)] == ["DPL000"]


# ------------------------------------------------------------------ DPL009 and process starts
SPAWN = (
    "import os\n"
    "import torch\n"
    "import torch.multiprocessing as mp\n"
    "def main(args):\n"
    "    os.environ['CUDA_VISIBLE_DEVICES'] = args.gpus\n"
)


@pytest.mark.parametrize(
    "after, expected",
    [
        ("    mp.spawn(work, nprocs=2)\n", []),
        ("    with ctx():\n        mp.spawn(work, nprocs=2)\n", []),
        ("    try:\n        mp.spawn(work, nprocs=2)\n    except KeyboardInterrupt:\n        pass\n", []),
        # Only `import torch` before the write: it takes effect in this process too.
        ("    if args.n > 1:\n        mp.spawn(work, nprocs=args.n)\n    else:\n        work(0)\n", []),
        ("    for _ in range(args.retries):\n        mp.spawn(work, nprocs=2)\n", []),
    ],
)
def test_process_start_after_the_write(after, expected):
    assert found(SPAWN + after) == expected


def test_conditional_spawn_downgrades_an_error_and_says_why():
    code = SPAWN.replace("def main(args):\n", "def main(args):\n    torch.cuda.set_device(0)\n") + (
        "    if args.n > 1:\n        mp.spawn(work, nprocs=args.n)\n"
    )
    (finding,) = [f for f in lint(code) if f.code == "DPL009"]
    assert finding.severity.value == "warning"
    assert "runs only on some paths" in finding.message
