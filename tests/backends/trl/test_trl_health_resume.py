"""Issue 40, item 9, on a real run: a TRL run stopped by SIGTERM and rerun continues its health checks from the
rows it wrote before the resume, so the rerun's log holds exactly the lines the report's replay of
train_metrics.jsonl gives (before: the rerun started an empty monitor, and a resumed run logged reward_flat at
another step than the report, or not at all)."""

from __future__ import annotations

import os
import signal

import pytest
from test_trl_grpo import launch, spec_command, wait_for_checkpoint
from trainkit import read_jsonl

from grpoflow.backends.trl.ckpt import latest_complete
from grpoflow.health import assess

pytestmark = pytest.mark.xdist_group("trl-short-run")


def health_lines(log_text: str) -> list[str]:
    return [line.split("grpoflow.health: ", 1)[1] for line in log_text.splitlines() if "grpoflow.health: " in line]


@pytest.mark.slow
def test_a_resumed_run_logs_the_health_lines_the_report_replays(default_config, tmp_path, arith_parquet, tiny_sft_json):
    """20 steps at a learning rate of 1e-12 (nothing is learned; the health window is 5 steps): reward_flat is
    judged at the looks of steps 10, 15 and 20 and fires at the second flat one. SIGTERM once step 10 is saved
    stops the run a step or two later; the rerun resumes there, between two looks."""
    total = 20
    cmd, paths = spec_command(
        default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=total, save_freq=5, learning_rate=1e-12
    )
    ckpt = paths["checkpoint_dir"]
    proc = launch(cmd, tmp_path / "log1")
    wait_for_checkpoint(proc, ckpt, 10)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 1
    resumed_at = latest_complete(ckpt)[0]
    assert 10 <= resumed_at < total

    proc = launch(cmd, tmp_path / "log2")
    assert proc.wait(timeout=300) == 0, (tmp_path / "log2").read_text()[-3000:]
    rerun = (tmp_path / "log2").read_text()
    assert f"resuming from {ckpt / f'checkpoint-{resumed_at}'}" in rerun
    health = assess(read_jsonl(paths["metrics"]), total)
    assert health["checks"]["reward_flat"] is not None and health["checks"]["reward_flat"] > resumed_at, health
    assert health_lines(rerun) == health["log"], (health_lines(rerun), health["log"])
