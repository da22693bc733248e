"""Helpers shared by the reward-library tests (fixtures stay in conftest.py)."""

from __future__ import annotations

import contextlib

from grpoflow.rewards import _sandbox, reset_caches, reset_stats, verifier
from grpoflow.rewards._sandbox import MathVerifyPool


@contextlib.contextmanager
def verifier_pool(monkeypatch, **pool_kwargs):
    """A started ``MathVerifyPool(**pool_kwargs)`` as the verifier's default pool, with fresh caches and counters;
    closed (and the caches reset) afterwards."""
    pool = MathVerifyPool(**pool_kwargs)
    monkeypatch.setattr(_sandbox, "_default", pool)
    monkeypatch.setattr(verifier, "default_pool", lambda: pool)
    reset_caches()
    reset_stats()
    pool.start()
    try:
        yield pool
    finally:
        pool.close()
        reset_caches()
