"""The real-world benchmark's blind split is frozen, and the mutation operators make the intended bugs."""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict

import pytest

from conftest import ROOT

REALWORLD = ROOT / "tests" / "realworld"
sys.path.insert(0, str(REALWORLD))
try:
    import mutate
    import score
    import split
finally:
    sys.path.remove(str(REALWORLD))


# --- the blind split ---------------------------------------------------------------------------

def test_blind_file_equals_the_hash_rule_for_the_manifest():
    repos = split.manifest_repos()
    assert split.frozen_blind() == sorted(r for r in repos if split.is_blind(r))
    assert split.BLIND_FILE.read_text() == split.blind_text(repos)


def test_every_repository_is_in_exactly_one_part():
    repos = split.manifest_repos()
    parts = defaultdict(set)
    for repo in repos:
        parts[split.part_of(repo)].add(repo)
    assert set(parts) == {split.BLIND, split.DEVELOPED}
    assert parts[split.BLIND] & parts[split.DEVELOPED] == set()
    assert parts[split.BLIND] | parts[split.DEVELOPED] == set(repos)
    assert set(split.frozen_blind()) <= set(repos)  # no stale name in the frozen list


def test_the_blind_part_is_about_a_quarter_and_keeps_its_names():
    repos = split.manifest_repos()
    share = len(split.frozen_blind()) / len(repos)
    assert 0.18 < share < 0.32, share
    # The rule is a hash of the name alone: fixed answers, whatever the manifest holds.
    assert split.is_blind("karpathy/nanoGPT") and not split.is_blind("facebookresearch/moco")


def test_score_prints_developed_and_blind_side_by_side():
    totals = {
        split.DEVELOPED: {"missing-set-epoch": {"tp": 3, "fp": 1, "fn": 0}},
        split.BLIND: {"missing-set-epoch": {"tp": 1, "fp": 0, "fn": 1},
                      "sampler-shuffle": {"tp": 2, "fp": 0, "fn": 0}},
    }
    lines, summary = score.split_table(totals)
    by_rule = {line.split()[0]: line for line in lines[2:]}
    assert by_rule["missing-set-epoch"].split() == [
        "missing-set-epoch", "3", "1", "0", "0.75", "1.00", "|", "1", "0", "1", "1.00", "0.50"]
    assert by_rule["sampler-shuffle"].split()[1:7] == ["0", "0", "0", "nan", "nan", "|"]
    assert summary == ["realworld developed: precision 0.75 recall 1.00 (3/1/0)",
                       "realworld blind: precision 1.00 recall 0.75 (3/0/1)"]


# --- the mutation operators ---------------------------------------------------------------------

TRAIN = textwrap.dedent("""\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def main(rank, model, dataset):
        dist.init_process_group("nccl", rank=rank)
        torch.cuda.set_device(rank)
        model = DDP(model.cuda(), device_ids=[rank])
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
            print(model.module.head)
            if rank == 0 and epoch % 2 == 0:
                torch.save(model.module.state_dict(), "ckpt.pt")
            dist.barrier()
""")


def mutants(files):
    repo = mutate.Repo(files)
    for path, text in files.items():
        facts = mutate.RepoFacts()
        mutate.cst.parse_module(text).visit(facts)
        for name in facts.wrapped:
            repo.wrapped_names.setdefault(name, set()).add(path)
        repo.saving_helpers |= facts.saving
        repo.mentions_nccl |= "nccl" in text
    found = defaultdict(list)
    for mutant in mutate.mutants_of(repo):
        if mutate.built(mutant):
            found[mutant.operator].append(mutant)
    return found


def changed_lines(old, new):
    """(removed, added) lines of a one-site mutation."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    return ([line for line in old_lines if line not in new_lines],
            [line for line in new_lines if line not in old_lines])


EXPECTED = {
    "drop-set-epoch": ("missing-set-epoch", 14, ["        sampler.set_epoch(epoch)"], []),
    "shuffle-beside-sampler": (
        "sampler-shuffle", 12,
        ["    loader = DataLoader(dataset, batch_size=8, sampler=sampler)"],
        ["    loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=True)"]),
    "unwrap-saved-state-dict": (
        "save-wrapped-state-dict", 20,
        ['            torch.save(model.module.state_dict(), "ckpt.pt")'],
        ['            torch.save(model.state_dict(), "ckpt.pt")']),
    "drop-save-rank-guard": (
        "unguarded-rank-save", 19,
        ["        if rank == 0 and epoch % 2 == 0:"], ["        if epoch % 2 == 0:"]),
    "drop-set-device": ("missing-set-device", 9, ["    torch.cuda.set_device(rank)"], []),
    "drop-module-attribute": (
        "attribute-through-wrapper", 18, ["        print(model.module.head)"], ["        print(model.head)"]),
    "forward-through-inner": (
        "wrapper-bypass", 16, ["            loss = model(x).sum()"], ["            loss = model.module(x).sum()"]),
    "barrier-under-rank-guard": (
        "collective-under-rank-guard", 21, [], []),
}


@pytest.mark.parametrize("operator", sorted(EXPECTED))
def test_operator_makes_its_one_bug(operator):
    rule, line, removed, added = EXPECTED[operator]
    found = mutants({"train.py": TRAIN})[operator]
    assert len(found) == 1, [m.line for m in found]
    mutant = found[0]
    assert (mutant.rule, mutant.path, mutant.line) == (rule, "train.py", line)
    mutate.cst.parse_module(mutant.text)  # the mutant parses
    if operator != "barrier-under-rank-guard":
        assert changed_lines(TRAIN, mutant.text) == (removed, added)


def test_barrier_moves_into_the_rank_guard_just_before_it():
    mutant = mutants({"train.py": TRAIN})["barrier-under-rank-guard"][0]
    assert mutant.text.endswith(
        "        if rank == 0 and epoch % 2 == 0:\n"
        '            torch.save(model.module.state_dict(), "ckpt.pt")\n'
        "            dist.barrier()\n")


def test_barrier_with_no_guard_before_it_gets_a_new_one():
    code = "import torch.distributed as dist\n\ndef sync():\n    x = 1\n    dist.barrier()\n"
    mutant = mutants({"sync.py": code})["barrier-under-rank-guard"][0]
    assert mutant.text == ("import torch.distributed as dist\n\ndef sync():\n    x = 1\n"
                           "    if dist.get_rank() == 0:\n        dist.barrier()\n")


def test_a_whole_rank_guard_is_removed_and_its_body_dedented():
    code = textwrap.dedent("""\
        import torch

        def save(model, args):
            if args.rank == 0:
                # keep this comment
                torch.save(model.state_dict(), "m.pt")
            return 1
    """)
    mutant = mutants({"s.py": code})["drop-save-rank-guard"][0]
    assert mutant.text == textwrap.dedent("""\
        import torch

        def save(model, args):
            # keep this comment
            torch.save(model.state_dict(), "m.pt")
            return 1
    """)


def test_a_deleted_only_statement_leaves_pass():
    code = "def f(s, e):\n    if s is not None:\n        s.set_epoch(e)\n"
    mutant = mutants({"f.py": code})["drop-set-epoch"][0]
    assert mutant.text == "def f(s, e):\n    if s is not None:\n        pass\n"


def test_set_epoch_of_a_sampler_only_with_an_epoch_that_changes():
    code = ("def f(s, writer, e, it):\n    s.set_epoch(0)\n    writer.set_epoch(it, 'train')\n"
            "    s.set_epoch(e)\n")
    assert [m.line for m in mutants({"f.py": code})["drop-set-epoch"]] == [4]


def test_a_name_wrapped_only_in_an_unlinked_file_is_no_site():
    files = {
        "main.py": "from torch.nn.parallel import DistributedDataParallel\n"
                   "model = DistributedDataParallel(net)\n",
        "tests/test_net.py": "def test_step(model, x):\n    model(x).sum().backward()\n    print(model.module.size)\n",
    }
    found = mutants(files)
    assert found["forward-through-inner"] == [] and found["drop-module-attribute"] == []


def test_wrapper_made_in_another_file_is_the_other_file_variant():
    files = {
        "main.py": "from torch.nn.parallel import DistributedDataParallel\n"
                   "from engine import step\n"
                   "model = DistributedDataParallel(net)\n",
        "engine.py": "def step(model, x):\n    model(x).sum().backward()\n    print(model.module.size)\n",
    }
    found = mutants(files)
    assert [(m.path, m.variant) for m in found["forward-through-inner"]] == [("engine.py", "other-file")]
    assert [(m.path, m.variant) for m in found["drop-module-attribute"]] == [("engine.py", "other-file")]
    assert found["forward-through-inner"][0].text.splitlines()[1] == "    model.module(x).sum().backward()"


def test_a_forward_with_gradients_off_is_no_site():
    files = {
        "main.py": "import torch\n"
                   "from torch.nn.parallel import DistributedDataParallel\n"
                   "model = DistributedDataParallel(net)\n"
                   "def fit(model, x, y):\n"
                   "    model(x).sum().backward()\n"
                   "    with torch.no_grad():\n"
                   "        score = model(y)\n"
                   "@torch.no_grad()\n"
                   "def check(model, x):\n"
                   "    loss = model(x).sum()\n"
                   "    loss.backward()\n",
    }
    assert [m.line for m in mutants(files)["forward-through-inner"]] == [5]


def test_sites_that_are_not_the_shape_give_no_mutant():
    code = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader

        def f(model, ds, s):
            a = DataLoader(ds, sampler=s, shuffle=False)      # shuffle already given
            b = DataLoader(ds, sampler=None)                  # no sampler
            model.module.state_dict()                         # not saved
            model.module.parameters()                         # the wrapper has it too
            torch.cuda.set_device(0)                          # no NCCL in the project
            if epoch == 3:
                torch.save(model, "x.pt")                     # not a rank test
    """)
    assert dict(mutants({"f.py": code})) == {}


def test_judge_maps_lines_through_the_mutation():
    original = "a\nb\nc\nd\n"
    mutant = mutate.Mutant("drop-set-epoch", "missing-set-epoch", "t.py", 2, "a\nc\nd\n")
    baseline = [("t.py", "missing-set-epoch", 4), ("t.py", "strict-false-load", 3)]
    # The old finding on line 4 is on line 3 now: not new.  A finding on line 1 is.
    same = mutate.judge(mutant, original, baseline, [("t.py", "missing-set-epoch", 3)])
    assert not same["detected"] and same["had"]  # line 4 is within SITE_SLACK of the site
    found = mutate.judge(mutant, original, [], [("t.py", "missing-set-epoch", 1), ("t.py", "missing-set-epoch", 3)])
    assert found["detected"] and found["at_site"] and not found["had"]
    assert found["new"] == ["t.py:1 missing-set-epoch", "t.py:3 missing-set-epoch"]


def test_set_device_variant_says_whether_the_file_uses_the_bare_cuda_device():
    assert mutants({"train.py": TRAIN})["drop-set-device"][0].variant == "bare-cuda"
    indexed = TRAIN.replace("model.cuda()", "model.cuda(rank)")
    assert mutants({"train.py": indexed})["drop-set-device"][0].variant == "indexed-cuda"
    # `.cuda(non_blocking=True)` names no device: the current one
    batches = indexed.replace("loss = model(x)", "loss = model(x.cuda(non_blocking=True))")
    assert mutants({"train.py": batches})["drop-set-device"][0].variant == "bare-cuda"
    named = indexed.replace("loss = model(x)", "loss = model(x.cuda(rank, non_blocking=True))")
    assert mutants({"train.py": named})["drop-set-device"][0].variant == "indexed-cuda"


ONE_PROCESS_BRANCHES = textwrap.dedent("""\
    import torch
    import torch.distributed as dist


    def main(args, model, device="cuda"):
        if args.local_rank == -1:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            torch.cuda.set_device(args.local_rank)
            device = torch.device("cuda", args.local_rank)
            dist.init_process_group("nccl")
        if args.distributed:
            model = torch.nn.parallel.DistributedDataParallel(model.to(device))
        elif args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            model = model.cuda(args.gpu)
        return model
""")


def test_set_device_variant_reads_the_branches_around_the_site():
    # the first set_device's only bare `cuda` is on the other branch of its `if`, and the
    # parameter default is a caller's to replace: indexed; the second serves the one-process run
    first, second = mutants({"train.py": ONE_PROCESS_BRANCHES})["drop-set-device"]
    assert (first.line, first.variant) == (9, "indexed-cuda")
    assert (second.line, second.variant) == (15, "one-process-branch")
    bare = ONE_PROCESS_BRANCHES.replace("model.to(device)", "model.cuda()")
    assert [m.variant for m in mutants({"train.py": bare})["drop-set-device"]] == ["bare-cuda", "one-process-branch"]


def test_set_device_deletions_no_rank_feels_are_shown_but_not_counted():
    def record(variant, detected, part="blind"):
        return {"operator": "drop-set-device", "rule": "missing-set-device", "variant": variant,
                "part": part, "had": False, "detected": detected}
    records = [record("bare-cuda", True), record("bare-cuda", False), record("indexed-cuda", False),
               record("one-process-branch", False)]
    lines = mutate.table(records)
    operator = next(line for line in lines if line.startswith("drop-set-device"))
    assert operator.split("|")[1].split() == ["2", "0", "1/2", "0.50"]
    indexed = next(line for line in lines if "indexed-cuda" in line)
    assert "(no bug: not counted)" in indexed and indexed.split("|")[1].split() == ["1", "0", "0/1", "0.00"]
    assert next(line for line in lines if line.startswith("all")).split("|")[1].split() == ["2", "0", "1/2", "0.50"]
