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

What it cannot know (stated constants below): CUDA contexts, NCCL buffers, what vLLM keeps while asleep,
allocator fragmentation. They were not measured here (no GPU); each says where its value comes from. The
calibration against verl's own published configurations is in tests/backends/verl/test_memory.py and docs/cluster.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

GIB = 1024**3

# The memory CUDA reports for a card sold as N GB: an H100 80GB reports 81559 MiB (79.65 GiB), an H200 141GB
# 143771 MiB; an A100 80GB reports 81920 MiB, so the H100's ratio is the conservative one.
CARD_GIB_PER_GB = 81559 / 1024 / 80

# Fixed per-GPU costs (estimates, not measured here). A CUDA context with torch's kernels loaded lazily is about
# 0.5 GiB on Hopper; there are two processes per GPU (verl's trainer worker and the vLLM worker). NCCL's buffers
# for FSDP's all-gather/reduce-scatter rings (4 MiB per channel and peer, up to 32 channels) are taken as 1 GiB.
# Asleep, vLLM frees only what its CuMemAllocator tagged (weights, KV cache): CUDA graphs, its TP communicators
# and allocator leftovers stay, taken as 1 GiB.
CUDA_CONTEXT_GIB = 0.5
NCCL_GIB = 1.0
VLLM_ASLEEP_GIB = 1.0
# PyTorch's caching allocator never packs perfectly; 5% of what the trainer allocates is kept as headroom.
FRAGMENTATION = 0.05
# verl hands weights to vLLM in buckets of checkpoint_engine.update_weights_bucket_megabytes (0.9.1 default 2048).
WEIGHT_SYNC_BUCKET_MB = 2048
# Bytes per logit element while training: bf16 logits (2); + 2 for the temperature-scaled copy when T != 1;
# + 6 when an entropy term is trained (its softmax kept for backward, and flash-attn's cross entropy no longer
# writes its gradient in place). Forward-only log-probs: bf16 logits + 4 for the entropy verl logs.
LOGIT_BYTES = 2
LOGIT_BYTES_TEMPERATURE = 2
LOGIT_BYTES_ENTROPY_TRAIN = 6
LOGIT_BYTES_ENTROPY_FORWARD = 4
# One recomputed layer's backward: its saved activations plus the gradients in flight (about half as much
# again: the MLP's two intermediate-wide gradients next to its four saved intermediate-wide tensors).
LAYER_BACKWARD_FACTOR = 1.5
# Host RAM per GPU outside the model states: a trainer worker and a vLLM worker (torch + CUDA libraries, Ray),
# the dataloader and reward workers' share. Estimate.
HOST_PER_GPU_GIB = 12.0
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Architecture:
    """What the estimate needs from the model's config.json."""

    name: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + 2 * self.head_dim  # q, k, v, o (+ Qwen3's q/k norms)
        return attn + 3 * h * self.intermediate_size + 2 * h  # SwiGLU MLP, two RMSNorms

    @property
    def root_params(self) -> int:
        """Embeddings (+ lm_head when untied) and the final norm: FSDP2's root unit."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    @property
    def params(self) -> int:
        return self.num_layers * self.layer_params + self.root_params

    def lora_params(self, rank: int) -> int:
        """Trainable LoRA parameters on all linear layers (verl's target_modules: all-linear)."""
        h, q, kv, i = (
            self.hidden_size,
            self.num_attention_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
            self.intermediate_size,
        )
        shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
        return self.num_layers * sum(rank * (a + b) for a, b in shapes)

    def layer_activation_bytes_per_token(self) -> int:
        """bf16 tensors one decoder layer saves for backward, per token (flash attention: no seq² term):
        norms 2×2h, q/k/v and attention output, o-proj input/output, SwiGLU gate/up/act/product (4 × 2I)."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return 2 * (2 * h + h + q + 2 * kv + q + h + 4 * self.intermediate_size)


# Qwen3 dense models, from their config.json on the Hugging Face Hub (Qwen/Qwen3-*): hidden_size,
# num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
# tie_word_embeddings.
PRESETS = {
    "qwen3-0.6b": Architecture("qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, True),
    "qwen3-1.7b": Architecture("qwen3-1.7b", 2048, 28, 16, 8, 128, 6144, 151936, True),
    "qwen3-4b": Architecture("qwen3-4b", 2560, 36, 32, 8, 128, 9728, 151936, True),
    "qwen3-8b": Architecture("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, False),
    "qwen3-14b": Architecture("qwen3-14b", 5120, 40, 40, 8, 128, 17408, 151936, False),
    "qwen3-32b": Architecture("qwen3-32b", 5120, 64, 64, 8, 128, 25600, 151936, False),
}
_PRESET_IN_NAME = re.compile(r"qwen3[-_.]?(0\.6|1\.7|4|8|14|32)b(?![\d.])", re.I)


def architecture(exp: dict) -> tuple[Architecture | None, str]:
    """The experiment's architecture and where it came from: ``architecture:`` (a preset name or the sizes), else
    a Qwen3 size named in sft.model / sft.run_dir / sft.name (e.g. /models/qwen3-32b-sft). None when unknown."""
    arch = exp.get("architecture")
    if isinstance(arch, str):
        return PRESETS[arch], f"architecture: {arch}"
    if isinstance(arch, dict):
        return Architecture(name="custom", **arch), "architecture (given)"
    sft = exp.get("sft") or {}
    for key in ("model", "run_dir", "name"):
        m = _PRESET_IN_NAME.search(str(sft.get(key) or ""))
        if m:
            preset = f"qwen3-{m.group(1)}b"
            return PRESETS[preset], f"{preset} from sft.{key}"
    return None, ""


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


@dataclass
class Phase:
    name: str
    terms: dict[str, float] = field(default_factory=dict)  # GiB

    @property
    def total(self) -> float:
        return sum(self.terms.values())


@dataclass
class Breakdown:
    """Per-GPU memory of the peak phase, and the node's host RAM, in GiB."""

    experiment: str
    arch: str
    capacity: float
    phases: list[Phase]
    host_needed: float
    host_capacity: float

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def margin(self) -> float:
        return self.capacity - self.peak.total

    @property
    def fits(self) -> bool:
        return self.margin >= 0

    @property
    def host_fits(self) -> bool:
        return self.host_needed <= self.host_capacity

    def line(self) -> str:
        p = self.peak
        terms = " + ".join(f"{k} {v:.1f}" for k, v in p.terms.items() if v >= 0.05)
        others = ", ".join(f"{q.name} {q.total:.1f}" for q in self.phases if q is not p)
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (
            f"GPU memory per GPU ({self.arch}): peak at {p.name}: {terms} = {p.total:.1f} GiB of {self.capacity:.1f}, "
            f"margin {self.margin:+.1f} GiB, {verdict} (other phases: {others}); host RAM per node {self.host_needed:.0f} of {self.host_capacity:.0f} GiB"
        )


def estimate(name: str, exp: dict) -> Breakdown | None:
    """The per-GPU breakdown of a resolved verl experiment; None when its architecture is unknown."""
    arch, source = architecture(exp)
    if arch is None:
        return None
    grpo, verl, res = exp["grpo"], exp["verl"], exp["resources"]
    rollout = verl["rollout"]
    gpus = res["nodes"] * res["gpus_per_node"]
    capacity = res["gpu_mem_gb"] * CARD_GIB_PER_GB
    fsdp_size = _override(verl, "actor_rollout_ref.actor.fsdp_config.fsdp_size", -1)
    shards = gpus if fsdp_size in (-1, 0) else min(fsdp_size, gpus)
    master = DTYPE_BYTES[verl["model_dtype"]]
    offload_policy = verl.get("offload_policy", False) or _override(
        verl, "actor_rollout_ref.actor.fsdp_config.offload_policy", False
    )
    lora = grpo["lora"]["rank"]
    P = arch.params
    trainable = arch.lora_params(lora) if lora else P
    seq = grpo["max_prompt_length"] + grpo["max_response_length"]

    # Model states per GPU (GiB). With offload_policy FSDP2 keeps them on the host for the whole run.
    on_gpu = 0.0 if offload_policy else 1.0
    params = on_gpu * P * master / shards / GIB
    grads = on_gpu * trainable * master / shards / GIB
    adam = on_gpu * 2 * trainable * master / shards / GIB
    adam_step_tmp = on_gpu * trainable * master / shards / GIB
    # Gathered FSDP units in bf16: the root (kept through forward and backward) and two decoder layers (the one
    # computing, the one prefetched); in backward also the lm_head's and one layer's unsharded bf16 gradients.
    # With LoRA the frozen base needs no gradients.
    lm_head = arch.vocab_size * arch.hidden_size if not arch.tie_word_embeddings else 0
    gathered_fwd = (arch.root_params + 2 * arch.layer_params) * 2 / GIB
    gathered_bwd = gathered_fwd + (0 if lora else (lm_head + arch.layer_params) * 2 / GIB)

    # Tokens per micro-batch, worst case.
    dyn = verl["use_dynamic_bsz"]
    max_tok = _override(verl, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", 16384)
    train_tokens = max(max_tok, seq) if dyn else verl["ppo_micro_batch_size_per_gpu"] * seq
    lp_dyn = _override(verl, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False)
    lp_tok = _override(verl, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", max_tok)
    lp_tokens = max(lp_tok, seq) if lp_dyn else verl["log_prob_micro_batch_size_per_gpu"] * seq
    sp = _override(verl, "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", 1)
    train_tokens, lp_tokens = train_tokens / sp, lp_tokens / sp

    temp = LOGIT_BYTES_TEMPERATURE if grpo["temperature"] != 1.0 else 0
    entropy = LOGIT_BYTES_ENTROPY_TRAIN if verl["entropy_coeff"] else 0
    logits_train = train_tokens * arch.vocab_size * (LOGIT_BYTES + temp + entropy) / GIB
    logits_lp = lp_tokens * arch.vocab_size * (LOGIT_BYTES + temp + LOGIT_BYTES_ENTROPY_FORWARD) / GIB
    layer_act = arch.layer_activation_bytes_per_token()
    if verl["gradient_checkpointing"]:
        kept = train_tokens * arch.hidden_size * 2 * arch.num_layers / GIB
        working = train_tokens * layer_act * LAYER_BACKWARD_FACTOR / GIB
    else:
        kept = train_tokens * layer_act * arch.num_layers / GIB
        working = train_tokens * layer_act * (LAYER_BACKWARD_FACTOR - 1) / GIB
    # Backward starts with every checkpoint alive and the logits' gradient; the logits are freed before the
    # first recomputed layer, so the two working sets do not overlap.
    activations = kept + max(logits_train, working)
    lp_activations = max(logits_lp, lp_tokens * layer_act / GIB)

    fixed_trainer = CUDA_CONTEXT_GIB + NCCL_GIB
    vllm_awake = rollout["gpu_memory_utilization"] * capacity
    vllm_asleep = CUDA_CONTEXT_GIB + VLLM_ASLEEP_GIB
    bucket = (
        _override(
            verl, "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", WEIGHT_SYNC_BUCKET_MB
        )
        / 1024
    )

    def with_frag(phase: Phase, trainer_keys: list[str]) -> Phase:
        phase.terms["fragmentation"] = FRAGMENTATION * sum(phase.terms[k] for k in trainer_keys)
        return phase

    # Rollout, vLLM awake: params stay unless param_offload; AdamW state unless optimizer_offload; grads are freed
    # (zero_grad on leaving train mode).
    r_params = 0.0 if verl["param_offload"] else params
    r_adam = 0.0 if verl["optimizer_offload"] else adam
    rollout_phase = with_frag(
        Phase(
            "rollout (vLLM awake, from step 2)",
            {
                "vLLM (util × memory)": vllm_awake,
                "actor params": r_params,
                "AdamW state": r_adam,
                "CUDA/NCCL": fixed_trainer + CUDA_CONTEXT_GIB,
            },
        ),
        ["actor params", "AdamW state"],
    )
    # Weight sync (engine_workers.py update_weights): vLLM's weights are resumed first, then verl gathers each full
    # tensor in bf16 and copies it through a bucket on the trainer's GPU (bucketed_weight_transfer.py, shared with
    # vLLM by CUDA IPC); the bucket is released and the cache emptied before the KV cache is resumed.
    largest_tensor = max(arch.vocab_size * arch.hidden_size, arch.hidden_size * arch.intermediate_size) * 2 / GIB
    sync_phase = with_frag(
        Phase(
            "weight sync (vLLM weights back, KV cache not yet)",
            {
                "vLLM weights": P * 2 / rollout["tensor_model_parallel_size"] / GIB,
                "actor params": r_params,
                "AdamW state": r_adam,
                "weight-sync bucket": bucket,
                "gathered tensor": largest_tensor,
                "CUDA/NCCL": fixed_trainer + CUDA_CONTEXT_GIB,
            },
        ),
        ["actor params", "AdamW state", "weight-sync bucket", "gathered tensor"],
    )
    # Log-probs (old, then reference): eval mode loads offloaded params back, not the optimizer state.
    logprob_phase = with_frag(
        Phase(
            "log-prob (vLLM asleep)",
            {
                "actor params": params,
                "AdamW state": r_adam,
                "gathered layers": gathered_fwd,
                "activations+logits": lp_activations,
                "CUDA/NCCL": fixed_trainer,
                "vLLM asleep": vllm_asleep,
            },
        ),
        ["actor params", "AdamW state", "gathered layers", "activations+logits"],
    )
    update_phase = with_frag(
        Phase(
            "update (vLLM asleep)",
            {
                "actor params": params,
                "grads": grads,
                "AdamW state": adam,
                "gathered layers": gathered_bwd,
                "activations+logits": activations,
                "CUDA/NCCL": fixed_trainer,
                "vLLM asleep": vllm_asleep,
            },
        ),
        ["actor params", "grads", "AdamW state", "gathered layers", "activations+logits"],
    )
    step_phase = with_frag(
        Phase(
            "optimizer step",
            {
                "actor params": params,
                "grads": grads,
                "AdamW state": adam,
                "AdamW temp": adam_step_tmp,
                "CUDA/NCCL": fixed_trainer,
                "vLLM asleep": vllm_asleep,
            },
        ),
        ["actor params", "grads", "AdamW state", "AdamW temp"],
    )

    # Host RAM per node: offloaded actor states, the reference model (pinned, its model_dtype), fixed per GPU.
    per_node = res["gpus_per_node"]
    host = HOST_PER_GPU_GIB * per_node
    states_per_gpu = (P * master + 3 * trainable * master) / shards / GIB  # params, grads, 2 moments
    if offload_policy:
        host += states_per_gpu * per_node
    else:
        host += per_node * (
            (P * master / shards / GIB if verl["param_offload"] else 0)
            + (2 * trainable * master / shards / GIB if verl["optimizer_offload"] else 0)
        )
    if grpo["kl_coef"] > 0 and not lora:  # with LoRA verl takes reference log-probs from the actor without adapters
        ref_dtype = _override(verl, "actor_rollout_ref.ref.fsdp_config.model_dtype", "bf16")
        host += per_node * P * DTYPE_BYTES.get(ref_dtype, 4) / shards / GIB
    return Breakdown(
        name,
        f"{arch.name}, {P / 1e9:.2f} B params, {source}",
        capacity,
        [rollout_phase, sync_phase, logprob_phase, update_phase, step_phase],
        host,
        res["mem_mb"] * 1e6 / GIB,
    )


# ---- numerics ---------------------------------------------------------------------------------------------------

# A typical Qwen linear weight: initialised N(0, 0.02²) and of about that size after pre-training; its mean |w| is
# 0.02·√(2/π) ≈ 0.016.
TYPICAL_WEIGHT = 0.016
BF16_MANTISSA_BITS = 7  # explicit bits; 8 significant bits


def bf16_half_spacing(w: float) -> float:
    """Half the distance between adjacent bf16 values at |w|: an update smaller than this rounds back to w."""
    return 2.0 ** (math.floor(math.log2(abs(w))) - BF16_MANTISSA_BITS) / 2


def bf16_update_lost(lr: float, w: float = TYPICAL_WEIGHT) -> bool:
    """True when an AdamW step (about lr in size: Adam normalises the gradient) is rounded away at |w|."""
    return lr < bf16_half_spacing(w)


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
    b = estimate(name, exp)
    fit = (
        b.line() if b else "GPU memory not checked: set architecture (a Qwen3 preset or the model's sizes) to check it"
    )
    return f"train {name} with verl. {fit}. {time_limit_note(exp)}"


# ---- the same estimate at job start, from verl's own command line ------------------------------------------------


def from_overrides(ov: dict[str, str], gpu_mem_gb: float | None = None, mem_mb: int | None = None) -> str:
    """The estimate for the verl command the wrapper is about to run (``key=value`` overrides), with the SFT
    model's real config.json and, when given, the GPU and node memory the job sees. For the training log: the
    wrapper has verl's command line, not grpoflow's config."""
    import json
    from pathlib import Path

    cfg_file = Path(ov.get("actor_rollout_ref.model.path", "")) / "config.json"
    try:
        hf = json.loads(cfg_file.read_text(encoding="utf-8"))
        hf = hf.get("text_config", hf)
        heads = hf["num_attention_heads"]
        arch = {
            "hidden_size": hf["hidden_size"],
            "num_layers": hf["num_hidden_layers"],
            "num_attention_heads": heads,
            "num_kv_heads": hf.get("num_key_value_heads", heads),
            "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads,
            "intermediate_size": hf["intermediate_size"],
            "vocab_size": hf["vocab_size"],
            "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
        }
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"GPU memory not estimated at job start ({cfg_file}: {err.__class__.__name__})"

    def get(key, default):
        v = ov.get(key)
        if v is None:
            return default
        if isinstance(default, bool):
            return v.lower() == "true"
        return type(default)(float(v)) if isinstance(default, (int, float)) else v

    dtype = get("actor_rollout_ref.actor.fsdp_config.model_dtype", "fp32")
    exp = {
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
    b = estimate(ov.get("trainer.experiment_name", "?"), exp)
    line = b.line().replace(", architecture (given)", f", {cfg_file}")
    if not mem_mb:
        line = line.rsplit("; host RAM", 1)[0] + f"; host RAM per node {b.host_needed:.0f} GiB"
    return line


def at_job_start(ov: dict[str, str]) -> str:
    """from_overrides with what this node has: the first GPU's memory (nvidia-smi, in MiB → GB as sold) and the
    job's memory (SLURM_MEM_PER_NODE, MB). Never fails: it only informs the log."""
    import os
    import subprocess

    gpu_gb = None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.split()
        gpu_gb = float(out[0]) / 1024 / CARD_GIB_PER_GB if out else None
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    mem = os.environ.get("SLURM_MEM_PER_NODE")
    try:
        text = from_overrides(ov, gpu_gb, int(mem) if mem and mem.isdigit() else None)
    except Exception as err:  # noqa: BLE001 - an estimate must never stop training
        text = f"GPU memory not estimated at job start ({err.__class__.__name__}: {err})"
    return text + ("" if gpu_gb else " (GPU memory taken as 80 GB: nvidia-smi not available)")
