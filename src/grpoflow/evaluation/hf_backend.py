"""The transformers backend: batched ``generate`` with left padding, on CPU (the local plane, tests) or a GPU.

Deterministic for greedy decoding: prompts are batched in a fixed order (longest first, ties by position),
every decoding knob is passed explicitly (the model's generation_config sampling defaults never leak in), and
sampled runs seed each batch with ``seed + batch index``.
"""

from __future__ import annotations

import logging
import time

from grpoflow.errors import GrpoflowError
from grpoflow.evaluation.settings import Generation
from grpoflow.generation import (
    Completion,
    ModelSource,
    completion_from_ids,
    first_line,
    pad_token_id,
    warn_beyond_positions,
)
from grpoflow.progress import batch_line

log = logging.getLogger(__name__)


def load_model(source: ModelSource):
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    # bf16 halves memory on GPUs; CPUs run fp32 (bf16 matmuls there are slow and less exact).
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source.path, dtype=dtype, trust_remote_code=source.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise GrpoflowError(f"cannot load model {source.name} from {source.path}: {first_line(exc)}") from None
    model.to(device).eval()
    return model, device, str(dtype).removeprefix("torch.")


def generate(
    source: ModelSource,
    tokenizer,
    prompt_ids: list[list[int]],
    gen: Generation,
    stop_ids: list[int],
    *,
    threads: int | None = None,
    **_,
) -> tuple[list[list[Completion]], dict]:
    """``gen.samples`` completions for each prompt (token ids), in prompt order, and what was run."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    model, device, dtype = load_model(source)
    warn_beyond_positions(prompt_ids, gen.max_new_tokens, getattr(model.config, "max_position_embeddings", None))
    pad = pad_token_id(tokenizer, stop_ids)
    kwargs = _decoding_kwargs(gen, stop_ids, pad)
    order = sorted(range(len(prompt_ids)), key=lambda i: (-len(prompt_ids[i]), i))
    results: list[list[Completion] | None] = [None] * len(prompt_ids)
    t0 = time.perf_counter()
    for b, start in enumerate(range(0, len(order), gen.batch_size)):
        batch = order[start : start + gen.batch_size]
        input_ids, attention = _left_pad([prompt_ids[i] for i in batch], pad)
        if not gen.greedy:
            torch.manual_seed(gen.seed + b)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        new = out[:, input_ids.shape[1] :].tolist()
        for j, i in enumerate(batch):
            rows = new[j * gen.samples : (j + 1) * gen.samples]
            results[i] = [completion_from_ids(tokenizer, row, stop_ids) for row in rows]
        log.info("%s", batch_line(b + 1, min(start + gen.batch_size, len(order)), len(order), time.perf_counter() - t0))
    elapsed = time.perf_counter() - t0
    info = {"device": device, "dtype": dtype, "torch_threads": torch.get_num_threads(), "generate_s": elapsed}
    return results, info  # type: ignore[return-value]


def _decoding_kwargs(gen: Generation, stop_ids: list[int], pad: int) -> dict:
    common = {
        "max_new_tokens": gen.max_new_tokens,
        "num_return_sequences": gen.samples,
        "num_beams": 1,
        "eos_token_id": list(stop_ids),
        "pad_token_id": pad,
        "repetition_penalty": 1.0,
    }
    if gen.greedy:
        # transformers' own neutral values, so the model's generation_config (Qwen3's ships T 0.6, top_k 20)
        # neither leaks in nor triggers "flag only used in sampling" warnings; greedy search ignores them.
        return {**common, "do_sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 50, "min_p": None}
    return {
        **common,
        "do_sample": True,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "top_k": 0 if gen.top_k < 0 else gen.top_k,
        "min_p": None,
    }


def _left_pad(seqs: list[list[int]], pad: int):
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[r, width - len(s) :] = 1
    return ids, mask
