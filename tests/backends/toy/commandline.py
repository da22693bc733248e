"""The toy backend's command and config check (today's interface: the check registers itself)."""

from __future__ import annotations

from grpoflow.backends import common
from grpoflow.config import register_backend_check
from grpoflow.errors import ConfigError


def command(cfg, experiment: str, inputs: dict, outputs: dict) -> str:
    return common.spec_command("toy", common.training_spec(cfg, experiment, inputs, outputs))


@register_backend_check("toy")
def check_toy_experiment(name: str, exp: dict, cfg=None) -> None:
    steps, most = exp["grpo"]["total_steps"], exp["toy"]["max_steps"]
    if steps > most:
        raise ConfigError(
            f"config error: experiments.{name}.grpo.total_steps = {steps} exceeds toy.max_steps = {most}: lower it"
        )
