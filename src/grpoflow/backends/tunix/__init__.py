"""The Tunix backend (Tunix 0.1.7 ``GRPOLearner`` on JAX: TPU VMs, also CPU and GPU): its Backend
object (``BACKEND``) and its tables.

Files:

- ``commandline.py``: ``command`` (``python -m grpoflow.backends.tunix.train --spec JSON``) and the config check;
- ``train.py``: that entry point;
- ``runner.py``: the resumable GRPOLearner run (imports JAX/Tunix; only in the job, in the Tunix environment:
  requirements/tunix.lock), the ``grpo.*`` -> Tunix mapping (``SETTINGS`` below), the metrics and the marker;
- ``ckpt.py``: the checkpoint dir (Tunix's Orbax checkpoints ``actor/<step>``);
- ``qwen3.py``: Hugging Face Qwen3 checkpoints <-> Tunix's Qwen3 (load; export to an HF model dir);
- ``merge.py``: ``merge_checkpoint`` for this backend (an Orbax step -> an HF model dir);
- ``generate.py``: its generator for ``evaluation.backend: tunix`` (Tunix's sampler);
- ``memory.py``: the HBM estimate per chip for a declared ``tunix.tpu`` (config load, ``snakemake -n``).

Importing this package stays free of JAX/Tunix: the Snakefile imports it on every dry-run, in the environment that
runs Snakemake, which does not hold Tunix.
"""

from __future__ import annotations

from grpoflow.backends.tunix import environment
from grpoflow.backends.tunix.ckpt import checkpoints
from grpoflow.backends.tunix.commandline import check_tunix_experiment, command
from grpoflow.planes import TPU, TUNIX
from grpoflow.training import Generator
from grpoflow.training.memory import DTYPE_BYTES, HUB_WEIGHT_BYTES

# grpoflow key -> what it sets in Tunix (runner.train: tunix.rl.rl_cluster RLTrainingConfig / RolloutConfig,
# tunix.rl.grpo.grpo_learner GRPOConfig, optax, orbax). tests/backends/tunix checks the runner reads each key.
SETTINGS: dict[str, str] = {
    "grpo.seed": "PromptBatches order, RolloutConfig.seed (seed and step)",
    "grpo.total_steps": "RLTrainingConfig.max_steps",
    "grpo.prompts_per_step": "prompts per data batch, RLTrainingConfig.mini_batch_size",
    "grpo.num_generations": "GRPOConfig.num_generations",
    "grpo.learning_rate": "optax.adamw.learning_rate",
    "grpo.lr_scheduler": "optax.constant_schedule, optax.warmup_cosine_decay_schedule, optax.linear_schedule",
    "grpo.lr_warmup_ratio": "warm-up steps of the optax schedule",
    "grpo.kl_coef": "GRPOConfig.beta (reference model loaded when > 0)",
    "grpo.clip_ratio": "GRPOConfig.epsilon",
    "grpo.clip_ratio_high": "GRPOConfig.epsilon_high",
    "grpo.max_grad_norm": "optax.clip_by_global_norm",
    "grpo.temperature": "RolloutConfig.temperature",
    "grpo.top_p": "RolloutConfig.top_p",
    "grpo.top_k": "RolloutConfig.top_k",
    "grpo.max_prompt_length": "RolloutConfig.max_prompt_length, grpoflow drops longer prompts before training",
    "grpo.max_response_length": "RolloutConfig.max_tokens_to_generate",
    "grpo.save_freq": "CheckpointManagerOptions.save_interval_steps",
    "grpo.max_checkpoints_to_keep": "CheckpointManagerOptions.max_to_keep",
    "grpo.report_to": "metrax.TensorboardBackend, metrax.WandbBackend",
    "grpo.lora.rank": "qwix.LoraProvider.rank",
    "grpo.lora.alpha": "qwix.LoraProvider.alpha",
    "grpo.lora.dropout": "qwix.LoraProvider.dropout",
    "grpo.lora.target_modules": "qwix.LoraProvider.module_path",
}

# Tunix's logged scalar (``<prefix>/train/<name>``) -> train_metrics.jsonl key. ``grpoflow/...`` are the metrics
# grpoflow.backends.tunix.rewards computes; reward/<func> keys pass through.
METRICS = {
    "grpoflow/train/reward": "reward",
    "grpoflow/train/reward_std": "reward_std",
    "grpoflow/train/frac_reward_zero_std": "frac_reward_zero_std",
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


class TunixBackend:
    """The Tunix backend's Backend object (grpoflow.training.Backend)."""

    name = "tunix"
    MERGE_CHECK = environment.MERGE  # Tunix's Qwen3 and Orbax, in the Tunix interpreter
    # Tunix's own sampler, in the Tunix environment; it holds the TPU (one job at a time with training).
    GENERATOR = Generator("grpoflow.backends.tunix.generate", TUNIX, environment.GENERATE, TPU)
    MERGE_CHECKED_WITH = "safetensors"  # the Tunix environment has no torch: tensor by tensor against the start's files
    SETTINGS = SETTINGS
    METRICS = METRICS

    def command(self, cfg, experiment: str, inputs: dict, outputs: dict) -> str:
        return command(cfg, experiment, inputs, outputs)

    def check(self, name: str, exp: dict, cfg=None) -> None:
        check_tunix_experiment(name, exp, cfg)

    def checkpoints(self, checkpoint_dir) -> dict:
        return checkpoints(checkpoint_dir)

    def merge(self, checkpoint_dir: str, step: int, base: str, out) -> dict:
        from grpoflow.backends.tunix.merge import merge  # its trainer's libraries: only in the merge job

        return merge(checkpoint_dir, step, base, out)

    def validate(self, cfg, name: str) -> None:
        return None  # no check against the trainer's own config schema beyond ``check``

    def plane(self, exp: dict) -> str:
        return TUNIX  # Tunix + JAX: requirements/tunix.lock, whose pins differ from the cluster lock's

    def accelerator(self, exp: dict) -> str:
        # The device JAX opens, a TPU on a TPU VM: one process at a time holds it, so every Tunix training job takes
        # the `tpu` resource, a declared tunix.tpu or not.
        return TPU

    def environment(self, exp: dict, rule: str) -> list[tuple[str, str, str]]:
        return list((environment.TRAIN if rule == "train_grpo" else environment.MERGE).needs)

    def summary(self, name: str, exp: dict) -> str | None:
        """The HBM estimate per chip for a declared ``tunix.tpu`` (grpoflow.backends.tunix.memory.summary); none
        without one."""
        from grpoflow.backends.tunix.memory import summary as memory_summary

        return memory_summary(name, exp) if exp["tunix"]["tpu"] else None

    def declared_device(self, exp: dict) -> str:
        """The declared ``tunix.tpu`` ("" for none), which the train_grpo and evaluate jobs check JAX runs on
        (grpoflow.backends.tunix.device)."""
        from grpoflow.backends.tunix.device import experiment_tpu

        return experiment_tpu(exp)

    def checkpoint_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """Tunix's CheckpointManager (``tunix/sft/checkpoint_manager.py``) writes Orbax items ``model_params``
        (``nnx.state(model)``; with LoRA only the LoRA params) and ``optimizer_state`` (AdamW's two moments), in
        ``tunix.param_dtype``. Orbax compresses them (zstd), so this is an upper bound (80 % was written for a small
        Qwen3 after one step: tests/backends/tunix/test_tunix_checkpoint_size.py)."""
        dtype = exp["tunix"]["param_dtype"]
        trained = arch.lora_params(rank) if rank else arch.params
        return 3 * trained * DTYPE_BYTES[dtype], f"{dtype} params + AdamW state, Orbax"

    def merged_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """merge.py exports in the start's dtype (taken as the Hub's bfloat16)."""
        return arch.params * HUB_WEIGHT_BYTES, "the start's bfloat16"


BACKEND = TunixBackend()
