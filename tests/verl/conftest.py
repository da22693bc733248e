"""Fixtures for the verl backend tests (helpers in verlkit.py): a real two-node local SLURM, a tiny SFT model,
genuine verl checkpoints."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from verlkit import REPO, merge_kit

import grpoflow.verl.checks  # noqa: F401  (registers the verl config check, as grpoflow.config does)


@pytest.fixture(scope="session")
def local_slurm() -> dict:
    """A real SLURM with two slurmd nodes on this host (tests/slurm/start.sh); skips visibly when the machine
    cannot run one (not root, no apt-get)."""
    env = {**os.environ, "FAKE_NODES": "2"}
    proc = subprocess.run(["bash", str(REPO / "tests/slurm/start.sh")], capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode == 77:
        pytest.skip(f"local SLURM unavailable: {proc.stderr.strip()}")
    assert proc.returncode == 0, f"tests/slurm/start.sh failed:\n{proc.stdout}\n{proc.stderr}"
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout.split()
    return {"nodes": sorted(set(nodes))}


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
            made[step] = kit.write_checkpoint(tiny_model, tmp_path_factory.mktemp(f"ckpt{step}") / "checkpoints", step, lora=False)
        return made[step]

    return make
