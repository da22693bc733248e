"""Issue 38, item 4: the refusal of a changed sampling distribution under TRL's vLLM importance-sampling correction,
over every place a config can put a sampler setting. Each config is recipe 004 (TRL, one GPU, vLLM colocated)
loaded through resolve_config, as Snakemake loads it, with untruncated sampling (grpo.top_p 1.0) and the
correction on, plus one setting.

Why each place counts (TRL 1.16.0, .venv/lib/python3.11/site-packages/trl): grpoflow's runner passes grpo.top_p /
top_k / temperature to GRPOConfig and then trl.extra_args over them
(grpoflow.backends.trl.runner.grpo_config_kwargs); TRL builds vLLM's SamplingParams from GRPOConfig's
repetition_penalty, temperature, top_p, top_k, min_p and then updates them with GRPOConfig.generation_kwargs
(trl/generation/vllm_generation.py:662-672, colocate), which is trl.extra_args.generation_kwargs
(runner.build_trainer). TRL starts vLLM with logprobs_mode processed_logprobs (vllm_generation.py:361): the
log-softmax after everything vLLM's sampler applies before it samples (vllm/v1/sample/sampler.py, Sampler docstring
steps 3-7, read in vLLM 0.31.0: allowed tokens, bad words, min_tokens and logit_bias, the
repetition/frequency/presence penalties, temperature, min_p, top-k/top-p), while the trainer's log-probs are the
model's own at GRPOConfig.temperature (trl/trainer/grpo_trainer.py:1068-1072 give add_fused_lm_head
GRPOConfig.temperature; trl/kernels/chunked_logprob.py:75 and 335 scale the logits by its inverse). A temperature in
generation_kwargs reaches the sampler (vLLM and HF generate: grpo_trainer.py:1171-1172) but not the trainer, so it
is refused with or without the correction."""

from __future__ import annotations

import pytest
from grpoflow_testing import load_shipped

from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError

RECIPE_004 = "config/qwen2.5-math-1.5b-lora-binary.yaml"
EXP = "qwen2.5-math-1.5b-lora-binary"
CORRECTION = "trl.vllm.importance_sampling_correction = true with "


def recipe(override: dict, *, where: str = "defaults"):
    """Recipe 004 with untruncated sampling and TRL's correction on, then ``override`` merged into ``where``
    (``defaults`` or the experiment's own section)."""
    raw = deep_merge(
        load_shipped(RECIPE_004),
        {"defaults": {"grpo": {"top_p": 1.0}, "trl": {"vllm": {"importance_sampling_correction": True}}}},
    )
    section = {"defaults": override} if where == "defaults" else {"experiments": {EXP: override}}
    return resolve_config(deep_merge(raw, section))


def refusal(override: dict, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        recipe(override, **kw)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: experiments.{EXP}."), text
    return text


def gen(**kwargs) -> dict:
    return {"trl": {"extra_args": {"generation_kwargs": kwargs}}}


def extra(**kwargs) -> dict:
    return {"trl": {"extra_args": kwargs}}


# Every place a setting that changes vLLM's processed log-probs can be put, and the key the refusal must name.
ROUTES = [
    ({"grpo": {"top_p": 0.9}}, "grpo.top_p = 0.9"),
    ({"grpo": {"top_k": 20}}, "grpo.top_k = 20"),
    (extra(top_p=0.9), "trl.extra_args.top_p = 0.9"),
    (extra(top_k=20), "trl.extra_args.top_k = 20"),
    (extra(min_p=0.05), "trl.extra_args.min_p = 0.05"),
    (extra(repetition_penalty=1.1), "trl.extra_args.repetition_penalty = 1.1"),
    (extra(vllm_structured_outputs_regex=r"\\boxed\{\d+\}"), "trl.extra_args.vllm_structured_outputs_regex = "),
    (gen(top_p=0.9), "trl.extra_args.generation_kwargs.top_p = 0.9"),
    (gen(top_k=20), "trl.extra_args.generation_kwargs.top_k = 20"),
    (gen(min_p=0.05), "trl.extra_args.generation_kwargs.min_p = 0.05"),
    (gen(repetition_penalty=1.1), "trl.extra_args.generation_kwargs.repetition_penalty = 1.1"),
    (gen(frequency_penalty=0.5), "trl.extra_args.generation_kwargs.frequency_penalty = 0.5"),
    (gen(presence_penalty=0.5), "trl.extra_args.generation_kwargs.presence_penalty = 0.5"),
    (gen(min_tokens=8), "trl.extra_args.generation_kwargs.min_tokens = 8"),
    (gen(logit_bias={"151643": -5.0}), "trl.extra_args.generation_kwargs.logit_bias = "),
    (gen(bad_words=["\\n\\n\\n"]), "trl.extra_args.generation_kwargs.bad_words = "),
    (gen(allowed_token_ids=[0, 1, 2]), "trl.extra_args.generation_kwargs.allowed_token_ids = "),
    (gen(structured_outputs={"regex": "[0-9]+"}), "trl.extra_args.generation_kwargs.structured_outputs = "),
    # generation_kwargs wins over GRPOConfig's own setting: untruncated there, truncated here.
    (deep_merge(extra(top_p=1.0), gen(top_p=0.9)), "trl.extra_args.generation_kwargs.top_p = 0.9"),
]


@pytest.mark.parametrize("override, named", ROUTES, ids=[r[1].split(" = ")[0] for r in ROUTES])
def test_a_changed_sampling_distribution_is_refused_under_the_correction_wherever_it_is_set(override, named):
    text = refusal(override)
    assert CORRECTION in text and named in text, text
    assert "set trl.vllm.importance_sampling_correction: false" in text, text


@pytest.mark.parametrize("override, named", ROUTES[:1] + ROUTES[7:8], ids=["grpo", "generation_kwargs"])
def test_the_experiments_own_section_is_checked_as_the_defaults_are(override, named):
    assert named in refusal(override, where="experiment")


def test_the_correction_switched_on_through_extra_args_is_named():
    """trl.extra_args wins over trl.vllm (runner.grpo_config_kwargs): the correction is on even with it off there."""
    override = deep_merge(
        {"trl": {"vllm": {"importance_sampling_correction": False}}},
        deep_merge(extra(vllm_importance_sampling_correction=True), gen(top_p=0.9)),
    )
    text = refusal(override)
    assert "trl.extra_args.vllm_importance_sampling_correction = true with " in text, text
    assert "trl.extra_args.generation_kwargs.top_p = 0.9" in text, text


@pytest.mark.parametrize("key, value", [("use_vllm", True), ("vllm_mode", "colocate")])
def test_vllm_switched_on_through_extra_args_instead_of_trl_vllm_mode_is_refused(key, value):
    """trl.vllm.mode none (HF generate: TRL corrects nothing, so no refusal) with vLLM switched on in extra_args
    would sample with vLLM past every vLLM check (and with HF generate's stop-token keyword, runner.stop_kwargs)."""
    override = deep_merge({"trl": {"vllm": {"mode": "none"}}, "grpo": {"top_p": 0.9}}, extra(**{key: value}))
    text = refusal(override)
    assert f"trl.extra_args.{key}" in text and "trl.vllm.mode" in text, text


def test_generation_kwargs_as_a_json_string_is_refused():
    """TRL parses a JSON string for generation_kwargs (transformers TrainingArguments.__post_init__), so
    '{"top_p": 0.9}' would reach vLLM past a check that reads a mapping; the runner merges it with the stop tokens
    as a mapping too."""
    text = refusal(extra(generation_kwargs='{"top_p": 0.9}'))
    assert "trl.extra_args.generation_kwargs" in text and "mapping" in text, text


@pytest.mark.parametrize("correction", [True, False])
def test_a_sampler_temperature_other_than_the_trainers_is_refused(correction):
    text = refusal(
        deep_merge(
            {"grpo": {"temperature": 0.7}, "trl": {"vllm": {"importance_sampling_correction": correction}}},
            gen(temperature=1.0),
        )
    )
    assert "trl.extra_args.generation_kwargs.temperature = 1" in text and "grpo.temperature = 0.7" in text, text


@pytest.mark.parametrize(
    "override",
    [
        {"grpo": {"temperature": 0.7}},  # the trainer divides its logits by the same temperature vLLM samples at
        deep_merge({"grpo": {"temperature": 0.7}}, gen(temperature=0.7)),
        deep_merge({"grpo": {"top_p": 0.9}}, gen(top_p=1.0)),  # generation_kwargs untruncates what grpo truncated
        gen(seed=3, stop=["</answer>"], top_k=-1, repetition_penalty=1.0, min_p=0.0, logit_bias={}),
        extra(top_k=0, min_p=None),
    ],
    ids=["temperature", "same-temperature", "untruncated-by-generation_kwargs", "neutral-values", "neutral-extra"],
)
def test_settings_that_leave_the_models_distribution_load_with_the_correction(override):
    recipe(override)


@pytest.mark.parametrize("override, named", ROUTES, ids=[r[1].split(" = ")[0] for r in ROUTES])
def test_every_route_loads_with_the_correction_off(override, named):
    recipe(deep_merge(override, {"trl": {"vllm": {"importance_sampling_correction": False}}}))
