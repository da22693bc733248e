"""The configuration: every shipped config resolves; every mistake is one line naming key, value, fix."""

from __future__ import annotations

import copy

import pytest
from grpoflow_testing import REPO, SHIPPED_CONFIGS, load_shipped, load_yaml

from grpoflow.config import DEMO_SFT_RUN_DIR, deep_merge, resolve_config
from grpoflow.errors import ConfigError


@pytest.mark.parametrize("path", SHIPPED_CONFIGS)
def test_shipped_configs_resolve(path):
    cfg = resolve_config(load_shipped(path))
    assert cfg.models, f"{path} evaluates nothing"
    for name, exp in cfg.experiments.items():
        assert exp["grpo"]["total_steps"] >= 1
        assert exp["backend"] in ("trl", "verl", "tunix")
        kept = [b for b in ("trl", "verl", "tunix") if b in exp]
        assert kept == [exp["backend"]], "only the chosen backend's section is kept"


def test_defaults_merge_into_every_experiment(default_config):
    cfg = resolve_config(default_config)
    seeds = {name: exp["grpo"]["seed"] for name, exp in cfg.experiments.items()}
    assert len(set(seeds.values())) == len(seeds), "each experiment keeps its own seed"
    lrs = {exp["grpo"]["learning_rate"] for exp in cfg.experiments.values()}
    assert lrs == {default_config["defaults"]["grpo"]["learning_rate"]}


def test_schema_defaults_are_filled(default_config):
    exp = next(iter(resolve_config(default_config).experiments.values()))
    assert exp["grpo"]["lora"] == {"rank": 0, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}
    assert exp["upload"]["enabled"] is False
    assert exp["rewards"]["normalize"] == "none"


def test_deep_merge_replaces_lists_and_merges_dicts():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1}
    assert deep_merge(base, {"a": {"y": [3]}}) == {"a": {"x": 1, "y": [3]}, "b": 1}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 1}, "inputs are not mutated"


def test_shared_sft_model_is_evaluated_once(default_config):
    cfg = resolve_config(default_config)
    sft_models = [n for n, m in cfg.models.items() if m["kind"] == "sft"]
    assert sft_models == ["tiny-arith-sft"]
    assert {n for n, m in cfg.models.items() if m["kind"] == "grpo"} == set(cfg.experiments)


def test_dataset_splits(default_config):
    cfg = resolve_config(default_config)
    assert cfg.dataset_splits("arith") == ["train", "val", "test"]
    assert cfg.dataset_splits("gsm8k_sample") == ["train", "test"]


def _mutate(config, path, value):
    c = copy.deepcopy(config)
    node = c
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return c


_DELETE = object()

BAD = [
    # (path to change, new value, substrings the one-line message must contain)
    (("defaults", "grpo", "learning_rate"), "fast", ["defaults.grpo.learning_rate", "'fast'", "number"]),
    (("defaults", "grpo", "lerning_rate"), 1e-5, ["unknown key 'lerning_rate'", "defaults.grpo", "learning_rate"]),
    (("experimnts",), {}, ["unknown key 'experimnts'", "experiments"]),
    (
        ("experiments", "tiny-arith-seed1", "backend"),
        "deepspeed",
        ["experiments.tiny-arith-seed1.backend", "'deepspeed'", "trl, tunix, verl"],
    ),
    (("datasets", "arith", "format"), "xml", ["datasets.arith.format", "gsm8k, boxed, plain"]),
    (
        ("datasets", "arith", "validation"),
        {"fraction": 0.1, "size": 3},
        ["datasets.arith.validation", "fraction or size"],
    ),
    (("datasets", "arith", "source"), "hub", ["datasets.arith", "'hub'"]),
    (("defaults", "data", "dataset"), "nope", ["data.dataset = 'nope'", "arith, gsm8k_sample"]),
    (("experiments", "report"), {}, ["invalid name 'report'", "reserved"]),
    (("evaluation", "preset"), "greeedy", ["evaluation.preset", "greedy, standard, liberal"]),
    (("defaults", "grpo", "num_generations"), 0, ["num_generations = 0", ">= 1"]),
    (("defaults", "sft", "model"), "some/model", ["sft", "exactly one of sft.model", "sft.run_dir"]),
    (("defaults", "grpo", "total_steps"), _DELETE, ["grpo.total_steps is missing"]),
    (("defaults", "rewards", "weights"), [1.0, 2.0], ["rewards.weights has 2 values for 1 funcs"]),
    (("defaults", "data", "val_split"), "dev", ["data.val_split = 'dev'", "train, val, test"]),
    (("datasets", "gsm8k_sample", "validation"), None, ["datasets.gsm8k_sample.validation"]),
    (("datasets", "arith", "prompt", "template"), "Solve it.", ["no {question} placeholder"]),
    (("datasets", "arith", "test"), {"size": 10}, ["already provides a 'test' split"]),
    (
        ("evaluation", "benchmarks", "gsm8k_sample", "split"),
        "val",
        ["evaluation.benchmarks.gsm8k_sample.split = 'val'"],
    ),
    (("evaluation", "benchmarks"), {}, ["evaluation.benchmarks is empty"]),
    (("report", "primary_benchmark"), "math500", ["report.primary_benchmark = 'math500'"]),
    (("defaults", "upload"), {"enabled": True}, ["upload.repo_id is not set"]),
    (("defaults", "rewards", "funcs"), ["acc"], ["unknown reward 'acc'"]),
    (("defaults", "merge_step"), 30, ["merge_step = 30: that checkpoint will not exist", "kept steps: 150, 200"]),
    (
        ("defaults", "trl", "completions_per_device_batch"),
        7,
        ["completions_per_device_batch = 7 does not divide the 128 completions"],
    ),
    (("defaults", "sft", "run_dir"), DEMO_SFT_RUN_DIR, None),  # fine: the demo exists
    (
        ("demo", "sft", "target_accuracy", "band"),
        [0.6, 0.4],
        ["demo.sft.target_accuracy.band = [0.6, 0.4]", "low < high"],
    ),
    (("demo", "sft", "target_accuracy", "band"), [0.4, 1.5], ["demo.sft.target_accuracy.band", "1.5"]),
    (
        ("demo", "sft", "target_accuracy", "split"),
        "test",
        ["demo.sft.target_accuracy.split = 'test'", "never the test split"],
    ),
    (
        ("demo", "sft", "target_accuracy", "split"),
        "dev",
        ["demo.sft.target_accuracy.split = 'dev'", "train, val, test"],
    ),
    (("demo", "sft", "target_accuracy"), None, None),  # fine: stop at demo.sft.max_steps
    (
        ("defaults", "resources", "term_before_limit_s"),
        3600,
        ["resources.term_before_limit_s = 3600 is not shorter than resources.runtime = 60 min (3600 s)"],
    ),
    (("defaults", "resources", "term_before_limit_s"), 300, None),  # fine: inside the 60-min limit
    (
        ("defaults", "resources"),
        {"nodes": 2, "gpus_per_node": 0, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 60, "term_before_limit_s": 300},
        ["resources.term_before_limit_s = 300 with resources.nodes = 2", "--signal does not reach"],
    ),
]


@pytest.mark.parametrize("path,value,expect", BAD, ids=[".".join(b[0]) for b in BAD])
def test_bad_config_gives_one_line(default_config, path, value, expect):
    config = _mutate(default_config, path, value)
    if expect is None:
        resolve_config(config)
        return
    with pytest.raises(ConfigError) as info:
        resolve_config(config)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("config error: ")
    for part in expect:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_demo_run_dir_without_demo_is_an_error(default_config):
    config = copy.deepcopy(default_config)
    del config["demo"]
    with pytest.raises(ConfigError, match="built by the demo"):
        resolve_config(config)


def test_evaluation_only_config_needs_no_experiments(tmp_path):
    cfg = resolve_config(
        {
            "evaluation": {
                "models": {"my-model": {"path": "Qwen/Qwen3-0.6B"}},
                "benchmarks": {
                    "gsm8k": {"path": "data/gsm8k_sample/test.jsonl", "prompt_key": "question", "answer_key": "answer"}
                },
            }
        }
    )
    assert cfg.experiments == {} and list(cfg.models) == ["my-model"]
    assert cfg.eval_targets() == ["results/my-model/eval/gsm8k.json"]


def test_model_name_clash_is_an_error(default_config):
    config = _mutate(default_config, ("evaluation", "models"), {"tiny-arith-sft": {"path": "x/y"}})
    with pytest.raises(ConfigError, match="already used"):
        resolve_config(config)


def test_empty_config_says_where_to_run():
    with pytest.raises(ConfigError, match="configfile"):
        resolve_config({})


# ---- canonical params: the same settings in another key order or number spelling rerun nothing -----------------


def _shuffled(obj, rng):
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffled(v, rng) for v in obj]
    return obj


def _params_of(cfg) -> list[str]:
    """What the rules hand Snakemake as params, as Snakemake compares them (repr)."""
    from grpoflow.backends import training_command
    from grpoflow.report import experiment_summary

    out = [
        repr(cfg.experiments),
        repr(cfg.datasets),
        repr(cfg.evaluation),
        repr(cfg.report),
        repr(cfg.demo),
        repr(cfg.models),
        repr(cfg.evaluation_settings()),
        repr({e: experiment_summary(cfg.experiment(e)) for e in cfg.experiments}),
    ]
    for name in cfg.experiments:
        inputs = {"train": "t.parquet", "val": "v.parquet", "sft": "sft.json"}
        out.append(training_command(cfg, name, inputs, {"marker": "m.json", "metrics": "x.jsonl"}))
    return out


@pytest.mark.parametrize("path", SHIPPED_CONFIGS)
def test_params_do_not_depend_on_key_order_or_formatting(path):
    import random

    import yaml

    raw = load_shipped(path)
    want = _params_of(resolve_config(raw))
    for other in (
        _shuffled(raw, random.Random(1)),
        _shuffled(raw, random.Random(2)),
        yaml.safe_load(yaml.safe_dump(raw, sort_keys=True)),
    ):
        assert _params_of(resolve_config(other)) == want


def test_numbers_are_typed_by_the_schema(default_config):
    one = deep_merge(default_config, {"defaults": {"grpo": {"max_grad_norm": 1, "learning_rate": 0.00005}}})
    cfg = resolve_config(one)
    grpo = cfg.experiment("tiny-arith-seed1")["grpo"]
    assert repr(grpo["max_grad_norm"]) == "1.0" and grpo["learning_rate"] == 5e-5
    assert isinstance(grpo["total_steps"], int) and isinstance(grpo["seed"], int)  # integers stay integers
    # Free-form values that may be text keep their spelling: verl.env's 1 is exported as "1", not "1.0".
    verl = resolve_config(
        deep_merge(load_yaml(REPO / "config/qwen3-8b-gsm8k.yaml"), {"defaults": {"verl": {"env": {"FLAG": 1}}}})
    )
    assert repr(verl.experiment("qwen3-8b-gsm8k")["verl"]["env"]["FLAG"]) == "1"
    assert _params_of(cfg) == _params_of(
        resolve_config(deep_merge(default_config, {"defaults": {"grpo": {"max_grad_norm": 1.0}}}))
    )


def test_exponent_without_a_dot_is_a_number(default_config):
    """YAML 1.1 (PyYAML, Snakemake's loader) reads `1e-6` as text; where the schema wants a number it is one."""
    import yaml

    text = yaml.safe_load("defaults: {grpo: {learning_rate: 5e-5}}")
    assert text["defaults"]["grpo"]["learning_rate"] == "5e-5"
    cfg = resolve_config(deep_merge(default_config, text))
    assert cfg.experiment("tiny-arith-seed1")["grpo"]["learning_rate"] == 5e-5
    assert _params_of(cfg) == _params_of(resolve_config(default_config))
    # Text stays text where the schema wants a string.
    named = resolve_config(deep_merge(default_config, {"defaults": {"upload": {"repo_id": "1e5"}}}))
    assert named.experiment("tiny-arith-seed1")["upload"]["repo_id"] == "1e5"
