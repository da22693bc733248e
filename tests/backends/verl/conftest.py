"""Fixtures for the verl backend tests (helpers in verlkit.py): a real two-node local SLURM, a tiny SFT model,
genuine verl checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from verlkit import merge_kit

import grpoflow.backends.verl.checks  # noqa: F401  (registers the verl config check, as grpoflow.config does)

# local_slurm: tests/conftest.py (two slurmd nodes; fails instead of skipping under CI=true).


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, default_config) -> str:
    return merge_kit().build_tiny_base(tmp_path_factory.mktemp("tiny"), default_config)


@pytest.fixture(scope="session")
def genuine_checkpoint(tmp_path_factory, tiny_model):
    """factory(step) -> a checkpoint dir holding a genuine verl FSDP2 checkpoint at `step` (written under torchrun by
    verl's FSDPCheckpointManager, with the trainer's data.pt and latest_checkpointed_iteration.txt)."""
    kit, made = merge_kit(), {}

    def make(step: int) -> Path:
        if step not in made:
            made[step] = kit.write_checkpoint(
                tiny_model, tmp_path_factory.mktemp(f"ckpt{step}") / "checkpoints", step, lora=False
            )
        return made[step]

    return make
