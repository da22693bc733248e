"""Reward library (placeholder interface; the full registry is built in issue #3)."""

from grpoflow.errors import ConfigError

KNOWN = {"accuracy"}


def check_reward_config(rewards: dict, where: str = "rewards") -> None:
    for name in rewards["funcs"]:
        if name not in KNOWN:
            raise ConfigError(f"config error: {where}.funcs: unknown reward {name!r} (known: {', '.join(sorted(KNOWN))})")
