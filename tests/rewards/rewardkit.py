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


# The Kaggle Fast-Math reward set and completions both trainer adapters' tests score (tests/rewards/test_*_adapter.py).
B = "\\boxed"
KAGGLE = {
    "funcs": ["format2", "cosine", "length", "accuracy"],
    "weights": [1.0, 1.0, 1.0, 0.5],
    "normalize": "per_prompt",
    "eps": 1e-6,
    "params": {"cosine": {"max_len": 64}},
}
TEXTS = [
    (f"<think>48 / 2 = 24 so {B}{{72}}</think>\nThe answer is {B}{{72}}.", "72"),
    (f"<think>hmm</think>\nThe answer is {B}{{72}}.", "72"),
    (f"<think>48 + 24 is 71 {B}{{71}}</think>\n{B}{{71}}", "72"),
    ("<think>Natalia sold 48 clips in April and", "72"),
    (f"<think>12 times 35</think>\n{B}{{420}}", "420"),
    ("<think>12 times 35 is 420</think>\nSo the total is 420.", "420"),
    ("<think>12 times 35 is 420</think>\nSo the total is 421.", "420"),
    (f"<think>x</think>\n{B}{{420}} or {B}{{421}}", "420"),
]
