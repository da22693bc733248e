"""SFT-checkpoint discovery: the layouts real SFT runs have, numeric step order, and every way it can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpoflow.discovery import discover, discover_to_file
from grpoflow.errors import DataError


def hf_dir(path: Path) -> Path:
    """The files discovery checks for (contents are irrelevant to discovery itself)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen3"}')
    (path / "model.safetensors").write_bytes(b"\0")
    (path / "tokenizer.json").write_text("{}")
    return path


def spec(run_dir, **kw):
    return {"run_dir": str(run_dir), "hf_subdir": "huggingface", "step": "latest", **kw}


def test_highest_step_is_numeric_not_lexical(tmp_path):
    for step in (900, 1000, 99):
        hf_dir(tmp_path / f"global_step_{step}" / "huggingface")
    rec = discover(spec(tmp_path))
    assert rec["step"] == 1000 and rec["found_by"] == "highest step dir"
    assert rec["path"] == str((tmp_path / "global_step_1000" / "huggingface").resolve())


def test_latest_checkpointed_iteration_wins(tmp_path):
    for step in (100, 200):
        hf_dir(tmp_path / f"global_step_{step}" / "huggingface")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    rec = discover(spec(tmp_path))
    assert rec["step"] == 100 and rec["found_by"] == "latest_checkpointed_iteration.txt"


def test_custom_hf_subdir(tmp_path):
    hf_dir(tmp_path / "global_step_5" / "huggingface_fast_math_r1")
    (tmp_path / "global_step_5" / "huggingface").mkdir()  # empty default sub-folder must not be taken
    rec = discover(spec(tmp_path, hf_subdir="huggingface_fast_math_r1"))
    assert rec["path"].endswith("global_step_5/huggingface_fast_math_r1")


def test_verl_rl_actor_layout_and_trl_checkpoints(tmp_path):
    hf_dir(tmp_path / "verl" / "global_step_3" / "actor" / "huggingface")
    assert discover(spec(tmp_path / "verl"))["path"].endswith("global_step_3/actor/huggingface")
    for step in (50, 150):
        hf_dir(tmp_path / "trl" / f"checkpoint-{step}")
    assert discover(spec(tmp_path / "trl"))["path"].endswith("checkpoint-150")


def test_explicit_step(tmp_path):
    for step in (1, 2):
        hf_dir(tmp_path / f"checkpoint-{step}")
    assert discover(spec(tmp_path, step=1))["step"] == 1
    with pytest.raises(DataError, match=r"sft.step = 7: .* \(steps: \[1, 2\]\)"):
        discover(spec(tmp_path, step=7))


@pytest.mark.parametrize(
    "layout,message",
    [
        ({}, "holds no checkpoint: looked for latest_checkpointed_iteration.txt, global_step_N/ and checkpoint-N/"),
        (
            {"global_step_10/actor/model_world_size_2_rank_0.pt": "x"},
            "step 10 of .* has no Hugging Face model: looked in .*global_step_10/huggingface",
        ),
        (
            {"global_step_10/huggingface/config.json": "{}", "global_step_10/huggingface/model.safetensors": "x"},
            "missing a tokenizer",
        ),
        (
            {"global_step_10/huggingface/config.json": "{}", "global_step_10/huggingface/tokenizer.json": "{}"},
            "missing weights",
        ),
        (
            {"global_step_10/huggingface/config.json": "{}", "latest_checkpointed_iteration.txt": "12"},
            "says '12', but .* has no such step dir",
        ),
    ],
)
def test_failures_say_where_they_looked(tmp_path, layout, message):
    for rel, content in layout.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(content)
    with pytest.raises(DataError, match=message):
        discover(spec(tmp_path))


def test_missing_run_dir(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        discover(spec(tmp_path / "nope"))


def test_explicit_model_dir_and_hub_id(tmp_path):
    rec = discover({"model": str(hf_dir(tmp_path / "m"))})
    assert rec["found_by"] == "sft.model (local dir)" and rec["files"]["weights"] == ["model.safetensors"]
    rec = discover({"model": "Qwen/Qwen3-0.6B"})
    assert rec["hub_id"] == "Qwen/Qwen3-0.6B" and rec["path"] == "Qwen/Qwen3-0.6B"
    with pytest.raises(DataError, match="neither an existing directory nor a Hub id"):
        discover({"model": "./not/there"})


def test_sft_json_and_cli(tmp_path):
    hf_dir(tmp_path / "run" / "global_step_2" / "huggingface")
    out = tmp_path / "sft.json"
    discover_to_file(spec(tmp_path / "run"), str(out))
    path = subprocess.run(
        [sys.executable, "-m", "grpoflow.discovery", "path", str(out)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert path == json.loads(out.read_text())["path"]
    bad = subprocess.run(
        [sys.executable, "-m", "grpoflow.discovery", "path", str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "discover_sft_checkpoint" in bad.stderr
