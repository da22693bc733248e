"""Will a Tunix experiment fit in its TPU's memory? A per-chip HBM estimate at config load (arithmetic only, no
JAX import), for a declared ``tunix.tpu``.

It models grpoflow's Tunix run (grpoflow.backends.tunix.runner: Tunix 0.1.7 ``GRPOLearner``, actor, reference and
rollout on one mesh, the vanilla rollout sharing the actor's weights), as read in Tunix 0.1.7's source:

- Sharding (``tunix/models/qwen3/model.py``, ``ShardingConfig.get_default_sharding``): every weight is split over
  both mesh axes, so model states divide by the number of chips; activations split their batch over ``fsdp`` and
  their hidden size, heads and MLP width over ``tp``. A chip holds ``ceil(sequences / fsdp)`` sequences: fewer
  sequences than fsdp shards leave chips holding padding, not less.
- States (always resident): the actor's weights in ``tunix.param_dtype``; AdamW's two moments in the same dtype
  (``optax.adamw`` takes the parameters' dtype); the reference model (``grpo.kl_coef > 0``, no LoRA) in the compute
  dtype, as the runner loads it. With LoRA the frozen start model is the reference and only the adapters train.
- Rollout (``tunix/generate/sampler.py``): the KV cache ``[sequences, prompt + response + 8, kv heads, head dim]``
  per layer for keys and values in the compute dtype, created by ``jnp.zeros`` outside any jit
  (``Sampler.init_sample_state`` → ``Qwen3.init_cache``), i.e. whole on one chip, which is how it is counted; the
  prefill's fp32 logits for every prompt position (``Qwen3.__call__`` returns ``[B, T, vocab]`` in float32). With
  ``tunix.rollout_engine: vllm`` vLLM keeps ``vllm_hbm_utilization`` of every chip.
- Reference log-probs (``rl/common.py`` ``compute_per_token_logps``): a forward pass over prompt + response.
- Update (``rl/algo_core.py`` ``grpo_loss_fn`` under ``sft/peft_trainer.py`` ``_train_step``): forward and backward
  over every sequence of the step at once (grpoflow sets no micro-batch), the gradients in the parameters' dtype, the
  fp32 logits kept for the backward next to their gradient, and per layer what ``tunix.remat`` keeps
  (``RematConfig``: none keeps every activation, block the inputs of the attention and MLP blocks and their
  norms' float32 inputs, decoder only the layer's input) plus one recomputed layer's working set.
- Optimizer step: one weight-sized buffer next to the states and gradients: the new weights. Tunix's ``nnx.jit``
  donates the optimizer (AdamW's moments update in place) but not the model (``sft/peft_trainer.py:421``), so the
  updated weights are written beside the old; clipping and AdamW fuse into that write. XLA:CPU at Qwen3-8B widths:
  19.3 B per weight per layer against the 20 counted here, 149.4 GiB against 152.6 at 36 layers (-2.1 %;
  ``benchmarks/tunix_memory.py --train-step``).
- Weights in the compute dtype while used: with ``param_dtype`` ≠ ``compute_dtype`` (each ``Einsum`` casts its
  weight) or ``fsdp`` > 1 (XLA gathers the weight), two layers and the embeddings/lm_head at a time; without remat
  the casts of every layer are kept for the backward as well.

Activation sizes per token are counted from the model code (``per_token_layer_bytes``); the attention-score and
logit bytes are what XLA's buffer assignment of Tunix's loss + gradient compiled for CPU keeps (at Qwen3-8B's widths:
benchmarks/tunix_memory.py, docs/backends.md). What the estimate cannot know, stated as constants below: libtpu's
reserve, XLA's fusion and scheduling on a TPU (XLA:CPU schedules recomputation early, so remat cannot be checked
there), fragmentation. Nothing here was measured on a TPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpoflow.training.memory import (
    DTYPE_BYTES,
    GIB,
    LAYER_BACKWARD_FACTOR,
    Architecture,
    Breakdown,
    Phase,
    architecture,
    described,
    fit_text,
)


@dataclass(frozen=True)
class Tpu:
    """A single-host TPU VM slice: its chips (JAX devices) and each chip's HBM as sold (GiB)."""

    name: str
    chips: int
    hbm_gib: float

    @property
    def usable_gib(self) -> float:
        return self.hbm_gib - XLA_RESERVED_GIB


# Google Cloud's slice names count TensorCores on v4/v5p (two per chip, one JAX device each: megacore) and chips on
# v5e/v6e. HBM per chip as sold: v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB (cloud.google.com/tpu/docs/v4,
# v5e, v5p, v6e; the same table as vllm-project/tpu-inference's get_device_hbm_limit).
TPUS = {
    t.name: t
    for t in (
        Tpu("v4-8", 4, 32),
        Tpu("v5e-1", 1, 16),
        Tpu("v5e-4", 4, 16),
        Tpu("v5e-8", 8, 16),
        Tpu("v5p-8", 4, 95),
        Tpu("v6e-1", 1, 32),
        Tpu("v6e-4", 4, 32),
        Tpu("v6e-8", 8, 32),
    )
}
# HBM that XLA may not allocate: a v6e chip (32 GiB) reports a limit of 31.25 GiB (33,550,237,696 bytes: vLLM's usage
# stats in vllm-project/vllm#16211; "31.25G hbm" in XLA's out-of-memory message, EnzymeAD/Enzyme-JAX#2422). Taken
# as the same for every generation (not measured on the others).
XLA_RESERVED_GIB = 0.75
# Per chip outside the model: libtpu's program and constants, the sampler's token buffers, metrics. Estimate.
RUNTIME_GIB = 0.5
# Bytes per attention-score element per layer without flash attention, by compute-dtype bytes: the scores, their
# float32 softmax and the probabilities the backward keeps (hand count at bf16: 2 + 4 + 4 + 2 = 12). XLA:CPU's
# buffer assignment of Tunix's loss + gradient keeps 14.9 at bf16 and 12.0 at float32 (benchmarks/tunix_memory.py).
ATTENTION_SCORE_BYTES = {2: 14.9, 4: 12.0}
# Bytes per logit element ([sequences, prompt + response, vocab / tp]) in the update: the float32 logits kept for
# the backward (4), the compute-dtype logits of the lm_head (c) and the logits' float32 gradient (4, padded to the
# whole sequence). XLA:CPU keeps exactly 10 at bf16 (benchmarks/tunix_memory.py). Forward only (reference
# log-probs): the compute-dtype and float32 logits.
LOGIT_BYTES_TRAIN = 8
LOGIT_BYTES_FORWARD = 4


def per_token_layer_bytes(arch: Architecture, c: int) -> int:
    """What one decoder layer of Tunix's Qwen3 keeps for the backward per token, without remat or attention
    scores (``c``: compute-dtype bytes): the two RMSNorms' float32 inputs and compute-dtype outputs, q/k/v, their
    float32 q/k-norm inputs and the rotated q/k, the attention output, and the MLP's gate, up, silu(gate) and product."""
    d, q, kv, f = (
        arch.hidden_size,
        arch.num_attention_heads * arch.head_dim,
        arch.num_kv_heads * arch.head_dim,
        arch.intermediate_size,
    )
    norms = 2 * (4 * d + c * d)
    attention = c * (q + 2 * kv) + 4 * (q + kv) + c * (q + kv) + c * q
    mlp = 4 * c * f
    return norms + attention + mlp


def remat_kept_bytes(arch: Architecture, c: int, remat: str) -> int:
    """What one layer keeps per token between its forward and its backward under ``tunix.remat``."""
    d = arch.hidden_size
    if remat == "decoder":
        return c * d  # the layer's input
    if remat == "block":
        return 2 * (4 * d + c * d)  # the two norms' float32 inputs, the blocks' inputs (the norms' outputs)
    return per_token_layer_bytes(arch, c)


@dataclass
class Estimate(Breakdown):
    """Per-chip HBM of each phase (GiB) for an experiment on a TPU: the shared Breakdown (peak, margin, fits) with
    the TPU and mesh; a TPU VM's host RAM is not modelled (``host_needed`` 0)."""

    tpu: Tpu
    mesh: tuple[int, int]

    capacity_digits = 2  # a v6e chip's 31.25 GiB

    def line(self) -> str:
        return (
            f"HBM per chip on a {self.tpu.name} (mesh fsdp {self.mesh[0]} × tp {self.mesh[1]}; {self.arch}): "
            f"{self.verdict()}"
        )


def mesh_shape(tunix: dict, chips: int) -> tuple[int, int]:
    """(fsdp, tp) on ``chips`` devices (``fsdp: -1`` takes the rest, as the runner's mesh does)."""
    fsdp, tp = tunix["mesh"]["fsdp"], tunix["mesh"]["tp"]
    return (chips // tp if fsdp == -1 else fsdp), tp


# ---- sizes -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """How a step's work lies on the chips: the mesh, the dtypes' bytes, the sequences each chip holds."""

    chips: int
    fsdp: int
    tp: int
    p: int  # param_dtype bytes
    c: int  # compute_dtype bytes
    sequences: int  # of the whole step
    per_chip_seqs: int
    prompt_len: int
    seq_len: int
    vocab_per_chip: float

    @classmethod
    def of(cls, arch: Architecture, exp: dict, tpu: Tpu) -> _Layout:
        grpo, tunix = exp["grpo"], exp["tunix"]
        fsdp, tp = mesh_shape(tunix, tpu.chips)
        sequences = grpo["prompts_per_step"] * grpo["num_generations"]
        return cls(
            chips=tpu.chips,
            fsdp=fsdp,
            tp=tp,
            p=DTYPE_BYTES[tunix["param_dtype"]],
            c=DTYPE_BYTES[tunix["compute_dtype"]],
            sequences=sequences,
            # The batch splits over fsdp; a shard never holds less than one.
            per_chip_seqs=math.ceil(sequences / fsdp),
            prompt_len=grpo["max_prompt_length"],
            seq_len=grpo["max_prompt_length"] + grpo["max_response_length"],
            vocab_per_chip=arch.vocab_size / tp,
        )


def _lora_rank(exp: dict) -> int:
    return (exp["grpo"].get("lora") or {}).get("rank", 0)


def _resident(arch: Architecture, exp: dict, L: _Layout) -> dict[str, float]:
    """The states always on a chip (GiB): the actor's weights and AdamW moments in param_dtype, the reference in the
    compute dtype, LoRA's adapters; every weight split over both mesh axes."""
    lora, P, n, p = _lora_rank(exp), arch.params, L.chips, L.p
    trainable = arch.trainable_params(lora)
    return {
        "actor params": P * p / n / GIB,
        "AdamW state": 2 * trainable * p / n / GIB,
        "reference": P * L.c / n / GIB if exp["grpo"]["kl_coef"] > 0 and not lora else 0.0,
        "LoRA adapters": trainable * p / n / GIB if lora else 0.0,
    }


def _weights_in_use(arch: Architecture, exp: dict, L: _Layout) -> tuple[float, float]:
    """Weights in the compute dtype while a layer runs (cast and/or gathered: two layers, embeddings and lm_head),
    and in the backward the lm_head's and one layer's gradients (GiB)."""
    cast_or_gathered = L.p != L.c or L.fsdp > 1
    working = (arch.root_params + 2 * arch.layer_params) * L.c / L.tp / GIB if cast_or_gathered else 0.0
    layer_grads = (arch.lm_head_params + arch.layer_params) * L.c / L.tp / GIB if not _lora_rank(exp) else 0.0
    return working, layer_grads


def _rollout(arch: Architecture, exp: dict, L: _Layout) -> tuple[float, float]:
    """The vanilla sampler's KV cache (whole, on the first chip) and the prefill's float32 logits (GiB); vLLM's
    are within its share."""
    vanilla = exp["tunix"]["rollout_engine"] == "vanilla"
    kv = L.sequences * (L.seq_len + 8) * arch.num_layers * 2 * arch.num_kv_heads * arch.head_dim * L.c
    return kv / GIB * vanilla, L.per_chip_seqs * L.prompt_len * L.vocab_per_chip * 4 / GIB * vanilla


def _activations(arch: Architecture, exp: dict, L: _Layout) -> tuple[float, float, float]:
    """Per chip (GiB): the update's activations + logits, and a forward-only pass's logits and one layer."""
    tunix, c, tp = exp["tunix"], L.c, L.tp
    tokens = L.per_chip_seqs * L.seq_len
    score_bytes = 0.0 if tunix["flash_attention"] else ATTENTION_SCORE_BYTES[c] * arch.num_attention_heads * L.seq_len
    full_layer = tokens * (per_token_layer_bytes(arch, c) + score_bytes) / tp
    if tunix["remat"] == "none":
        # Without recomputation the backward also needs each layer's weights as its matmuls used them: the
        # compute-dtype casts of float32 weights are kept for every layer (sharded like the weights).
        casts = arch.num_layers * arch.layer_params * c / L.chips if L.p != c else 0
        kept = full_layer * arch.num_layers + casts
        working = full_layer * (LAYER_BACKWARD_FACTOR - 1)
    else:
        kept = tokens * remat_kept_bytes(arch, c, tunix["remat"]) / tp * arch.num_layers
        working = full_layer * LAYER_BACKWARD_FACTOR
    logits_train = L.per_chip_seqs * L.vocab_per_chip * L.seq_len * (LOGIT_BYTES_TRAIN + c)
    logits_forward = L.per_chip_seqs * L.vocab_per_chip * L.seq_len * (LOGIT_BYTES_FORWARD + c) / GIB
    # Backward starts with every kept activation and the logits' gradient; the logits are freed before the last
    # layer's backward, so the two working sets do not overlap.
    return (kept + max(logits_train, working)) / GIB, logits_forward, full_layer / GIB


# ---- phases ------------------------------------------------------------------------------------------------------


def _phases(arch: Architecture, exp: dict, tpu: Tpu, L: _Layout) -> list[Phase]:
    """Rollout, reference log-probs (only with a reference model), update, optimizer step."""
    tunix = exp["tunix"]
    resident = _resident(arch, exp, L)
    grads = arch.trainable_params(_lora_rank(exp)) * L.p / L.chips / GIB
    vllm = tunix["vllm_hbm_utilization"] * tpu.usable_gib if tunix["rollout_engine"] == "vllm" else 0.0
    fixed = {"vLLM (util × HBM)": vllm, "runtime": RUNTIME_GIB}
    weights, layer_grads = _weights_in_use(arch, exp, L)
    kv_cache, prefill_logits = _rollout(arch, exp, L)
    activations, logits_forward, forward_layer = _activations(arch, exp, L)
    rollout = {"weights in use": weights, "KV cache": kv_cache, "prefill logits": prefill_logits}
    reference = {"weights in use": weights, "logits": logits_forward, "activations": forward_layer}
    update = {"grads": grads, "weights in use": weights + layer_grads, "activations+logits": activations}
    phases = [
        Phase("rollout", {**resident, **rollout, **fixed}),
        Phase("reference log-probs", {**resident, **reference, **fixed}),
        Phase("update", {**resident, **update, **fixed}),
        Phase("optimizer step", {**resident, "grads": grads, "step temp": grads, **fixed}),
    ]
    return phases if resident["reference"] else [ph for ph in phases if ph.name != "reference log-probs"]


def estimate(name: str, exp: dict, tpu: Tpu | None = None) -> Estimate | None:
    """The per-chip breakdown of a resolved tunix experiment on ``tpu`` (default its ``tunix.tpu``); None when no
    TPU is declared or the model's architecture is unknown (``architecture:``, or a Qwen3 size in sft.*)."""
    tunix = exp["tunix"]
    tpu = tpu or TPUS.get(tunix.get("tpu") or "")
    arch, source = architecture(exp)
    if tpu is None or arch is None:
        return None
    L = _Layout.of(arch, exp, tpu)
    flash = "on" if tunix["flash_attention"] else "off"
    what = f"{described(arch, source)}, remat {tunix['remat']}, flash attention {flash}"
    phases = _phases(arch, exp, tpu, L)
    return Estimate(name, what, tpu.usable_gib, phases, 0.0, 0.0, tpu, (L.fsdp, L.tp))


# ---- the config-load check and the dry-run line ------------------------------------------------------------------


def check(name: str, exp: dict, fail) -> None:
    """The mesh against the declared TPU, then the memory estimate (unless checks.tpu_memory is false)."""
    tunix = exp["tunix"]
    tpu = TPUS.get(tunix.get("tpu") or "")
    if tpu is None:
        return
    fsdp, tp = tunix["mesh"]["fsdp"], tunix["mesh"]["tp"]
    if (fsdp == -1 and tpu.chips % tp) or (fsdp != -1 and fsdp * tp != tpu.chips):
        shown = "-1" if fsdp == -1 else str(fsdp)
        fail(
            f"tunix.mesh fsdp {shown} × tp {tp} does not cover the {tpu.chips} chips of a {tpu.name} (tunix.tpu): "
            f"use tp dividing {tpu.chips} with fsdp: -1"
        )
    arch, _ = architecture(exp)
    if arch is not None and arch.num_kv_heads % tp:
        fail(
            f"tunix.mesh.tp = {tp} does not divide the model's {arch.num_kv_heads} KV heads ({arch.name}): Tunix's Qwen3 "
            f"shards heads over tp; use a divisor of {arch.num_kv_heads}"
        )
    b = estimate(name, exp, tpu)
    if b is None or b.fits or not exp["checks"]["tpu_memory"]:
        return
    fixes = "; ".join([*knobs(exp, b), "or checks.tpu_memory: false if you know better"])
    fail(f"tunix.tpu = {tpu.name}: {b.refusal('HBM peak per chip', ' + ')}; {fixes}")


def knobs(exp: dict, b: Estimate) -> list[str]:
    """The settings that lower the peak phase, in the order they usually help most."""
    tunix, grpo = exp["tunix"], exp["grpo"]
    out = []
    if b.peak.name == "update":
        if tunix["remat"] != "decoder":
            out.append("tunix.remat: decoder (keep only each layer's input)")
        if not tunix["flash_attention"] and tunix["rollout_engine"] == "vllm":
            out.append("tunix.flash_attention: true (no sequence² attention scores)")
        if b.mesh[1] < b.tpu.chips:
            out.append(f"a larger tunix.mesh.tp (now {b.mesh[1]}: activations and logits split over tp)")
    if not (grpo.get("lora") or {}).get("rank"):
        out.append("grpo.lora (AdamW state for the adapters only)")
    if tunix["rollout_engine"] == "vllm":
        out.append(f"a lower tunix.vllm_hbm_utilization (now {tunix['vllm_hbm_utilization']})")
    larger = [t.name for t in TPUS.values() if t.chips * t.hbm_gib > b.tpu.chips * b.tpu.hbm_gib]
    if larger:
        out.append(f"a TPU with more HBM ({', '.join(larger)})")
    return ["use " + out[0], *out[1:]] if out else []


def summary(name: str, exp: dict) -> str:
    """What `snakemake -n` shows for a tunix experiment."""
    tpu = exp["tunix"].get("tpu")
    if not tpu:
        return f"train {name} with Tunix (no tunix.tpu declared: HBM not checked)"
    return f"train {name} with Tunix on a {tpu}. {fit_text(estimate(name, exp), 'HBM')}"
