"""The session's shared verify runs (see support.py)."""

from __future__ import annotations

import pytest

from .support import HAS_TORCH, Verified, needed_keys

NEEDED: set[str] = set()


def pytest_collection_finish(session):
    NEEDED.update(needed_keys(session.items))


@pytest.fixture(scope="session")
def verified():
    if not HAS_TORCH:
        pytest.skip("needs torch (pip install 'dplint[runtime]')")
    shared = Verified(NEEDED)
    yield shared
    shared.pool.shutdown(wait=True, cancel_futures=True)
