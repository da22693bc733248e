"""verl 0.9.1 adapter: the reward function verl loads. The Hydra overrides and the environment that wire it into a
verl command are the verl backend's (grpoflow.backends.verl.overrides.reward_overrides / reward_environment).

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` once per
response, in a thread pool of its reward workers; the reward config arrives as ``reward_kwargs`` (from
``+reward.custom_reward_function.reward_kwargs.*``). It returns ``{"score": Σ w_k r_k over the per-sample
rewards, "<reward>": r_k for each, "acc", "answer_found", "verify_error"}``; verl logs the extra keys.

verl has no group-level reward interface, so group-level terms — the Kimi ``length`` reward and per-prompt
z-normalisation — are applied in grpoflow's advantage estimator (``verl_plugin``, registered as
``algorithm.adv_estimator=grpoflow``). That estimator receives only the token-level scores, the response mask
and the prompt uid (verl 0.9.1 passes no reward extras to custom estimators), so when ``length`` is configured
``compute_score`` carries each response's correctness in the two lowest mantissa bits of the float32 score
(a relative change below 4e-7; bit 1 marks the score as tagged, bit 0 is "correct"). The estimator checks the
mark on every score and fails loudly when it is missing (reward function not wired, KL-in-reward on).

This module imports nothing from verl: the workflow builds commands with it on machines without verl.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from grpoflow.errors import ConfigError
from grpoflow.rewards.combine import RewardSet
from grpoflow.rewards.funcs import Sample

__all__ = [
    "compute_score",
    "tag_score",
    "untag_scores",
    "ESTIMATOR",
    "PLUGIN_MODULE",
    "REWARD_MANAGER",
    "TOKENS_KEY",
    "COMPUTE_SCORE_PATH",
    "SCORE_MODULE",
]

ESTIMATOR = "grpoflow"  # algorithm.adv_estimator
PLUGIN_MODULE = "grpoflow.backends.verl.reward_plugin"  # VERL_USE_EXTERNAL_MODULES / reward manager module
REWARD_MANAGER = "GrpoflowRewardManager"  # passes each response's token count to compute_score
TOKENS_KEY = "grpoflow_response_tokens"  # extra_info key the reward manager sets
SCORE_MODULE = (
    "grpoflow.backends.verl.rewards"  # reward.custom_reward_function.path=pkg://grpoflow.backends.verl.rewards
)
COMPUTE_SCORE_PATH = str(Path(__file__).resolve())
# Group-level rewards the estimator implements (every registry reward with group=True must be listed here).
GROUP_REWARDS = ("length",)

_TAG_MARK = np.uint32(2)
_TAG_CORRECT = np.uint32(1)
_TAG_MASK = np.uint32(0xFFFFFFFC)


# ---------------------------------------------------------------------------------------------------------------
# Carrying correctness to the estimator


def tag_score(score: float, correct: bool) -> float:
    """``score`` as float32 with its two lowest mantissa bits set to (tagged, correct)."""
    bits = np.array([score], dtype=np.float32).view(np.uint32)
    bits = (bits & _TAG_MASK) | _TAG_MARK | (_TAG_CORRECT if correct else np.uint32(0))
    return float(bits.view(np.float32)[0])


def untag_scores(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(clean float32 scores, correct, tagged) from float32 scores written by ``tag_score``."""
    bits = np.ascontiguousarray(scores, dtype=np.float32).view(np.uint32)
    tagged = (bits & _TAG_MARK) != 0
    correct = (bits & _TAG_CORRECT) != 0
    clean = (bits & _TAG_MASK).view(np.float32)
    return clean, correct, tagged


# ---------------------------------------------------------------------------------------------------------------
# The reward function


def _plain(value: Any) -> Any:
    """OmegaConf containers (reward_kwargs arrive as DictConfig/ListConfig) → plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


@lru_cache(maxsize=16)
def _reward_set(cfg_json: str) -> RewardSet:
    return RewardSet(json.loads(cfg_json), where="reward.custom_reward_function.reward_kwargs")


def _rewards_cfg(reward_kwargs: dict) -> dict:
    if "funcs" not in reward_kwargs:
        raise ConfigError(
            "config error: grpoflow's verl compute_score got no reward config: add the overrides from "
            "grpoflow.backends.verl.overrides.reward_overrides(rewards) (+reward.custom_reward_function.reward_kwargs.funcs=...)"
        )
    keys = ("funcs", "weights", "normalize", "eps", "params")
    return {k: _plain(reward_kwargs[k]) for k in keys if k in reward_kwargs and reward_kwargs[k] is not None}


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, **reward_kwargs: Any
) -> dict[str, float]:
    """verl 0.9.1 custom reward function (``reward.custom_reward_function.name=compute_score``).

    Per-sample rewards and their weighted sum; group-level terms are left to the ``grpoflow`` estimator. Never
    raises for a response (the verifier does not); a wrong reward config raises ConfigError at the first call."""
    rset = _reward_set(json.dumps(_rewards_cfg(reward_kwargs), sort_keys=True))
    tokens = (extra_info or {}).get(TOKENS_KEY) if isinstance(extra_info, Mapping) else None
    sample = Sample(str(solution_str), str(ground_truth), n_tokens=int(tokens) if tokens is not None else None)
    components = rset.sample_components(sample)
    score = rset.sample_total(components)
    verdict = sample.verdict
    if not math.isfinite(score) or abs(score) > 1e30:  # weights overflowing float32: never hand verl inf/NaN
        raise ConfigError(
            f"config error: reward_kwargs produce a non-finite score {score} ({components}): check weights and params"
        )
    if rset.group_funcs:
        score = tag_score(score, verdict.correct)
    out = {
        "score": score,
        **components,
        "acc": float(verdict.correct),
        "answer_found": float(verdict.found),
        "verify_error": float(verdict.error),
    }
    return out
