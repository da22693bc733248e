"""The TRL backend's config check of the rollout sampler's settings, wherever a config puts them.

A sampler setting reaches TRL 1.16.0 three ways (paths under .venv/lib/python3.11/site-packages/trl): grpo.top_p /
top_k / temperature become GRPOConfig's own (grpoflow.backends.trl.runner.grpo_config_kwargs), trl.extra_args is
passed over them, and trl.extra_args.generation_kwargs becomes GRPOConfig.generation_kwargs
(runner.build_trainer), which TRL lays over the others: vLLM's SamplingParams are GRPOConfig's repetition_penalty,
temperature, top_p, top_k and min_p updated with generation_kwargs (generation/vllm_generation.py:662-672,
colocate), HF generate's GenerationConfig likewise (trainer/grpo_trainer.py:1155-1173).

TRL starts colocated vLLM with logprobs_mode processed_logprobs (vllm_generation.py:361): the log-softmax after
everything vLLM's sampler does before it samples (vllm/v1/sample/sampler.py, the Sampler docstring's steps 3-7, read
in vLLM 0.31.0; requirements/cluster.lock pins 0.24.0): allowed_token_ids, bad_words, min_tokens and logit_bias, the
repetition/frequency/presence penalties, temperature, min_p, top-k/top-p; a structured output's grammar masks the
logits before the sampler. The trainer's log-probs are the model's own at GRPOConfig.temperature
(grpo_trainer.py:1068-1072 give add_fused_lm_head GRPOConfig.temperature; kernels/chunked_logprob.py:75 and 335
scale the logits by its inverse). So with anything but the temperature changed, TRL's importance weight
(vllm_importance_sampling_correction) is the ratio of two different distributions, not the sampler's numerical
mismatch it is meant to correct: for top-p 0.9 the kept mass, ~0.9, on every token (TRL issue 6789). Refused, not
fixed: vLLM has no logprobs mode with the temperature but without the rest. A temperature in generation_kwargs
changes the sampler's distribution but not the trainer's: refused with or without the correction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# The sampler settings that change vLLM's processed log-probs, each with the value that leaves the model's
# distribution as it is (what the refusal suggests; None: remove the setting). Off are also None and empty values,
# and top_k <= 0 (vLLM's -1 and TRL's 0 both mean all tokens).
_NEUTRAL = {
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "min_tokens": 0,
    "logit_bias": None,
    "allowed_token_ids": None,
    "bad_words": None,
    "structured_outputs": None,
    "vllm_structured_outputs_regex": None,  # GRPOConfig's own; TRL turns it into structured_outputs
}
# GRPOConfig's own sampler settings a config can set in trl.extra_args (the rest only through generation_kwargs).
_GRPO_CONFIG_KEYS = ("top_p", "top_k", "min_p", "repetition_penalty", "vllm_structured_outputs_regex")
# TRL's switches grpoflow sets from trl.vllm.mode; the stop-token keyword (runner.stop_kwargs), the memory
# estimate and the vLLM checks follow trl.vllm.mode, so extra_args must not switch the engine behind them.
_ENGINE_KEYS = ("use_vllm", "vllm_mode")


def _changes(key: str, value) -> bool:
    if value is None or (isinstance(value, (str, list, dict)) and not value):
        return False
    if key == "top_k":
        return not isinstance(value, (int, float)) or value > 0
    neutral = _NEUTRAL[key]
    return neutral is None or value != neutral


def _show(value) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value)


def _fix(key: str) -> str:
    neutral = _NEUTRAL[key.rsplit(".", 1)[-1]]
    return f"remove {key}" if neutral is None else f"{key}: {json.dumps(neutral)}"


def sampler_settings(exp: dict) -> dict[str, tuple[str, object]]:
    """Each sampler setting vLLM gets, as ``{name: (the config key that sets it, value)}``: grpo.top_p/top_k,
    then trl.extra_args (which the runner passes over them), then trl.extra_args.generation_kwargs (which TRL lays
    over GRPOConfig's own)."""
    grpo, extra = exp["grpo"], exp["trl"]["extra_args"]
    out = {"top_p": ("grpo.top_p", grpo["top_p"]), "top_k": ("grpo.top_k", grpo["top_k"])}
    out.update({k: (f"trl.extra_args.{k}", extra[k]) for k in _GRPO_CONFIG_KEYS if k in extra})
    generation = extra.get("generation_kwargs") or {}
    out.update({k: (f"trl.extra_args.generation_kwargs.{k}", v) for k, v in generation.items() if k in _NEUTRAL})
    return out


def changed_settings(exp: dict) -> list[tuple[str, object]]:
    """The settings (config key, value) under which vLLM's returned log-probs are not the model's own."""
    return [(key, value) for name, (key, value) in sampler_settings(exp).items() if _changes(name, value)]


def check(exp: dict, fail, *, uses_vllm: bool) -> None:
    """Refuse a sampler that TRL's trainer does not score as it samples: the engine switched in extra_args, a
    generation_kwargs that is not a mapping, a temperature in generation_kwargs, and (when vLLM generates, with
    the importance-sampling correction on) any setting of ``_NEUTRAL`` not at its neutral value."""
    extra = exp["trl"]["extra_args"]
    for key in _ENGINE_KEYS:
        if key in extra:
            fail(
                f"trl.extra_args.{key} = {_show(extra[key])}: grpoflow sets TRL's use_vllm and vllm_mode from trl.vllm.mode, which the stop tokens, the GPU-memory estimate and the vLLM checks follow; remove it and set trl.vllm.mode"
            )
    generation = extra.get("generation_kwargs", {})
    if not isinstance(generation, Mapping):
        fail(
            f"trl.extra_args.generation_kwargs is a {type(generation).__name__}, not a mapping: TRL would parse a JSON string that grpoflow's sampler checks and stop tokens do not read; write its keys under generation_kwargs as YAML"
        )
    temp_key = "trl.extra_args.temperature" if "temperature" in extra else "grpo.temperature"
    temperature = extra.get("temperature", exp["grpo"]["temperature"])
    if generation.get("temperature") is not None and generation["temperature"] != temperature:
        fail(
            f"trl.extra_args.generation_kwargs.temperature = {generation['temperature']:g} differs from {temp_key} = {temperature:g}: TRL samples at the first (generation_kwargs override GRPOConfig's sampler settings) but computes the trainer's log-probs at the second, so the loss takes completions sampled at one temperature for the policy's at the other; set the temperature with {temp_key} only"
        )
    correction_key = "vllm_importance_sampling_correction"
    if correction_key in extra:
        correction_key, correction = f"trl.extra_args.{correction_key}", extra[correction_key]
    else:
        correction_key, correction = (
            "trl.vllm.importance_sampling_correction",
            exp["trl"]["vllm"]["importance_sampling_correction"],
        )
    changed = changed_settings(exp)
    if uses_vllm and correction and changed:
        settings = " and ".join(f"{key} = {_show(value)}" for key, value in changed)
        fixes = ", ".join(_fix(key) for key, _ in changed)
        fail(
            f"{correction_key} = true with {settings}: TRL starts vLLM with logprobs_mode processed_logprobs, the log-probs of the distribution after these settings (renormalised over the tokens top-p/top-k/min-p keep, penalised, biased), while the trainer's are the model's own at grpo.temperature, so TRL's importance weight measures the settings instead of correcting the sampler's mismatch, and reweights every token's loss (top_p 0.9: by ~0.9; TRL issue 6789); set {correction_key}: false, or sample from the model's distribution ({fixes})"
        )
