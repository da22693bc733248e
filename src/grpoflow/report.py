"""The cross-experiment report (issue #6)."""

from __future__ import annotations


def experiment_summary(exp: dict) -> dict:
    """The hyperparameters the summary table shows for an experiment."""
    grpo, rewards = exp["grpo"], exp["rewards"]
    return {
        "backend": exp["backend"],
        "lora_rank": grpo["lora"]["rank"],
        "prompts_per_step": grpo["prompts_per_step"],
        "num_generations": grpo["num_generations"],
        "learning_rate": grpo["learning_rate"],
        "kl_coef": grpo["kl_coef"],
        "total_steps": grpo["total_steps"],
        "temperature": grpo["temperature"],
        "rewards": "+".join(rewards["funcs"]),
        "normalize": rewards["normalize"],
        "seed": grpo["seed"],
    }
