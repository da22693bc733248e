"""Fixtures of the Tunix backend's tests: specs for the tiny model, and one short run shared by the slow tests."""

from __future__ import annotations

import copy

import pytest
from grpoflow_testing import SMALL_ARITH
from tunixkit import TINY_GRPO, TINY_REWARDS, require_tunix, train

from grpoflow.backends.tunix.commandline import training_spec
from grpoflow.config import deep_merge, resolve_config


@pytest.fixture(scope="session")
def make_spec(default_config, arith_parquet, tiny_sft_json):
    """make_spec(run_dir, **grpo) -> the spec train_grpo's command would carry for a tunix experiment of the tiny
    model, its checkpoints and outputs under run_dir."""

    def make(run_dir, rewards=TINY_REWARDS, tunix=None, **grpo):
        override = {
            **SMALL_ARITH,
            "defaults": {
                "backend": "tunix",
                "grpo": {**TINY_GRPO, **grpo},
                "tunix": tunix or {},
                **({"rewards": rewards} if rewards else {}),
            },
            "experiments": {"tiny-tunix": {"checkpoint_dir": str(run_dir / "checkpoints")}},
        }
        raw = deep_merge(copy.deepcopy(default_config), override)
        raw["experiments"] = override["experiments"]
        cfg = resolve_config(raw)
        inputs = {"train": arith_parquet["train"], "sft": tiny_sft_json}
        outputs = {"marker": str(run_dir / "training_complete.json"), "metrics": str(run_dir / "train_metrics.jsonl")}
        return training_spec(cfg, "tiny-tunix", inputs, outputs)

    return make


@pytest.fixture(scope="module")
def short_run(make_spec, tmp_path_factory):
    """A finished 12-step Tunix run of the tiny model: (spec, stderr of the job)."""
    require_tunix()
    run_dir = tmp_path_factory.mktemp("tunix-short")
    spec = make_spec(run_dir)
    proc = train(spec)
    return spec, proc.stderr
