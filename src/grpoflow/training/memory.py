"""The memory model every backend's fit check is built on: sizes → phases → verdict (pure arithmetic, no trainer
import, nothing backend-specific).

- Sizes: the model's architecture (``architecture``: a Qwen3 preset, the sizes given, or a Qwen3 size named in the
  SFT model's path) and the bytes of each dtype.
- Phases: a phase is what the device holds at one point of a step, as named terms (GiB) that sum to its total; a
  trainer's allocator overhead is a ``fragmentation`` term over the terms it allocates.
- Verdict: the peak phase against the device's memory (``Breakdown``: peak, margin, fits; a node's host RAM),
  and the texts every backend shows: the dry-run line, the refusal's "peak at … is … of …", "not checked".

What each backend's trainer holds in each phase is in ``backends/<name>/memory.py``, with the source lines it was
read from. The GPU constants below (what CUDA reports for a card, its context, NCCL, fragmentation) are shared by
the GPU backends; they were not measured here (no GPU), each says where its value comes from.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass, field

GIB = 1024**3
# How the Qwen3 presets' weights are published on the Hub (their config.json torch_dtype: bfloat16): the size of a
# Hub download, and the dtype a merge saves in when it keeps the start's.
HUB_WEIGHT_BYTES = 2
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "float32": 4, "bfloat16": 2, "float16": 2}

# One recomputed layer's backward: its saved activations plus the gradients in flight (about half as much
# again: the MLP's two intermediate-wide gradients next to its four saved intermediate-wide tensors).
LAYER_BACKWARD_FACTOR = 1.5

# ---- a GPU: what CUDA reports and what every process on it costs -------------------------------------------------

# The memory CUDA reports for a card sold as N GB: an H100 80GB reports 81559 MiB (79.65 GiB), an H200 141GB
# 143771 MiB; an A100 80GB reports 81920 MiB, so the H100's ratio is the conservative one.
CARD_GIB_PER_GB = 81559 / 1024 / 80
# Fixed per-GPU costs (estimates, not measured here). A CUDA context with torch's kernels loaded lazily is about
# 0.5 GiB on Hopper. NCCL's buffers for FSDP's all-gather/reduce-scatter rings or DDP's all-reduce (4 MiB per
# channel and peer, up to 32 channels) are taken as 1 GiB.
CUDA_CONTEXT_GIB = 0.5
NCCL_GIB = 1.0
# PyTorch's caching allocator never packs perfectly; 5% of what the trainer allocates is kept as headroom.
FRAGMENTATION = 0.05

# ---- sizes: the model's architecture ---------------------------------------------------------------------------


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

    @property
    def lm_head_params(self) -> int:
        """The untied lm_head's weights (0 when tied to the embeddings)."""
        return self.vocab_size * self.hidden_size if not self.tie_word_embeddings else 0

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

    def trainable_params(self, lora_rank: int) -> int:
        """The trained parameters: the LoRA adapters with a rank, else all of them."""
        return self.lora_params(lora_rank) if lora_rank else self.params

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


def first_gpu_memory_gb(timeout_s: float = 20) -> float | None:
    """The first visible GPU's memory as sold (GB; nvidia-smi reports MiB), or None where nvidia-smi is absent, hangs
    past ``timeout_s`` or names no GPU."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        ).stdout.split()
        return float(out[0]) / 1024 / CARD_GIB_PER_GB if out else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


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


def described(arch: Architecture, source: str) -> str:
    """The architecture as every estimate names it: ``qwen3-8b, 8.19 B params, architecture: qwen3-8b``."""
    return f"{arch.name}, {arch.params / 1e9:.2f} B params, {source}"


def checkpointed_activations(arch: Architecture, tokens: float) -> tuple[float, float]:
    """Gradient checkpointing over ``tokens`` (GiB): each layer's bf16 input kept until its backward, and one
    recomputed layer's working set (its saved activations and the gradients in flight)."""
    kept = tokens * arch.hidden_size * 2 * arch.num_layers / GIB
    working = tokens * arch.layer_activation_bytes_per_token() * LAYER_BACKWARD_FACTOR / GIB
    return kept, working


# ---- phases ------------------------------------------------------------------------------------------------------


@dataclass
class Phase:
    """What a device holds at one point of a step: named terms (GiB) summing to its total."""

    name: str
    terms: dict[str, float] = field(default_factory=dict)  # GiB

    @property
    def total(self) -> float:
        return sum(self.terms.values())


def trainer_phase(name: str, terms: dict[str, float], allocated: list[str]) -> Phase:
    """A phase with PyTorch's allocator overhead: ``fragmentation`` is FRAGMENTATION of the ``allocated`` terms
    (what the trainer's caching allocator holds; not vLLM's own reservation or the fixed costs)."""
    terms["fragmentation"] = FRAGMENTATION * sum(terms[k] for k in allocated)
    return Phase(name, terms)


# ---- the verdict -------------------------------------------------------------------------------------------------

NOT_CHECKED = "{what} not checked: set architecture (a Qwen3 preset or the model's sizes) to check it"


@dataclass
class Breakdown:
    """Per-device memory of each phase and the node's host RAM, in GiB; the verdict is the peak phase's."""

    experiment: str
    arch: str
    capacity: float
    phases: list[Phase]
    host_needed: float
    host_capacity: float

    # Digits of the capacity in the texts (a TPU's 31.25 GiB needs two).
    capacity_digits = 1

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

    def terms(self, phase: Phase | None = None, sep: str = " + ") -> str:
        """The phase's terms of at least 0.05 GiB (default the peak's), ``name value`` joined by ``sep``."""
        phase = phase or self.peak
        return sep.join(f"{k} {v:.1f}" for k, v in phase.terms.items() if v >= 0.05)

    def verdict(self) -> str:
        """``peak at P: terms = T GiB of C, margin ±M GiB, fits (other phases: …)``."""
        p = self.peak
        others = ", ".join(f"{q.name} {q.total:.1f}" for q in self.phases if q is not p)
        fit = "fits" if self.fits else "DOES NOT FIT"
        return (
            f"peak at {p.name}: {self.terms(p)} = {p.total:.1f} GiB of {self.capacity:.{self.capacity_digits}f}, "
            f"margin {self.margin:+.1f} GiB, {fit} (other phases: {others})"
        )

    def line(self) -> str:
        """The dry-run line of a GPU estimate (per GPU, with the node's host RAM)."""
        return (
            f"GPU memory per GPU ({self.arch}): {self.verdict()}; "
            f"host RAM per node {self.host_needed:.0f} of {self.host_capacity:.0f} GiB"
        )

    def refusal(self, what: str = "peak per GPU", sep: str = ", ") -> str:
        """The middle of a refusal: ``the estimated peak per GPU at P is T GiB of C (terms; arch)``."""
        p = self.peak
        return (
            f"the estimated {what} at {p.name} is {p.total:.1f} GiB of {self.capacity:.{self.capacity_digits}f} "
            f"({self.terms(p, sep)}; {self.arch})"
        )


def fit_text(b: Breakdown | None, what: str = "GPU memory") -> str:
    """The estimate's line, or that it was not checked (the architecture is unknown)."""
    return b.line() if b else NOT_CHECKED.format(what=what)


# ---- numerics: bf16 master weights -------------------------------------------------------------------------------

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
