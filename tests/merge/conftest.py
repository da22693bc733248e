"""Fixtures for the merge tests (builders in mergekit.py): a tiny Qwen3 SFT start, genuine verl FSDP2 and TRL
checkpoints trained from it, and the files train_grpo leaves for merge_checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from mergekit import train_trl

# tiny_base, verl_full_checkpoints, verl_lora_checkpoint: tests/conftest.py (shared with the verl and SLURM tests).


@pytest.fixture(scope="session")
def verl_full_ckpt(verl_full_checkpoints) -> Path:
    return verl_full_checkpoints[3]


@pytest.fixture(scope="session")
def verl_lora_ckpt(verl_lora_checkpoint) -> Path:
    return verl_lora_checkpoint


@pytest.fixture(scope="session")
def trl_full_run(tmp_path_factory, tiny_base) -> Path:
    return train_trl(tiny_base, tmp_path_factory.mktemp("trl_full") / "run", 0)


@pytest.fixture(scope="session")
def trl_lora_run(tmp_path_factory, tiny_base) -> Path:
    return train_trl(tiny_base, tmp_path_factory.mktemp("trl_lora") / "run", 4)


@pytest.fixture
def run_files(tmp_path, tiny_base):
    """(sft.json, marker writer) as discover_sft_checkpoint and train_grpo leave them."""
    from grpoflow.discovery import discover_to_file
    from grpoflow.io import atomic_write_json

    sft = tmp_path / "sft.json"
    discover_to_file({"model": tiny_base}, str(sft))

    def marker(final_step: int) -> str:
        path = tmp_path / "training_complete.json"
        atomic_write_json(path, {"final_step": final_step, "planned_steps": final_step})
        return str(path)

    return str(sft), marker
