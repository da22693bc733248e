"""The vLLM backend (the cluster path): one ``vllm.LLM`` per job, all prompts in one ``generate`` call.

Thin on purpose: prompts arrive as token ids rendered by the shared code (same chat template, same tokens as
the transformers backend) and completions are cut and decoded by the shared code, so the two backends write
identical records. ``vllm`` is imported only here, only when this backend is chosen.
"""

from __future__ import annotations

import logging
import sys
import time

from grpoflow.errors import GrpoflowError
from grpoflow.evaluation.generation import Completion, ModelSource, completion_from_ids
from grpoflow.evaluation.settings import Generation

log = logging.getLogger(__name__)


def _import_vllm():
    try:
        import vllm
    except ImportError:
        raise GrpoflowError(
            "evaluation.backend is vllm but vllm is not installed in this environment: install the cluster "
            "environment (envs/cluster.yaml, requirements/cluster.lock) or set evaluation.backend: transformers"
        ) from None
    return vllm


def engine_kwargs(source: ModelSource, gen: Generation, vllm_cfg: dict) -> dict:
    kwargs = {
        "model": source.path,
        "tokenizer": source.path,
        "trust_remote_code": source.trust_remote_code,
        "tensor_parallel_size": vllm_cfg["tensor_parallel_size"],
        "gpu_memory_utilization": vllm_cfg["gpu_memory_utilization"],
        "dtype": vllm_cfg["dtype"],
        "seed": gen.seed,
    }
    if vllm_cfg["max_model_len"]:
        kwargs["max_model_len"] = vllm_cfg["max_model_len"]
    return kwargs


def sampling_kwargs(gen: Generation, stop_ids: list[int], index: int) -> dict:
    """SamplingParams for problem ``index``. A per-request seed makes sampled runs independent of batching."""
    kwargs = {
        "n": gen.samples,
        "max_tokens": gen.max_new_tokens,
        "stop_token_ids": list(stop_ids),
        "skip_special_tokens": True,
        "repetition_penalty": 1.0,
    }
    if gen.greedy:
        return {**kwargs, "temperature": 0.0}
    return {**kwargs, "temperature": gen.temperature, "top_p": gen.top_p, "top_k": gen.top_k, "seed": gen.seed + index}


def progress_bar(*args, **kwargs):
    """vLLM's progress bar (prompts done, tokens/s, ETA). In a job log (not a terminal) tqdm cannot redraw in
    place, so it updates at most every 30 s rather than filling the log."""
    from tqdm import tqdm

    return tqdm(*args, **{"mininterval": 0.1 if sys.stderr.isatty() else 30.0, **kwargs})


def generate(
    source: ModelSource,
    tokenizer,
    prompt_ids: list[list[int]],
    gen: Generation,
    stop_ids: list[int],
    *,
    vllm_cfg: dict | None = None,
    **_,
) -> tuple[list[list[Completion]], dict]:
    vllm = _import_vllm()
    llm = vllm.LLM(**engine_kwargs(source, gen, vllm_cfg))
    params = [vllm.SamplingParams(**sampling_kwargs(gen, stop_ids, i)) for i in range(len(prompt_ids))]
    t0 = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=progress_bar)
    elapsed = time.perf_counter() - t0
    results = [
        [completion_from_ids(tokenizer, o.token_ids, stop_ids, finish_reason=o.finish_reason) for o in req.outputs]
        for req in outputs
    ]
    info = {
        "device": "cuda",
        "dtype": vllm_cfg["dtype"],
        "vllm": {k: v for k, v in engine_kwargs(source, gen, vllm_cfg).items() if k not in ("model", "tokenizer")},
        "vllm_version": getattr(vllm, "__version__", None),
        "generate_s": elapsed,
    }
    return results, info
