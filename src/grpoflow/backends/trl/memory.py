"""Will a TRL experiment on GPUs fit? A per-GPU estimate at config load (pure arithmetic, no torch/TRL import),
over the shared memory model (grpoflow.training.memory: architectures, phases, the verdict, the GPU constants).

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
  recomputed layer's working set. Tokens per micro-batch are the worst case: ``completions_per_device_batch ×
  (max_prompt_length + max_response_length)``.
- The LM head never materialises the ``[tokens, vocab]`` logits: TRL 1.16 patches the model with a fused head
  (grpo_trainer.py:1066-1076 ``add_fused_lm_head``; every log-prob call passes ``fused_lm_head=True``,
  grpo_trainer.py:1497-1498) that projects the scored positions in tiles of at most TOKEN_CHUNK_SIZE tokens ×
  ``_CHUNKED_LOGPROB_CHUNK_SIZE`` vocabulary entries into one reused buffer (trl/kernels/chunked_logprob.py:347-356,
  trl/trainer/utils.py:1506 and 1644-1654). What it holds is ``lm_head_bytes`` below; it does not grow with the
  vocabulary and grows with the tokens only through the hidden states and a few fp32 numbers per token.

What it cannot know (CUDA context, NCCL buffers, allocator fragmentation) takes the shared model's stated
constants; nothing here was measured on a GPU (none here).
"""

from __future__ import annotations

from grpoflow.training.memory import (
    CARD_GIB_PER_GB,
    CUDA_CONTEXT_GIB,
    GIB,
    NCCL_GIB,
    Architecture,
    Breakdown,
    Phase,
    architecture,
    checkpointed_activations,
    described,
    trainer_phase,
)

# TRL 1.16's fused LM head (trl/kernels/chunked_logprob.py:31 TOKEN_CHUNK_SIZE; trl/trainer/utils.py:1506
# _CHUNKED_LOGPROB_CHUNK_SIZE): one [4096, 32768] tile buffer in the compute dtype, whatever the vocabulary.
# Checked on CPU (TRL's own ChunkedLogProbFunction, forward + backward, H 256, V 65,536, fp32): peak RSS grew by
# 4,910 MiB at 4,096 tokens and 4,923 MiB at 16,384 (full logits: 1,024 and 4,096 MiB), i.e. flat in the tokens;
# the CPU fallback's torch ops hold ~10 tile-sized temporaries where the GPU's Triton kernel folds in place.
LM_HEAD_TOKEN_CHUNK = 4096
LM_HEAD_VOCAB_CHUNK = 32768
# fp32 vectors of one number per scored token: chunked_logprob.py:340-346 (7 running statistics) + log-prob and
# entropy out (378-380) + their fp32 incoming gradients in backward (414-415).
LM_HEAD_FP32_PER_TOKEN = 11
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


def lm_head_bytes(tokens: int, hidden: int, vocab: int, full_finetune: bool, compute_bytes: int = 2) -> int:
    """Bytes TRL 1.16's fused LM head adds at its peak (the backward) for ``tokens`` scored positions, bf16 autocast.

    - the tile buffer, reallocated in backward: ``min(tokens, 4096) × min(vocab, 32768)`` in the compute dtype
      (chunked_logprob.py:347 forward, 413 backward; the forward's is freed by then);
    - the scored hidden states gathered into a new tensor (``hidden_states[mask]``, utils.py:1646) and saved for
      backward (chunked_logprob.py:386), in the compute dtype, and their gradient accumulated in fp32
      (chunked_logprob.py:406-408);
    - the per-token fp32 statistics (LM_HEAD_FP32_PER_TOKEN);
    - a full fine-tune trains the head: its fp32 gradient accumulator ``[vocab, hidden]`` (chunked_logprob.py:409-411)
      and, with fp32 masters, a compute-dtype copy of one vocabulary tile of the weight (423).
    """
    tile = min(tokens, LM_HEAD_TOKEN_CHUNK) * min(vocab, LM_HEAD_VOCAB_CHUNK) * compute_bytes
    per_token = tokens * (hidden * (compute_bytes + 4) + LM_HEAD_FP32_PER_TOKEN * 4)
    head_grad = vocab * hidden * 4 + min(vocab, LM_HEAD_VOCAB_CHUNK) * hidden * compute_bytes if full_finetune else 0
    return tile + per_token + head_grad


def _states(arch: Architecture, exp: dict, processes: int) -> dict[str, float]:
    """What every training process holds for the whole run (GiB): a full replica's weights, gradients and AdamW
    moments of the trained parameters, DDP's gradient buckets, the reference model."""
    grpo, P = exp["grpo"], arch.params
    lora = grpo["lora"]["rank"]
    # With LoRA the trained parameters are the adapters (on all linear layers: the upper bound of target_modules).
    trainable = arch.trainable_params(lora)
    wbytes = master_bytes(exp)
    tbytes = LORA_DTYPE_BYTES if lora else wbytes
    grads = trainable * tbytes / GIB
    return {
        "weights": (P * wbytes + (trainable * tbytes if lora else 0)) / GIB,
        "grads": grads,
        "AdamW state": 2 * trainable * tbytes / GIB,
        "DDP buckets": grads if processes > 1 else 0.0,
        "reference": P * wbytes / GIB if grpo["kl_coef"] > 0 and not lora else 0.0,
    }


def _activations(arch: Architecture, exp: dict, micro: int) -> float:
    """Activations + the fused LM head of one micro-batch's forward + backward (GiB), gradient checkpointing on."""
    grpo = exp["grpo"]
    tokens = micro * (grpo["max_prompt_length"] + grpo["max_response_length"])
    # Only the completion tokens are scored (labels -100 elsewhere, grpo_trainer.py:1494-1496).
    completion_tokens = micro * grpo["max_response_length"]
    logits = lm_head_bytes(completion_tokens, arch.hidden_size, arch.vocab_size, not grpo["lora"]["rank"]) / GIB
    kept, working = checkpointed_activations(arch, tokens)
    # The head's backward runs before the layers' recomputation, so its working set and one layer's never coexist.
    return kept + max(logits, working)


def _phases(states: dict[str, float], activations: float, outside: dict[str, float]) -> list[Phase]:
    """The update (forward + backward) and the optimizer step; ``outside``: vLLM and the fixed costs."""
    update = trainer_phase(
        "update (forward + backward)",
        {**states, "activations+LM head": activations, **outside},
        [*states, "activations+LM head"],
    )
    step = trainer_phase(
        "optimizer step",
        {
            "weights": states["weights"],
            "grads": states["grads"],
            "AdamW state": states["AdamW state"],
            "AdamW temp": states["grads"],
            "DDP buckets": states["DDP buckets"],
            "reference": states["reference"],
            **outside,
        },
        [*states, "AdamW temp"],
    )
    return [update, step]


def estimate(name: str, exp: dict, processes: int, micro: int, vllm_mode: str) -> Breakdown | None:
    """Per-GPU breakdown of a TRL experiment on GPUs (``processes``: training processes, ``micro``: completions per
    forward/backward micro-batch, ``vllm_mode``: none|colocate); None when its architecture is unknown."""
    arch, source = architecture(exp)
    if arch is None:
        return None
    trl, res = exp["trl"], exp["resources"]
    capacity = res["gpu_mem_gb"] * CARD_GIB_PER_GB
    vllm = trl["vllm"]["gpu_memory_utilization"] * capacity + VLLM_OUTSIDE_GIB if vllm_mode == "colocate" else 0.0
    outside = {
        "vLLM (util × memory + graphs)": vllm,
        "CUDA/NCCL": CUDA_CONTEXT_GIB + (NCCL_GIB if processes > 1 else 0.0),
    }
    phases = _phases(_states(arch, exp, processes), _activations(arch, exp, micro), outside)
    return Breakdown(
        name,
        described(arch, source),
        capacity,
        phases,
        HOST_PER_PROCESS_GIB * processes,
        res["mem_mb"] * 1e6 / GIB,
    )
