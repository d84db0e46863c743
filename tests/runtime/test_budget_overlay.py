"""The pieces of verify that need no torch run: loop truncation, the scratch overlay, the
reaper (in-process or with a small helper process; seconds in all)."""

from __future__ import annotations

import builtins
import os
import signal
import subprocess
import sys
import time

import pytest

from dplint.runtime_check import supervise
from dplint.runtime_check.budget import LOOP, WHILE, Budget, compile_with_budget
from dplint.runtime_check.overlay import Snapshot, WriteGuard, mirror


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.script = "<none>"

    def emit(self, kind: str, **fields) -> None:
        self.events.append((kind, fields))

    def script_line(self, frame=None):
        return None


TRAINING = """\
log = []
def train_one_epoch(loader):
    for batch in loader:
        budget.work += 1          # an optimizer step
        log.append(("batch", batch))

for epoch in range(50):
    budget.passes += 1            # a DataLoader pass starts
    train_one_epoch(range(100))
    log.append(("epoch", epoch))
else:
    log.append(("loop-else", None))
log.append(("after", None))
step = 0
while step < 1000:
    budget.work += 1
    step += 1
log.append(("steps", step))
"""


def run_with_budget(source: str, batches: int, epochs: int) -> tuple[list, Events]:
    recorder = Events()
    budget = Budget(recorder, batches=batches, epochs=epochs)
    saved = {name: builtins.__dict__.get(name) for name in (LOOP, WHILE)}
    builtins.__dict__[LOOP] = budget.loop
    whiles: dict = {}

    def while_test(value, line, end):
        whiles.setdefault(line, budget.while_test(line, end))
        return whiles[line](value)

    builtins.__dict__[WHILE] = while_test
    try:
        namespace = {"budget": budget}
        exec(compile_with_budget(source, "train.py"), namespace)
    finally:
        for name, value in saved.items():
            if value is None:
                builtins.__dict__.pop(name, None)
            else:
                builtins.__dict__[name] = value
    return namespace["log"], recorder


def test_loops_are_cut_and_the_script_goes_on():
    log, recorder = run_with_budget(TRAINING, batches=3, epochs=2)
    assert [entry for entry in log if entry[0] == "epoch"] == [("epoch", 0), ("epoch", 1)]
    assert [entry for entry in log if entry[0] == "batch"] == [("batch", 0), ("batch", 1), ("batch", 2)] * 2
    assert log[-3:] == [("loop-else", None), ("after", None), ("steps", 3)]
    cuts = [fields for kind, fields in recorder.events if kind == "loop-cut"]
    assert {(cut["line"], cut["by"]) for cut in cuts} == {(3, "batches"), (7, "epochs"), (15, "batches")}
    assert next(cut for cut in cuts if cut["line"] == 7)["end_line"] == 12


def test_loops_without_work_are_not_cut():
    log, _ = run_with_budget("log = [i for i in range(10)]\nfor i in range(10):\n    log.append(i)\n", 1, 1)
    assert log == list(range(10)) * 2  # no batch drawn, no step taken: nothing to cut


def test_line_numbers_are_unchanged():
    source = "x = 0\nfor i in range(3):\n    x += i\n\nwhile x > 100:\n    x -= 1\nraise ValueError(x)\n"
    with pytest.raises(ValueError) as caught:
        run_with_budget(source, 3, 2)
    assert caught.traceback[-1].lineno + 1 == 7


# ----------------------------------------------------------------------------- overlay
@pytest.fixture
def project(tmp_path):
    real = tmp_path / "project"
    (real / "data").mkdir(parents=True)
    (real / "data" / "points.csv").write_text("1,2\n")
    (real / "checkpoints").mkdir()
    (real / "checkpoints" / "last.pt").write_text("user's checkpoint")
    (real / "train.py").write_text("print('hi')\n")
    return real


def test_mirror_links_files_and_copies_folders(project, tmp_path):
    overlay = tmp_path / "overlay"
    mirror(str(project), str(overlay))
    assert (overlay / "data").is_dir() and not (overlay / "data").is_symlink()
    assert (overlay / "data" / "points.csv").is_symlink()
    assert (overlay / "data" / "points.csv").read_text() == "1,2\n"


def test_mirror_links_big_folders_whole(project, tmp_path):
    overlay = tmp_path / "overlay"
    mirror(str(project), str(overlay), max_entries=2)
    assert (overlay / "checkpoints").is_symlink() or (overlay / "data").is_symlink()


def test_write_guard_keeps_the_users_files(project, tmp_path, monkeypatch):
    overlay = tmp_path / "overlay"
    mirror(str(project), str(overlay), max_entries=2)  # some folders linked whole
    guard = WriteGuard(Events())
    guard.root, guard.real_root = str(overlay), str(project)
    snapshot = Snapshot(str(project))
    monkeypatch.chdir(overlay)
    guard.prepare("checkpoints/last.pt", truncate=True)
    with open("checkpoints/last.pt", "w") as handle:
        handle.write("verify's")
    guard.prepare("data/points.csv", truncate=False)
    with open("data/points.csv", "a") as handle:
        handle.write("3,4\n")
    guard.prepare("checkpoints/new.pt", truncate=True)
    with open("checkpoints/new.pt", "w") as handle:
        handle.write("new")
    redirected = guard.redirect(str(project / "checkpoints" / "abs.pt"))
    assert redirected == str(overlay / "checkpoints" / "abs.pt")
    assert guard.redirect("/elsewhere/x.pt") == "/elsewhere/x.pt"
    assert (overlay / "data" / "points.csv").read_text() == "1,2\n3,4\n"
    assert (project / "checkpoints" / "last.pt").read_text() == "user's checkpoint"
    assert snapshot.changes() == []
    (project / "stray.txt").write_text("x")
    assert snapshot.changes() == ["stray.txt"]


# ------------------------------------------------------------------------------ reaper
def test_reaper_kills_tagged_processes_and_removes_the_folder(tmp_path):
    token = f"test{os.getpid()}{time.monotonic_ns()}"
    folder = tmp_path / "dplint-verify-x"
    folder.mkdir()
    reaper = supervise.start_reaper(token, str(folder))
    env = dict(os.environ, **{supervise.TOKEN_VARIABLE: f"{token}-1"})
    # a grandchild in a session of its own, like a script's helper process
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    assert supervise.tagged_processes(token) == [sleeper.pid]
    reaper.stdin.close()  # what verify's death does
    reaper.wait(timeout=20)
    assert sleeper.wait(timeout=20) == -signal.SIGKILL
    assert not folder.exists()
