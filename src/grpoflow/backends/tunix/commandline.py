"""The Tunix backend of `train_grpo`: the command the rule runs and its config check (the entry point is train.py).

``command(cfg, experiment, inputs, outputs)`` is composed when Snakemake builds the DAG::

    python -m grpoflow.backends.tunix.train --spec '{"experiment": ..., "grpo": {...}, "tunix": {...}, ...}'

The spec holds everything that determines the trained weights and nothing else, so changing any of it, and only
it, reruns training. The training itself is ``grpoflow.backends.tunix.runner.run_training``; this module stays
free of JAX/Tunix imports because the Snakefile imports it on every dry-run.
"""

from __future__ import annotations

from grpoflow.errors import ConfigError
from grpoflow.training import ResolvedConfig, common

# tunix.* keys that only feed checks (config load; tpu also the job's start check, through GRPOFLOW_TUNIX_TPU, which
# the rule exports outside the spec): not the trainer's business, so changing them reruns nothing.
CHECK_ONLY = ("tpu",)
ENTRY = "grpoflow.backends.tunix.train"  # train_grpo's entry point, named in finished runs' commands


def training_spec(cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> dict:
    spec = common.training_spec(cfg, experiment, inputs, outputs)
    spec["tunix"] = {k: v for k, v in spec["tunix"].items() if k not in CHECK_ONLY}
    return spec


def command(cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    return common.spec_command(ENTRY, training_spec(cfg, experiment, inputs, outputs))


def check_tunix_experiment(name: str, exp: dict, cfg=None) -> None:
    """What Tunix would only reject once the model is loaded, and the HBM estimate for a declared tunix.tpu
    (grpoflow.backends.tunix.memory)."""
    from grpoflow.backends.tunix import memory

    grpo, tunix = exp["grpo"], exp["tunix"]
    where = f"config error: experiments.{name}"

    def fail(message: str) -> None:
        raise ConfigError(f"{where}.{message}")

    if grpo["num_generations"] < 2:
        raise ConfigError(
            f"{where}.grpo.num_generations = {grpo['num_generations']}: Tunix's GRPOConfig needs at least 2 (GRPO compares completions within a prompt's group)"
        )
    lr = grpo["learning_rate"]
    if tunix["param_dtype"] == "bfloat16" and not exp["checks"]["allow_bf16_master_weights"]:
        from grpoflow.training.memory import TYPICAL_WEIGHT, bf16_half_spacing, bf16_update_lost

        if bf16_update_lost(lr):
            raise ConfigError(
                f"{where}.tunix.param_dtype = bfloat16 with grpo.learning_rate = {lr:g}: AdamW steps of about {lr:g} are below half bf16's spacing at a typical weight (|w| {TYPICAL_WEIGHT}: {bf16_half_spacing(TYPICAL_WEIGHT):.1e}) and round to zero, so the run would not learn; use tunix.param_dtype: float32 (with compute_dtype: bfloat16), or set checks.allow_bf16_master_weights: true"
            )
    if tunix["flash_attention"]:
        if tunix["rollout_engine"] == "vanilla":
            fail(
                "tunix.flash_attention is true with tunix.rollout_engine: vanilla: Tunix 0.1.7's sampler runs its "
                "prefill through the splash kernel without the padding mask, so every left-padded prompt attends to its "
                "padding and the rollouts come from other prompts than the model is trained on; use tunix.remat: "
                "decoder to save memory instead, or the vllm rollout"
            )
        block = tunix["flash_attention_block_size"]
        for key in ("max_prompt_length", "max_response_length"):
            if grpo[key] % block:
                fail(
                    f"grpo.{key} = {grpo[key]} is not a multiple of tunix.flash_attention_block_size = {block}: Tunix's "
                    "splash attention needs whole blocks of the padded prompt and completion; change either, or set "
                    "tunix.flash_attention: false"
                )
    memory.check(name, exp, fail)
