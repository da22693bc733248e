"""Will a TRL experiment on GPUs fit? A per-GPU estimate at config load (pure arithmetic, no torch/TRL import),
built like verl's (grpoflow.backends.verl.memory, whose architecture presets and constants it shares).

It models TRL 1.16's GRPOTrainer under DDP (read in .venv/.../trl/trainer/grpo_trainer.py and
trl/generation/vllm_generation.py):

- Every training process holds a full replica: the weights in ``trl.param_dtype`` (fp32 masters for a full
  fine-tune, the model's bf16 for a LoRA run's frozen base; PEFT keeps the adapter in fp32), gradients and two
  AdamW moments of the trainable parameters in the masters' dtype, and DDP's gradient buckets (one more copy of
  the gradients) when there is more than one process.
- The reference model: TRL loads a second copy (same ``model_init_kwargs``) when ``beta > 0`` and the model is
  not a PEFT model (grpo_trainer.py: ``ref_model = None`` when beta is 0 or with PEFT, whose reference is the
  policy with its adapter disabled).
- vLLM colocate: each process starts its own engine (``VLLMGeneration``, ``distributed_executor_backend=
  "external_launcher"``) that reserves ``gpu_memory_utilization × total memory`` at start and keeps it (sleep mode
  is off), plus CUDA graphs outside that share (docs: NOTES on vLLM; taken as VLLM_OUTSIDE_GIB).
- Activations: gradient checkpointing (on for GPUs) keeps each layer's input until its backward, plus one
  recomputed layer's working set; logits of the completion tokens (``logits_to_keep``) in bf16, a temperature-
  scaled copy, and the fp32 log-softmax/entropy TRL computes for every token (LOGIT_BYTES_TRL). Tokens per
  micro-batch are the worst case: ``completions_per_device_batch × (max_prompt_length + max_response_length)``.

What it cannot know (CUDA context, NCCL buffers, allocator fragmentation) takes verl's stated constants; nothing
here was measured on a GPU (none here).
"""

from __future__ import annotations

from grpoflow.backends.verl.memory import (
    CARD_GIB_PER_GB,
    CUDA_CONTEXT_GIB,
    FRAGMENTATION,
    GIB,
    LAYER_BACKWARD_FACTOR,
    NCCL_GIB,
    Breakdown,
    Phase,
    architecture,
)

# bf16 logits (2) + the temperature-scaled copy (2) + fp32 log-softmax / entropy over the vocabulary (4).
LOGIT_BYTES_TRL = 8
# vLLM memory outside gpu_memory_utilization (CUDA graphs, its allocator's leftovers): NOTES-cluster-deployment.md
# gives 1-4 GiB; the low end for the small models TRL runs here.
VLLM_OUTSIDE_GIB = 1.0
# Host RAM per training process (torch + CUDA libraries, the dataloader, the reward); estimate.
HOST_PER_PROCESS_GIB = 12.0
LORA_DTYPE_BYTES = 4  # PEFT casts adapter weights to fp32 (autocast_adapter_dtype)


def master_bytes(exp: dict) -> int:
    """Bytes per weight as loaded (trl.param_dtype auto: fp32 for a full fine-tune, bf16 for a LoRA base)."""
    dtype, lora = exp["trl"]["param_dtype"], exp["grpo"]["lora"]["rank"]
    if dtype == "auto":
        return 2 if lora else 4
    return 4 if dtype == "float32" else 2


def estimate(name: str, exp: dict, processes: int, micro: int, vllm_mode: str) -> Breakdown | None:
    """Per-GPU breakdown of a TRL experiment on GPUs (``processes``: training processes, ``micro``: completions per
    forward/backward micro-batch, ``vllm_mode``: none|colocate); None when its architecture is unknown."""
    arch, source = architecture(exp)
    if arch is None:
        return None
    grpo, trl, res = exp["grpo"], exp["trl"], exp["resources"]
    capacity = res["gpu_mem_gb"] * CARD_GIB_PER_GB
    lora = grpo["lora"]["rank"]
    P = arch.params
    # With LoRA the trained parameters are the adapters (on all linear layers: the upper bound of target_modules).
    trainable = arch.lora_params(lora) if lora else P
    wbytes = master_bytes(exp)
    tbytes = LORA_DTYPE_BYTES if lora else wbytes

    params = (P * wbytes + (trainable * tbytes if lora else 0)) / GIB
    grads = trainable * tbytes / GIB
    adam = 2 * trainable * tbytes / GIB
    ddp = grads if processes > 1 else 0.0
    reference = P * wbytes / GIB if grpo["kl_coef"] > 0 and not lora else 0.0

    tokens = micro * (grpo["max_prompt_length"] + grpo["max_response_length"])
    completion_tokens = micro * grpo["max_response_length"]
    logits = completion_tokens * arch.vocab_size * LOGIT_BYTES_TRL / GIB
    layer_act = arch.layer_activation_bytes_per_token()
    kept = tokens * arch.hidden_size * 2 * arch.num_layers / GIB  # gradient checkpointing: each layer's input
    working = tokens * layer_act * LAYER_BACKWARD_FACTOR / GIB
    activations = kept + max(logits, working)

    fixed = CUDA_CONTEXT_GIB + (NCCL_GIB if processes > 1 else 0.0)
    vllm = trl["vllm"]["gpu_memory_utilization"] * capacity + VLLM_OUTSIDE_GIB if vllm_mode == "colocate" else 0.0

    def phase(label: str, terms: dict[str, float], trainer: list[str]) -> Phase:
        p = Phase(label, terms)
        p.terms["fragmentation"] = FRAGMENTATION * sum(terms[k] for k in trainer)
        return p

    states = ["weights", "grads", "AdamW state", "DDP buckets", "reference"]
    update = phase(
        "update (forward + backward)",
        {
            "weights": params,
            "grads": grads,
            "AdamW state": adam,
            "DDP buckets": ddp,
            "reference": reference,
            "activations+logits": activations,
            "vLLM (util × memory + graphs)": vllm,
            "CUDA/NCCL": fixed,
        },
        states + ["activations+logits"],
    )
    step = phase(
        "optimizer step",
        {
            "weights": params,
            "grads": grads,
            "AdamW state": adam,
            "AdamW temp": grads,
            "DDP buckets": ddp,
            "reference": reference,
            "vLLM (util × memory + graphs)": vllm,
            "CUDA/NCCL": fixed,
        },
        states + ["AdamW temp"],
    )
    return Breakdown(
        name,
        f"{arch.name}, {P / 1e9:.2f} B params, {source}",
        capacity,
        [update, step],
        HOST_PER_PROCESS_GIB * processes,
        res["mem_mb"] * 1e6 / GIB,
    )
