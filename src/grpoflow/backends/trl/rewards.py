"""TRL 1.16 adapter: the configured rewards as GRPOTrainer reward functions.

``build_reward_funcs(rewards_cfg, num_generations)`` returns one TRL reward function per configured reward
(named after it, so TRL logs ``rewards/<name>/mean`` and shows each component in its completions table) and
``GRPOConfig`` settings with the configured weights: TRL's own weighted sum then equals grpoflow's
R = Σ w_k r_k. With ``normalize: per_prompt`` one more function, ``per_prompt_znorm`` (weight 1), returns
z(R) − R, so TRL's sum is exactly the z-normalised reward the verl path uses; TRL then applies its own
``scale_rewards`` group standardisation on top, as verl's GRPO does after grpoflow's estimator.

TRL calls every reward function with the same ``prompts``/``completions`` lists of one generation batch; the
first call scores the whole batch (every component, the verdicts) and the others reuse it. Each batch also
logs, through TRL's ``log_metric``: ``accuracy`` (fraction verified correct), ``answer_found``,
``verify_errors`` (verifier timeouts/errors in the batch) and ``reward_unnormalized`` (mean R before z-norm).

Group-level terms need each prompt's completions together and contiguous in one call (TRL's layout on one
process): groups are the runs of identical prompts; groups of different sizes in one call (a prompt split across
processes) raise, a uniform size other than ``num_generations`` (evaluation) is logged once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from grpoflow.errors import GrpoflowError
from grpoflow.rewards.combine import RewardSet, Scores, contiguous_groups
from grpoflow.rewards.funcs import Sample

__all__ = ["build_reward_funcs", "TrlRewards", "completion_text", "ZNORM_FUNC"]

ZNORM_FUNC = "per_prompt_znorm"
log = logging.getLogger("grpoflow.rewards")


@dataclass
class TrlRewards:
    reward_funcs: list[Callable]  # GRPOTrainer(reward_funcs=...)
    reward_weights: list[float]  # GRPOConfig(reward_weights=...)
    config_kwargs: dict[str, Any] = field(default_factory=dict)  # everything to pass to GRPOConfig

    @property
    def names(self) -> list[str]:
        return [f.__name__ for f in self.reward_funcs]


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string, or a list of chat messages (assistant contents joined; a parsed
    reasoning field is put back inside ``<think>…</think>`` so the answer convention sees the same text)."""
    if isinstance(completion, str):
        return completion
    parts = []
    for msg in completion or []:
        if not isinstance(msg, dict):
            parts.append(str(msg))
            continue
        reasoning = msg.get("reasoning_content") or msg.get("thinking") or msg.get("reasoning")
        if reasoning:
            parts.append(f"<think>{reasoning}</think>")
        content = msg.get("content")
        if isinstance(content, list):  # content blocks
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        parts.append(content or "")
    return "".join(parts)


def _ground_truths(kwargs: dict, n: int) -> list[str]:
    if "ground_truth" in kwargs and kwargs["ground_truth"] is not None:
        values = list(kwargs["ground_truth"])
    elif "reward_model" in kwargs and kwargs["reward_model"] is not None:
        values = [rm["ground_truth"] if isinstance(rm, dict) else None for rm in kwargs["reward_model"]]
    else:
        cols = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric", "completion_ids"))
        raise GrpoflowError(
            f"the reward functions need the ground truth: give the dataset a `ground_truth` column or verl's "
            f"`reward_model` dict (columns passed: {', '.join(cols) or 'none'})"
        )
    if len(values) != n or any(v is None for v in values):
        raise GrpoflowError(f"the ground-truth column has {len(values)} values (some missing) for {n} completions")
    return [str(v) for v in values]


class _Batch:
    """Scores of the current generation batch, shared by the reward functions of one trainer."""

    def __init__(self, rset: RewardSet, num_generations: int, tokenizer=None):
        self.rset = rset
        self.num_generations = num_generations
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        # The batch last scored: TRL passes the very same list objects to each reward function of one batch.
        self._last: tuple[tuple, Scores] | None = None
        self._warned_size = False

    def scores(self, prompts: Sequence, completions: Sequence, completion_ids: Sequence | None, kwargs: dict) -> Scores:
        # TRL builds these lists once per batch and hands the same objects to every reward function.
        refs = (completions, prompts, kwargs.get("ground_truth", kwargs.get("reward_model")))
        with self._lock:
            if self._last is not None and all(a is b for a, b in zip(self._last[0], refs)):
                return self._last[1]
            scores = self._score(prompts, completions, completion_ids, kwargs)
            self._last = (refs, scores)
        self._log(scores, kwargs.get("log_metric"))
        return scores

    def _score(self, prompts, completions, completion_ids, kwargs) -> Scores:
        n = len(completions)
        truths = _ground_truths(kwargs, n)
        if self.tokenizer is not None and completion_ids is not None:
            texts = self.tokenizer.batch_decode(list(completion_ids), skip_special_tokens=True)
        else:
            texts = [completion_text(c) for c in completions]
        lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [None] * n
        samples = [Sample(t, g, n_tokens=k) for t, g, k in zip(texts, truths, lengths)]
        groups = self._groups(prompts, n) if self.rset.needs_groups else None
        return self.rset.score(samples, groups)

    def _groups(self, prompts: Sequence | None, n: int) -> list[list[int]]:
        """The prompt groups of a batch: runs of identical prompts (TRL keeps a prompt's completions together;
        evaluation may use another group size), or chunks of num_generations when prompts are not given."""
        g = self.num_generations
        if prompts is None or len(prompts) != n:
            if n % g:
                raise GrpoflowError(
                    f"group-level rewards got {n} completions, not a multiple of num_generations={g}: each reward "
                    "call must hold whole prompt groups (one process, or per-device batches of whole groups)"
                )
            return contiguous_groups(n, g)
        groups: list[list[int]] = []
        for i in range(n):
            if groups and prompts[i] == prompts[groups[-1][0]]:
                groups[-1].append(i)
            else:
                groups.append([i])
        sizes = {len(grp) for grp in groups}
        if len(sizes) > 1:
            raise GrpoflowError(
                f"group-level rewards got prompt groups of sizes {sorted(sizes)} in one call: a prompt's "
                f"completions are split across calls (several processes?); they need whole groups of {g}"
            )
        if sizes != {g} and not self._warned_size:
            self._warned_size = True
            log.warning(
                "grpoflow.rewards: group-level rewards computed over groups of %d completions (num_generations "
                "is %d): expected in evaluation with num_generations_eval, a bug in training",
                sizes.pop(),
                g,
            )
        return groups

    def _log(self, scores: Scores, log_metric) -> None:
        if log_metric is None or not scores.total:
            return
        n = len(scores.total)
        log_metric("accuracy", sum(scores.correct) / n)
        log_metric("answer_found", sum(scores.found) / n)
        log_metric("verify_errors", float(sum(scores.errors)))
        if self.rset.normalize == "per_prompt":
            log_metric("reward_unnormalized", sum(scores.total) / n)


def _reward_fn(batch: _Batch, name: str) -> Callable:
    def fn(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
        scores = batch.scores(prompts, completions, completion_ids, kwargs)
        if name == ZNORM_FUNC:
            return [z - r for z, r in zip(scores.normalized, scores.total)]
        return list(scores.components[name])

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"grpoflow reward {name!r} (TRL reward function)"
    return fn


def build_reward_funcs(
    rewards_cfg: dict, num_generations: int, *, tokenizer=None, max_response_length: int | None = None
) -> TrlRewards:
    """TRL reward functions and GRPOConfig settings for an experiment's ``rewards`` section.

    ``tokenizer``: when given, completions are decoded from ``completion_ids`` exactly as verl decodes them
    (``skip_special_tokens=True``, think tags kept); otherwise TRL's decoded completions are used. Lengths are
    always TRL's ``completion_ids`` lengths in tokens (incl. EOS). ``max_response_length`` fills length
    parameters left unset (``soft_overlong.max_len``)."""
    rset = RewardSet(rewards_cfg, max_response_length=max_response_length)
    if rset.needs_groups and num_generations < 2:
        raise GrpoflowError(
            f"group-level rewards ({rset.group_funcs or 'per_prompt normalisation'}) need grpo.num_generations >= 2"
        )
    batch = _Batch(rset, num_generations, tokenizer)
    funcs = [_reward_fn(batch, name) for name in rset.funcs]
    weights = list(rset.weights)
    if rset.normalize == "per_prompt":
        funcs.append(_reward_fn(batch, ZNORM_FUNC))
        weights.append(1.0)
    return TrlRewards(funcs, weights, {"reward_weights": weights, "multi_objective_aggregation": "sum_then_normalize"})
