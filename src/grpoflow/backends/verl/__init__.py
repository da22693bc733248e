"""The verl backend (``verl.trainer.main_ppo``, FSDP + vLLM, one or several nodes through Ray): its Backend object
(``BACKEND``) and its tables.

Files:

- ``commandline.py``: ``command`` (``python -m grpoflow.backends.verl.train ... -- python -m verl.trainer.main_ppo
  <overrides>``); ``overrides.py``: an experiment -> verl's Hydra overrides (``SETTINGS`` below);
- ``checks.py``, ``memory.py``: the config-load checks (batch arithmetic, GPU memory, bf16 master weights);
  ``validate.py``: the check against verl's own Hydra schema (``python -m grpoflow.validate``);
- ``train.py``: the job's wrapper around ``main_ppo`` (pre-flight, signals, rotation, marker and metrics);
  ``ckpt.py``: verl's checkpoint dir; ``metrics.py``: verl's per-step file log -> train_metrics.jsonl rows;
- ``ray_cluster.py``, ``ray_slurm.sh``: the multi-node Ray launcher.

Importing this package (or ``commandline``, ``overrides``, ``checks``) never imports verl, Hydra or Ray: the
Snakefile composes commands and runs the cheap checks on every dry-run. Only ``validate`` (the full check
against verl's real Hydra schema) and the training wrapper's subprocesses need verl installed.
"""

from __future__ import annotations

from grpoflow import envcheck
from grpoflow.backends.verl import environment
from grpoflow.backends.verl.checks import check_verl_experiment
from grpoflow.backends.verl.ckpt import checkpoints
from grpoflow.backends.verl.commandline import command
from grpoflow.credentials import refuse_credentials
from grpoflow.planes import CLUSTER, GPU
from grpoflow.training.memory import DTYPE_BYTES


def _import_overrides(exp: dict) -> dict[str, str]:
    """The few overrides of the experiment that decide what main_ppo imports (grpoflow.backends.verl.environment)."""
    ov = {"actor_rollout_ref.rollout.name": exp["verl"]["rollout"]["name"]}
    for text in exp["verl"].get("extra_overrides") or []:
        key, _, value = text.lstrip("+").partition("=")
        ov[key] = value.strip().strip("'\"")
    return ov


# grpoflow key -> the verl 0.9.1 overrides it sets (overrides.build, where each override names its source).
# tests/backends/verl checks this table against the overrides built. grpo.lora.dropout: verl has no LoRA dropout.
SETTINGS: dict[str, str] = {
    "grpo.seed": "data.seed, actor_rollout_ref.rollout.seed",
    "grpo.total_steps": "trainer.total_training_steps, trainer.total_epochs",
    "grpo.prompts_per_step": "data.train_batch_size",
    "grpo.num_generations": "actor_rollout_ref.rollout.n",
    "grpo.learning_rate": "actor_rollout_ref.actor.optim.lr",
    "grpo.lr_scheduler": "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "grpo.lr_warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "grpo.kl_coef": "actor_rollout_ref.actor.use_kl_loss, actor_rollout_ref.actor.kl_loss_coef",
    "grpo.clip_ratio": "actor_rollout_ref.actor.clip_ratio_low",
    "grpo.clip_ratio_high": "actor_rollout_ref.actor.clip_ratio_high",
    "grpo.max_grad_norm": "actor_rollout_ref.actor.optim.clip_grad",
    "grpo.temperature": "actor_rollout_ref.rollout.temperature",
    "grpo.top_p": "actor_rollout_ref.rollout.top_p",
    "grpo.top_k": "actor_rollout_ref.rollout.top_k",
    "grpo.max_prompt_length": "data.max_prompt_length",
    "grpo.max_response_length": "data.max_response_length",
    "grpo.save_freq": "trainer.save_freq",
    "grpo.max_checkpoints_to_keep": "trainer.max_actor_ckpt_to_keep",
    "grpo.report_to": "trainer.logger",
    "grpo.lora.rank": "actor_rollout_ref.model.lora_rank",
    "grpo.lora.alpha": "actor_rollout_ref.model.lora_alpha",
    "grpo.lora.target_modules": "actor_rollout_ref.model.target_modules",
}

# verl's logged names (its `file` logger) -> train_metrics.jsonl keys (docs/ARCHITECTURE.md); when two name the
# same key, the first one present wins. metrics.to_project adds reward/<f>/mean -> reward/<f>.
METRICS: dict[str, str] = {
    "critic/score/mean": "reward",
    "critic/score/max": "reward_max",
    "critic/score/min": "reward_min",
    "reward/accuracy/mean": "accuracy",
    "acc/mean": "accuracy",
    "response_length/mean": "response_length",
    "response_length/max": "response_length_max",
    "response_length/clip_ratio": "truncated_fraction",
    "actor/pg_clipfrac": "clip_ratio",
    "actor/kl_loss": "kl",
    "actor/entropy": "entropy",
    "actor/pg_loss": "loss",
    "actor/lr": "learning_rate",
    "actor/grad_norm": "grad_norm",
    "timing_s/step": "time_s",
}


class VerlBackend:
    """The verl backend's Backend object (grpoflow.training.Backend)."""

    name = "verl"
    MERGE_CHECK = environment.MERGE  # verl's model merger, in the cluster interpreter
    GENERATOR = None
    MERGE_CHECKED_WITH = "transformers"
    SETTINGS = SETTINGS
    METRICS = METRICS

    def command(self, cfg, experiment: str, inputs: dict, outputs: dict) -> str:
        return command(cfg, experiment, inputs, outputs)

    def check(self, name: str, exp: dict, cfg=None) -> None:
        # verl.env is exported on the training command and extra_overrides are on it: no credential among them.
        verl, where = exp["verl"], f"experiments.{name}"
        refuse_credentials(where, [(f"verl.env.{k}", k) for k in verl.get("env") or {}], export_as=str.upper)
        overrides = [o.split("=", 1)[0] for o in verl.get("extra_overrides") or []]
        refuse_credentials(where, [(f"verl.extra_overrides ({o})", o.rsplit(".", 1)[-1]) for o in overrides])
        check_verl_experiment(name, exp, cfg)

    def checkpoints(self, checkpoint_dir) -> dict:
        return checkpoints(checkpoint_dir)

    def merge(self, checkpoint_dir: str, step: int, base: str, out) -> dict:
        from grpoflow.backends.verl.merge import merge  # its trainer's libraries: only in the merge job

        return merge(checkpoint_dir, step, base, out)

    def validate(self, cfg, name: str) -> dict:
        """The experiment against verl's own Hydra schema and validate_config (grpoflow.backends.verl.validate;
        needs verl installed): its result, with the line ``python -m grpoflow.validate`` prints."""
        from grpoflow.backends.verl.validate import summary, validate_experiment

        result = validate_experiment(cfg, name)
        return {**result, "summary": summary(result)}

    def plane(self, exp: dict) -> str:
        return CLUSTER  # verl + vLLM (+ TransferQueue, flash-attn): requirements/cluster.lock

    def accelerator(self, exp: dict) -> str:
        return GPU

    def environment(self, exp: dict, rule: str) -> list[tuple[str, str, str]] | None:
        """What the job imports: the merger; for training what ``main_ppo`` imports with this experiment's
        overrides (None with ``verl.env.GRPOFLOW_SKIP_ENV_CHECK: 1``, which the job's wrapper honours too)."""
        if rule == "merge_checkpoint":
            return list(self.MERGE_CHECK.needs)
        if str(exp["verl"]["env"].get(envcheck.SKIP_ENV_CHECK, "")).lower() in ("1", "true"):
            return None
        return environment.training_needs(_import_overrides(exp))

    def summary(self, name: str, exp: dict) -> str:
        """The GPU-memory estimate and what a time limit costs (grpoflow.backends.verl.memory.summary)."""
        from grpoflow.backends.verl.memory import summary as memory_summary

        return memory_summary(name, exp)

    def declared_device(self, exp: dict) -> str:
        return ""  # nothing declared: the job checks no device

    def checkpoint_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """``checkpoint.save_contents`` [model, optimizer, extra]: every parameter in ``verl.model_dtype`` (with
        LoRA the base as well as the adapters) and AdamW's two moments of every trained one, in the same dtype."""
        dtype = exp["verl"]["model_dtype"]
        b = DTYPE_BYTES[dtype]
        trained_state = 3 * arch.lora_params(rank) * b if rank else 2 * arch.params * b
        return arch.params * b + trained_state, f"{dtype} params + AdamW state"

    def merged_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """verl's merger saves bfloat16 (``base_model_merger.save_hf_model_and_tokenizer``); with LoRA its scratch
        copy stays beside the merged one."""
        return arch.params * 2 * (2 if rank else 1), "bfloat16" + (", and the merger's copy" if rank else "")


BACKEND = VerlBackend()
