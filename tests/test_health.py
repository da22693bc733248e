"""grpoflow.health: each check's condition, its one line, once; the verdict; stop_on. Real runs through the DAG (the
demo's, and broken ones for TRL and Tunix) are in tests/pipeline/test_demo_learning.py; here the rows are built to
put each check exactly at its threshold."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

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
from grpoflow.training.common import map_metrics

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


def test_a_flat_reward_fires_once_at_its_second_flat_window_from_half_the_run(caplog):
    """W = 10: the looks at 50 and 60 (half the run on; before, a slow rise is still within noise) are flat."""
    monitor = HealthMonitor(100)
    caplog.set_level(logging.WARNING, logger="grpoflow.health")
    fired = [(r["step"], monitor.observe(r)) for r in rows(100, reward=noisy(lambda s: 0.5))]
    assert [(step, lines[0][:13]) for step, lines in fired if lines] == [(60, "reward flat: ")]
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().startswith("reward flat: mean reward 0.")
    assert monitor.summary()["verdict"] == "no evidence of learning"


def test_a_rising_reward_is_learned():
    health = assess(rows(100, reward=noisy(lambda s: 0.3 + 0.004 * s)), 100)
    assert health["verdict"] == "learned" and health["lines"] == {}
    assert health["reward_trend"]["delta"] == pytest.approx(0.36, abs=0.05)


def test_a_falling_reward_is_diverged():
    health = assess(rows(100, reward=noisy(lambda s: max(0.6 - 0.02 * s, 0))), 100)
    assert health["verdict"] == "diverged" and list(health["lines"])[0] == "reward_drop"
    assert health["checks"]["reward_drop"] == 20 and health["cleared"]["reward_drop"] is None


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
    with pytest.raises(HealthStop, match="reward_flat at step 25: reward flat: .*health.stop_on lists reward_flat"):
        for row in flat:
            stopping.observe(row)


def test_a_run_too_short_to_judge_has_no_verdict_of_learning():
    assert assess(rows(3, reward=lambda s: s), 3)["reward_trend"] is None
    assert assess(rows(3, reward=lambda s: s), 3)["verdict"] == "no evidence of learning"
    assert assess(rows(4, reward=lambda s: s / 10), 4)["verdict"] == "no evidence of learning"  # 2 steps against 2
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
    from grpoflow.config import deep_merge, resolve_config
    from grpoflow.training.common import training_spec

    raw = yaml.safe_load((SCHEMA.parents[3] / "config" / "config.yaml").read_text())
    io = ({"sft": "s.json", "train": "t.parquet"}, {"marker": "m.json", "metrics": "x.jsonl"})
    default = training_spec(resolve_config(raw), "tiny-arith-seed1", *io)
    changed_cfg = resolve_config(deep_merge(raw, {"defaults": {"health": {"stop_on": ["nonfinite", "reward_drop"]}}}))
    changed = training_spec(changed_cfg, "tiny-arith-seed1", *io)
    assert "health" not in default and changed["health"] == {"stop_on": ["nonfinite", "reward_drop"]}


# ---- issue 40: verdicts that match the curve ------------------------------------------------------------------


def grpo_rewards(mean, steps: int, seed: int, prompts: int = 16, generations: int = 8) -> list[float]:
    """Per-step mean rewards as a GRPO step makes them: ``prompts`` prompts whose accuracy is spread around the
    curve's ``mean(step)`` (Beta with concentration 2: at 0.5 a fifth of the groups answer all alike, as in the
    demo), each with ``generations`` 0/1 completions. The demo's shape (16 x 8, rewards in multiples of 1/128) by
    default; its step-to-step SD is about 0.08, the demo run's own (tests/health/demo-seed2)."""
    rng = np.random.default_rng(seed)
    m = np.clip([mean(s) for s in range(1, steps + 1)], 1e-6, 1 - 1e-6)
    accuracy = rng.beta(m * 2, (1 - m) * 2, size=(prompts, steps))
    return list(rng.binomial(generations, accuracy).sum(axis=0) / (prompts * generations))


def reward_rows(rewards: list[float]) -> list[dict]:
    return [{"step": s, "reward": float(r)} for s, r in enumerate(rewards, 1)]


def piecewise(*points):
    """A mean reward curve through (fraction of the run, reward) points, for a run of ``steps``."""
    xs, ys = zip(*points)
    return lambda steps: lambda s: float(np.interp(s / steps, xs, ys))


RISE_THEN_COLLAPSE = piecewise((0, 0.2), (0.4, 0.8), (0.5, 0.8), (0.7, 0.45), (1, 0.45))


def test_a_run_that_rises_then_collapses_fell_from_its_best():
    """Item 5: 0.2 -> 0.8 -> 0.45 read "learned, checks fired: none" in every run: reward_drop compared the last
    window only with the first and with step 1. The fall from the run's best window is a check, and the verdict
    says what the last window shows."""
    for seed in range(20):
        health = assess(reward_rows(grpo_rewards(RISE_THEN_COLLAPSE(100), 100, seed)), 100)
        assert health["verdict"] == "fell from its best", (seed, health)
        assert health["checks"]["reward_drop_from_best"] is not None and health["checks"]["reward_drop"] is None
        best = health["reward_from_best"]
        assert best["first"] > 0.7 and best["last"] < 0.55 and best["ci"][1] < 0
    line = health["lines"]["reward_drop_from_best"]
    assert line.startswith("reward fell from its best: mean reward 0.") and ", its best window (change -0." in line


@pytest.mark.parametrize("steps", [50, 100, 200])
def test_a_steady_rise_is_learned_and_reward_flat_is_never_left_standing(steps):
    """Item 6: a steady 0.3 -> 0.7 rise got reward_flat in 96 / 82 / 56 % of runs of 50 / 100 / 200 steps (adjacent
    windows see a fraction of the rise), never taken back, and stop_on: [reward_flat] would have stopped them."""
    fired = 0
    for seed in range(20):
        health = assess(reward_rows(grpo_rewards(lambda s: 0.3 + 0.4 * (s - 1) / (steps - 1), steps, seed)), steps)
        assert health["verdict"] == "learned", (seed, health)
        fired += health["checks"]["reward_flat"] is not None
        taken_back = health.get("cleared", {}).get("reward_flat")
        assert health["checks"]["reward_flat"] is None or taken_back is not None, (seed, health)
    assert fired <= (2 if steps == 50 else 0)
    stopping = HealthMonitor(steps, stop_on=["reward_flat"])
    for row in reward_rows(grpo_rewards(lambda s: 0.3 + 0.4 * (s - 1) / (steps - 1), steps, 0)):
        stopping.observe(row)  # never raises HealthStop


def test_reward_flat_is_taken_back_when_the_run_rises(caplog):
    """A run flat for its first 40 % that then rises: reward_flat fires (the reward was flat), then the line that
    takes it back is logged, and the verdict is "learned"."""
    rows = reward_rows(grpo_rewards(piecewise((0, 0.3), (0.6, 0.3), (1, 0.7))(100), 100, 3))
    caplog.set_level(logging.INFO, logger="grpoflow.health")
    monitor = HealthMonitor(100)
    for row in rows:
        monitor.observe(row)
    health = monitor.summary()
    assert health["verdict"] == "learned"
    fired, cleared = health["checks"]["reward_flat"], health.get("cleared", {}).get("reward_flat")
    assert fired is not None and cleared is not None and cleared > fired
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("reward flat: ") and messages[1].startswith(
        f"reward flat (step {fired}) taken back at step {cleared}: the reward is rising"
    )
    assert health["log"] == messages


def test_a_run_that_learns_within_its_first_window_is_learned():
    """Item 7: 0.1 -> 0.7 in about 5 steps read "no evidence of learning" in 92 % of runs, though it is +0.6 over
    step 1: the first window already holds most of the rise."""
    for seed in range(20):
        health = assess(reward_rows(grpo_rewards(lambda s: min(0.1 + 0.12 * (s - 1), 0.7), 200, seed)), 200)
        assert health["verdict"] == "learned", (seed, health)
        assert health["reward_from_start"]["ci"][0] > 0 and health["checks"]["reward_flat"] is None


def test_windows_of_constant_values_are_not_learned():
    """Item 8: [0, 0, 0, 1/64, 1/64] gave a zero-width interval and "learned"; so did 2.7 % of flat 5-step runs with
    coarse rewards. The noise is pooled over the run and floored by the rewards' resolution."""
    health = assess(reward_rows([0, 0, 0, 1 / 64, 1 / 64]), 5)
    assert health["verdict"] == "no evidence of learning", health
    assert health["reward_trend"]["ci"][0] < 0 < health["reward_trend"]["ci"][1]
    # Flat 5-step runs of coarse rewards (multiples of 1/2, of 1/8): 3.1 % and 2.9 % "learned" before.
    for steps, prompts, generations, mean in ((5, 1, 2, 0.5), (5, 4, 2, 0.1), (10, 1, 2, 0.5)):
        learned = sum(
            assess(reward_rows(grpo_rewards(lambda s: mean, steps, seed, prompts, generations)), steps)["verdict"]
            == "learned"
            for seed in range(1000)
        )
        assert learned <= 10, (steps, prompts, generations, learned)  # at most 1 %


def test_a_resumed_monitor_continues_from_the_rows_already_written(tmp_path, caplog):
    """Item 9: TRL and Tunix started an empty monitor after a resume, so a run resumed at step 55 fired reward_flat
    at its own 30th step (85) or never, while the report's replay said step 60. The monitor is built from the rows
    written before the resume (training.common.health_monitor, as both runners call it)."""
    from grpoflow.training.common import append_live_metrics, health_monitor

    rows = reward_rows(grpo_rewards(lambda s: 0.5, 100, 7))
    live = tmp_path / "train_metrics.jsonl"
    for row in rows[:55]:
        append_live_metrics(live, row)
    spec = {"experiment": "tiny", "grpo": {"total_steps": 100}}
    caplog.set_level(logging.INFO, logger="grpoflow.health")
    monitor = health_monitor(spec, live)
    for row in rows[55:]:
        monitor.observe(row)
    replayed = assess(rows, 100)
    resumed = monitor.summary()
    assert resumed == replayed and replayed["checks"]["reward_flat"] == 60, replayed
    assert [r.getMessage() for r in caplog.records][-len(replayed["log"]) :] == replayed["log"]


def test_verls_follower_continues_from_the_earlier_attempts(tmp_path, caplog):
    """Item 9 for verl: every attempt logs to its own file (backends.verl.metrics), and the wrapper's follower started
    an empty monitor for each. After a resume at step 55 it continues from the earlier attempts' steps up to 55 (a
    killed attempt's steps after it are trained again, and left out), so its lines are the report's."""
    from grpoflow.backends.verl import metrics as vm
    from grpoflow.backends.verl.train import step_progress

    rewards = grpo_rewards(lambda s: 0.5, 100, 7)

    def record(step: int, reward: float) -> str:
        return json.dumps({"step": step, "data": {"critic/score/mean": reward, "timing_s/step": 1.0}}) + "\n"

    attempts = tmp_path / "ckpt" / vm.METRICS_SUBDIR
    attempts.mkdir(parents=True)
    # The first attempt reached step 58 and was killed; its checkpoint is step 55.
    (attempts / "attempt-20261129T000000000000Z-1.jsonl").write_text(
        "".join(record(s, r) for s, r in enumerate(rewards[:58], 1))
    )
    second = attempts / "attempt-20261129T010000000000Z-2.jsonl"
    caplog.set_level(logging.INFO, logger="grpoflow.health")
    with step_progress(second, 100, resumed_from=55):
        second.write_text("".join(record(s, r) for s, r in enumerate(rewards[55:], 56)))
    replayed = assess(vm.collect(vm.attempt_files(tmp_path / "ckpt"), 100), 100)
    assert replayed["checks"]["reward_flat"] == 60
    assert [r.getMessage() for r in caplog.records] == replayed["log"]


def test_a_stop_on_check_that_fired_before_the_resume_stops_the_rerun_at_once():
    """The replay of the rows before a resume never stops; a check of health.stop_on that fired in them and still
    holds stops the resumed run before it trains a step (change health.stop_on to continue)."""
    flat = rows(40, reward=lambda s: 0.5)  # reward_flat fires at step 25 (W = 5, from step 20 on, twice in a row)
    with pytest.raises(HealthStop, match="stopped by its health check reward_flat at step 25: reward flat: "):
        HealthMonitor.resumed(40, flat[:30], stop_on=["reward_flat"], experiment="x")
    monitor = HealthMonitor.resumed(40, flat[:30], stop_on=["nonfinite"])
    assert monitor.fired["reward_flat"]["step"] == 25 and monitor.stop_on == ("nonfinite",)
