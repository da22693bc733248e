"""A toy fourth training backend (issue 42: "a toy fourth backend (in a test) is one folder plus one registry line").

A stand-in for a trainer, written against the Backend protocol (grpoflow.training.Backend): it trains nothing.
Each checkpoint is the start model as it is, every step logs a zero reward, and its merge copies the checkpoint.
tests/backends/test_toy_backend.py adds this folder to a copy of the checkout as ``src/grpoflow/backends/toy/``,
writes one line in the registry, and runs the workflow on it; nothing here is imported from the tests' own path.

Files: ``schema.yaml`` (the ``toy:`` section), ``commandline.py`` (command, config check), ``train.py`` (entry
point), ``runner.py`` (the run), ``merge.py``, ``generate.py`` (its generator, for ``evaluation.backend: toy``).
"""

from __future__ import annotations

import re
from pathlib import Path

from grpoflow.backends.toy.commandline import check_toy_experiment, command
from grpoflow.planes import LOCAL, NO_ACCELERATOR
from grpoflow.training import Generator, common
from grpoflow.training.memory import HUB_WEIGHT_BYTES

CHECKPOINT_DIR = re.compile(r"^step-(\d+)$")


def is_complete(path: Path, step: int) -> bool:
    return (path / "config.json").is_file()


class ToyBackend:
    """The toy's Backend object (grpoflow.training.Backend)."""

    name = "toy"
    MERGE_CHECK = None
    GENERATOR = Generator("grpoflow.backends.toy.generate", LOCAL, None, NO_ACCELERATOR)
    MERGE_CHECKED_WITH = "transformers"
    SETTINGS = {
        "grpo.total_steps": "steps the toy copies the start model for",
        "grpo.seed": "(unused: nothing is drawn)",
    }
    METRICS = {"reward": "reward"}

    def command(self, cfg, experiment: str, inputs: dict, outputs: dict) -> str:
        return command(cfg, experiment, inputs, outputs)

    def check(self, name: str, exp: dict, cfg=None) -> None:
        check_toy_experiment(name, exp, cfg)

    def checkpoints(self, checkpoint_dir) -> dict[int, Path]:
        return common.scan_checkpoints(checkpoint_dir, CHECKPOINT_DIR, is_complete)

    def merge(self, checkpoint_dir: str, step: int, base: str, out: Path) -> dict:
        from grpoflow.backends.toy.merge import merge

        return merge(checkpoint_dir, step, base, out)

    def validate(self, cfg, name: str) -> None:
        return None  # no trainer with a config schema of its own

    def plane(self, exp: dict) -> str:
        return LOCAL

    def accelerator(self, exp: dict) -> str:
        return NO_ACCELERATOR

    def environment(self, exp: dict, rule: str) -> None:
        return None  # the local plane: Snakemake's own environment

    def summary(self, name: str, exp: dict) -> None:
        return None

    def declared_device(self, exp: dict) -> str:
        return ""

    def checkpoint_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        return arch.params * HUB_WEIGHT_BYTES, "the start model, copied"

    def merged_size(self, exp: dict, arch, rank: int) -> tuple[int, str]:
        return arch.params * HUB_WEIGHT_BYTES, "the start model, copied"


BACKEND = ToyBackend()
