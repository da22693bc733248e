"""Tunix 0.1.7 adapter: the configured rewards as one ``GRPOLearner`` reward function plus one metric function.

Tunix sums its reward functions without weights (``tunix.rl.reward_manager.SequenceRewardManager``), so the
whole of grpoflow's reward, R = Σ w_k r_k (z-normalised per prompt with ``normalize: per_prompt``), is one
function, ``grpoflow_reward``; Tunix then standardises it within each prompt's group (its ``grpo`` advantage
estimator), as verl and TRL do after grpoflow's reward. ``metrics`` reports what the other backends log for the
same batch (each component's mean before weights, accuracy, answers found, verifier errors, R before z-norm);
it is handed to ``GRPOLearner(metric_fns=...)``, which calls it with the very same completions list right after
the reward, so the batch is scored once.

Tunix calls the functions with the batch's columns as keyword arguments: ``ground_truth`` comes from the data
iterator (grpoflow.backends.tunix.runner), repeated ``num_generations`` times, one prompt's completions
contiguous. Completion lengths (for ``length``/``soft_overlong``) are counted by re-tokenising the decoded text
(Tunix passes no token ids to reward functions).
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from grpoflow.errors import GrpoflowError
from grpoflow.rewards.combine import RewardSet, Scores, contiguous_groups
from grpoflow.rewards.funcs import Sample

__all__ = ["build_reward_fns", "REWARD_NAME"]

REWARD_NAME = "grpoflow_reward"


class _Scorer:
    """Scores one generation batch once: the reward and the metric function get the same completions list."""

    def __init__(self, rset: RewardSet, num_generations: int, tokenizer=None):
        self.rset, self.num_generations, self.tokenizer = rset, num_generations, tokenizer
        self._lock = threading.Lock()
        self._last: tuple[object, Scores] | None = None

    def __call__(self, completions, kwargs: dict) -> Scores:
        with self._lock:
            if self._last is not None and self._last[0] is completions:
                return self._last[1]
            scores = self._score(list(completions), kwargs)
            self._last = (completions, scores)
            return scores

    def _score(self, texts: list[str], kwargs: dict) -> Scores:
        n, g = len(texts), self.num_generations
        truths = kwargs.get("ground_truth")
        if truths is None or len(truths) != n:
            raise GrpoflowError(
                f"the reward needs one ground truth per completion: got {0 if truths is None else len(truths)} for {n}"
            )
        lengths = [None] * n
        if self.tokenizer is not None:
            lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        samples = [Sample(t, str(gt), n_tokens=k) for t, gt, k in zip(texts, truths, lengths)]
        groups = None
        if self.rset.needs_groups:
            if n % g:
                raise GrpoflowError(f"group-level rewards got {n} completions, not a multiple of num_generations={g}")
            groups = contiguous_groups(n, g)
        return self.rset.score(samples, groups)


def build_reward_fns(
    rewards_cfg: dict, num_generations: int, *, tokenizer=None, max_response_length: int | None = None
) -> tuple[list[Callable], Callable]:
    """``(reward_fns, metric_fn)`` for ``GRPOLearner`` from an experiment's ``rewards`` section."""
    rset = RewardSet(rewards_cfg, max_response_length=max_response_length)
    scorer = _Scorer(rset, num_generations, tokenizer)

    def grpoflow_reward(prompts, completions, **kwargs) -> list[float]:
        return list(scorer(completions, kwargs).normalized)

    def metrics(prompts, completions, rewards, advantages, **kwargs) -> dict:
        scores = scorer(completions, kwargs)
        n = max(len(scores.total), 1)
        out = {
            "reward": (sum(scores.total) / n, np.mean),
            "accuracy": (sum(scores.correct) / n, np.mean),
            "answer_found": (sum(scores.found) / n, np.mean),
            "verify_errors": (float(sum(scores.errors)), np.sum),
        }
        if len(scores.total) > 1:
            out["reward_std"] = (float(np.std(scores.total, ddof=1)), np.mean)
        if len(scores.total) % num_generations == 0:  # completions come in contiguous groups (_Scorer._score)
            groups = np.reshape(scores.total, (-1, num_generations))
            out["frac_reward_zero_std"] = (float(np.mean(groups.max(axis=1) == groups.min(axis=1))), np.mean)
        for name, values in scores.components.items():
            out[f"reward/{name}"] = (sum(values) / n, np.mean)
        return out

    return [grpoflow_reward], metrics
