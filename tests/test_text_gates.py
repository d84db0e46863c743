"""The text-only gates a rule asks before resolving a callee (`functions_mentioning`): they may
let through too much (a resolution), never too little (a lost finding)."""

from __future__ import annotations

from dplint.project import function_texts, functions_mentioning

SAVE = r"save\s*\("
WRAPPER = r"DataParallel|DP\("

CODE = (
    "from torch.nn.parallel import DistributedDataParallel as Wrapper\n"
    "from torch import save as keep\n"
    "dump = torch.save\n"
    "def wrap(m):\n"
    "    return Wrapper(m)\n"
    "def place(m):\n"
    "    return wrap(m)\n"
    "def build(m):\n"
    "    return place(m)\n"
    "def setup(m):\n"
    "    return build(m)\n"
    "class Saver:\n"
    "    def write(self, sd):\n"
    "        keep(sd, 'a.pt')\n"
    "    def __call__(self, sd):\n"
    "        def inner():\n"
    "            pass\n"
    "        dump(sd, 'b.pt')\n"
    "    def log(self, text):\n"
    "        print(text)\n"
)


def test_a_def_runs_to_the_next_def_no_deeper():
    texts = dict(function_texts(CODE))
    assert "def inner" in texts["__call__"] and "dump(sd" in texts["__call__"]
    assert "print" not in texts["write"]


def test_aliases_of_the_matched_name_count():
    # `inner` runs on to its parent's end, past the save: too much, on the safe side
    assert functions_mentioning([CODE], SAVE) == {"write", "__call__", "inner"}


def test_callers_count_as_many_calls_up_as_asked():
    assert functions_mentioning([CODE], WRAPPER, depth=2) == {"wrap", "place", "build"}
    assert functions_mentioning([CODE], WRAPPER, depth=3) == {"wrap", "place", "build", "setup"}


def test_a_function_is_not_its_own_caller():
    # the name on a def line is not a call of it
    assert "wrap" not in functions_mentioning(["def wrap(m):\n    return m\n"], WRAPPER)
