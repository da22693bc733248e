"""A toy fourth training backend (issue 42: "a toy fourth backend (in a test) is one folder plus one registry line").

A stand-in for a trainer, written against today's interface (``grpoflow.backends.INTERFACE``): it trains nothing.
Each checkpoint is the start model as it is, every step logs a zero reward, and its merge copies the checkpoint.
tests/backends/test_toy_backend.py adds this folder to a copy of the checkout as ``src/grpoflow/backends/toy/``,
writes one line in the registry, and runs the workflow on it; nothing here is imported from the tests' own path.

Files: ``schema.yaml`` (the ``toy:`` section), ``commandline.py`` (command, config check), ``train.py`` (entry
point), ``runner.py`` (the run), ``merge.py``, ``generate.py`` (its generator, for ``evaluation.backend: toy``).
"""

from __future__ import annotations

import re
from pathlib import Path

from grpoflow.backends import HUB_WEIGHT_BYTES, LOCAL, NO_ACCELERATOR, common
from grpoflow.backends.toy.commandline import check_toy_experiment as check
from grpoflow.backends.toy.commandline import command

__all__ = [
    "MERGE_CHECK",
    "METRICS",
    "SETTINGS",
    "accelerator",
    "check",
    "checkpoint_size",
    "checkpoints",
    "command",
    "environment",
    "merged_size",
    "plane",
    "summary",
]

MERGE_CHECK = None
CHECKPOINT_DIR = re.compile(r"^step-(\d+)$")
SETTINGS = {"grpo.total_steps": "steps the toy copies the start model for", "grpo.seed": "(unused: nothing is drawn)"}
METRICS = {"reward": "reward"}


def plane(exp: dict) -> str:
    return LOCAL


def accelerator(exp: dict) -> str:
    return NO_ACCELERATOR


def environment(exp: dict, rule: str) -> None:
    return None  # the local plane: Snakemake's own environment


def summary(name: str, exp: dict) -> None:
    return None


def is_complete(path: Path, step: int) -> bool:
    return (path / "config.json").is_file()


def checkpoints(checkpoint_dir) -> dict[int, Path]:
    return common.scan_checkpoints(checkpoint_dir, CHECKPOINT_DIR, is_complete)


def checkpoint_size(exp: dict, arch, rank: int) -> tuple[int, str]:
    return arch.params * HUB_WEIGHT_BYTES, "the start model, copied"


def merged_size(exp: dict, arch, rank: int) -> tuple[int, str]:
    return arch.params * HUB_WEIGHT_BYTES, "the start model, copied"
