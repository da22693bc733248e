"""Recipe 003's AdamW (b1 0.9, b2 0.99, weight decay 0.1): the optimizer the Tunix runner builds from
config/qwen3-8b-gsm8k-tunix.yaml, resolved as a job resolves it, takes three steps on one weight in the Tunix
environment, and its updates are AdamW's with the recipe's values (and not with optax's default b2 0.999)."""

from __future__ import annotations

import json
import math

import pytest
from grpoflow_testing import load_shipped
from tunixkit import run_tunix

from grpoflow.config import resolve_config

RECIPE = "config/qwen3-8b-gsm8k-tunix.yaml"
GRADS = [0.03, -0.05, 0.04]  # global norm below the recipe's clip 0.1: the updates are AdamW's alone

STEPS = """
import json, sys
import jax.numpy as jnp
from grpoflow.backends.tunix.runner import _optimizer
exp = json.loads(sys.argv[1])
opt = _optimizer(exp["grpo"], exp["tunix"])
w = {"w": jnp.asarray(0.5, jnp.float32)}
state = opt.init(w)
rows = []
for g in json.loads(sys.argv[2]):
    updates, state = opt.update({"w": jnp.asarray(g, jnp.float32)}, state, w)
    rows.append({"w": float(w["w"]), "lr": float(state.hyperparams["learning_rate"]), "update": float(updates["w"])})
    w = {"w": w["w"] + updates["w"]}
print(json.dumps(rows))
"""


def adamw(rows: list[dict], b1: float, b2: float, weight_decay: float, eps: float = 1e-8) -> list[float]:
    m = v = 0.0
    out = []
    for t, (row, g) in enumerate(zip(rows, GRADS), start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        out.append(-row["lr"] * (m_hat / (math.sqrt(v_hat) + eps) + weight_decay * row["w"]))
    return out


def test_the_recipe_config_builds_adamw_with_the_recipes_b2_and_weight_decay():
    exp = resolve_config(load_shipped(RECIPE)).experiment("qwen3-8b-gsm8k-tunix")
    assert (exp["tunix"]["adam_b2"], exp["tunix"]["weight_decay"]) == (0.99, 0.1)
    proc = run_tunix(["-c", STEPS, json.dumps({"grpo": exp["grpo"], "tunix": exp["tunix"]}), json.dumps(GRADS)])
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(row["lr"] > 0 for row in rows[1:]), rows  # warm-up: step 0's rate is 0, the later ones are not
    got = [row["update"] for row in rows]
    assert got == pytest.approx(adamw(rows, 0.9, 0.99, 0.1), rel=1e-4, abs=1e-15)
    assert got != pytest.approx(adamw(rows, 0.9, 0.999, 0.1), rel=1e-3)
    assert got != pytest.approx(adamw(rows, 0.9, 0.99, 0.0), rel=1e-3)
