"""Provenance recorded with every training/evaluation output: config hash, package versions, git commit."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from importlib import metadata
from typing import Any

from grpoflow.config import config_hash

TRACKED_PACKAGES = (
    "grpoflow",
    "torch",
    "transformers",
    "trl",
    "peft",
    "verl",
    "vllm",
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


def provenance(config: Any = None) -> dict[str, Any]:
    return {
        "config_hash": config_hash(config) if config is not None else None,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "host": platform.node(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
