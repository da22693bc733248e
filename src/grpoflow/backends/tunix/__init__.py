"""The Tunix backend (JAX: TPU VMs, also CPU and GPU): Tunix 0.1.7 ``GRPOLearner`` with grpoflow's rewards.

Interface (the same for every backend): ``command``, ``SETTINGS``, ``METRICS``, ``checkpoints``, the config check.
This module stays free of JAX/Tunix imports: the Snakefile imports it on every dry-run, in the environment that
runs Snakemake, which does not hold Tunix (the job runs in the Tunix environment: requirements/tunix.lock).

Checkpoints are Tunix's own Orbax checkpoints, ``<checkpoint_dir>/actor/<step>/{model_params,optimizer_state}``,
saved every ``grpo.save_freq`` steps and at the last step; Orbax writes ``<step>.orbax-checkpoint-tmp*`` and
renames it when the save is committed, so a dir named ``<step>`` holding ``_CHECKPOINT_METADATA`` is complete.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from grpoflow.config import WorkflowConfig, register_backend_check
from grpoflow.errors import ConfigError

ACTOR_SUBDIR = "actor"  # Tunix's RLCluster saves the actor under <checkpoint_root_directory>/actor
LIVE_METRICS = "train_metrics.jsonl"  # the run's metrics so far, next to its checkpoints (survives restarts)
_STEP_DIR = re.compile(r"^(\d+)$")

# grpoflow setting -> what it becomes in Tunix (tunix.rl.rl_cluster, tunix.rl.grpo.grpo_learner, optax, orbax).
SETTINGS = {
    "grpo.total_steps": "RLTrainingConfig.max_steps",
    "grpo.prompts_per_step": "prompts per batch of the data iterator (= RLTrainingConfig.mini_batch_size)",
    "grpo.num_generations": "GRPOConfig.num_generations",
    "grpo.learning_rate": "optax.adamw(learning_rate=...)",
    "grpo.lr_scheduler": "optax schedule: constant, warmup_cosine_decay_schedule, linear",
    "grpo.lr_warmup_ratio": "warmup steps = ratio × total_steps (optax schedule)",
    "grpo.kl_coef": "GRPOConfig.beta (a reference model is loaded only when > 0)",
    "grpo.clip_ratio": "GRPOConfig.epsilon",
    "grpo.clip_ratio_high": "GRPOConfig.epsilon_high (read by Tunix's grpo policy loss)",
    "grpo.max_grad_norm": "optax.clip_by_global_norm",
    "grpo.temperature": "RolloutConfig.temperature",
    "grpo.top_p": "RolloutConfig.top_p",
    "grpo.top_k": "RolloutConfig.top_k (-1: None)",
    "grpo.max_prompt_length": "RolloutConfig.max_prompt_length (longer prompts are dropped, as with TRL)",
    "grpo.max_response_length": "RolloutConfig.max_tokens_to_generate",
    "grpo.seed": "data order, and RolloutConfig.seed per step (seed, step)",
    "grpo.save_freq": "orbax CheckpointManagerOptions.save_interval_steps",
    "grpo.max_checkpoints_to_keep": "orbax CheckpointManagerOptions.max_to_keep",
    "grpo.report_to": "MetricsLoggerOptions backends (tensorboard, wandb)",
}

# Tunix's logged scalar (``<prefix>/train/<name>``) -> train_metrics.jsonl key. ``grpoflow/...`` are the metrics
# grpoflow.rewards.tunix computes; reward/<func> keys pass through.
METRICS = {
    "grpoflow/train/reward": "reward",
    "grpoflow/train/reward_std": "reward_std",
    "grpoflow/train/accuracy": "accuracy",
    "grpoflow/train/answer_found": "answer_found",
    "grpoflow/train/verify_errors": "verify_errors",
    "completions/train/mean_length": "response_length",
    "completions/train/max_length": "response_length_max",
    "actor/train/loss": "loss",
    "actor/train/kl": "kl",
    "actor/train/pg_clipfrac": "clip_ratio",
    "actor/train/grad_norm": "grad_norm",
    "actor/train/learning_rate": "learning_rate",
}
REWARD_COMPONENT_PREFIX = "grpoflow/train/reward/"  # + <func>  ->  reward/<func>


def checkpoints(checkpoint_dir: str | Path) -> dict[int, Path]:
    """Complete Orbax checkpoints ``actor/<step>`` by step."""
    actor = Path(checkpoint_dir) / ACTOR_SUBDIR
    if not actor.is_dir():
        return {}
    found = {}
    for entry in actor.iterdir():
        m = _STEP_DIR.match(entry.name)
        if m and is_complete(entry):
            found[int(m.group(1))] = entry
    return found


def is_complete(checkpoint: Path) -> bool:
    return (checkpoint / "_CHECKPOINT_METADATA").is_file() and (checkpoint / "model_params").is_dir()


def latest_complete(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    found = checkpoints(checkpoint_dir)
    if not found:
        return None
    step = max(found)
    return step, found[step]


def training_spec(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> dict:
    exp = cfg.experiment(experiment)
    return {
        "experiment": experiment,
        "sft": inputs["sft"],
        "train": inputs["train"],
        "grpo": exp["grpo"],
        "rewards": exp["rewards"],
        "tunix": exp["tunix"],
        "checkpoint_dir": cfg.checkpoint_dir(experiment),
        "resume_across_changes": exp["resume_across_changes"],
        "marker": outputs["marker"],
        "metrics": outputs["metrics"],
    }


def command(cfg: WorkflowConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    spec = training_spec(cfg, experiment, inputs, outputs)
    return f"python -m grpoflow.backends.tunix.train --spec {shlex.quote(json.dumps(spec, sort_keys=True))}"


@register_backend_check("tunix")
def check_tunix_experiment(name: str, exp: dict, cfg=None) -> None:
    """What Tunix would only reject once the model is loaded."""
    grpo, tunix = exp["grpo"], exp["tunix"]
    where = f"config error: experiments.{name}"
    if grpo["num_generations"] < 2:
        raise ConfigError(
            f"{where}.grpo.num_generations = {grpo['num_generations']}: Tunix's GRPOConfig needs at least 2 (GRPO compares completions within a prompt's group)"
        )
    lr = grpo["learning_rate"]
    if tunix["param_dtype"] == "bfloat16" and not exp["checks"]["allow_bf16_master_weights"]:
        from grpoflow.verl.memory import TYPICAL_WEIGHT, bf16_half_spacing, bf16_update_lost

        if bf16_update_lost(lr):
            raise ConfigError(
                f"{where}.tunix.param_dtype = bfloat16 with grpo.learning_rate = {lr:g}: AdamW steps of about {lr:g} are below half bf16's spacing at a typical weight (|w| {TYPICAL_WEIGHT}: {bf16_half_spacing(TYPICAL_WEIGHT):.1e}) and round to zero, so the run would not learn; use tunix.param_dtype: float32 (with compute_dtype: bfloat16), or set checks.allow_bf16_master_weights: true"
            )
    if (grpo.get("lora") or {}).get("rank", 0) > 0:
        raise ConfigError(
            f"{where}.grpo.lora: LoRA is not wired into the tunix backend yet (full fine-tuning only): remove grpo.lora or use backend trl"
        )
