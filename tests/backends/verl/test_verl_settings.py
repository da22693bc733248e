"""grpoflow.backends.verl.SETTINGS names exactly the verl overrides each grpo key sets: those whose recorded source
is the key, plus those that change when it changes (grpo.report_to -> trainer.logger); keys verl does not read
change nothing."""

from __future__ import annotations

import copy

from grpoflow_testing import grpo_leaves, vary_setting
from verlkit import load

from grpoflow.backends.verl import SETTINGS
from grpoflow.backends.verl import overrides as ov
from grpoflow.backends.verl.validate import training_inputs
from grpoflow.config import deep_merge, resolve_config

NAME = "qwen3-8b-gsm8k"


def test_every_grpo_key_sets_the_named_overrides_and_nothing_else():
    lora = {"rank": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
    raw = deep_merge(
        load("config/qwen3-8b-gsm8k.yaml"), {"defaults": {"grpo": {"clip_ratio_high": 0.28, "lora": lora}}}
    )
    cfg = resolve_config(raw)
    exp, inputs, ckpt = cfg.experiment(NAME), training_inputs(cfg, NAME), cfg.checkpoint_dir(NAME)
    assert exp["grpo"]["kl_coef"] > 0  # so the KL overrides are there

    def built(e):
        items = ov.build(e, NAME, inputs, ckpt)
        return {o.key: o.text for o in items}, items

    before, items = built(exp)
    for key, value in grpo_leaves(exp["grpo"]).items():
        e = copy.deepcopy(exp)
        section = e["grpo"]
        *path, last = key.split(".")[1:]
        for p in path:
            section = section[p]
        section[last] = vary_setting(key, value)
        after, _ = built(e)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        sources = {o.key for o in items if o.source == key}
        named = set(SETTINGS[key].split(", ")) if key in SETTINGS else set()
        assert named == sources | changed, f"verl SETTINGS[{key}] = {named}, the overrides built: {sources | changed}"
        if key not in SETTINGS:
            assert not named  # e.g. grpo.lora.dropout: verl has no LoRA dropout
