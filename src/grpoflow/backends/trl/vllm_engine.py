"""TRL's vLLM rollouts as grpoflow runs them (imports torch, TRL and vLLM: only in the train_grpo job).

- ``engine_kwargs``: what grpoflow sets on the colocated engine that TRL 1.16 leaves to vLLM: the dtype it
  generates in (``trl.vllm.dtype``, resolved by ``commandline.vllm_dtype``) and, on the CPU, eager execution;
  ``configure_colocate`` hands them to the ``LLM`` TRL builds.
- ``keep_cpu_linear_weights``: the one piece the CPU build needs beyond the GPU path, so that TRL's own weight sync
  runs unchanged.
- ``shut_down``, ``log_engine``, ``vllm_model``: the engine at the end of training, in the log, and where TRL's sync
  loads the weights. The weight-sync check is grpoflow.backends.trl.weight_sync.
"""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger(__name__)

KV_CACHE_VAR = "VLLM_CPU_KVCACHE_SPACE"  # GiB


def engine_kwargs(trl: dict) -> dict:
    """Arguments added to TRL's ``vllm.LLM(...)`` (trl/generation/vllm_generation.py:347-364 passes no dtype, so
    vLLM's ``auto`` would run a float32 checkpoint in bfloat16, vllm/config/model.py ``_resolve_auto_dtype``).
    On the CPU also ``enforce_eager``: vLLM's CPU platform otherwise compiles the model with inductor
    (vllm/platforms/cpu.py), minutes per engine start for no gain on a model this size."""
    from grpoflow.backends.trl.commandline import vllm_dtype

    kwargs = {"dtype": vllm_dtype({"trl": trl})}
    if trl["use_cpu"]:
        kwargs["enforce_eager"] = True
    return kwargs


def configure_colocate(trl: dict) -> None:
    """Before GRPOTrainer starts its colocated engine: the LLM TRL builds gets ``engine_kwargs``, and on the CPU
    the linear weights stay as vLLM loaded them. TRL calls the name ``LLM`` of its module
    (trl/generation/vllm_generation.py:43, 347): that name is rebound to vLLM's own LLM with these arguments."""
    import trl.generation.vllm_generation as trl_vllm
    from vllm import LLM

    trl_vllm.LLM = functools.partial(LLM, **engine_kwargs(trl))
    if trl["use_cpu"]:
        keep_cpu_linear_weights()
        # The CPU engine sizes its KV cache by this variable alone (vllm/platforms/cpu.py; gpu_memory_utilization
        # does not apply): 1 GiB holds 500k tokens of the demo model. A value the user exported wins.
        os.environ.setdefault(KV_CACHE_VAR, "1")


def keep_cpu_linear_weights() -> None:
    """vLLM's CPU build packs every linear layer's weight into a oneDNN handle after loading and replaces the
    parameter with an empty one (vllm/model_executor/layers/utils.py ``dispatch_cpu_unquantized_gemm``, called from
    linear.py ``process_weights_after_loading`` with ``remove_weight=True``): TRL's sync, which loads each tensor
    through the parameter's ``weight_loader`` (vllm_generation.py:511), then fails ('Parameter' object has no
    attribute 'weight_loader'), and an update to a packed copy would never reach generation. With oneDNN off
    (vllm/_custom_ops.py ``_supports_onednn``, read at each dispatch) a float32 layer computes with
    ``torch.nn.functional.linear`` on the parameter itself, which the sync updates in place. (The AMX sgl-kernel
    path packs bfloat16/float16 weights only, utils.py ``check_cpu_sgl_kernel``; the CPU runs float32.)"""
    import vllm._custom_ops as ops

    ops._supports_onednn = False


def shut_down(trainer) -> None:
    """Stop the colocated engine when training has finished, while the process group it shares is still there. Left
    to its finaliser at interpreter exit, it ran after grpoflow.backends.trl.train closed the process group and
    printed a traceback into the job log ('Invalid process group specified', from destroying its own groups). Its
    shutdown (vllm/v1/engine/core_client.py ``InprocClient.shutdown`` -> core.py ``EngineCore.shutdown``) tears
    down vLLM's distributed state itself, the default group included."""
    generation = getattr(trainer, "vllm_generation", None)
    llm = getattr(generation, "llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()


def log_engine(trainer) -> None:
    """The dtype the engine was built with, as vLLM resolved it (its model config), in the job log."""
    config = trainer.vllm_generation.llm.llm_engine.model_config
    log.info("vLLM colocated engine: %s generates in %s", config.model, str(config.dtype).removeprefix("torch."))


def vllm_model(trainer):
    """The colocated engine's model, where TRL's own sync loads the weights (vllm_generation.py:511)."""
    return trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
