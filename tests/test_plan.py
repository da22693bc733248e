"""The typed plans (grpoflow.plan): config load resolves each experiment and benchmark once, frozen; a job decodes
its plan from the JSON the rule hands it, and what it decodes is what config load resolved."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
from grpoflow_testing import SHIPPED_CONFIGS, load_shipped

from grpoflow.backends import training_command
from grpoflow.config import resolve_config
from grpoflow.evaluation.settings import BenchmarkRun
from grpoflow.plan import ExperimentPlan, GrpoSettings, TrainingPlan

INPUTS = {"train": "t.parquet", "val": "v.parquet", "sft": "sft.json"}
OUTPUTS = {"marker": "m.json", "metrics": "m.jsonl"}


def _spec_of(command: str) -> dict | None:
    """The --spec JSON of a train_grpo command (TRL, Tunix), None for a command without one (verl's Hydra overrides)."""
    words = shlex.split(command)
    if "--spec" not in words:
        return None
    return json.JSONDecoder().raw_decode(words[words.index("--spec") + 1])[0]  # a `;` of the shell may follow


@pytest.mark.parametrize("path", SHIPPED_CONFIGS)
def test_the_plan_a_training_job_decodes_is_the_one_config_load_resolved(path):
    cfg = resolve_config(load_shipped(path))
    assert set(cfg.plans) == set(cfg.experiments)
    decoded = 0
    for name, exp in cfg.experiments.items():
        plan = cfg.plans[name]
        assert isinstance(plan, ExperimentPlan) and plan.grpo.as_dict() == exp["grpo"]
        spec = _spec_of(training_command(cfg, name, INPUTS, OUTPUTS))
        if spec is None:
            continue
        job = TrainingPlan.decode(exp["backend"], spec)
        assert job.matches(plan), (job, plan)
        decoded += 1
    backends = {e["backend"] for e in cfg.experiments.values()}
    assert decoded or backends <= {"verl"}, f"{path}: no experiment's plan was decoded from its command"


@pytest.mark.parametrize("path", SHIPPED_CONFIGS)
def test_the_plan_an_evaluate_job_decodes_is_the_one_config_load_resolved(path):
    cfg = resolve_config(load_shipped(path))
    for run in cfg.benchmark_runs.values():
        assert BenchmarkRun.from_json(json.loads(json.dumps(run.as_json()))) == run


def test_plans_are_frozen_and_typed():
    cfg = resolve_config(load_shipped("config/config.yaml"))
    plan = next(iter(cfg.plans.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.grpo.learning_rate = 1.0  # type: ignore[misc]
    assert isinstance(plan.grpo.learning_rate, float) and isinstance(plan.grpo.total_steps, int)


def test_a_grpo_key_the_plan_does_not_know_is_named():
    cfg = resolve_config(load_shipped("config/config.yaml"))
    grpo = {**next(iter(cfg.experiments.values()))["grpo"], "new_knob": 1}
    with pytest.raises(TypeError, match="grpo.new_knob is not a field of GrpoSettings"):
        GrpoSettings.from_dict(grpo)
