"""Will a verl experiment fit in GPU memory? A per-GPU estimate at config load (pure arithmetic, no verl import).

It models verl 0.9.1's colocated FSDP2 actor + vLLM rollout (read in the 0.9.1 wheel):

- Phases. *Rollout*: vLLM awake; what the actor keeps on the GPU meanwhile depends on offload
  (``workers/engine/base.py`` ``_context_switch``: with param/optimizer offload off it is a no-op;
  ``engine_workers.py`` ``update_weights``: only ``param_offload`` moves weights off before the KV cache is
  resumed). *Log-prob* (old and reference log-probs, forward only) and *update* (forward + backward + AdamW
  step): vLLM asleep. On entering train/eval mode the engine loads offloaded params *and* optimizer state
  back (``_context_switch(device)``), so offload lowers only the rollout phase; FSDP2's CPU offload policy
  (``fsdp_config.offload_policy``) keeps params, grads and AdamW on the host throughout (the step runs on CPU).
- vLLM (v1 worker): reserves ``gpu_memory_utilization × total memory`` for weights + activations + KV cache at
  start (it refuses to start unless that much is free) and restores the same amount at every wake-up.
- AdamW state exists only after the first optimizer step: a config can pass step 1 and fail when vLLM wakes for
  step 2. Its moments take the master weights' dtype (``fsdp_config.model_dtype``, ``transformer_impl.py``
  ``_build_module``); torch's foreach AdamW (used for DTensor params) allocates one more shard-sized tensor
  (``torch._foreach_sqrt(exp_avg_sqs)`` in ``torch/optim/adam.py``) during the step.
- FSDP2 shards params/grads/optimizer over every trainer GPU (``fsdp_size: -1``); each decoder layer is a unit
  gathered in the compute dtype (bf16) when used, the next one prefetched; the root unit (embeddings + untied
  lm_head) is not resharded after forward (``utils/fsdp_utils.py`` ``apply_fsdp2``).
- Reference model: forward-only FSDP2 uses ``CPUOffloadPolicy(pin_memory=True)`` (``transformer_impl.py``):
  pinned host RAM in its ``model_dtype``, only gathered units on the GPU.
- Activations: with gradient checkpointing each layer keeps its input (hidden × 2 bytes per token) until its
  backward, plus one recomputed layer's working set; logits are vocab × tokens in bf16, the log-prob gradient
  written in place by flash-attn's cross entropy when no entropy term is trained (``transformer_impl.py``
  ``inplace_backward``). Tokens per micro-batch are the worst case, micro-batch × (prompt + response) or
  ``ppo_max_token_len_per_gpu`` with dynamic batch size: a run fits when every response reaches
  ``max_response_length``, not only while responses are short.

What it cannot know (stated constants below and in grpoflow.training.memory, the shared model this builds on):
CUDA contexts, NCCL buffers, what vLLM keeps while asleep, allocator fragmentation. They were not measured here
(no GPU); each says where its value comes from. The calibration against verl's own published configurations is
in tests/backends/verl/test_memory.py and docs/cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoflow.training.memory import (
    CARD_GIB_PER_GB,
    CUDA_CONTEXT_GIB,
    DTYPE_BYTES,
    GIB,
    LAYER_BACKWARD_FACTOR,
    NCCL_GIB,
    PRESETS,  # noqa: F401 - re-exported: tests/backends/verl/test_memory.py and benchmarks/ read them from here
    TYPICAL_WEIGHT,  # noqa: F401
    Architecture,
    Breakdown,
    Phase,
    architecture,
    bf16_half_spacing,  # noqa: F401
    bf16_update_lost,  # noqa: F401
    checkpointed_activations,
    described,
    first_gpu_memory_gb,
    fit_text,
    trainer_phase,
)

# Two processes per GPU (verl's trainer worker and the vLLM worker) each hold a CUDA context (CUDA_CONTEXT_GIB).
# Asleep, vLLM frees only what its CuMemAllocator tagged (weights, KV cache): CUDA graphs, its TP communicators
# and allocator leftovers stay, taken as 1 GiB.
VLLM_ASLEEP_GIB = 1.0
# verl hands weights to vLLM in buckets of checkpoint_engine.update_weights_bucket_megabytes (0.9.1 default 2048).
WEIGHT_SYNC_BUCKET_MB = 2048
# Bytes per logit element while training: bf16 logits (2); + 2 for the temperature-scaled copy when T != 1;
# + 6 when an entropy term is trained (its softmax kept for backward, and flash-attn's cross entropy no longer
# writes its gradient in place). Forward-only log-probs: bf16 logits + 4 for the entropy verl logs.
LOGIT_BYTES = 2
LOGIT_BYTES_TEMPERATURE = 2
LOGIT_BYTES_ENTROPY_TRAIN = 6
LOGIT_BYTES_ENTROPY_FORWARD = 4
# Host RAM per GPU outside the model states: a trainer worker and a vLLM worker (torch + CUDA libraries, Ray),
# the dataloader and reward workers' share. Estimate.
HOST_PER_GPU_GIB = 12.0


def _override(verl: dict, key: str, default):
    """The value an extra override gives a verl key (last one wins), converted like the default; else default."""
    value = default
    for text in verl.get("extra_overrides") or []:
        k, _, v = text.lstrip("+").partition("=")
        if k == key:
            v = v.strip().strip("'\"")
            if isinstance(default, bool):
                value = v.lower() == "true"
            elif isinstance(default, (int, float)) and not isinstance(default, bool):
                value = type(default)(float(v))
            else:
                value = v
    return value


# ---- sizes -------------------------------------------------------------------------------------------------------


def _shards(exp: dict) -> int:
    """GPUs FSDP2 shards the actor's states over (``fsdp_size: -1``: every trainer GPU)."""
    res = exp["resources"]
    gpus = res["nodes"] * res["gpus_per_node"]
    fsdp_size = _override(exp["verl"], "actor_rollout_ref.actor.fsdp_config.fsdp_size", -1)
    return gpus if fsdp_size in (-1, 0) else min(fsdp_size, gpus)


def _offload_policy(verl: dict) -> bool:
    return verl.get("offload_policy", False) or _override(
        verl, "actor_rollout_ref.actor.fsdp_config.offload_policy", False
    )


def _model_states(arch: Architecture, exp: dict) -> tuple[float, float, float, float]:
    """Actor params, grads, AdamW state and AdamW's step temporary per GPU (GiB), in the master dtype, sharded.
    With offload_policy FSDP2 keeps them on the host for the whole run."""
    verl = exp["verl"]
    shards, master = _shards(exp), DTYPE_BYTES[verl["model_dtype"]]
    P, trainable = arch.params, arch.trainable_params(exp["grpo"]["lora"]["rank"])
    on_gpu = 0.0 if _offload_policy(verl) else 1.0
    params = on_gpu * P * master / shards / GIB
    grads = on_gpu * trainable * master / shards / GIB
    adam = on_gpu * 2 * trainable * master / shards / GIB
    adam_step_tmp = on_gpu * trainable * master / shards / GIB
    return params, grads, adam, adam_step_tmp


def _gathered_units(arch: Architecture, lora: int) -> tuple[float, float]:
    """Gathered FSDP units in bf16 (GiB), forward and backward: the root (kept through forward and backward) and two
    decoder layers (the one computing, the one prefetched); in backward also the lm_head's and one layer's
    unsharded bf16 gradients. With LoRA the frozen base needs no gradients."""
    gathered_fwd = (arch.root_params + 2 * arch.layer_params) * 2 / GIB
    gathered_bwd = gathered_fwd + (0 if lora else (arch.lm_head_params + arch.layer_params) * 2 / GIB)
    return gathered_fwd, gathered_bwd


def _tokens(exp: dict) -> tuple[float, float]:
    """Tokens per micro-batch of the update and of the log-prob passes, worst case (every response at its maximum;
    ``ppo_max_token_len_per_gpu`` with dynamic batch size), per Ulysses sequence-parallel rank."""
    grpo, verl = exp["grpo"], exp["verl"]
    seq = grpo["max_prompt_length"] + grpo["max_response_length"]
    dyn = verl["use_dynamic_bsz"]
    max_tok = _override(verl, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", 16384)
    train_tokens = max(max_tok, seq) if dyn else verl["ppo_micro_batch_size_per_gpu"] * seq
    lp_dyn = _override(verl, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False)
    lp_tok = _override(verl, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", max_tok)
    lp_tokens = max(lp_tok, seq) if lp_dyn else verl["log_prob_micro_batch_size_per_gpu"] * seq
    sp = _override(verl, "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", 1)
    return train_tokens / sp, lp_tokens / sp


def _activations(arch: Architecture, exp: dict) -> tuple[float, float]:
    """Activations + logits (GiB) of the update (forward + backward) and of a log-prob pass (forward only)."""
    grpo, verl = exp["grpo"], exp["verl"]
    train_tokens, lp_tokens = _tokens(exp)
    temp = LOGIT_BYTES_TEMPERATURE if grpo["temperature"] != 1.0 else 0
    entropy = LOGIT_BYTES_ENTROPY_TRAIN if verl["entropy_coeff"] else 0
    logits_train = train_tokens * arch.vocab_size * (LOGIT_BYTES + temp + entropy) / GIB
    logits_lp = lp_tokens * arch.vocab_size * (LOGIT_BYTES + temp + LOGIT_BYTES_ENTROPY_FORWARD) / GIB
    layer_act = arch.layer_activation_bytes_per_token()
    if verl["gradient_checkpointing"]:
        kept, working = checkpointed_activations(arch, train_tokens)
    else:
        kept = train_tokens * layer_act * arch.num_layers / GIB
        working = train_tokens * layer_act * (LAYER_BACKWARD_FACTOR - 1) / GIB
    # Backward starts with every checkpoint alive and the logits' gradient; the logits are freed before the
    # first recomputed layer, so the two working sets do not overlap.
    return kept + max(logits_train, working), max(logits_lp, lp_tokens * layer_act / GIB)


@dataclass(frozen=True)
class _Sizes:
    """What verl's phases hold, per GPU in GiB."""

    params: float
    grads: float
    adam: float
    adam_step_tmp: float
    rollout_params: float  # what stays on the GPU while vLLM is awake: none with param_offload
    rollout_adam: float  # none with optimizer_offload
    gathered_fwd: float
    gathered_bwd: float
    activations: float
    lp_activations: float
    vllm_awake: float
    vllm_weights: float
    bucket: float
    largest_tensor: float


def _sizes(arch: Architecture, exp: dict, capacity: float) -> _Sizes:
    verl, rollout = exp["verl"], exp["verl"]["rollout"]
    params, grads, adam, adam_step_tmp = _model_states(arch, exp)
    gathered_fwd, gathered_bwd = _gathered_units(arch, exp["grpo"]["lora"]["rank"])
    activations, lp_activations = _activations(arch, exp)
    bucket_mb = _override(
        verl, "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", WEIGHT_SYNC_BUCKET_MB
    )
    return _Sizes(
        params=params,
        grads=grads,
        adam=adam,
        adam_step_tmp=adam_step_tmp,
        rollout_params=0.0 if verl["param_offload"] else params,
        rollout_adam=0.0 if verl["optimizer_offload"] else adam,
        gathered_fwd=gathered_fwd,
        gathered_bwd=gathered_bwd,
        activations=activations,
        lp_activations=lp_activations,
        vllm_awake=rollout["gpu_memory_utilization"] * capacity,
        vllm_weights=arch.params * 2 / rollout["tensor_model_parallel_size"] / GIB,
        bucket=bucket_mb / 1024,
        largest_tensor=max(arch.vocab_size * arch.hidden_size, arch.hidden_size * arch.intermediate_size) * 2 / GIB,
    )


# ---- phases ------------------------------------------------------------------------------------------------------

TRAINER_FIXED_GIB = CUDA_CONTEXT_GIB + NCCL_GIB
VLLM_ASLEEP_TOTAL_GIB = CUDA_CONTEXT_GIB + VLLM_ASLEEP_GIB  # its CUDA context and what sleep keeps


def _rollout_phases(s: _Sizes) -> list[Phase]:
    """vLLM awake (from step 2, when AdamW state exists), and the weight sync before its KV cache is back."""
    # Rollout: params stay unless param_offload; AdamW state unless optimizer_offload; grads are freed (zero_grad on
    # leaving train mode).
    rollout = trainer_phase(
        "rollout (vLLM awake, from step 2)",
        {
            "vLLM (util × memory)": s.vllm_awake,
            "actor params": s.rollout_params,
            "AdamW state": s.rollout_adam,
            "CUDA/NCCL": TRAINER_FIXED_GIB + CUDA_CONTEXT_GIB,
        },
        ["actor params", "AdamW state"],
    )
    # Weight sync (engine_workers.py update_weights): vLLM's weights are resumed first, then verl gathers each full
    # tensor in bf16 and copies it through a bucket on the trainer's GPU (bucketed_weight_transfer.py, shared with
    # vLLM by CUDA IPC); the bucket is released and the cache emptied before the KV cache is resumed.
    sync = trainer_phase(
        "weight sync (vLLM weights back, KV cache not yet)",
        {
            "vLLM weights": s.vllm_weights,
            "actor params": s.rollout_params,
            "AdamW state": s.rollout_adam,
            "weight-sync bucket": s.bucket,
            "gathered tensor": s.largest_tensor,
            "CUDA/NCCL": TRAINER_FIXED_GIB + CUDA_CONTEXT_GIB,
        },
        ["actor params", "AdamW state", "weight-sync bucket", "gathered tensor"],
    )
    return [rollout, sync]


def _trainer_phases(s: _Sizes) -> list[Phase]:
    """vLLM asleep: the log-prob passes, the update (forward + backward), the optimizer step."""
    # Log-probs (old, then reference): eval mode loads offloaded params back, not the optimizer state.
    logprob = {"actor params": s.params, "AdamW state": s.rollout_adam, "gathered layers": s.gathered_fwd}
    logprob["activations+logits"] = s.lp_activations
    states = {"actor params": s.params, "grads": s.grads, "AdamW state": s.adam}
    asleep = {"CUDA/NCCL": TRAINER_FIXED_GIB, "vLLM asleep": VLLM_ASLEEP_TOTAL_GIB}
    update = {**states, "gathered layers": s.gathered_bwd, "activations+logits": s.activations}
    step = {**states, "AdamW temp": s.adam_step_tmp}
    return [
        trainer_phase("log-prob (vLLM asleep)", {**logprob, **asleep}, list(logprob)),
        trainer_phase("update (vLLM asleep)", {**update, **asleep}, list(update)),
        trainer_phase("optimizer step", {**step, **asleep}, list(step)),
    ]


def _host_ram(arch: Architecture, exp: dict) -> float:
    """Host RAM per node (GiB): offloaded actor states, the reference model (pinned, its model_dtype), the workers."""
    grpo, verl, per_node = exp["grpo"], exp["verl"], exp["resources"]["gpus_per_node"]
    shards, master, lora = _shards(exp), DTYPE_BYTES[verl["model_dtype"]], grpo["lora"]["rank"]
    P, trainable = arch.params, arch.trainable_params(lora)
    host = HOST_PER_GPU_GIB * per_node
    states_per_gpu = (P * master + 3 * trainable * master) / shards / GIB  # params, grads, 2 moments
    if _offload_policy(verl):
        host += states_per_gpu * per_node
    else:
        host += per_node * (
            (P * master / shards / GIB if verl["param_offload"] else 0)
            + (2 * trainable * master / shards / GIB if verl["optimizer_offload"] else 0)
        )
    if grpo["kl_coef"] > 0 and not lora:  # with LoRA verl takes reference log-probs from the actor without adapters
        ref_dtype = _override(verl, "actor_rollout_ref.ref.fsdp_config.model_dtype", "bf16")
        host += per_node * P * DTYPE_BYTES.get(ref_dtype, 4) / shards / GIB
    return host


def estimate(name: str, exp: dict) -> Breakdown | None:
    """The per-GPU breakdown of a resolved verl experiment; None when its architecture is unknown."""
    arch, source = architecture(exp)
    if arch is None:
        return None
    res = exp["resources"]
    capacity = res["gpu_mem_gb"] * CARD_GIB_PER_GB
    s = _sizes(arch, exp, capacity)
    phases = [*_rollout_phases(s), *_trainer_phases(s)]
    return Breakdown(name, described(arch, source), capacity, phases, _host_ram(arch, exp), res["mem_mb"] * 1e6 / GIB)


# ---- the one-line summary the dry-run shows ----------------------------------------------------------------------


def time_limit_note(exp: dict) -> str:
    f = exp["grpo"]["save_freq"]
    return (
        f"A job killed by its time limit loses up to {f} steps (verl 0.9.1 has no SIGTERM handler; "
        f"it resumes from the last grpo.save_freq = {f} checkpoint)"
    )


def summary(name: str, exp: dict) -> str:
    """What `snakemake -n` and the training log show for an experiment."""
    if exp["backend"] != "verl":
        return f"train {name} with TRL"
    return f"train {name} with verl. {fit_text(estimate(name, exp))}. {time_limit_note(exp)}"


# ---- the same estimate at job start, from verl's own command line ------------------------------------------------


def _hf_architecture(cfg_file) -> dict:
    """The ``architecture:`` sizes from a model's config.json (a multimodal model's ``text_config``)."""
    import json

    hf = json.loads(cfg_file.read_text(encoding="utf-8"))
    hf = hf.get("text_config", hf)
    heads = hf["num_attention_heads"]
    return {
        "hidden_size": hf["hidden_size"],
        "num_layers": hf["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_kv_heads": hf.get("num_key_value_heads", heads),
        "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads,
        "intermediate_size": hf["intermediate_size"],
        "vocab_size": hf["vocab_size"],
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
    }


def _experiment_from_overrides(ov: dict[str, str], arch: dict, gpu_mem_gb: float | None, mem_mb: int | None) -> dict:
    """The parts of a resolved verl experiment the estimate reads, from verl's ``key=value`` overrides (verl's
    defaults where the command leaves a key out)."""

    def get(key, default):
        v = ov.get(key)
        if v is None:
            return default
        if isinstance(default, bool):
            return v.lower() == "true"
        return type(default)(float(v)) if isinstance(default, (int, float)) else v

    dtype = get("actor_rollout_ref.actor.fsdp_config.model_dtype", "fp32")
    return {
        "backend": "verl",
        "architecture": arch,
        "grpo": {
            "max_prompt_length": get("data.max_prompt_length", 512),
            "max_response_length": get("data.max_response_length", 512),
            "temperature": get("actor_rollout_ref.rollout.temperature", 1.0),
            "lora": {"rank": get("actor_rollout_ref.model.lora_rank", 0)},
            "kl_coef": 1.0 if get("actor_rollout_ref.actor.use_kl_loss", False) else 0.0,
            "save_freq": get("trainer.save_freq", -1),
        },
        "verl": {
            "model_dtype": {"float32": "fp32", "bfloat16": "bf16"}.get(dtype, dtype),
            "param_offload": get("actor_rollout_ref.actor.fsdp_config.param_offload", False),
            "optimizer_offload": get("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False),
            "offload_policy": get("actor_rollout_ref.actor.fsdp_config.offload_policy", False),
            "use_dynamic_bsz": get("actor_rollout_ref.actor.use_dynamic_bsz", False),
            "ppo_micro_batch_size_per_gpu": get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1),
            "log_prob_micro_batch_size_per_gpu": get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 1),
            "entropy_coeff": get("actor_rollout_ref.actor.entropy_coeff", 0.0),
            "gradient_checkpointing": get("actor_rollout_ref.model.enable_gradient_checkpointing", True),
            "rollout": {
                "gpu_memory_utilization": get("actor_rollout_ref.rollout.gpu_memory_utilization", 0.5),
                "tensor_model_parallel_size": get("actor_rollout_ref.rollout.tensor_model_parallel_size", 2),
            },
            "extra_overrides": [f"{k}={v}" for k, v in ov.items()],
        },
        "resources": {
            "nodes": get("trainer.nnodes", 1),
            "gpus_per_node": get("trainer.n_gpus_per_node", 8),
            "gpu_mem_gb": gpu_mem_gb or 80,
            "mem_mb": mem_mb or 0,
        },
    }


def from_overrides(ov: dict[str, str], gpu_mem_gb: float | None = None, mem_mb: int | None = None) -> str:
    """The estimate for the verl command the wrapper is about to run (``key=value`` overrides), with the SFT
    model's real config.json and, when given, the GPU and node memory the job sees. For the training log: the
    wrapper has verl's command line, not grpoflow's config."""
    from pathlib import Path

    cfg_file = Path(ov.get("actor_rollout_ref.model.path", "")) / "config.json"
    try:
        arch = _hf_architecture(cfg_file)
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"GPU memory not estimated at job start ({cfg_file}: {err.__class__.__name__})"
    exp = _experiment_from_overrides(ov, arch, gpu_mem_gb, mem_mb)
    b = estimate(ov.get("trainer.experiment_name", "?"), exp)
    line = b.line().replace(", architecture (given)", f", {cfg_file}")
    if not mem_mb:
        line = line.rsplit("; host RAM", 1)[0] + f"; host RAM per node {b.host_needed:.0f} GiB"
    return line


def at_job_start(ov: dict[str, str]) -> str:
    """from_overrides with what this node has: the first GPU's memory (nvidia-smi, in MiB → GB as sold) and the
    job's memory (SLURM_MEM_PER_NODE, MB). Never fails: it only informs the log."""
    import os

    gpu_gb = first_gpu_memory_gb()
    mem = os.environ.get("SLURM_MEM_PER_NODE")
    try:
        text = from_overrides(ov, gpu_gb, int(mem) if mem and mem.isdigit() else None)
    except Exception as err:  # noqa: BLE001 - an estimate must never stop training
        text = f"GPU memory not estimated at job start ({err.__class__.__name__}: {err})"
    return text + ("" if gpu_gb else " (GPU memory taken as 80 GB: nvidia-smi not available)")
