"""merge_checkpoint for the toy backend: its checkpoint already is a Hugging Face model dir."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpoflow.errors import DataError


def merge(checkpoint_dir: str, step: int, base: str, out: Path) -> dict:
    ckpt = Path(checkpoint_dir) / f"step-{step}"
    if not ckpt.is_dir():
        raise DataError(f"{ckpt} does not exist: set merge_step to a step the toy saved")
    shutil.copytree(ckpt, out, dirs_exist_ok=True)
    return {"source": str(ckpt), "lora": None}
