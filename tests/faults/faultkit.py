"""Helpers for the fault tests: a small training config, waiting on files and SLURM, the trainer's process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from grpoflow_testing import TINY_SPEC  # noqa: F401  (re-exported for the fault tests)

from grpoflow.backends.trl.ckpt import latest_complete

EXPERIMENT = "fault"
MARKER = f"results/{EXPERIMENT}/training_complete.json"
METRICS = f"results/{EXPERIMENT}/train_metrics.jsonl"
CHECKPOINTS = f"results/{EXPERIMENT}/checkpoints"
TRAIN_LOG = f"logs/train_grpo/{EXPERIMENT}.log"
ARITH = {
    "source": "synthetic",
    "format": "gsm8k",
    "prompt": {"system": None, "template": "{question}"},
    "synthetic": {
        "task": "arithmetic",
        "train_size": 200,
        "test_size": 10,
        "max_operand": 99,
        "operations": ["+", "-"],
        "seed": 7,
    },
}


def fault_config(
    start_model: str, *, total_steps: int, save_freq: int, runtime: int, retry_runtime: int | None = None
) -> dict:
    """One TRL experiment from ``start_model`` on a small arithmetic set; ``runtime`` is its SLURM time limit
    (minutes), ``retry_runtime`` that of the profile's retries. Only training is targeted by the tests; the
    evaluation section is what a config needs."""
    return {
        "datasets": {"arith": ARITH},
        "defaults": {
            "backend": "trl",
            "data": {"dataset": "arith", "train_split": "train", "val_split": None},
            "sft": {"model": start_model},
            "grpo": {
                "total_steps": total_steps,
                "save_freq": save_freq,
                "prompts_per_step": 4,
                "num_generations": 4,
                "learning_rate": 5.0e-5,
                "lr_scheduler": "constant",
                "temperature": 0.7,
                "max_prompt_length": 64,
                "max_response_length": 16,
            },
            "rewards": {"funcs": ["accuracy"]},
            "trl": {"loss_type": "dapo", "use_cpu": True},
            "resources": {
                "nodes": 1,
                "gpus_per_node": 0,
                "cpus_per_task": 2,
                "mem_mb": 4000,
                "runtime": runtime,
                "retry_runtime": retry_runtime,
            },
        },
        "experiments": {EXPERIMENT: {}},
        "evaluation": {
            "benchmarks": {"arith": {"dataset": "arith", "split": "test"}},
            "resources": {"gpus": 0, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 10},
        },
    }


def wait_for(what: str, predicate: Callable[[], object], timeout: float, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def latest_checkpoint(wd: Path) -> int:
    """Step of the newest complete checkpoint (0 when none)."""
    found = latest_complete(wd / CHECKPOINTS)
    return found[0] if found else 0


def trainer_pids(jobid: str) -> list[int]:
    """PIDs of the GRPO trainer inside a SLURM job (``scontrol listpids``: the job's own processes)."""
    out = subprocess.run(["scontrol", "listpids", jobid], capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines()[1:]:
        pid = line.split()[0]
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grpoflow.backends.trl.train" in cmdline and b"-m" in cmdline:
            pids.append(int(pid))
    return pids


def process_state(pid: int) -> str:
    """One letter from /proc/PID/stat: R, S, T (stopped), ...; "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def pause(pids: list[int]) -> None:
    """SIGSTOP the trainer: it stays mid-run until SLURM ends the job (SLURM sends SIGCONT with its SIGTERM)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
