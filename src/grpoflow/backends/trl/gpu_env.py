"""What a TRL job on GPUs needs in its interpreter (trl.use_cpu false): a CUDA build of torch, TRL, vLLM (unless
``trl.vllm.mode: none``) and PEFT (LoRA), found in milliseconds before torch or a model loads.

    python -m grpoflow.envcheck train-trl-gpu colocate|server|none [lora]   # in the command, before torchrun

The train_grpo command of a TRL experiment on GPUs with several processes or a vLLM server runs that first (finished
runs' commands name ``grpoflow.envcheck``, which runs ``gpu_env_main``); each rank runs ``check`` again (train.py).
"""

from __future__ import annotations

import sys

from grpoflow import envcheck
from grpoflow.errors import GrpoflowError

TRL = ("trl", "trl==1.16.0")


def check(spec: dict) -> None:
    """train_grpo of a TRL experiment with trl.use_cpu false: CUDA torch, TRL, vLLM (unless trl.vllm.mode none) and
    PEFT (LoRA) in this interpreter, found in milliseconds, before torch or a model is loaded."""
    require_gpu_environment(spec["trl"]["vllm"]["mode"], bool((spec["grpo"].get("lora") or {}).get("rank")))


def command_args(spec: dict) -> str:
    """The arguments of ``python -m grpoflow.envcheck`` that ``check(spec)`` amounts to (run before torchrun)."""
    lora = " lora" if (spec["grpo"].get("lora") or {}).get("rank") else ""
    return f"train-trl-gpu {spec['trl']['vllm']['mode']}{lora}"


def gpu_needs(vllm_mode: str, lora: bool) -> list[tuple[str, str, str]]:
    """The modules a TRL GPU job imports besides torch (whose CUDA build require_gpu_environment reads): (module,
    package, why). The preflight at onstart finds the same ones in the cluster interpreter."""
    needs = [(*TRL, "backend: trl")]
    if vllm_mode != "none":
        needs.append((*envcheck.VLLM, f"trl.vllm.mode {vllm_mode}"))
    if lora:
        needs.append((*envcheck.PEFT, "grpo.lora"))
    return needs


def require_gpu_environment(vllm_mode: str, lora: bool) -> None:
    job = "train_grpo (backend trl on GPUs)"
    needs = gpu_needs(vllm_mode, lora)
    missing = [(pkg, why) for module, pkg, why in needs if not envcheck.found(module)]
    cuda = envcheck.torch_cuda_build()
    if cuda is None:
        torch_what = "torch" if not envcheck.found("torch") else "a CPU-only torch"
        missing.insert(0, (f"CUDA torch (it has {torch_what})", "trl.use_cpu false"))
    if missing:
        what = ", ".join(f"{pkg} (for {why})" for pkg, why in missing)
        raise GrpoflowError(
            f"environment check failed for {job}: {sys.executable} lacks {what}; {envcheck.HOW_TO_PICK}"
        )
    envcheck.log.info(
        "environment check for %s passed: torch (CUDA %s), %s importable", job, cuda, ", ".join(m for m, _, _ in needs)
    )
