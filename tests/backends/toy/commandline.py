"""The toy backend's command and config check (its Backend object calls both)."""

from __future__ import annotations

from grpoflow.errors import ConfigError
from grpoflow.training import common


def command(cfg, experiment: str, inputs: dict, outputs: dict) -> str:
    return common.spec_command("grpoflow.backends.toy.train", common.training_spec(cfg, experiment, inputs, outputs))


def check_toy_experiment(name: str, exp: dict, cfg=None) -> None:
    steps, most = exp["grpo"]["total_steps"], exp["toy"]["max_steps"]
    if steps > most:
        raise ConfigError(
            f"config error: experiments.{name}.grpo.total_steps = {steps} exceeds toy.max_steps = {most}: lower it"
        )
