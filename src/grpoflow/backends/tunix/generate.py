"""The Tunix backend's generator (``evaluation.backend: tunix``, its Backend object's ``GENERATOR``): Tunix 0.1.7's
own sampler (``tunix.generate.sampler.Sampler``, what its vanilla rollout generates with) on the job's JAX devices: a
TPU VM's chips, or the CPU (tests). The job runs in the Tunix environment (grpoflow.deployment's tunix plane), one at
a time with training (the ``tpu`` resource of rules/evaluate.smk and rules/train.smk: one process can hold a TPU).

Thin on purpose, like the vLLM backend: prompts arrive as token ids rendered by the shared code (the model's chat
template) and are handed to the sampler as they are; completions are cut at the first stop token and decoded by the
shared code. So the files are the other backends' (greedy completions equal transformers' on the demo model:
tests/backends/tunix/test_tunix_evaluation.py).

- Model: grpoflow.backends.tunix.qwen3 (the checkpoint's own rope θ), weights and activations in bfloat16 on a TPU,
  float32 elsewhere (as the transformers backend: bf16 on GPUs, fp32 on CPUs); no flash attention (Tunix 0.1.7's
  prefill then attends to the prompts' left padding, docs/backends.md).
- Mesh: tp = the largest divisor of the device count that divides the model's KV and query heads (all 4 chips of a
  v5p-8, all 8 of a v6e-8 for Qwen3-8B), fsdp = the rest, over which the batch splits.
- Shapes are fixed for the whole benchmark (prompts left-padded to the longest one, the last batch filled up with
  copies of its last prompt whose completions are dropped), so XLA compiles prefill and decode once.
- Greedy: the sampler's argmax mode. Sampled: its top-p/top-k mode at ``temperature``, each batch seeded with
  ``seed + batch index`` (so a rerun draws the same completions; they differ from transformers' and vLLM's, whose
  random streams differ).
- Padding: the sampler masks every position holding its pad id, generated ones included, so the pad id is a stop
  token that no prompt contains (normally ``<|endoftext|>``); a completion ends at its first stop token anyway.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from grpoflow.errors import DataError
from grpoflow.generation import Completion, ModelSource, completion_from_ids, warn_beyond_positions
from grpoflow.progress import batch_line

if TYPE_CHECKING:
    from grpoflow.evaluation.settings import Generation

log = logging.getLogger(__name__)


def pick_pad_id(tokenizer, prompt_ids: list[list[int]], stop_ids: list[int]) -> int:
    """A stop token no prompt contains, the tokenizer's pad token first (see the module docstring)."""
    used = {t for ids in prompt_ids for t in ids}
    candidates = [tokenizer.pad_token_id, *stop_ids] if tokenizer.pad_token_id in stop_ids else list(stop_ids)
    for token in candidates:
        if token is not None and token not in used:
            return int(token)
    raise DataError(
        f"every stop token ({stop_ids}) occurs in some prompt: the Tunix sampler would mask it there as padding; use evaluation.backend: transformers for this benchmark"
    )


def sampling_mesh(devices: int, heads: int, kv_heads: int) -> tuple[int, int]:
    """(fsdp, tp): tp the largest divisor of ``devices`` that divides both head counts."""
    tp = max(t for t in range(1, devices + 1) if devices % t == 0 and kv_heads % t == 0 and heads % t == 0)
    return devices // tp, tp


class _Tokens:
    """What Tunix's TokenizerAdapter needs of a tokenizer, with a chosen pad id (prompts are token ids already)."""

    def __init__(self, tokenizer, pad_id: int, stop_ids: list[int]):
        self._tokenizer, self._pad, self._eos = tokenizer, pad_id, stop_ids[0]

    def encode(self, text, **kwargs):
        raise AssertionError("the Tunix evaluation backend hands token ids to the sampler")

    def decode(self, ids, **kwargs):
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def bos_id(self):
        return None

    def eos_id(self):
        return self._eos

    def pad_id(self):
        return self._pad


def generate(
    source: ModelSource,
    tokenizer,
    prompt_ids: list[list[int]],
    gen: Generation,
    stop_ids: list[int],
    **_,
) -> tuple[list[list[Completion]], dict]:
    """``gen.samples`` completions for each prompt (token ids), in prompt order, and what was run."""
    import jax
    import tunix

    from grpoflow.backends.tunix import qwen3
    from grpoflow.backends.tunix.device import require_declared_tpu

    require_declared_tpu(f"evaluate ({source.name})")  # before the model is loaded

    platform = jax.devices()[0].platform
    dtype = "bfloat16" if platform == "tpu" else "float32"
    cfg = qwen3.hf_config(source.path)
    fsdp, tp = sampling_mesh(jax.device_count(), cfg["num_attention_heads"], cfg["num_key_value_heads"])
    mesh = jax.make_mesh((fsdp, tp), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    pad = pick_pad_id(tokenizer, prompt_ids, stop_ids)
    warn_beyond_positions(prompt_ids, gen.max_new_tokens, cfg.get("max_position_embeddings"))
    longest = max(len(p) for p in prompt_ids)
    with mesh:
        sampler = _load_sampler(source, tokenizer, cfg, mesh, dtype, pad, stop_ids, longest + gen.max_new_tokens)
        t0 = time.perf_counter()
        results = _sample_all(sampler, tokenizer, prompt_ids, gen, stop_ids, cfg["vocab_size"], fsdp, longest)
        elapsed = time.perf_counter() - t0
    info = {
        "device": platform,
        "device_kind": jax.devices()[0].device_kind,
        "devices": jax.device_count(),
        "mesh": {"fsdp": fsdp, "tp": tp},
        "dtype": dtype,
        "pad_token_id": pad,
        "jax_version": jax.__version__,
        "tunix_version": getattr(tunix, "__version__", None),
        "generate_s": elapsed,
    }
    return results, info


def _load_sampler(source: ModelSource, tokenizer, cfg: dict, mesh, dtype: str, pad: int, stop_ids, cache_size: int):
    """The model loaded onto ``mesh`` and Tunix's sampler over it, with a KV cache of ``cache_size`` positions
    (inside the mesh context)."""
    import jax
    import numpy as np
    from tunix.generate import sampler as sampler_lib

    from grpoflow.backends.tunix import qwen3

    class IdsSampler(sampler_lib.Sampler):
        def tokenize(self, input_string):  # the prompts are token ids already
            return np.asarray(input_string, dtype=np.int32)

    t_load = time.perf_counter()
    model = qwen3.load(source.path, mesh, dtype, dtype)
    sampler = IdsSampler(
        model,
        _Tokens(tokenizer, pad, stop_ids),
        sampler_lib.CacheConfig(
            cache_size=cache_size,
            num_layers=cfg["num_hidden_layers"],
            num_kv_heads=cfg["num_key_value_heads"],
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
        ),
    )
    log.info(
        "loaded %s on %d %s device(s) (mesh fsdp %d × tp %d, %s) in %.1f s",
        source.path,
        jax.device_count(),
        jax.devices()[0].platform,
        mesh.shape["fsdp"],
        mesh.shape["tp"],
        dtype,
        time.perf_counter() - t_load,
    )
    return sampler


def _sample_all(
    sampler, tokenizer, prompt_ids: list[list[int]], gen: Generation, stop_ids, vocab: int, fsdp: int, longest: int
) -> list[list[Completion]]:
    """Every prompt's completions, batch by batch, each batch padded to the same rows (one compilation)."""
    per_call = gen.batch_size
    rows = -(-per_call * gen.samples // fsdp) * fsdp  # whole shards: the batch splits over fsdp
    results: list[list[Completion]] = []
    t0 = time.perf_counter()
    for b, start in enumerate(range(0, len(prompt_ids), per_call)):
        batch = prompt_ids[start : start + per_call]
        inputs = [ids for ids in batch for _ in range(gen.samples)]
        inputs += [inputs[-1]] * (rows - len(inputs))  # fixed shapes: one compilation
        out = sampler(
            inputs,
            max_generation_steps=gen.max_new_tokens,
            max_prompt_length=longest,
            echo=False,
            eos_tokens=list(stop_ids),
            **_sampling(gen, vocab, b),
        )
        for j in range(len(batch)):
            results.append(
                [_completion(tokenizer, out.tokens[j * gen.samples + k], stop_ids, gen) for k in range(gen.samples)]
            )
        log.info("%s", batch_line(b + 1, start + len(batch), len(prompt_ids), time.perf_counter() - t0))
    return results


def _sampling(gen: Generation, vocab: int, batch: int) -> dict:
    """The sampler's decoding arguments for batch ``batch``: none for greedy (its argmax mode)."""
    if gen.greedy:
        return {}
    return {
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        # top-k at or above the vocabulary filters nothing (Tunix's jax.lax.top_k refuses k > vocab)
        "top_k": None if gen.top_k < 0 or gen.top_k >= vocab else gen.top_k,
        "seed": gen.seed + batch,
    }


def _completion(tokenizer, tokens, stop_ids: list[int], gen: Generation) -> Completion:
    """The sampler returns the generated ids up to (not including) the first stop token: fewer than
    ``max_new_tokens`` ids means a stop token ended the completion."""
    ids = [int(t) for t in tokens]
    return completion_from_ids(tokenizer, ids, stop_ids, "length" if len(ids) >= gen.max_new_tokens else "stop")
