"""What every backend shares, written once: the completion marker, the checkpoint scan, the metrics file, and
reading the RL Parquet. Light (no trainer imports).

- ``write_marker``: ``training_complete.json``, only for a run whose final step is the planned one.
- ``scan_checkpoints`` / ``latest_checkpoint``: step dirs by a name pattern, kept when a backend's completeness
  predicate says so.
- ``map_metrics`` (a trainer's metric dict through a backend's ``METRICS`` table) and ``write_metrics``
  (``train_metrics.jsonl``, atomically).
- ``read_rl_rows``: the verl RL Parquet that convert_to_parquet writes (demo SFT, the tiny model's corpus, TRL).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from grpoflow.errors import DataError, GrpoflowError
from grpoflow.io import atomic_write_json, atomic_write_jsonl

# ---- completion marker --------------------------------------------------------------------------------------


def write_marker(
    path: str | os.PathLike,
    *,
    experiment: str,
    backend: str,
    planned_steps: int,
    final_step: int,
    checkpoint_dir: str,
    final_checkpoint: str,
    metrics_summary: dict,
    settings_history: list,
    provenance: dict,
    **extra: Any,
) -> dict:
    """Write the completion marker (docs/ARCHITECTURE.md, "Training interface") atomically; returns it.

    ``extra`` holds the backend's own keys (TRL: ``checkpoint_format``, ``start_model``; verl: ``nodes``,
    ``gpus_per_node``, ``trainer_command``). Refuses a run that stopped short of its planned steps: a marker
    means the run is complete."""
    if final_step != planned_steps:
        raise GrpoflowError(
            f"training of {experiment} stopped at step {final_step} of {planned_steps}: not complete, no completion marker written"
        )
    marker = {
        "experiment": experiment,
        "backend": backend,
        "planned_steps": planned_steps,
        "final_step": final_step,
        "checkpoint_dir": checkpoint_dir,
        "final_checkpoint": final_checkpoint,
        **extra,
        "metrics_summary": metrics_summary,
        # Non-empty only when the run continued across a settings change (resume_across_changes): which steps
        # were trained from what.
        "settings_history": settings_history,
        "provenance": provenance,
    }
    atomic_write_json(path, marker)
    return marker


# ---- checkpoint dir -----------------------------------------------------------------------------------------


def step_dirs(checkpoint_dir: str | os.PathLike, pattern: re.Pattern) -> dict[int, Path]:
    """Every dir of ``checkpoint_dir`` whose name matches ``pattern`` (group 1: the step), by step, complete or not;
    {} when ``checkpoint_dir`` does not exist."""
    from grpoflow.discovery import checkpoint_steps  # the same scan finds an SFT run's step dirs

    return checkpoint_steps(checkpoint_dir, pattern)


def scan_checkpoints(
    checkpoint_dir: str | os.PathLike, pattern: re.Pattern, is_complete: Callable[[Path, int], bool]
) -> dict[int, Path]:
    """The complete checkpoints by step, in step order: step dirs matching ``pattern`` for which the backend's
    ``is_complete(path, step)`` holds (a save cut off by a kill is left out)."""
    found = step_dirs(checkpoint_dir, pattern)
    return {step: found[step] for step in sorted(found) if is_complete(found[step], step)}


def latest_checkpoint(checkpoints: dict[int, Path]) -> tuple[int, Path] | None:
    """``(step, path)`` of the highest step of a ``checkpoints`` result, or None."""
    if not checkpoints:
        return None
    step = max(checkpoints)
    return step, checkpoints[step]


# ---- metrics --------------------------------------------------------------------------------------------------


def number(value: Any) -> float | int | None:
    """``value`` when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


def map_metrics(step: int, data: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    """One ``train_metrics.jsonl`` row: ``{"step": step}`` plus each trainer metric of ``data`` named in ``table``
    (trainer name -> project key) under its project key. Non-numbers and NaN/inf are skipped; when several
    trainer names map to one key, the first in ``table`` that ``data`` has wins."""
    row: dict[str, Any] = {"step": step}
    for source, key in table.items():
        if key not in row and source in data and number(data[source]) is not None:
            row[key] = data[source]
    return row


def write_metrics(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """``train_metrics.jsonl``: one JSON object per optimizer step, written atomically."""
    atomic_write_jsonl(path, rows)


# ---- data -------------------------------------------------------------------------------------------------------

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
