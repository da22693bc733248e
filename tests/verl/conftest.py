"""Fixtures for the verl backend tests: the shipped cluster configs, and a real two-node local SLURM."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import grpoflow.verl.checks  # noqa: F401  (registers the verl config check, as grpoflow.config does)

REPO = Path(__file__).resolve().parents[2]


def _backends(raw: dict) -> set[str]:
    default = (raw.get("defaults") or {}).get("backend", "verl")
    return {(e or {}).get("backend", default) for e in (raw.get("experiments") or {}).values()}


VERL_CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "config").glob("*.yaml")
                      if "verl" in _backends(yaml.safe_load(p.read_text()) or {}))


def load(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text())


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


def submit(script: str, args: list[str], workdir: Path) -> str:
    path = workdir / "job.sh"
    path.write_text(script)
    out = subprocess.run(["sbatch", "--parsable", "-D", str(workdir), "-o", str(workdir / "slurm.out"), *args, str(path)],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


def job_state(job: str) -> dict:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_job(job: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(job)
        if state["JobState"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            return state
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], check=False)
            raise AssertionError(f"job {job} still {state['JobState']} after {timeout} s")
        time.sleep(1)


def leftover_ray(job: str) -> list[str]:
    """Processes of this job's Ray cluster still alive (their command lines name the job's session dirs)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if f"ray-{job}-" in ln and "ps -eo" not in ln]


def _merge_kit():
    """tests/merge/conftest.py's builders (tiny SFT model, genuine FSDP2 checkpoints), loaded by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("grpoflow_tests_merge_kit", REPO / "tests" / "merge" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, default_config) -> str:
    return _merge_kit().build_tiny_base(tmp_path_factory.mktemp("tiny"), default_config)


@pytest.fixture(scope="session")
def genuine_checkpoint(tmp_path_factory, tiny_model):
    """factory(step) -> a checkpoint dir holding a genuine verl FSDP2 checkpoint at `step` (written under torchrun by
    verl's FSDPCheckpointManager, with the trainer's data.pt and latest_checkpointed_iteration.txt)."""
    kit, made = _merge_kit(), {}

    def make(step: int) -> Path:
        if step not in made:
            made[step] = kit.write_checkpoint(tiny_model, tmp_path_factory.mktemp(f"ckpt{step}") / "checkpoints", step, lora=False)
        return made[step]

    return make
