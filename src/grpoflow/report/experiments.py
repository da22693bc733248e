"""What the report takes from the config: each experiment's hyperparameters and reward settings, and which
runs differ only by seed."""

from __future__ import annotations

import json
import logging
import re

log = logging.getLogger(__name__)


# Keys of a resolved experiment that do not change what is trained: runs equal in all else form a seed group.
# Not what is trained: where it runs (resources: the same run on 1 or 8 GPUs is one seed group), where it is kept.
_NOT_TRAINING = ("description", "checkpoint_dir", "upload", "resume_across_changes", "resources", "health")
_SEED_SUFFIX = re.compile(r"-seed\d+$")


def experiment_summary(exp: dict) -> dict:
    """The hyperparameters the summary table shows for an experiment (plus ``sft_model``, its baseline's name
    when the config names it)."""
    grpo, rewards = exp["grpo"], exp["rewards"]
    params = rewards.get("params") or {}
    return {
        "backend": exp["backend"],
        "lora_rank": grpo["lora"]["rank"],
        "prompts_per_step": grpo["prompts_per_step"],
        "num_generations": grpo["num_generations"],
        "learning_rate": grpo["learning_rate"],
        "kl_coef": grpo["kl_coef"],
        "total_steps": grpo["total_steps"],
        "temperature": grpo["temperature"],
        "top_p": grpo["top_p"],
        "top_k": grpo["top_k"],
        "rewards": "+".join(rewards["funcs"]),
        "reward_weights": "" if rewards.get("weights") is None else "/".join(f"{w:g}" for w in rewards["weights"]),
        "reward_params": json.dumps(params, sort_keys=True, separators=(",", ":")) if params else "",
        "normalize": rewards["normalize"],
        "seed": grpo["seed"],
        "sft_model": exp["sft"].get("name"),
    }


def experiment_rewards(exp: dict) -> dict:
    """What scoring the experiment's training rewards on evaluation completions needs."""
    return {"rewards": exp["rewards"], "max_response_length": exp["grpo"]["max_response_length"]}


def seed_groups(experiments: dict[str, dict]) -> dict[str, list[str]]:
    """Experiments whose resolved configs differ only in ``grpo.seed`` (and the SFT start's display name, the
    description, the job's resources, where checkpoints go and upload settings), by group name: the members' common name without
    ``-seed<k>`` when they share one (``seeds:`` expansion names runs so), else the first member's name.
    Experiments without a partner form a group of one."""
    by_key: dict[str, list[str]] = {}
    for name, exp in sorted(experiments.items()):
        trained = {k: v for k, v in exp.items() if k not in _NOT_TRAINING}
        trained["grpo"] = {k: v for k, v in exp["grpo"].items() if k != "seed"}
        trained["sft"] = {k: v for k, v in exp["sft"].items() if k != "name"}
        by_key.setdefault(json.dumps(trained, sort_keys=True, default=str), []).append(name)
    groups = {}
    for members in by_key.values():
        members.sort(key=lambda m: (experiments[m]["grpo"]["seed"], m))
        stems = {_SEED_SUFFIX.sub("", m) for m in members}
        name = stems.pop() if len(stems) == 1 and len(members) > 1 else members[0]
        if name in groups or (name in experiments and name not in members):
            name = members[0]
        groups[name] = members
    return dict(sorted(groups.items()))
