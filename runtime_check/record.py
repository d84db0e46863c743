"""Observations as JSON lines, one file per rank: written by the harness, read by the runner.

Every line is one event: ``{"kind": ..., "seq": n, "t": seconds since start, ...}``. Lines
are flushed as they are written, so a run killed by the timeout keeps what it saw.
No torch here: the runner (which never imports torch) reads these files.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Optional


class Recorder:
    """The harness side: appends events to ``<directory>/rank<R>.jsonl``."""

    MAX_EVENTS_PER_KIND = 400  # a long run must not fill the disk

    def __init__(self, directory: str, rank: int, script: str) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._file = None
        self.muted = False  # set while the harness itself calls torch (its own queries are not the script's)
        self.switch(directory, script)

    def switch(self, directory: str, script: str) -> None:
        """Record the next variant (another script, another records folder), counting afresh."""
        with self._lock:
            if self._file is not None:
                self._file.close()
            self.script = script
            self.path = os.path.join(directory, f"rank{self.rank}.jsonl")
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)
            self._start = time.monotonic()
            self._seq = 0
            self._counts: dict[str, int] = {}

    def emit(self, kind: str, **fields) -> None:
        if self.muted:
            return
        with self._lock:
            count = self._counts.get(kind, 0)
            if count >= self.MAX_EVENTS_PER_KIND:
                return
            self._counts[kind] = count + 1
            self._seq += 1
            fields.update(kind=kind, seq=self._seq, t=round(time.monotonic() - self._start, 3))
            self._file.write(json.dumps(fields, default=str) + "\n")

    def script_line(self, frame=None) -> Optional[int]:
        """The line of the innermost frame running the script (not torch, not the harness)."""
        frame = sys._getframe(1) if frame is None else frame
        while frame is not None:
            if frame.f_code.co_filename == self.script:
                return frame.f_lineno
            frame = frame.f_back
        return None

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_events(directory: str) -> dict[int, list[dict]]:
    """rank -> its events in order. A torn last line (a killed writer) is skipped."""
    events: dict[int, list[dict]] = {}
    if not os.path.isdir(directory):
        return events
    for name in sorted(os.listdir(directory)):
        if not (name.startswith("rank") and name.endswith(".jsonl")):
            continue
        rank = int(name[len("rank") : -len(".jsonl")])
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            for line in handle:
                try:
                    events.setdefault(rank, []).append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return events


class Tail:
    """Reads the events appended to a records folder since the last call (for progress)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._offsets: dict[str, int] = {}

    def new_events(self) -> list[tuple[int, dict]]:
        found: list[tuple[int, dict]] = []
        if not os.path.isdir(self.directory):
            return found
        for name in sorted(os.listdir(self.directory)):
            if not (name.startswith("rank") and name.endswith(".jsonl")):
                continue
            rank = int(name[len("rank") : -len(".jsonl")])
            path = os.path.join(self.directory, name)
            with open(path, encoding="utf-8") as handle:
                handle.seek(self._offsets.get(name, 0))
                while True:
                    line = handle.readline()
                    if not line.endswith("\n"):
                        break  # a line still being written: read it next time
                    self._offsets[name] = handle.tell()
                    try:
                        found.append((rank, json.loads(line)))
                    except json.JSONDecodeError:
                        continue
        return found


def stacks_path(plan_path: str, rank: int) -> str:
    """Where a rank's stack goes when verify sends it SIGUSR1 (next to the batch's plan)."""
    return f"{os.path.splitext(plan_path)[0]}-stacks-rank{rank}.txt"
