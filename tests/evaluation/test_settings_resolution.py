"""Resolve once, defaults in one place, names in one place: each benchmark's evaluation and each experiment's reward
set are resolved when the config loads (``WorkflowConfig.benchmark_runs`` / ``reward_sets``) by the code the jobs
run; a default the schema fills at load has no second value in code; the built-in benchmarks' names are the
registry's."""

from __future__ import annotations

import copy
import json

import pytest
from grpoflow_testing import REPO, SHIPPED_CONFIGS, load_shipped, load_yaml

from grpoflow.config import resolve_config
from grpoflow.errors import ConfigError
from grpoflow.evaluation.benchmarks import benchmark_source
from grpoflow.evaluation.settings import PRESETS, BenchmarkRun, resolve_benchmark
from grpoflow.evaluation.vllm_backend import engine_kwargs
from grpoflow.generation import ModelSource
from grpoflow.rewards import RewardSet
from grpoflow.rewards.combine import needs_group_terms
from grpoflow.rewards.registry import ResolvedRewards
from grpoflow.schema import benchmarks as eval_registry
from grpoflow.schema import load_schema

# Read with .get on purpose: null (their schema default) and absent both mean "the preset's value", and a
# benchmark naming its own preset drops the evaluation-wide ones (settings.benchmark_settings).
PRESET_OVERRIDES = {"temperature", "top_p", "top_k"}
STRUCTURAL = {"benchmarks", "models", "stages", "resources"}


@pytest.fixture
def fresh_schema():
    """load_schema is cached: rebuilt for the test (after a patched registry) and again after it."""
    load_schema.cache_clear()
    yield
    load_schema.cache_clear()


@pytest.mark.parametrize("path", SHIPPED_CONFIGS)
def test_config_load_resolves_what_the_evaluate_job_runs_with(path):
    """The job gets its benchmark's plan as config load resolved it (rules/common.smk evaluate_job: JSON) and decodes
    it: the same typed values, per benchmark; and the reward set a trainer builds is the one config load resolved."""
    cfg = resolve_config(load_shipped(path))
    assert set(cfg.benchmark_runs) == set(cfg.evaluation["benchmarks"])
    for name, run in cfg.benchmark_runs.items():
        assert isinstance(run, BenchmarkRun)
        assert resolve_benchmark(cfg.evaluation_settings(), name, cfg.evaluation["benchmarks"][name]) == run
        assert BenchmarkRun.from_json(json.loads(json.dumps(run.as_json()))) == run
    assert set(cfg.reward_sets) == set(cfg.experiments)
    for name, exp in cfg.experiments.items():
        rs = RewardSet(cfg.plans[name].rewards)
        resolved = cfg.reward_sets[name]
        assert isinstance(resolved, ResolvedRewards)
        assert (tuple(rs.funcs), tuple(rs.weights), rs.normalize, rs.eps, rs.params) == (
            resolved.funcs,
            resolved.weights,
            resolved.normalize,
            resolved.eps,
            resolved.params,
        )


def test_a_reward_that_fails_with_the_runs_length_fails_at_load():
    """soft_overlong's max_len is the run's grpo.max_response_length (32 in the demo): its default cache of 4096
    tokens cannot fit. The training job would stop on this; resolving the reward set at load stops the config."""
    config = load_yaml(REPO / "config" / "config.yaml")
    config["defaults"]["rewards"] = {"funcs": ["accuracy", "soft_overlong"]}
    with pytest.raises(ConfigError) as info:
        resolve_config(config)
    msg = str(info.value)
    assert "\n" not in msg
    assert "rewards.params.soft_overlong: cache (4096) must be smaller than max_len (32)" in msg


def test_evaluation_defaults_have_no_second_value_in_code():
    """Every key of the `evaluation` section with a schema default is read as filled: without it, resolving a
    benchmark fails (KeyError) rather than falling back on a value written in code. Likewise the `vllm`
    engine settings and a benchmark's own keys."""
    cfg = resolve_config(load_yaml(REPO / "config" / "config.yaml"))
    props = load_schema()["$defs"]["evaluation"]["properties"]
    settings = cfg.evaluation_settings()
    name, bench = next(iter(cfg.evaluation["benchmarks"].items()))
    resolve_benchmark(settings, name, bench)
    defaulted = {k for k, p in props.items() if "default" in p} - STRUCTURAL - PRESET_OVERRIDES
    assert {"backend", "preset", "samples", "seed", "batch_size", "max_new_tokens", "vllm"} <= defaulted
    for key in sorted(defaulted):
        partial = {k: v for k, v in settings.items() if k != key}
        with pytest.raises(KeyError, match=key):
            resolve_benchmark(partial, name, bench)

    source = ModelSource("m", "external", "/nonexistent")
    run = cfg.benchmark_runs[name]
    for key in props["vllm"]["properties"]:
        with pytest.raises(KeyError, match=key):
            engine_kwargs(source, run.generation, {k: v for k, v in run.vllm.items() if k != key})

    data = str(REPO / "data" / "gsm8k_sample" / "test.jsonl")
    file_bench = {"path": data, "prompt_key": "question", "answer_key": "answer", "format": "gsm8k", "limit": None}
    bench_props = load_schema()["$defs"]["benchmark"]["properties"]
    for spec in (bench, file_bench):
        benchmark_source(name, spec, data)
        read = ("split", "limit") if "dataset" in spec else ("prompt_key", "answer_key", "format", "limit")
        for key in read:
            assert "default" in bench_props[key]
            with pytest.raises(KeyError, match=key):
                benchmark_source(name, {k: v for k, v in spec.items() if k != key}, data)


def test_reward_defaults_come_from_the_schema(monkeypatch):
    """A rewards section without normalize/eps gets the schema's values: change the schema's and the reward set
    follows (no default of its own in code)."""
    props = load_schema()["$defs"]["rewards"]["properties"]
    monkeypatch.setitem(props["eps"], "default", 0.5)
    monkeypatch.setitem(props["normalize"], "default", "per_prompt")
    rs = RewardSet({"funcs": ["accuracy"]})
    assert (rs.eps, rs.normalize, rs.weights) == (0.5, "per_prompt", [1.0])
    assert needs_group_terms({"funcs": ["accuracy"]})


def test_builtin_benchmark_names_are_the_registrys(fresh_schema, monkeypatch):
    """A name added to the registry is accepted by config load with nothing else to write; a name the registry
    lacks is refused with the one-line error listing the registry's names."""
    monkeypatch.setitem(eval_registry.BUILTIN, "gsm8k_copy", copy.deepcopy(eval_registry.BUILTIN["gsm8k"]))
    load_schema.cache_clear()
    cfg = resolve_config({"evaluation": {"benchmarks": {"copy": {"builtin": "gsm8k_copy"}}}})
    assert cfg.evaluation["benchmarks"]["copy"]["dataset"] == "gsm8k_copy" and "gsm8k_copy" in cfg.datasets
    with pytest.raises(ConfigError) as info:
        resolve_config({"evaluation": {"benchmarks": {"x": {"builtin": "mat500"}}}})
    assert str(info.value) == (
        "config error: evaluation.benchmarks.x.builtin = 'mat500': must be one of " + ", ".join(eval_registry.BUILTIN)
    )
    assert str(info.value).endswith("olympiadbench, minerva, gsm8k_copy")


def test_preset_names_are_the_presets_table():
    """The schema's preset enums (evaluation-wide and per benchmark) name exactly the presets settings.py defines."""
    defs = load_schema()["$defs"]
    assert defs["evaluation"]["properties"]["preset"]["enum"] == list(PRESETS)
    assert defs["benchmark"]["properties"]["preset"]["enum"] == list(PRESETS)
