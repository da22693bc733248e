"""Reading the verl RL Parquet that convert_to_parquet writes (the demo SFT, the tiny model's corpus, TRL GRPO)."""

from __future__ import annotations

from grpoflow.errors import DataError

RL_COLUMNS = ("prompt", "reward_model")


def read_rl_rows(parquet: str, what: str) -> list[dict]:
    """The rows of a verl RL Parquet; ``what`` names the file's role (and config key) in errors."""
    from grpoflow.data.readers import read_records

    rows = read_records(parquet, what=what)
    missing = [c for c in RL_COLUMNS if c not in rows[0]]
    if missing:
        raise DataError(
            f"{what} ({parquet}): no {', '.join(missing)} column: not a verl RL Parquet; write it with the convert_to_parquet rule"
        )
    return rows
