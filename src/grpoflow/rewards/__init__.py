"""grpoflow's reward library: one answer verifier and one registry of rewards for every trainer and evaluation.

Public API (see docs/rewards.md):

- ``verify(completion, ground_truth) -> Verdict`` (``.correct``, ``.found``, ``.extracted``, ``.source``,
  ``.reason``), ``is_correct``, ``within_tolerance`` ("partial accuracy"), ``format_ok`` ("format accuracy"),
  ``stats()`` / ``reset_stats()`` (verifier counters: timeouts, errors, fast-path hits, ...).
- ``REGISTRY`` / ``registry()``: every reward's name, parameters, defaults, group-level flag and docstring;
  ``check_reward_config(rewards_cfg, where)`` validates a config section.
- ``RewardSet(rewards_cfg)``: the weighted sum (+ optional per-prompt z-norm) over a batch of ``Sample``s.
- Each training backend's adapter (the reward function in its trainer's own form) lives in its folder,
  ``grpoflow/backends/<name>/rewards.py``, above this library.
"""

from grpoflow.rewards.combine import RewardSet, Scores, contiguous_groups, groups_of, znorm
from grpoflow.rewards.extract import Extraction, extract_answer, extract_boxed_answer
from grpoflow.rewards.funcs import Sample, kimi_length
from grpoflow.rewards.registry import REGISTRY, Param, RewardSpec, check_reward_config, registry, resolve_params
from grpoflow.rewards.verifier import (
    Verdict,
    answers_equal,
    bad_ground_truths,
    format_ok,
    is_correct,
    reset_caches,
    reset_stats,
    stats,
    verify,
    verify_many,
    warm_up,
    within_tolerance,
)

__all__ = [
    "verify",
    "verify_many",
    "is_correct",
    "Verdict",
    "within_tolerance",
    "format_ok",
    "answers_equal",
    "extract_answer",
    "extract_boxed_answer",
    "Extraction",
    "stats",
    "bad_ground_truths",
    "reset_stats",
    "reset_caches",
    "warm_up",
    "REGISTRY",
    "registry",
    "Param",
    "RewardSpec",
    "check_reward_config",
    "resolve_params",
    "RewardSet",
    "Scores",
    "Sample",
    "znorm",
    "kimi_length",
    "groups_of",
    "contiguous_groups",
]
