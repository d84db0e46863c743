"""`dplint migrate`: each fixture shape migrates to its expected text, the result is clean under
every rule, parses, and migrating it again changes nothing; unsafe scripts are refused with one
line per blocker and nothing written. The runtime proof is tests/runtime/test_verify_migration.py."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import libcst as cst
import pytest

from conftest import FIXTURES, lint, run_cli
from dplint.migration import Options, migrate_source

FOLDER = FIXTURES / "migrate"
SHAPES = sorted(path for path in FOLDER.glob("*.py"))
SHAPE_NAMES = {path.stem for path in SHAPES}


def test_the_issue_s_eight_shapes_are_all_there():
    assert {"tutorial_loop", "argparse_functions", "trainer_class", "validation_every_epoch", "lr_scheduler",
            "amp_grad_scaler", "grad_accumulation", "checkpoint_resume"} <= SHAPE_NAMES
    for path in SHAPES:
        assert path.with_name(path.name + ".migrated").exists(), path.name


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_shape_migrates_to_its_expected_text(path):
    result = migrate_source(path.read_text(), path.name)
    assert result.blockers == [] and result.migrated
    assert result.text == path.with_name(path.name + ".migrated").read_text()


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_migrated_shape_is_clean_parses_and_is_idempotent(path):
    migrated = path.with_name(path.name + ".migrated").read_text()
    cst.parse_module(migrated)
    assert lint(migrated, path.name) == []  # every rule
    again = migrate_source(migrated, path.name)
    assert again.text == migrated and again.blockers == [] and again.already_distributed is not None


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_every_migration_step_is_there(path):
    migrated = path.with_name(path.name + ".migrated").read_text()
    for step in ('dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")',
                 "torch.cuda.set_device(local_rank)", "DDP(", "sampler=DistributedSampler(",
                 ".sampler.set_epoch(epoch)", "// dist.get_world_size()", "dist.destroy_process_group()",
                 "if dist.get_rank() == 0:\n"):
        assert step in migrated, step
    assert "nn.DataParallel(" not in migrated
    assert "shuffle=" not in re.sub(r"DistributedSampler\([^)]*\)", "", migrated)  # the sampler shuffles, not the loader


def test_comments_and_layout_are_kept():
    migrated = (FOLDER / "grad_accumulation.py.migrated").read_text()
    assert "            # average over the accumulated batches, as one big batch would\n" in migrated
    tutorial = (FOLDER / "tutorial_loop.py.migrated").read_text()
    assert tutorial.startswith('"""The tutorial loop: one script, every GPU DataParallel finds."""\n\nimport os\n\nimport torch\n')


def test_accumulation_runs_forward_and_backward_under_no_sync_off_step():
    migrated = (FOLDER / "grad_accumulation.py.migrated").read_text()
    assert ("            with contextlib.nullcontext() if (step + 1) % ACCUMULATE == 0 else model.no_sync():\n"
            "                outputs = model(inputs)\n") in migrated
    assert "                loss.backward()\n            if (step + 1) % ACCUMULATE == 0:\n" in migrated


def test_validation_sums_are_all_reduced_over_a_sharded_loader():
    migrated = (FOLDER / "validation_every_epoch.py.migrated").read_text()
    assert "val_loader = DataLoader(val_set, batch_size=16, sampler=DistributedSampler(val_set, shuffle=False))" in migrated
    assert "dist.all_reduce(sums)\n" in migrated
    assert "loss_sum, correct, seen = float(sums[0].item()), int(sums[1].item()), int(sums[2].item())" in migrated


def test_checkpoints_save_the_bare_model_on_rank_zero_and_load_per_rank():
    migrated = (FOLDER / "checkpoint_resume.py.migrated").read_text()
    assert "checkpoint = torch.load(CHECKPOINT, map_location=device)" in migrated
    assert "model.module.load_state_dict(checkpoint[\"model\"])" in migrated
    assert ("        if dist.get_rank() == 0:\n"
            "            torch.save({\"model\": model.module.state_dict(),") in migrated


def test_a_save_read_back_later_gets_a_barrier_outside_the_guard():
    result = migrate_source(SCRIPT.format(after="    torch.save(model.state_dict(), 'm.pt')\n"
                                                "    model.load_state_dict(torch.load('m.pt'))\n"))
    assert result.migrated, result.blockers
    assert ("    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), 'm.pt')\n"
            "    dist.barrier()\n    model.module.load_state_dict(torch.load('m.pt', map_location=device))\n") in result.text


def test_the_trainer_class_ends_the_process_group_after_the_main_block_runs():
    migrated = (FOLDER / "trainer_class.py.migrated").read_text()
    assert migrated.endswith('if __name__ == "__main__":\n    Trainer().fit()\n    dist.destroy_process_group()\n')


# A small one-device script; `after` goes at the end of main().
SCRIPT = textwrap.dedent("""\
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    def main():
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        loader = DataLoader(data, batch_size=16, shuffle=True)
        model = nn.Linear(8, 2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
                optimizer.step()
    {after}
    """)


def test_batch_per_rank_keeps_the_batch_size():
    result = migrate_source(SCRIPT.format(after=""), options=Options(batch="per-rank"))
    assert "DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True))" in result.text
    assert any("kept per rank" in note for note in result.notes)


RANK0_EVAL = """\
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(data, batch_size=32):
            correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
    print(correct)
"""


def test_validation_on_rank_zero_guards_the_whole_loop_and_runs_the_bare_model():
    # DDP's first forward after training broadcasts buffers from rank 0 even under no_grad:
    # through the wrapper, rank 0 alone would wait in that collective forever.
    result = migrate_source(SCRIPT.format(after=RANK0_EVAL.replace("    correct = 0\n", "")
                                          .replace("correct += ", "print(").replace(".item()\n", ".item())\n")
                                          .replace("    print(correct)\n", "")), options=Options(validation="rank0"))
    assert result.migrated, result.blockers
    assert ("    if dist.get_rank() == 0:\n        with torch.no_grad():\n"
            "            for x, y in DataLoader(data, batch_size=32):\n"
            "                print((model.module(x.to(device)).argmax(1) == y.to(device)).sum().item())\n") in result.text
    assert lint(result.text) == []


def test_validation_on_rank_zero_is_refused_when_its_result_is_used_on_every_rank():
    result = migrate_source(SCRIPT.format(after=RANK0_EVAL), options=Options(validation="rank0"))
    assert not result.migrated
    assert [row for row, _ in result.blockers] == [19]
    assert "would exist on rank 0 only" in result.blockers[0][1]


def test_validation_all_reduce_sums_an_inline_evaluation_loop():
    result = migrate_source(SCRIPT.format(after=RANK0_EVAL))
    assert result.migrated, result.blockers
    assert "DataLoader(data, batch_size=32, sampler=DistributedSampler(data, shuffle=False))" in result.text
    assert "    correct = int(sums[0].item())\n" in result.text
    assert lint(result.text) == []


REFUSED = {
    "third-party trainer": ("import lightning as L\n" + SCRIPT.format(after=""), 1, "third-party trainer"),
    "several models": (SCRIPT.format(after="    critic = nn.Linear(2, 1)\n"
                                           "    critic_optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)\n"),
                       18, "several models"),
    "custom sampler": (SCRIPT.format(after="").replace("shuffle=True", "sampler=torch.utils.data.WeightedRandomSampler(torch.ones(64), 64)"),
                       9, "custom sampler"),
    "no training loop": (SCRIPT.format(after="").replace(".backward()", ".item()"), 1, "no training loop"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsafe_scripts_are_refused_naming_the_line(name):
    text, row, words = REFUSED[name]
    result = migrate_source(text, "train.py")
    assert not result.migrated and result.text == text
    assert any(line == row and words in reason for line, reason in result.blockers), result.blockers


def test_two_data_parallel_models_are_refused_at_the_second_wrap():
    text = SCRIPT.format(after="").replace(
        "    model = nn.Linear(8, 2).to(device)\n",
        "    model = nn.DataParallel(nn.Linear(8, 2)).to(device)\n    ema = nn.DataParallel(nn.Linear(8, 2))\n")
    result = migrate_source(text)
    assert (11, "several models are wrapped in DataParallel: migrate them by hand") in result.blockers


def test_cli_refusal_prints_one_line_per_blocker_and_writes_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(REFUSED["several models"][0].replace("shuffle=True", "sampler=torch.utils.data.WeightedRandomSampler(torch.ones(64), 64)"))
    out = tmp_path / "out.py"
    done = run_cli("migrate", str(script), "-o", str(out))
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1 and not out.exists() and done.stdout == b""
    assert lines[0] == f"{script}: not migrated (2 blockers):"
    assert lines[1].startswith(f"{script}:9: the training DataLoader has its own `sampler=`")
    assert lines[2].startswith(f"{script}:18: an optimizer over another model")


def test_cli_writes_the_output_and_prints_the_launch_command(tmp_path):
    script = tmp_path / "train.py"
    original = (FOLDER / "tutorial_loop.py").read_text()
    script.write_text(original)
    out = tmp_path / "train_ddp.py"
    done = run_cli("migrate", str(script), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == (FOLDER / "tutorial_loop.py.migrated").read_text()
    assert script.read_text() == original
    assert f"Launch with: torchrun --nproc_per_node=N {out}" in done.stderr.decode()
    again = run_cli("migrate", "--in-place", str(out))
    assert again.returncode == 0 and "already a DDP script; nothing to migrate" in again.stderr.decode()
    assert out.read_text() == (FOLDER / "tutorial_loop.py.migrated").read_text()


def test_cli_diff_shows_the_whole_change_and_writes_nothing(tmp_path):
    script = tmp_path / "train.py"
    original = (FOLDER / "one_device.py").read_text()
    script.write_text(original)
    done = run_cli("migrate", "--diff", str(script))
    diff = done.stdout.decode()
    assert done.returncode == 0 and script.read_text() == original
    assert diff.startswith(f"--- {script}\n+++ {script}\n")
    assert "-    device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n" in diff
    assert "+    model = DDP(model, device_ids=[local_rank] if device.type == \"cuda\" else None)\n" in diff


def test_cli_in_place_and_stdout(tmp_path):
    script = tmp_path / "train.py"
    script.write_text((FOLDER / "lr_scheduler.py").read_text())
    printed = run_cli("migrate", str(script))
    assert printed.stdout.decode() == (FOLDER / "lr_scheduler.py.migrated").read_text()
    assert run_cli("migrate", "--in-place", str(script)).returncode == 0
    assert script.read_text() == (FOLDER / "lr_scheduler.py.migrated").read_text()
    both = run_cli("migrate", "--diff", "--in-place", str(script))
    assert both.returncode == 2 and b"at most one of" in both.stderr


def test_migrate_never_imports_torch():
    code = (
        "import sys\n"
        "from dplint.migration import migrate_source\n"
        f"result = migrate_source(open({str(FOLDER / 'validation_every_epoch.py')!r}).read())\n"
        "assert result.migrated\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# Found on real scripts (rosinality/vq-vae-2-pytorch train_pixelsnail.py): a scheduler stepped
# under an `if` is no gradient accumulation; a loader whose arguments end on their own line keeps
# that layout; a script whose training runs in `if __name__ == "__main__":` ends the process
# group there, not at the module's end (where importing the file would run it).
MAIN_BLOCK = textwrap.dedent("""\
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm import tqdm


    def train(loader, model, optimizer, scheduler, device):
        loader = tqdm(loader)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()


    if __name__ == "__main__":
        device = "cuda"
        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        loader = DataLoader(
            data, batch_size=16, shuffle=True, drop_last=True
        )
        model = nn.DataParallel(nn.Linear(8, 2)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            train(loader, model, optimizer, None, device)
    """)


def test_real_script_shape_with_a_main_block_and_a_conditional_scheduler():
    result = migrate_source(MAIN_BLOCK)
    assert result.migrated, result.blockers
    assert "no_sync" not in result.text and "contextlib" not in result.text
    assert ("    loader = DataLoader(\n"
            "        data, batch_size=16 // dist.get_world_size(), drop_last=True, sampler=DistributedSampler(data, shuffle=True)\n"
            "    )\n") in result.text
    assert result.text.endswith("        train(loader, model, optimizer, None, device)\n    dist.destroy_process_group()\n")
    assert "    loader = tqdm(loader, disable=dist.get_rank() != 0)\n" in result.text
    assert "        loader.sampler.set_epoch(epoch)\n" in result.text
    assert lint(result.text) == []


def test_a_trailing_comma_layout_is_kept_when_the_sampler_is_added():
    text = MAIN_BLOCK.replace("    loader = DataLoader(\n        data, batch_size=16, shuffle=True, drop_last=True\n    )\n",
                              "    loader = DataLoader(\n        data,\n        batch_size=16,\n        shuffle=True,\n    )\n")
    assert text != MAIN_BLOCK
    result = migrate_source(text)
    assert ("    loader = DataLoader(\n        data,\n        batch_size=16 // dist.get_world_size(),\n"
            "        sampler=DistributedSampler(data, shuffle=True),\n    )\n") in result.text


def test_tests_for_data_parallel_ask_about_ddp_after_migration():
    # `bare = model.module if isinstance(model, nn.DataParallel) else model` would be False for
    # the DDP wrapper: the save would write `module.` keys
    result = migrate_source((FIXTURES / "clean" / "dp_train.py").read_text(), "dp_train.py")
    assert result.migrated, result.blockers
    assert "    bare = model.module if isinstance(model, DDP) else model\n" in result.text
    assert "nn.DataParallel" not in result.text.split('"""', 2)[2]  # past the docstring
    assert lint(result.text) == []


def test_a_script_that_binds_local_rank_itself_is_refused():
    result = migrate_source(SCRIPT.format(after="").replace("    device = torch", "    local_rank = 0\n    device = torch"))
    assert result.blockers == [(1, "the name `local_rank` is already used in the script; the migration binds it to LOCAL_RANK")]


def test_plain_torch_samplers_become_distributed_samplers():
    migrated = (FOLDER / "explicit_samplers.py.migrated").read_text()
    assert "    train_sampler = DistributedSampler(train_data, shuffle=True)\n" in migrated
    assert "DataLoader(train_data, sampler=train_sampler, batch_size=16 // dist.get_world_size())" in migrated
    assert "DataLoader(eval_data, sampler=DistributedSampler(eval_data, shuffle=False), batch_size=16)" in migrated
    # the evaluation inside the epoch loop is sharded and its sum all-reduced
    assert ("            # every rank evaluated its shard: add up the sums of all ranks\n"
            "            sums = torch.tensor([float(correct)], dtype=torch.float64,") in migrated
    assert "            dist.all_reduce(sums)\n            correct = int(sums[0].item())\n" in migrated


def test_a_sampler_over_another_data_set_is_custom():
    text = SCRIPT.format(after="").replace("shuffle=True", "sampler=torch.utils.data.RandomSampler(other)")
    result = migrate_source(text)
    assert (9, "the training DataLoader has its own `sampler=`: a custom sampler cannot be sharded safely") in result.blockers


def test_the_process_group_ends_after_everything_the_main_block_runs():
    # a `report()` after `main()` still prints on rank 0 (`dist.get_rank()` needs the group)
    text = SCRIPT.format(after="") + '\n\ndef report():\n    print("done")\n\n\nif __name__ == "__main__":\n    main()\n    report()\n'
    result = migrate_source(text)
    assert result.migrated, result.blockers
    assert result.text.endswith('    main()\n    report()\n    dist.destroy_process_group()\n')
    assert 'def report():\n    if dist.get_rank() == 0:\n        print("done")\n' in result.text
    assert result.text.count("dist.destroy_process_group()") == 1


# The bare `.cuda()` shape: no device variable; `after` replaces the model's move.
BARE_CUDA = textwrap.dedent("""\
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    model = nn.Linear(8, 2){move}
    model = nn.DataParallel(model)
    loader = DataLoader(data, batch_size=16, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x.{cuda}), y.cuda()).backward()
            optimizer.step()
    """)


def test_bare_cuda_starts_the_process_group_before_the_first_statement_that_needs_it():
    # the model's `.cuda()` (line 6) comes before the wrap (line 7) and the loader (line 8):
    # a `.cuda()` before `set_device` would open a context on GPU 0 in every rank, so the
    # setup goes just before it
    result = migrate_source(BARE_CUDA.format(move=".cuda()", cuda="cuda()"))
    assert result.migrated, result.blockers
    assert ("# one process per GPU, started by torchrun; a bare `.cuda()` then means this rank's GPU\n"
            'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
            'local_rank = int(os.environ["LOCAL_RANK"])\n'
            "if torch.cuda.is_available():\n"
            "    torch.cuda.set_device(local_rank)\n\n"
            "model = nn.Linear(8, 2).cuda()\n"
            'model = DDP(model.to("cuda" if torch.cuda.is_available() else "cpu"), '
            "device_ids=[local_rank] if torch.cuda.is_available() else None)\n") in result.text
    assert lint(result.text) == []


def test_a_cuda_call_that_names_a_gpu_is_refused_at_its_line():
    result = migrate_source(BARE_CUDA.format(move="", cuda="cuda(0)"))
    assert result.blockers == [(13, "`.cuda(...)` names one GPU for every rank: use a bare `.cuda()` "
                                    "(the rank's GPU after `set_device`) or a device variable")]


def test_no_device_and_no_cuda_is_refused():
    result = migrate_source(BARE_CUDA.format(move="", cuda="float()").replace("y.cuda()", "y"))
    assert result.blockers[0][0] == 1 and "no device variable" in result.blockers[0][1]


def test_bare_cuda_refuses_a_loader_built_in_a_function_the_wrap_s_scope_never_calls():
    # the loader is built in a method another file calls: where the process group must start
    # is not in this file
    text = textwrap.dedent("""\
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def build_model(self):
                self.model = nn.DataParallel(nn.Linear(8, 2)).cuda()
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def build_loader(self):
                self.data = TensorDataset(torch.randn(64, 8))
                self.loader = DataLoader(self.data, batch_size=16, shuffle=True)

            def train(self):
                for (x,) in self.loader:
                    self.optimizer.zero_grad()
                    self.model(x.cuda()).sum().backward()
                    self.optimizer.step()
        """)
    result = migrate_source(text)
    assert result.blockers == [(13, "the training DataLoader is built in a function not called where the model is "
                                    "wrapped: start the process group by hand")]


def test_bare_cuda_shape_sets_the_epoch_through_the_module_level_loader_name():
    # `for epoch ...: train()`: the loader is the module's `train_loader`, the name there too
    migrated = (FOLDER / "bare_cuda_file_dataset.py.migrated").read_text()
    assert "for epoch in range(args.epochs):\n    train_loader.sampler.set_epoch(epoch)\n" in migrated


def test_added_imports_go_with_the_torch_imports():
    migrated = (FOLDER / "bare_cuda_file_dataset.py.migrated").read_text()
    assert ("from torch.utils.data import DataLoader, Dataset\n"
            "import torch.distributed as dist\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "from torch.utils.data.distributed import DistributedSampler\n"
            "import time\n") in migrated


def test_a_loader_argument_removed_mid_call_keeps_the_line_breaks():
    migrated = (FOLDER / "bare_cuda_file_dataset.py.migrated").read_text()
    assert ("train_loader = DataLoader(train_data, batch_size=args.batch_size // dist.get_world_size(),\n"
            "                          num_workers=2, pin_memory=True, sampler=DistributedSampler(train_data, shuffle=True))\n"
            ) in migrated


def test_an_all_reduced_sum_over_the_batch_count_counts_every_rank_s_batches():
    # every rank's shard has the same length, so every rank has len(test_loader) batches
    result = migrate_source((FOLDER / "bare_cuda_file_dataset.py").read_text())
    assert ('    state["test_loss"] = loss_sum / (len(test_loader) * dist.get_world_size())'
            "  # the mean of the batches' losses\n") in result.text
    assert '    state["test_accuracy"] = correct / len(test_loader.dataset)\n' in result.text  # the whole set already
    assert any("`len(test_loader)` counts this rank's batches" in note for note in result.notes)


@pytest.mark.parametrize("loop, why", [
    ("for (x, y), _ in zip(loader, loader):", "(it iterates `zip(...)` of several loaders: each needs its own sampler; migrate it by hand)"),
    ("for x, y in {'train': loader}['train']:", "(it iterates `{'train': loader}['train']`, a loader looked up by key: "
                                                 "bind the training loader to a name)"),
])
def test_a_training_loop_over_no_single_loader_is_refused_saying_what_it_iterates(loop, why):
    result = migrate_source(SCRIPT.format(after="").replace("for x, y in loader:", loop))
    assert (13, "no training loop found: no `for` over a DataLoader runs `backward()` " + why) in result.blockers


def test_the_epoch_of_a_called_batch_loop_is_the_innermost_loop_s():
    text = (FOLDER / "bare_cuda_file_dataset.py").read_text().replace(
        "for epoch in range(args.epochs):\n    began", "for run in range(2):\n  for epoch in range(args.epochs):\n    began")
    result = migrate_source(text)
    assert result.migrated, result.blockers
    assert "for run in range(2):\n  for epoch in range(args.epochs):\n    train_loader.sampler.set_epoch(epoch)\n" in result.text


def test_bare_cuda_starts_the_process_group_before_the_call_of_the_loader_helper():
    # the loader is built in a same-file function: its call, before the wrap, is what needs
    # the process group first (the batch size is divided by the world size inside it)
    text = textwrap.dedent("""\
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset


        def make_loader(data):
            return DataLoader(data, batch_size=16, shuffle=True)


        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        loader = make_loader(data)
        model = nn.DataParallel(nn.Linear(8, 2)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
        """)
    result = migrate_source(text)
    assert result.migrated, result.blockers
    assert "    torch.cuda.set_device(local_rank)\n\nloader = make_loader(data)\n" in result.text
    assert ("    return DataLoader(data, batch_size=16 // dist.get_world_size(), "
            "sampler=DistributedSampler(data, shuffle=True))\n") in result.text
    assert 'model = DDP(nn.Linear(8, 2).to("cuda" if torch.cuda.is_available() else "cpu"), ' in result.text


def test_a_script_without_import_torch_gets_it_for_the_set_up():
    text = textwrap.dedent("""\
        from torch import nn, optim
        from torch.utils.data import DataLoader, TensorDataset

        from data import make_data

        data = make_data()
        loader = DataLoader(data, batch_size=16, shuffle=True)
        model = nn.DataParallel(nn.Linear(8, 2)).cuda()
        optimizer = optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
        """)
    result = migrate_source(text)
    assert result.migrated, result.blockers
    assert result.text.startswith("import os\n\nfrom torch import nn, optim\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                                  "import torch\nimport torch.distributed as dist\n")
    assert lint(result.text) == []


def test_a_cuda_call_with_only_non_blocking_names_no_gpu():
    result = migrate_source(BARE_CUDA.format(move="", cuda="cuda(non_blocking=True)"))
    assert result.migrated, result.blockers
    assert "model(x.cuda(non_blocking=True))" in result.text
