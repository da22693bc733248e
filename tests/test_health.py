"""grpoflow.health: each check's condition, its one line, once; the verdict; stop_on. Real runs through the DAG (the
demo's, and broken ones for TRL and Tunix) are in tests/pipeline/test_demo_learning.py; here the rows are built to
put each check exactly at its threshold."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path

import pytest
import yaml

from grpoflow.backends.common import map_metrics
from grpoflow.backends.trl import METRICS as TRL_METRICS
from grpoflow.health import (
    CHECKS,
    ENTROPY_COLLAPSE_RATIO,
    NO_SIGNAL_FRACTION,
    HealthMonitor,
    HealthStop,
    assess,
    window_for,
)

SCHEMA = Path(__file__).resolve().parent.parent / "src/grpoflow/schema/config.schema.yaml"
DEMO_ROWS = Path(__file__).resolve().parent / "health" / "demo-seed2.train_metrics.jsonl"


def rows(n: int, **series) -> list[dict]:
    """``n`` rows; each keyword is a function of the step (1-based) giving that key's value."""
    return [{"step": s, **{k: f(s) for k, f in series.items()}} for s in range(1, n + 1)]


def noisy(mean, sd=0.05, seed=0):
    rng = random.Random(seed)
    return lambda s: mean(s) + rng.gauss(0, sd)


def test_the_schema_offers_exactly_the_checks():
    schema = yaml.safe_load(SCHEMA.read_text())
    stop_on = schema["$defs"]["experiment"]["properties"]["health"]["properties"]["stop_on"]
    assert tuple(stop_on["items"]["enum"]) == CHECKS and stop_on["default"] == ["nonfinite"]


def test_window_is_a_tenth_of_the_run_within_5_and_50():
    assert [window_for(n) for n in (4, 20, 200, 1000, 10_000)] == [5, 5, 20, 50, 50]


def test_the_demo_run_learned_and_fired_nothing():
    """The demo's seed-2 TRL run (make demo, 2026-11-28, 200 steps): its recorded rows."""
    demo = [json.loads(line) for line in DEMO_ROWS.read_text().splitlines()]
    health = assess(demo, 200)
    assert health["verdict"] == "learned" and health["reward_trend"]["ci"][0] > 0, health
    assert health["checks"] == dict.fromkeys(CHECKS) and health["lines"] == {}


def test_a_flat_reward_fires_once_at_its_second_flat_window(caplog):
    monitor = HealthMonitor(100)
    caplog.set_level(logging.WARNING, logger="grpoflow.health")
    fired = [(r["step"], monitor.observe(r)) for r in rows(100, reward=noisy(lambda s: 0.5))]
    assert [(step, lines[0][:13]) for step, lines in fired if lines] == [(30, "reward flat: ")]  # W = 10
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().startswith("reward flat: mean reward 0.")
    assert monitor.summary()["verdict"] == "no evidence of learning"


def test_a_rising_reward_is_learned():
    health = assess(rows(100, reward=noisy(lambda s: 0.3 + 0.004 * s)), 100)
    assert health["verdict"] == "learned" and health["lines"] == {}
    assert health["reward_trend"]["delta"] == pytest.approx(0.36, abs=0.05)


def test_a_falling_reward_is_diverged():
    health = assess(rows(100, reward=noisy(lambda s: max(0.6 - 0.02 * s, 0))), 100)
    assert health["verdict"] == "diverged" and list(health["lines"]) == ["reward_drop"]
    assert health["checks"]["reward_drop"] == 20


def test_no_signal_at_its_threshold_and_not_below():
    at = assess(rows(40, reward=lambda s: 0.0, frac_reward_zero_std=lambda s: NO_SIGNAL_FRACTION), 40)
    below = assess(rows(40, reward=noisy(lambda s: 0.3), frac_reward_zero_std=lambda s: 0.89), 40)
    assert at["checks"]["no_signal"] == 5 and "too hard for the start model" in at["lines"]["no_signal"]
    assert below["checks"]["no_signal"] is None
    easy = assess(rows(40, reward=lambda s: 1.0, frac_reward_zero_std=lambda s: 1.0), 40)
    assert "looks too easy" in easy["lines"]["no_signal"]


def test_entropy_collapse_relative_to_the_start():
    # The demo's entropy is ~0.05 nats from the start: an absolute floor would fire on a healthy run.
    falling = assess(rows(100, reward=noisy(lambda s: 0.5 + 0.003 * s), entropy=lambda s: 0.05 * 0.95**s), 100)
    steady = assess(rows(100, reward=noisy(lambda s: 0.5 + 0.003 * s), entropy=lambda s: 0.05), 100)
    assert falling["checks"]["entropy_collapse"] is not None and steady["checks"]["entropy_collapse"] is None
    step = falling["checks"]["entropy_collapse"]
    assert 0.05 * 0.95 ** (step - 5) < ENTROPY_COLLAPSE_RATIO * 0.05 * 1.1


def test_truncation_and_importance_ratio():
    health = assess(
        rows(20, reward=noisy(lambda s: 0.5), truncated_fraction=lambda s: 0.6, is_ratio_mean=lambda s: 0.85), 20
    )
    assert health["checks"]["truncation"] == 5 and "raise grpo.max_response_length" in health["lines"]["truncation"]
    assert health["checks"]["is_ratio_drift"] == 5 and "0.850" in health["lines"]["is_ratio_drift"]


def test_a_nan_loss_from_trl_logs_stops_the_run_by_default():
    """TRL's own log dict of a diverged step, through the backend's METRICS table as the runner maps it."""
    logs = {"loss": float("nan"), "grad_norm": float("inf"), "reward": 0.25, "learning_rate": 5e-5}
    row = map_metrics(3, logs, TRL_METRICS)
    assert row["nonfinite"] == ["grad_norm", "loss"] and "loss" not in row
    json.dumps(row, allow_nan=False)  # the row stays valid JSON
    monitor = HealthMonitor(200, experiment="tiny")
    with pytest.raises(HealthStop, match=r"^training of tiny stopped by its health check nonfinite at step 3: "):
        monitor.observe(row)
    assert assess([row], 200)["verdict"] == "diverged"


def test_stop_on_other_checks_is_opt_in():
    flat = rows(40, reward=lambda s: 0.5)
    HealthMonitor(40, stop_on=["nonfinite"]).summary()
    logging_only = HealthMonitor(40)
    for row in flat:
        logging_only.observe(row)  # reward_flat fires, logs, does not stop
    stopping = HealthMonitor(40, stop_on=["reward_flat"], experiment="x")
    with pytest.raises(HealthStop, match="reward_flat at step 15: reward flat: .*health.stop_on lists reward_flat"):
        for row in flat:
            stopping.observe(row)


def test_a_run_too_short_to_judge_has_no_verdict_of_learning():
    assert assess(rows(3, reward=lambda s: s), 3)["reward_trend"] is None
    assert assess(rows(3, reward=lambda s: s), 3)["verdict"] == "no evidence of learning"
    assert math.isfinite(assess(rows(4, reward=lambda s: s / 10), 4)["reward_trend"]["delta"])


def test_a_model_wrecked_within_the_first_window_is_diverged():
    """tests/pipeline/health.yaml's TRL run at a learning rate of 0.05 (2026-11-28): reward 0.41 at step 1, then 0
    from step 2 on. The windows alone compare 0.08 with 0 and see noise; step 1, the start model, shows the fall."""
    rows = [
        json.loads(line) for line in (DEMO_ROWS.parent / "diverge-trl.train_metrics.jsonl").read_text().splitlines()
    ]
    health = assess(rows, 20)
    assert health["reward_trend"]["ci"][0] < 0 < health["reward_trend"]["ci"][1]
    assert health["verdict"] == "diverged" and health["checks"]["reward_drop"] == 15
    assert "against 0.406 at step 1 (the start model)" in health["lines"]["reward_drop"]
    assert health["checks"]["reward_flat"] is None  # fallen, not flat


def test_one_low_first_step_does_not_make_a_run_learned():
    """tests/pipeline/health.yaml's Tunix run at a learning rate of 1e-12 (2026-11-28): step 1 drew 0.27 against ~0.43
    after it. Against step 1 alone the run looks better; the verdict rests on the windows, which see no change."""
    rows = [json.loads(line) for line in (DEMO_ROWS.parent / "lr0-tunix.train_metrics.jsonl").read_text().splitlines()]
    health = assess(rows, 20)
    assert health["reward_from_start"]["delta"] > 0.1
    assert health["verdict"] == "no evidence of learning" and health["checks"]["reward_flat"] == 15


def test_the_default_health_setting_leaves_the_training_command_unchanged():
    """A key new to the training spec changes the command, and Snakemake reruns every finished run after an
    upgrade (and merge and evaluation after it): the default stays out of the spec, a changed setting goes in."""
    from grpoflow.backends.common import training_spec
    from grpoflow.config import deep_merge, resolve_config

    raw = yaml.safe_load((SCHEMA.parents[3] / "config" / "config.yaml").read_text())
    io = ({"sft": "s.json", "train": "t.parquet"}, {"marker": "m.json", "metrics": "x.jsonl"})
    default = training_spec(resolve_config(raw), "tiny-arith-seed1", *io)
    changed_cfg = resolve_config(deep_merge(raw, {"defaults": {"health": {"stop_on": ["nonfinite", "reward_drop"]}}}))
    changed = training_spec(changed_cfg, "tiny-arith-seed1", *io)
    assert "health" not in default and changed["health"] == {"stop_on": ["nonfinite", "reward_drop"]}
