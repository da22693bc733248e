"""Reading a verl checkpoint dir (``trainer.default_local_dir``)::

    latest_checkpointed_iteration.txt     last completed save (what resume_mode=auto reads)
    global_step_N/actor/                  per-rank shards, fsdp_config.json, huggingface/ (rank 0)
    global_step_N/data.pt                 dataloader state
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from grpoflow.errors import DataError

LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


def latest_step(checkpoint_dir: str | os.PathLike) -> int | None:
    """The step in latest_checkpointed_iteration.txt, or None when no checkpoint was saved yet."""
    path = Path(checkpoint_dir) / LATEST
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise DataError(f"{path} holds {text!r}, not a step number: it was damaged; write the last complete step into it (see the global_step_N dirs) or delete it to start over")
    return int(text)


def step_dirs(checkpoint_dir: str | os.PathLike) -> dict[int, Path]:
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return {}
    return {int(m.group(1)): p for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))}


def actor_dir(checkpoint_dir: str | os.PathLike, step: int) -> Path:
    return Path(checkpoint_dir) / f"global_step_{step}" / "actor"


def is_complete(checkpoint_dir: str | os.PathLike, step: int) -> bool:
    """Rank 0 writes fsdp_config.json after its shards; the trainer writes data.pt after every rank saved."""
    step_root = Path(checkpoint_dir) / f"global_step_{step}"
    return (step_root / "actor" / "fsdp_config.json").is_file() and (step_root / "data.pt").is_file()
