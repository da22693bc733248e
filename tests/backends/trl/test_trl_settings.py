"""grpoflow.backends.trl.SETTINGS names exactly what each grpo key sets in TRL: changing one key changes the
named GRPOConfig/LoraConfig arguments the runner builds, and nothing else."""

from __future__ import annotations

import copy
import re

import pytest
from grpoflow_testing import grpo_leaves, vary_setting
from trainkit import resolved

from grpoflow.backends.trl import SETTINGS
from grpoflow.backends.trl.commandline import training_spec
from grpoflow.backends.trl.runner import grpo_config_kwargs, peft_config

NAME = re.compile(r"^(GRPOConfig|LoraConfig)\.(\w+)$")


def settings(spec: dict) -> dict:
    out = {f"GRPOConfig.{k}": v for k, v in grpo_config_kwargs(spec).items()}
    lora = peft_config(spec["grpo"]["lora"])
    for attr in ("r", "lora_alpha", "lora_dropout", "target_modules"):
        out[f"LoraConfig.{attr}"] = getattr(lora, attr)
    return out


@pytest.fixture(scope="module")
def base_spec(default_config):
    cfg = resolved(default_config)
    name = next(n for n in cfg.experiments if cfg.experiment(n)["backend"] == "trl")
    inputs = {"train": "t.parquet", "sft": "sft.json"}
    spec = copy.deepcopy(training_spec(cfg, name, inputs, {"marker": "m", "metrics": "x"}))
    spec["grpo"].update(clip_ratio_high=0.28, top_k=20, report_to=[])
    spec["grpo"]["lora"] = {"rank": 8, "alpha": 16.0, "dropout": 0.05, "target_modules": "all-linear"}
    return spec


def test_every_grpo_key_arrives_at_the_named_settings_and_nowhere_else(base_spec):
    before = settings(base_spec)
    for key, value in grpo_leaves(base_spec["grpo"]).items():
        spec = copy.deepcopy(base_spec)
        section = spec["grpo"]
        *path, last = key.split(".")[1:]
        for p in path:
            section = section[p]
        section[last] = vary_setting(key, value)
        after = settings(spec)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        named = {n for n in SETTINGS.get(key, "").split(", ") if NAME.match(n)}
        assert changed <= named, f"{key} also changes {changed - named}: add them to trl SETTINGS"
        if key == "grpo.max_prompt_length":  # not a TRL setting: grpoflow filters the prompts (runner.load_prompts)
            assert not changed and key in SETTINGS
            continue
        assert changed, f"{key} changes nothing in TRL's settings but trl SETTINGS names {SETTINGS.get(key)}"
        assert named <= before.keys(), f"trl SETTINGS[{key}] names settings the runner never sets"
    assert set(SETTINGS) == set(grpo_leaves(base_spec["grpo"])), "every grpo key TRL reads is in its SETTINGS"
