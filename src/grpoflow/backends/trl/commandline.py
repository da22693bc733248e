"""The TRL backend of `train_grpo`: the command the rule runs and its config check (the entry point is train.py).

``command(cfg, experiment, inputs, outputs)`` is composed when Snakemake builds the DAG::

    python -m grpoflow.backends.trl.train --spec '{"experiment": ..., "grpo": {...}, ...}'

The spec holds everything that determines the trained weights and nothing else (no evaluation, upload or
resource settings), so changing any of it, and only it, reruns training. The training itself is
``grpoflow.backends.trl.runner.run_training`` (TRL ``GRPOTrainer``); this module stays free of torch/TRL imports
because the Snakefile imports it on every dry-run.
"""

from __future__ import annotations

from grpoflow.backends import common
from grpoflow.config import WorkflowConfig, register_backend_check
from grpoflow.errors import ConfigError


def training_spec(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> dict:
    return common.training_spec(
        cfg, experiment, inputs, outputs, trust_remote_code=cfg.experiment(experiment)["sft"]["trust_remote_code"]
    )


def command(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    return common.spec_command("trl", training_spec(cfg, experiment, inputs, outputs))


@register_backend_check("trl")
def check_trl_experiment(name: str, exp: dict, cfg=None) -> None:
    """Batch arithmetic TRL would only reject when training starts."""
    grpo, trl = exp["grpo"], exp["trl"]
    G, completions = grpo["num_generations"], grpo["prompts_per_step"] * grpo["num_generations"]
    where = f"config error: experiments.{name}"
    if G < 2:
        raise ConfigError(
            f"{where}.grpo.num_generations = {G}: GRPO compares completions within a prompt's group, so it needs at least 2"
        )
    micro = trl["completions_per_device_batch"]
    if micro is not None and completions % micro:
        raise ConfigError(
            f"{where}.trl.completions_per_device_batch = {micro} does not divide the {completions} completions of a step (grpo.prompts_per_step × num_generations = {grpo['prompts_per_step']} × {G}): use a divisor of {completions}"
        )
