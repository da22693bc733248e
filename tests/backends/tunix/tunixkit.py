"""Helpers of the Tunix backend's tests: the Tunix environment (.venv-tunix, `make setup-tunix`), specs, runs.

The tests themselves run in the local environment (.venv: torch, transformers); whatever needs JAX/Tunix runs in
the Tunix environment's interpreter as a subprocess, as the train_grpo and merge_checkpoint jobs do.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from grpoflow_testing import REPO, unavailable

TUNIX_PYTHON = REPO / ".venv-tunix" / "bin" / "python"
# Tiny runs: 4 prompts × 4 completions, 12 new tokens; a step takes ~0.1 s once JAX has compiled (~15 s).
TINY_GRPO = {
    "total_steps": 12,
    "save_freq": 4,
    "prompts_per_step": 4,
    "num_generations": 4,
    "max_prompt_length": 48,
    "max_response_length": 12,
    "learning_rate": 1.0e-3,
}
# The tiny model gets no answer right: the repetition penalty differs between completions, so steps have a
# non-zero advantage and change the weights.
TINY_REWARDS = {
    "funcs": ["accuracy", "repetition_penalty"],
    "params": {"repetition_penalty": {"ngram_size": 1, "max_penalty": -1.0}},
}


def require_tunix() -> str:
    """The Tunix interpreter; skipped visibly where it is not set up (fails under CI=true: `make test` builds it)."""
    if not TUNIX_PYTHON.exists():
        unavailable(f"{TUNIX_PYTHON} missing: run `make setup-tunix` (requirements/tunix.lock)")
    return str(TUNIX_PYTHON)


def tunix_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO / "src")  # this checkout's grpoflow, whichever checkout .venv-tunix was built from
    env["JAX_PLATFORMS"] = "cpu"
    return env


def run_tunix(args: list[str], *, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [require_tunix(), *args], capture_output=True, text=True, timeout=timeout, env=tunix_env(), cwd=REPO
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc


def start_training(spec: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [require_tunix(), "-m", "grpoflow.backends.tunix.train", "--spec", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=tunix_env(),
        cwd=REPO,
    )


def train(spec: dict, *, check: bool = True) -> subprocess.CompletedProcess:
    return run_tunix(["-m", "grpoflow.backends.tunix.train", "--spec", json.dumps(spec)], check=check)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
