"""Several TRL training processes (torchrun, gloo on the CPU) on the tiny model, through the command train_grpo
runs: rank 0 alone writes the metrics rows and the marker, a SIGTERM stops every rank at the same step with one
complete checkpoint, a rerun resumes, and the global batch is the same with 1 and 2 processes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from test_trl_grpo import launch, spec_command, wait_for_checkpoint
from trainkit import read_jsonl

from grpoflow.backends.trl.ckpt import LIVE_METRICS, latest_complete, step_dirs
from grpoflow.config import deep_merge

# 2 prompts × 4 completions per step; each of 2 processes takes 4 completions.
TWO = {"processes": 2}


def two_process_command(default_config, tmp_path, arith_parquet, tiny_sft_json, **grpo):
    # The demo's experiment with trl.processes: 2 (spec_command takes grpo overrides only).
    base = deep_merge(default_config, {"defaults": {"trl": TWO}})
    cmd, paths = spec_command(base, tmp_path, arith_parquet, tiny_sft_json, **grpo)
    assert (
        "-m grpoflow.backends.trl.launch --nproc-per-node 2 --shutdown-timeout 900 -- -m grpoflow.backends.trl.train"
        in cmd
    )
    return cmd, paths


def progress_lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if "grpoflow.backends.trl.runner: step " in ln]


@pytest.mark.slow
def test_two_gloo_processes_train_log_once_and_resume(default_config, tmp_path, arith_parquet, tiny_sft_json):
    cmd, paths = two_process_command(default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=2, save_freq=2)
    proc = launch(cmd, tmp_path / "log1")
    assert proc.wait(timeout=300) == 0, (tmp_path / "log1").read_text()[-3000:]
    log = (tmp_path / "log1").read_text()
    assert log.count("job interpreter:") == 2, "both ranks ran"
    assert len(progress_lines(tmp_path / "log1")) == 2, "one progress line per step, from rank 0"
    assert [r["step"] for r in read_jsonl(paths["metrics"])] == [1, 2]
    assert [r["step"] for r in read_jsonl(paths["checkpoint_dir"] / LIVE_METRICS)] == [1, 2]
    marker = json.loads(Path(paths["marker"]).read_text())
    assert marker["final_step"] == 2 and log.count("training of tiny-arith-seed1 complete") == 1
    ckpt = paths["checkpoint_dir"] / "checkpoint-2"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(os.listdir(ckpt)), "each rank's RNG state is saved"

    # More steps: the rerun resumes from checkpoint-2 on both ranks and logs each new step once.
    longer, _ = two_process_command(default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=3, save_freq=2)
    proc = launch(longer, tmp_path / "log2")
    assert proc.wait(timeout=300) == 0, (tmp_path / "log2").read_text()[-3000:]
    assert "resuming from" in (tmp_path / "log2").read_text()
    assert [r["step"] for r in read_jsonl(paths["metrics"])] == [1, 2, 3]
    assert json.loads(Path(paths["marker"]).read_text())["final_step"] == 3


@pytest.mark.slow
def test_one_and_two_processes_train_the_same_global_batch(default_config, tmp_path, arith_parquet, tiny_sft_json):
    """TRL's generation batch (completions per optimizer step) read from each run's saved TrainingArguments."""
    import torch

    batches = {}
    for n in (1, 2):
        base = deep_merge(default_config, {"defaults": {"trl": {"processes": n}}})
        cmd, paths = spec_command(base, tmp_path / f"n{n}", arith_parquet, tiny_sft_json, total_steps=1, save_freq=1)
        proc = launch(cmd, tmp_path / f"log{n}")
        assert proc.wait(timeout=300) == 0, (tmp_path / f"log{n}").read_text()[-3000:]
        args = torch.load(paths["checkpoint_dir"] / "checkpoint-1" / "training_args.bin", weights_only=False)
        batches[n] = (args.generation_batch_size, args.per_device_train_batch_size, args.gradient_accumulation_steps)
    assert batches[1][0] == batches[2][0] == 2 * 4, batches  # prompts_per_step × num_generations
    assert batches[1][1] * batches[1][2] == 2 * batches[2][1] * batches[2][2]


@pytest.mark.slow
def test_sigterm_stops_both_ranks_at_one_step_with_one_complete_checkpoint(
    default_config, tmp_path, arith_parquet, tiny_sft_json
):
    total = 40
    cmd, paths = two_process_command(
        default_config, tmp_path, arith_parquet, tiny_sft_json, total_steps=total, save_freq=2
    )
    ckpt = paths["checkpoint_dir"]
    proc = launch(cmd, tmp_path / "log1")
    wait_for_checkpoint(proc, ckpt, 2)
    # As SLURM does at a time limit: every process of the job gets SIGTERM (torchrun forwards it too).
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=300) != 0
    stopped, _ = latest_complete(ckpt)
    assert 2 <= stopped < total
    assert max(step_dirs(ckpt)) == stopped, "no checkpoint past the stop step, complete or cut off"
    rows = [r["step"] for r in read_jsonl(ckpt / LIVE_METRICS)]
    assert rows == list(range(1, stopped + 1)), "each step's row once, up to the step both ranks stopped at"
    assert f"stopped at step {stopped} of grpo.total_steps = {total}" in (tmp_path / "log1").read_text()
    assert not Path(paths["marker"]).exists()

    proc = launch(cmd, tmp_path / "log2")
    wait_for_checkpoint(proc, ckpt, stopped + 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert f"resuming from {ckpt / f'checkpoint-{stopped}'}" in (tmp_path / "log2").read_text()


@pytest.mark.slow
def test_a_run_resumes_under_another_process_count(default_config, tmp_path, arith_parquet, tiny_sft_json):
    """trl.processes keeps the global batch, so the checkpoints of a 1-process run are continued by 2 processes
    (runner.RESUMABLE_CHANGES) rather than refused as trained with other settings."""
    runs = {}
    for n, total in ((1, 1), (2, 2)):
        base = deep_merge(default_config, {"defaults": {"trl": {"processes": n}}})
        runs[n] = spec_command(base, tmp_path, arith_parquet, tiny_sft_json, total_steps=total, save_freq=1)
        proc = launch(runs[n][0], tmp_path / f"log{n}")
        assert proc.wait(timeout=300) == 0, (tmp_path / f"log{n}").read_text()[-3000:]
    assert f"resuming from {runs[2][1]['checkpoint_dir'] / 'checkpoint-1'}" in (tmp_path / "log2").read_text()
    assert [r["step"] for r in read_jsonl(runs[2][1]["metrics"])] == [1, 2]
    assert json.loads(Path(runs[2][1]["marker"]).read_text())["final_step"] == 2
