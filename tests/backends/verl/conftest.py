"""Fixtures for the verl backend tests (helpers in verlkit.py): a real two-node local SLURM, a tiny SFT model,
genuine verl checkpoints."""

from __future__ import annotations

import pytest

import grpoflow.backends.verl.checks  # noqa: F401  (registers the verl config check, as grpoflow.config does)

# local_slurm: tests/conftest.py (two slurmd nodes; fails instead of skipping under CI=true).


@pytest.fixture(scope="session")
def tiny_model(tiny_base) -> str:
    return tiny_base  # tests/conftest.py: one tiny SFT start for the merge, verl and SLURM tests


@pytest.fixture(scope="session")
def genuine_checkpoint(verl_full_checkpoints):
    """factory(step) -> a checkpoint dir holding a genuine verl FSDP2 checkpoint at `step` (2, 3 or 4; written under
    torchrun by verl's FSDPCheckpointManager, with the trainer's data.pt and latest_checkpointed_iteration.txt;
    tests/conftest.py). Read-only: copy it to change anything."""
    return verl_full_checkpoints.__getitem__
