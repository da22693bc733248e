"""The shell command `train_grpo` runs for an experiment, by backend.

Composed when Snakemake builds the DAG, so `snakemake -n -p` prints the exact command (for verl: the full
`python -m verl.trainer.main_ppo ...` line), and any change to it reruns training (Snakemake's params trigger).
Each backend module provides ``command(cfg, experiment, inputs, outputs) -> str``.
"""

from __future__ import annotations

import importlib
import importlib.util

from grpoflow.config import WorkflowConfig

BACKEND_MODULES = {"trl": "grpoflow.train.trl_grpo", "verl": "grpoflow.verl.command"}
BACKEND_ISSUES = {"trl": 4, "verl": 5}


def training_command(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    backend = cfg.experiment(experiment)["backend"]
    name = BACKEND_MODULES[backend]
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # parent package missing
        found = False
    if not found:
        issue = BACKEND_ISSUES[backend]
        return f"echo 'grpoflow: error: backend {backend} of rule train_grpo is not implemented yet: see issue #{issue}' >&2; exit 1"
    return importlib.import_module(name).command(cfg, experiment, inputs, outputs)
