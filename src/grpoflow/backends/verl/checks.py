"""Cheap checks of a verl experiment, run when the config is loaded (every `snakemake` call, dry-runs included).

Pure arithmetic over the resolved config, no verl import (milliseconds). They catch before submission what
verl would only report on the cluster: its own ``validate_config`` rules (batch × n divisible by the GPUs,
mini-batch ≤ batch), the asserts its workers hit at the first update (mini-batch split over data-parallel
ranks, micro-batches), vLLM's tensor-parallel layout, and extra overrides that fight grpoflow's own keys.
The full check, against verl's real Hydra schema, is ``python -m grpoflow.validate``.
"""

from __future__ import annotations

import math

from grpoflow.backends.verl.memory import GIB, HOST_PER_GPU_GIB
from grpoflow.errors import ConfigError

VLLM_MAX_LORA_RANK = 512  # verl maps a LoRA rank to vLLM's next allowed one, up to 512


def check_verl_experiment(name: str, exp: dict, cfg=None) -> None:
    where = f"experiments.{name}"
    grpo, verl, res = exp["grpo"], exp["verl"], exp["resources"]

    def fail(msg: str) -> None:
        raise ConfigError(f"config error: {where}.{msg}")

    per_node = res["gpus_per_node"]
    if per_node < 1:
        fail(
            "resources.gpus_per_node = 0: the verl backend trains on GPUs; set the GPUs per node (e.g. 8), or use backend: trl for CPU runs"
        )
    _check_batches(exp, fail)
    tp = verl["rollout"]["tensor_model_parallel_size"]
    if tp > per_node or per_node % tp:
        fail(
            f"verl.rollout.tensor_model_parallel_size = {tp} must divide resources.gpus_per_node = {per_node}: a vLLM replica lives within one node"
        )
    rank = grpo["lora"]["rank"]
    if rank and verl["rollout"]["name"] == "vllm" and rank > VLLM_MAX_LORA_RANK:
        fail(f"grpo.lora.rank = {rank}: vLLM serves LoRA ranks up to {VLLM_MAX_LORA_RANK}")
    if not exp["data"].get("val_split") and (verl["test_freq"] > 0 or verl["val_before_train"]):
        fail(
            "data.val_split is null but verl.test_freq/val_before_train ask for validation: set a val_split or test_freq: -1 and val_before_train: false"
        )

    _check_numerics(exp, fail)
    _check_gpu_memory(name, exp, fail)

    for key in verl["env"]:
        if not key.isidentifier():
            fail(f"verl.env: {key!r} is not a valid environment variable name")
    _check_overrides(name, exp, fail)


def _check_batches(exp: dict, fail) -> None:
    """The group size, and (without dynamic batch sizes) how a step's completions split into mini- and
    micro-batches over the GPUs: verl rejects, or pads, what does not divide."""
    grpo, verl, res = exp["grpo"], exp["verl"], exp["resources"]
    nodes, per_node = res["nodes"], res["gpus_per_node"]
    gpus = nodes * per_node
    P, G = grpo["prompts_per_step"], grpo["num_generations"]
    mini = verl["ppo_mini_batch_size"]
    micro = verl["ppo_micro_batch_size_per_gpu"]
    logprob = verl["log_prob_micro_batch_size_per_gpu"]

    if G < 2:
        fail(f"grpo.num_generations = {G}: GRPO compares completions within a prompt's group, so it needs at least 2")
    if verl["use_dynamic_bsz"]:
        return
    if (P * G) % gpus:
        fail(
            f"grpo.prompts_per_step × num_generations = {P} × {G} = {P * G} is not divisible by the {gpus} GPUs ({nodes} node(s) × {per_node}): verl rejects this; change prompts_per_step, num_generations or resources"
        )
    if mini > P:
        fail(f"verl.ppo_mini_batch_size = {mini} exceeds grpo.prompts_per_step = {P}: make it ≤ {P}")
    if P % mini:
        fail(
            f"grpo.prompts_per_step = {P} is not a multiple of verl.ppo_mini_batch_size = {mini}: each step would end in a padded partial update; use a divisor of {P}"
        )
    if (mini * G) % gpus:
        fail(
            f"verl.ppo_mini_batch_size × num_generations = {mini} × {G} = {mini * G} completions do not split over {gpus} GPUs: make it a multiple of {gpus}"
        )
    per_gpu = mini * G // gpus
    if per_gpu % micro:
        fail(
            f"verl.ppo_micro_batch_size_per_gpu = {micro} does not divide the {per_gpu} completions each GPU gets per mini-batch ({mini} × {G} / {gpus} GPUs): use a divisor of {per_gpu}"
        )
    batch_per_gpu = P * G // gpus
    if batch_per_gpu % logprob:
        fail(
            f"verl.log_prob_micro_batch_size_per_gpu = {logprob} does not divide the {batch_per_gpu} completions each GPU scores per step ({P} × {G} / {gpus} GPUs): use a divisor of {batch_per_gpu}"
        )


def _check_overrides(name: str, exp: dict, fail) -> None:
    """Composing the overrides checks extra_overrides (Hydra syntax, keys grpoflow owns, legacy keys verl
    ignores) and the rewards' part; paths are placeholders here. On several nodes, Ray's num_cpus is refused."""
    from grpoflow.backends.verl.overrides import build, parse_override

    build(
        exp,
        name,
        {"train": "train.parquet", "val": "val.parquet", "sft": "sft.json"},
        exp.get("checkpoint_dir") or "checkpoints",
    )
    nodes = exp["resources"]["nodes"]
    if nodes > 1:
        for i, text in enumerate(exp["verl"]["extra_overrides"]):
            _, key, _ = parse_override(text, f"verl.extra_overrides[{i}]")
            if key == "ray_kwargs.ray_init.num_cpus":
                fail(
                    f"verl.extra_overrides[{i}] sets {key}: on {nodes} nodes verl attaches to the launcher's Ray cluster, and Ray refuses num_cpus when attaching; remove it"
                )


def _check_numerics(exp: dict, fail) -> None:
    """bf16 master weights hold AdamW's updates only when they are at least half bf16's spacing at a weight's
    magnitude; below that (lr 1e-6 at |w| ≈ 0.016, spacing 1.2e-4) nearly every update rounds to zero and the run
    "completes" with the SFT weights (grpoflow.training.memory.bf16_update_lost)."""
    from grpoflow.training.memory import TYPICAL_WEIGHT, bf16_half_spacing, bf16_update_lost

    lr = exp["grpo"]["learning_rate"]
    if exp["verl"]["model_dtype"] == "bf16" and bf16_update_lost(lr) and not exp["checks"]["allow_bf16_master_weights"]:
        fail(
            f"verl.model_dtype = bf16 (actor_rollout_ref.actor.fsdp_config.model_dtype) with grpo.learning_rate = {lr:g}: "
            f"AdamW steps of about {lr:g} are below half bf16's spacing at a typical weight (|w| {TYPICAL_WEIGHT}: {bf16_half_spacing(TYPICAL_WEIGHT):.1e}) "
            f"and round to zero, so the run would not learn; use verl.model_dtype: fp32 (verl's default), or set checks.allow_bf16_master_weights: true"
        )


def _check_gpu_memory(name: str, exp: dict, fail) -> None:
    from grpoflow.backends.verl.memory import estimate

    b = estimate(name, exp)
    if b is None or not exp["checks"]["gpu_memory"]:
        return
    p = b.peak
    if not b.fits:
        fixes = []
        if "rollout" in p.name:
            if not exp["verl"]["param_offload"] or not exp["verl"]["optimizer_offload"]:
                fixes.append("verl.param_offload/optimizer_offload: true")
            fixes.append(
                f"a lower verl.rollout.gpu_memory_utilization (now {exp['verl']['rollout']['gpu_memory_utilization']})"
            )
        else:
            fixes.append("verl.offload_policy: true (AdamW on the CPU)")
            fixes.append("smaller verl.ppo_micro_batch_size_per_gpu / log_prob_micro_batch_size_per_gpu")
            fixes.append("more resources.nodes")
        fail(
            f"resources.gpu_mem_gb = {exp['resources']['gpu_mem_gb']:g}: {b.refusal()}; "
            f"use {' or '.join(fixes)}, or checks.gpu_memory: false if you know better"
        )
    if not b.host_fits:
        fail(
            f"resources.mem_mb = {exp['resources']['mem_mb']}: the node needs about {b.host_needed:.0f} GiB of host RAM (offloaded actor states, "
            f"the pinned reference model, {HOST_PER_GPU_GIB:.0f} GiB per GPU for the workers); raise mem_mb to at least {math.ceil(b.host_needed * GIB / 1e6 / 1000) * 1000}"
        )
