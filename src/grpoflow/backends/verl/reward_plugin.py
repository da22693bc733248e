"""grpoflow's verl 0.9.1 plugin: a reward manager that hands each response's token count to compute_score, and
the ``grpoflow`` advantage estimator that applies the group-level reward terms.

Loaded by verl itself: as the reward manager module (``reward.reward_manager.module.path=pkg://grpoflow.
rewards.verl_plugin``) and through ``VERL_USE_EXTERNAL_MODULES=grpoflow.backends.verl.reward_plugin``, which imports it
wherever ``verl`` is imported (the driver computes advantages). Importing it requires verl.

The estimator, per prompt group (verl's ``uid``):

1. reads each response's per-sample reward S (what ``compute_score`` returned) from the token-level rewards and,
   when ``length`` is configured, its correctness from the score's tag bits (``grpoflow.backends.verl.rewards``);
2. R = S + w_length · kimi_length(response tokens, correct);
3. with ``normalize: per_prompt``, R ← (R − mean)/(std + eps) (sample std, as verl's GRPO);
4. hands R to verl's own ``compute_grpo_outcome_advantage`` (so ``norm_adv_by_std_in_grpo`` keeps its
   meaning). With neither term it is exactly verl's GRPO.
"""

from __future__ import annotations

import numpy as np
import torch
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, compute_grpo_outcome_advantage, register_adv_est

from grpoflow.backends.verl.rewards import ESTIMATOR, TOKENS_KEY, untag_scores
from grpoflow.errors import GrpoflowError
from grpoflow.rewards.combine import groups_of, znorm
from grpoflow.rewards.funcs import kimi_length

__all__ = ["GrpoflowRewardManager", "compute_grpoflow_advantage"]


class GrpoflowRewardManager(NaiveRewardManager):
    """verl's naive reward manager, plus the response's token count in ``extra_info[TOKENS_KEY]``."""

    async def run_single(self, data):
        data = data[-1:]  # as the naive manager: the last sequence of a multi-sequence output
        item = data[0]
        response_length = item.batch["responses"].shape[-1]
        n_tokens = int(item.batch["attention_mask"][-response_length:].sum())
        extra = item.non_tensor_batch.get("extra_info")
        # A copy: the dataset's extra_info dict is shared by the n responses of a prompt (and verl mutates it).
        extra = dict(extra) if isinstance(extra, dict) else {}
        extra[TOKENS_KEY] = n_tokens
        data.non_tensor_batch["extra_info"] = np.array([extra], dtype=object)
        return await super().run_single(data)


def _settings(config) -> dict:
    section = None if config is None else config.get("grpoflow", None)
    if section is None:
        raise GrpoflowError(
            "algorithm.adv_estimator=grpoflow needs its settings (+algorithm.grpoflow.*): build the verl command "
            "with grpoflow.backends.verl.overrides.reward_overrides(rewards)"
        )
    return {
        "length_weight": float(section.get("length_weight", 0.0)),
        "normalize": str(section.get("normalize", "none")),
        "eps": float(section.get("eps", 1e-6)),
    }


def compute_grpoflow_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config=None,
    **kwargs,
):
    """GRPO advantages with grpoflow's group-level reward terms (Kimi length, per-prompt z-norm) applied first."""
    s = _settings(config)
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    if s["length_weight"] == 0.0 and s["normalize"] == "none":
        return compute_grpo_outcome_advantage(
            token_level_rewards,
            response_mask,
            index,
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )
    scores = token_level_rewards.sum(dim=-1).detach().float().cpu().numpy()
    rewards = scores.astype(np.float64)
    if s["length_weight"] != 0.0:
        if config is not None and config.get("use_kl_in_reward", False):
            raise GrpoflowError(
                "the grpoflow length reward cannot run with algorithm.use_kl_in_reward=true (the KL penalty "
                "rewrites the scores it reads): use the actor's KL loss (grpo.kl_coef) instead"
            )
        clean, correct, tagged = untag_scores(scores)
        if not tagged.all():
            raise GrpoflowError(
                f"{int((~tagged).sum())} of {len(tagged)} rewards reaching the grpoflow advantage estimator were "
                "not written by grpoflow's compute_score: set reward.custom_reward_function from "
                "grpoflow.backends.verl.overrides.reward_overrides(rewards)"
            )
        rewards = clean.astype(np.float64)
        lengths = response_mask.sum(dim=-1).detach().cpu().numpy()
        for g in groups_of(list(index)):
            bonus = kimi_length([float(lengths[i]) for i in g], [bool(correct[i]) for i in g])
            for i, b in zip(g, bonus):
                rewards[i] += s["length_weight"] * b
    if s["normalize"] == "per_prompt":
        for g in groups_of(list(index)):
            for i, v in zip(g, znorm([float(rewards[i]) for i in g], s["eps"])):
                rewards[i] = v
    shaped = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    last = (response_mask.sum(dim=-1) - 1).clamp(min=0).long()
    shaped[torch.arange(shaped.shape[0]), last] = torch.as_tensor(rewards, dtype=torch.float32)
    return compute_grpo_outcome_advantage(
        shaped, response_mask, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config
    )


# Loaded twice (by VERL_USE_EXTERNAL_MODULES and as the reward manager module) it registers once.
if ESTIMATOR not in ADV_ESTIMATOR_REGISTRY:
    register_adv_est(ESTIMATOR)(compute_grpoflow_advantage)
