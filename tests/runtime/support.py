"""Shared runs for the runtime tests: every fixture is verified once per session.

(Helpers live here, not in conftest.py: tests/conftest.py is imported as `conftest`.)

The runs are subprocesses, so they go in a small thread pool, started together on the first
request (the distributed ones first, they take longest); each test waits only for its own.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_FIXTURES = ROOT / "fixtures" / "runtime"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (pip install '.[runtime]')")

# Distributed first: they take longest. (name, script arguments, VerifyOptions fields)
PLANNED: list[tuple[str, tuple[str, ...], dict]] = [
    ("all_misuses", (), {}),
    ("wrapper_bypass", (), {}),
    ("missing_set_epoch", (), {}),
    ("unguarded_rank_save", (), {}),
    ("sampler_shuffle", (), {}),
    ("missing_set_epoch --epochs 5", ("--epochs", "5"), {"batches": 2}),
    ("teardown_hang", (), {"straggler_grace": 3.0}),
    ("collective_under_rank_guard", (), {"timeout": 40.0}),  # the hang ends at the timeout
    ("attribute_through_wrapper", (), {}),
    ("missing_set_device", (), {}),
    ("wrapper_train", (), {}),
    ("loss_on_cpu", (), {}),
    ("strip_module", (), {}),
    ("strict_false_load", (), {}),
    ("save_wrapped_state_dict", (), {}),
    ("late_cuda_visible_devices", (), {}),
    ("optimizer_in_dataparallel", (), {}),
    ("scalar_gather", (), {}),
    ("module_on_bare_model", (), {}),
    ("hand_rolled_strip", (), {}),
    ("cuda_only", (), {}),
    ("cuda_only --cpu-remap", (), {"cpu_remap": True}),
]
WORKERS = 2
TEST_TIMEOUT = 240.0  # per variant; a loaded 2-core machine runs two verifies at once


def uses(*keys: str):
    """Marks a test with the planned runs it reads (so a partial session starts only those)."""

    def mark(function):
        function.verified_keys = keys
        return function

    return mark


class Verified:
    """Report of `verify` per planned key, computed in the background. On first use every
    planned run the session's tests need is started, in PLANNED order."""

    def __init__(self, needed: set[str]) -> None:
        self.pool = ThreadPoolExecutor(max_workers=WORKERS)
        self.futures: dict[str, Future] = {}
        self.needed = needed
        self.started = False

    def submit(self, key: str, job: Callable) -> Future:
        self.start()
        if key not in self.futures:
            self.futures[key] = self.pool.submit(job)
        return self.futures[key]

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        for key, _, _ in PLANNED:
            if key in self.needed:
                self._submit_planned(key)

    def _submit_planned(self, key: str) -> None:
        from dplint.runtime_check.runner import VerifyOptions, verify

        (args, options), = [(a, o) for k, a, o in PLANNED if k == key]
        script = RUNTIME_FIXTURES / (key.split()[0] + ".py")
        chosen = VerifyOptions(**{"always_run": True, "timeout": TEST_TIMEOUT, **options})
        self.futures[key] = self.pool.submit(lambda: verify(str(script), list(args), chosen))

    def __call__(self, key: str):
        self.start()
        if key not in self.futures:
            self._submit_planned(key)
        return self.futures[key].result()


def needed_keys(items) -> set[str]:
    """The planned runs the collected tests read: their `fixture` parameter or `uses(...)`."""
    keys: set[str] = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "fixture" in callspec.params:
            keys.add(callspec.params["fixture"])
        keys.update(getattr(getattr(item, "function", None), "verified_keys", ()))
    return keys
