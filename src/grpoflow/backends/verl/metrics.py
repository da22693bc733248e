"""verl's per-step file log → ``train_metrics.jsonl`` in the project's keys (docs/ARCHITECTURE.md).

verl 0.9.1's ``file`` logger writes ``{"step": N, "data": {...}}`` lines to ``$VERL_FILE_LOGGER_PATH`` and
truncates that file when a run starts. The wrapper therefore gives every attempt (first run, each resume) its
own file under ``<checkpoint_dir>/grpoflow-metrics/`` (it survives failures with the checkpoints) and merges
them here: a later attempt's record for a step replaces an earlier one, because a resumed run redoes the steps
after its last checkpoint. The raw files keep every verl metric for deeper digging.

verl 0.9.1's v1 trainer does not aggregate per-sample reward extras (``reward/<func>``, accuracy) into its
training metrics; they appear here only if a reward module makes verl log them under these names.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from grpoflow.backends.verl import METRICS
from grpoflow.errors import DataError
from grpoflow.training.common import map_metrics, number

METRICS_SUBDIR = "grpoflow-metrics"

# A record is a training step (not only validation) when it has one of these.
TRAIN_KEYS = ("critic/score/mean", "actor/pg_loss", "timing_s/step")


def attempt_files(checkpoint_dir: str | os.PathLike) -> list[Path]:
    d = Path(checkpoint_dir) / METRICS_SUBDIR
    return sorted(d.glob("attempt-*.jsonl")) if d.is_dir() else []


def read_verl_log(path: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """step -> merged verl metrics of one attempt file (a partly written last line is skipped)."""
    steps: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line a killed run was writing
            if not isinstance(rec, dict) or "step" not in rec or not isinstance(rec.get("data"), dict):
                raise DataError(
                    f"{path}:{n}: not a verl file-logger record ({{'step', 'data'}}); is VERL_FILE_LOGGER_PATH shared with another run?"
                )
            steps.setdefault(int(rec["step"]), {}).update(rec["data"])
    return steps


# verl's validation (trainer.test_freq, and the last step) logs, per data source (grpoflow's hold a slash), `val-core/<source>/acc/mean@<n>`
# (the reward's "acc" extra, grpoflow's verdict) and `val-aux/<source>/reward/mean@<n>` with that step's record.
VALIDATION = (
    (re.compile(r"^val-core/.+/acc/mean@\d+$"), "val_accuracy"),
    (re.compile(r"^val-aux/.+/reward/mean@\d+$"), "val_reward"),
)


def to_project(step: int, data: dict[str, Any]) -> dict[str, Any]:
    """verl's metrics of one step as a train_metrics.jsonl row (METRICS, plus any reward/<f>/mean -> reward/<f>,
    and the validation accuracy/reward of a step that validated)."""
    row = map_metrics(step, data, METRICS)
    for pattern, key in VALIDATION:
        value = next((v for k, v in sorted(data.items()) if pattern.match(k) and number(v) is not None), None)
        if value is not None:
            row[key] = value
    for src, value in data.items():  # per-component rewards, if a reward module logs them
        if (
            src.startswith("reward/")
            and src.endswith("/mean")
            and src != "reward/accuracy/mean"
            and number(value) is not None
        ):
            row[src[: -len("/mean")]] = value
    return row


def collect(files: Iterable[str | os.PathLike], last_step: int) -> list[dict[str, Any]]:
    """Project rows for steps 1..last_step, later attempts winning."""
    merged: dict[int, dict[str, Any]] = {}
    for f in files:
        for step, data in read_verl_log(f).items():
            if any(k in data for k in TRAIN_KEYS):
                merged[step] = data
    return [to_project(s, merged[s]) for s in sorted(merged) if 1 <= s <= last_step]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(rows[-1]) if rows else {}


def follow(
    path: str | os.PathLike, on_row: Callable[[dict[str, Any]], None], stop: threading.Event, poll_s: float = 5.0
) -> None:
    """Call ``on_row`` with the project row of each training step verl appends to ``path``, until ``stop`` is set
    (then once more, for the steps logged last). Runs in a thread beside verl; verl creates (truncates) the file
    when it starts, so a missing file or one that shrank is read again from the start."""
    offset, partial = 0, ""
    while True:
        stopping = stop.wait(poll_s)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        if size is not None:
            if size < offset:
                offset, partial = 0, ""
            with open(path, encoding="utf-8") as fh:
                fh.seek(offset)
                chunk = fh.read()
                offset = fh.tell()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()  # the line verl is still writing
            for line in lines:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if (
                    isinstance(rec, dict)
                    and "step" in rec
                    and isinstance(rec.get("data"), dict)
                    and any(k in rec["data"] for k in TRAIN_KEYS)
                ):
                    on_row(to_project(int(rec["step"]), rec["data"]))
        if stopping:
            return
