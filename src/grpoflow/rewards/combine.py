"""The combined reward: R = Σ_k w_k r_k over the configured rewards, then optionally z-normalised per prompt.

``RewardSet(rewards_cfg)`` is what every backend builds from an experiment's ``rewards`` section. ``score``
computes all components for a batch whose groups (the completions of one prompt) are given, the weighted
total, the per-prompt normalised total and each sample's verdict. ``znorm`` and ``groups_of`` (with
``funcs.kimi_length``) are shared with the verl advantage estimator, which applies the group-level terms there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from grpoflow.rewards.funcs import Sample
from grpoflow.rewards.registry import ResolvedRewards, RewardSpec, check_reward_config, registry, resolve_reward_set
from grpoflow.rewards.verifier import verify_many

__all__ = ["RewardSet", "Scores", "znorm", "groups_of", "contiguous_groups", "needs_group_terms"]


def needs_group_terms(rewards_cfg: dict, where: str = "rewards") -> bool:
    """True when the config has group-level terms: a reward that needs a whole prompt group (``length``) or
    ``normalize: per_prompt``. Validates the config."""
    rewards_cfg = check_reward_config(rewards_cfg, where)
    reg = registry()
    return rewards_cfg["normalize"] == "per_prompt" or any(reg[f].group for f in rewards_cfg["funcs"])


def znorm(values: Sequence[float], eps: float) -> list[float]:
    """(R − mean)/(std + eps) within one group, std the sample standard deviation (n − 1), as torch.std in verl's
    and TRL's GRPO. A group of one is left unchanged (verl's convention for singleton groups)."""
    n = len(values)
    if n < 2:
        return [float(v) for v in values]
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [(v - mean) / (std + eps) for v in values]


def groups_of(ids: Sequence) -> list[list[int]]:
    """Indices grouped by prompt id (verl's ``uid``), in order of first appearance."""
    groups: dict = {}
    for i, key in enumerate(ids):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def contiguous_groups(n: int, group_size: int) -> list[list[int]]:
    """TRL's layout: the ``group_size`` completions of each prompt are contiguous."""
    return [list(range(i, min(i + group_size, n))) for i in range(0, n, group_size)]


@dataclass(frozen=True)
class Scores:
    components: dict[str, list[float]]  # each reward's value per sample, before weights
    total: list[float]  # Σ w_k r_k per sample
    normalized: list[float]  # total after per-prompt z-normalisation (== total when normalize is none)
    correct: list[bool]  # verdict per sample (also when no reward needs it: it is the accuracy metric)
    found: list[bool]
    errors: list[bool]  # verifier timeout/error per sample


class RewardSet:
    """The rewards of one experiment: its plan's resolved reward set (``grpoflow.plan``, what config load resolved),
    used as it is; or a ``rewards`` config section, resolved (validated) on construction by ``resolve_reward_set``."""

    def __init__(
        self, rewards_cfg: dict | ResolvedRewards, *, max_response_length: int | None = None, where: str = "rewards"
    ):
        resolved = (
            rewards_cfg
            if isinstance(rewards_cfg, ResolvedRewards)
            else resolve_reward_set(rewards_cfg, max_response_length=max_response_length, where=where)
        )
        self.params = resolved.params
        self.funcs: list[str] = list(resolved.funcs)
        self.weights: list[float] = list(resolved.weights)
        self.normalize: str = resolved.normalize
        self.eps: float = resolved.eps
        reg = registry()
        self.specs: list[RewardSpec] = [reg[n] for n in self.funcs]

    @property
    def needs_groups(self) -> bool:
        """Group-level terms present: some reward needs a whole prompt group, or per-prompt normalisation."""
        return self.normalize == "per_prompt" or any(s.group for s in self.specs)

    @property
    def sample_funcs(self) -> list[str]:
        return [s.name for s in self.specs if not s.group]

    @property
    def group_funcs(self) -> list[str]:
        return [s.name for s in self.specs if s.group]

    def weight(self, name: str) -> float:
        return self.weights[self.funcs.index(name)]

    def sample_components(self, sample: Sample) -> dict[str, float]:
        """The per-sample rewards of one completion (group-level ones need ``score``)."""
        return {s.name: float(s.fn(sample, **self.params[s.name])) for s in self.specs if not s.group}

    def sample_total(self, components: dict[str, float]) -> float:
        """Σ w_k r_k over the per-sample rewards only."""
        return sum(self.weight(name) * value for name, value in components.items())

    def score(self, samples: Sequence[Sample], groups: Sequence[Sequence[int]] | None = None) -> Scores:
        """Every component for a batch; ``groups`` (lists of indices, one per prompt) are required when
        group-level terms are configured."""
        n = len(samples)
        todo = [s for s in samples if s._verdict is None]
        if len(todo) > 1:  # verify the batch up front: its math-verify comparisons run concurrently
            for s, v in zip(todo, verify_many([(s.completion, s.ground_truth) for s in todo])):
                s._verdict = v
        if groups is None:
            if self.needs_groups:
                raise ValueError(f"rewards {self.group_funcs or ['per_prompt normalisation']} need the prompt groups")
            groups = [[i] for i in range(n)]
        components: dict[str, list[float]] = {}
        for spec in self.specs:
            values = [0.0] * n
            if spec.group:
                for g in groups:
                    for i, v in zip(g, spec.fn([samples[i] for i in g], **self.params[spec.name])):
                        values[i] = float(v)
            else:
                for i, s in enumerate(samples):
                    values[i] = float(spec.fn(s, **self.params[spec.name]))
            components[spec.name] = values
        total = [sum(w * components[name][i] for name, w in zip(self.funcs, self.weights)) for i in range(n)]
        normalized = list(total)
        if self.normalize == "per_prompt":
            for g in groups:
                for i, v in zip(g, znorm([total[i] for i in g], self.eps)):
                    normalized[i] = v
        verdicts = [s.verdict for s in samples]
        return Scores(
            components,
            total,
            normalized,
            [v.correct for v in verdicts],
            [v.found for v in verdicts],
            [v.error for v in verdicts],
        )
