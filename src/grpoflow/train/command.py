"""The shell command `train_grpo` runs for an experiment, by backend.

Composed when Snakemake builds the DAG, so `snakemake -n -p` prints the exact command (for verl: the full
`python -m verl.trainer.main_ppo ...` line), and any change to it reruns training (Snakemake's params trigger).
"""

from __future__ import annotations

from grpoflow.config import WorkflowConfig


def training_command(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    backend = cfg.experiment(experiment)["backend"]
    issue = {"trl": 4, "verl": 5}[backend]
    return f"echo 'grpoflow: error: backend {backend} of rule train_grpo is not implemented yet: see issue #{issue}' >&2; exit 1"
