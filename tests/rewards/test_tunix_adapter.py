"""The Tunix adapter as Tunix 0.1.7 calls it (tunix/rl/reward_manager.py: every batch column as a keyword, numpy
arrays repeated num_generations times, one prompt's completions contiguous; the metric function right after with
the same completions list): one reward equal to grpoflow's combined reward, the metrics the other backends log,
the batch scored once."""

from __future__ import annotations

import numpy as np
import pytest
from rewardkit import KAGGLE, TEXTS

from grpoflow.backends.tunix.rewards import REWARD_NAME, build_reward_fns
from grpoflow.errors import GrpoflowError
from grpoflow.rewards import RewardSet, Sample, contiguous_groups
from grpoflow.rewards import verifier as verifier_module

TEXTS = TEXTS[:4]

G = 2


class WordTokenizer:
    """Stands in for the HF tokenizer: one token per whitespace-separated word."""

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [t.split() for t in texts]}


def tunix_call(reward_fns, metric_fn, texts, truths):
    """What Tunix's SequenceRewardManager and GRPOLearner do with one batch."""
    prompts = np.repeat(np.array(["p1", "p2"], dtype=object), G)
    kwargs = {
        "ground_truth": np.array(truths, dtype=object),
        "trajectory_ids": ["0_0", "0_1", "1_0", "1_1"],
        "mode": "train",
    }
    rewards = np.zeros((len(texts), len(reward_fns)))
    for i, fn in enumerate(reward_fns):
        rewards[:, i] = np.array(fn(prompts=list(prompts), completions=texts, **kwargs))
    total = np.nansum(rewards, axis=1)
    metrics = metric_fn(prompts=list(prompts), completions=texts, rewards=total, advantages=total, **kwargs)
    return total, metrics


def test_one_reward_equal_to_grpoflows_combined_reward_and_the_same_metrics():
    texts, truths = [t for t, _ in TEXTS], [g for _, g in TEXTS]
    reward_fns, metric_fn = build_reward_fns(KAGGLE, G, tokenizer=WordTokenizer(), max_response_length=64)
    assert [f.__name__ for f in reward_fns] == [REWARD_NAME]
    total, metrics = tunix_call(reward_fns, metric_fn, texts, truths)
    want = RewardSet(KAGGLE, max_response_length=64).score(
        [Sample(t, g, n_tokens=len(t.split())) for t, g in TEXTS], contiguous_groups(len(TEXTS), G)
    )
    assert total == pytest.approx(want.normalized)
    value = {k: v[0] for k, v in metrics.items()}
    assert value["reward"] == pytest.approx(sum(want.total) / 4)  # R before z-norm, as the other backends report
    assert value["accuracy"] == pytest.approx(sum(want.correct) / 4) and value["answer_found"] == 0.75
    for name in KAGGLE["funcs"]:
        assert value[f"reward/{name}"] == pytest.approx(sum(want.components[name]) / 4)


def test_the_batch_is_scored_once(monkeypatch):
    calls = []
    real = verifier_module.verify_many
    monkeypatch.setattr("grpoflow.rewards.combine.verify_many", lambda pairs: calls.append(len(pairs)) or real(pairs))
    reward_fns, metric_fn = build_reward_fns({"funcs": ["accuracy"]}, G)
    tunix_call(reward_fns, metric_fn, [t for t, _ in TEXTS], [g for _, g in TEXTS])
    assert calls == [4]


def test_group_rewards_need_whole_groups():
    reward_fns, _ = build_reward_fns(KAGGLE, 3, max_response_length=64)
    with pytest.raises(GrpoflowError, match="not a multiple of num_generations=3"):
        reward_fns[0](prompts=["p"] * 4, completions=[t for t, _ in TEXTS], ground_truth=np.array(["72"] * 4))
