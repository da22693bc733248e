"""The shell command `train_grpo` runs for an experiment, by backend.

Composed when Snakemake builds the DAG, so `snakemake -n -p` prints the exact command (for verl: the full
`python -m verl.trainer.main_ppo ...` line), and any change to it reruns training (Snakemake's params trigger).
Each backend module provides ``command(cfg, experiment, inputs, outputs) -> str``.
"""

from __future__ import annotations

import importlib

from grpoflow.config import WorkflowConfig

BACKEND_MODULES = {"trl": "grpoflow.train.trl_grpo", "verl": "grpoflow.verl.command"}


def training_command(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    backend = cfg.experiment(experiment)["backend"]
    return importlib.import_module(BACKEND_MODULES[backend]).command(cfg, experiment, inputs, outputs)


def slurm_resources(res: dict) -> dict:
    """train_grpo's Snakemake resources from an experiment's `resources:` section.

    One node: `--gpus=G`, the job runs in the SLURM plugin's job step. Several nodes (verl's Ray launcher):
    per-node GRES (a job-wide `--gpus=N*G` breaks the launcher's per-node steps) and `mpi`, so the job's shell
    runs in the batch script itself (the plugin's own step would collapse the job to one node); the plugin
    insists on more than one task per node for mpi jobs, so CPUs are split over 2 tasks per node and the
    launcher starts exactly one Ray process per node with `srun --overlap`. None leaves a resource unset.
    """
    nodes, per_node = res["nodes"], res["gpus_per_node"]
    multi = nodes > 1
    return {
        "nodes": nodes,
        "gpu": None if multi else per_node,
        "gres": f"gpu:{per_node}" if multi else None,
        "mpi": "srun" if multi else None,
        "tasks_per_node": 2 if multi else None,
        "cpus_per_task": res["cpus_per_task"] // (2 if multi else 1),
        "mem_mb": res["mem_mb"],
        "runtime": res["runtime"],
    }
