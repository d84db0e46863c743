"""The session's shared verify runs (see support.py), and the `slow` marker: tests that run
verify on one fixture each, skipped unless DPLINT_SLOW_TESTS=1 (the runtime tests stay
within two minutes of CI time on two cores; the GPU suite and `DPLINT_SLOW_TESTS=1` run all)."""

from __future__ import annotations

import os

import pytest

from .support import HAS_TORCH, Verified, needed_keys

NEEDED: set[str] = set()
SLOW_ENABLED = os.environ.get("DPLINT_SLOW_TESTS") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long runtime check, skipped unless DPLINT_SLOW_TESTS=1")


def pytest_collection_modifyitems(config, items):
    if SLOW_ENABLED:
        return
    skip = pytest.mark.skip(reason="slow: set DPLINT_SLOW_TESTS=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    # only the runs of tests that will run are started
    NEEDED.update(needed_keys([item for item in session.items if SLOW_ENABLED or "slow" not in item.keywords]))


@pytest.fixture(scope="session")
def verified():
    if not HAS_TORCH:
        pytest.skip("needs torch (pip install '.[runtime]')")
    shared = Verified(NEEDED)
    yield shared
    shared.pool.shutdown(wait=True, cancel_futures=True)
