"""The demo SFT stage: a real (short) TRL SFT run written in the layout real SFT runs have."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpoflow.demo.sft import completion_text, run_sft
from grpoflow.discovery import discover
from grpoflow.errors import ConfigError, DataError

SPEC = {
    "dataset": "arith",
    "split": "train",
    "max_steps": 4,
    "schedule_steps": 8,
    "batch_size": 8,
    "learning_rate": 1e-3,
    "lr_scheduler": "cosine",
    "warmup_ratio": 0.0,
    "save_steps": 2,
    "seed": 0,
}


def test_completion_is_a_think_block_then_the_boxed_answer():
    assert completion_text("82", "37 + 45 = 82\n#### 82") == "<think>\n37 + 45 = 82\n</think>\n\\boxed{82}"
    gsm8k = "Half of 48 is 48/2 = <<48/2=24>>24 clips.\nSo 48+24 = <<48+24=72>>72.\n#### 72"
    assert (
        completion_text("72", gsm8k) == "<think>\nHalf of 48 is 48/2 = 24 clips.\nSo 48+24 = 72.\n</think>\n\\boxed{72}"
    )
    assert completion_text("5") == "<think>\n\n</think>\n\\boxed{5}"


def test_short_run_is_an_sft_run_dir_that_discovery_finds(tmp_path, tiny_model, arith_parquet):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir = tmp_path / "sft-run"
    summary = run_sft(SPEC, tiny_model, arith_parquet["train"], str(run_dir))
    assert summary["final_step"] == 4
    assert sorted(os.listdir(run_dir)) == [
        "global_step_2",
        "global_step_4",
        "latest_checkpointed_iteration.txt",
        "start_point.json",
        "train_log.jsonl",
    ]
    start = json.loads((run_dir / "start_point.json").read_text())
    assert start["step"] == 4 and start["chosen_by"] == "max_steps" and start["evaluations"] == []
    assert start["compute"]["torch"]["threads"] >= 1 and start["compute"]["cpu_model"]
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert os.listdir(tmp_path) == ["sft-run"]  # written atomically: no temporary dir left beside it

    found = discover({"run_dir": str(run_dir), "hf_subdir": "huggingface", "step": "latest"})
    assert found["step"] == 4 and found["path"] == str((run_dir / "global_step_4" / "huggingface").resolve())
    hf = found["path"]
    tok = AutoTokenizer.from_pretrained(hf)
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    AutoModelForCausalLM.from_pretrained(hf)
    trained, start = load_file(f"{hf}/model.safetensors"), load_file(f"{tiny_model}/model.safetensors")
    assert any(not (trained[k] == start[k]).all() for k in start)

    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    lrs = [row["learning_rate"] for row in log if "learning_rate" in row]
    # Stopped half-way through an 8-step cosine: the rate is still well above zero.
    assert lrs and lrs[-1] > 0.3 * SPEC["learning_rate"]


def test_schedule_shorter_than_training_is_a_config_error(tmp_path, tiny_model, arith_parquet):
    with pytest.raises(ConfigError, match="demo.sft.schedule_steps"):
        run_sft({**SPEC, "schedule_steps": 2}, tiny_model, arith_parquet["train"], str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


TARGET = {"band": [0.0, 1.0], "split": "val", "eval_every": 2, "max_new_tokens": 8, "batch_size": 64}


def test_the_start_point_is_the_first_step_whose_validation_accuracy_is_in_the_band(
    tmp_path, tiny_model, arith_parquet
):
    """Any accuracy is in [0, 1]: the run stops at the first evaluation, makes that step its latest checkpoint and
    records the evaluation, which is the evaluation library's own greedy accuracy of that checkpoint."""
    from grpoflow.demo.sft import ValidationProbe
    from grpoflow.discovery import discover

    run_dir = tmp_path / "sft-run"
    spec = {**SPEC, "max_steps": 6, "schedule_steps": 12, "save_steps": 5, "target_accuracy": TARGET}
    summary = run_sft(spec, tiny_model, arith_parquet["train"], str(run_dir), val_parquet=arith_parquet["val"])
    assert summary["final_step"] == 2
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    start = json.loads((run_dir / "start_point.json").read_text())
    assert start["step"] == 2 and start["chosen_by"] == "target_accuracy" and start["target_accuracy"] == TARGET
    assert start["evaluations"] == [{"step": 2, "accuracy": start["val_accuracy"]}]
    found = discover({"run_dir": str(run_dir), "hf_subdir": "huggingface", "step": "latest"})
    assert found["step"] == 2
    from transformers import AutoTokenizer

    probe = ValidationProbe(arith_parquet["val"], AutoTokenizer.from_pretrained(found["path"]), 8, 64)
    assert probe.accuracy(Path(found["path"])) == start["val_accuracy"]


def test_a_band_never_reached_fails_naming_the_key_and_leaves_no_run(tmp_path, tiny_model, arith_parquet):
    spec = {**SPEC, "target_accuracy": {**TARGET, "band": [0.99, 1.0]}}
    with pytest.raises(
        DataError, match=r"did not reach demo.sft.target_accuracy.band \[99 %, 100 %\] within demo.sft.max_steps = 4"
    ):
        run_sft(spec, tiny_model, arith_parquet["train"], str(tmp_path / "run"), val_parquet=arith_parquet["val"])
    assert not (tmp_path / "run").exists() and os.listdir(tmp_path) == []
