"""The toy's run: every step's checkpoint is the start model, unchanged (no optimizer: a stand-in trainer)."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpoflow.discovery import model_path
from grpoflow.io import atomic_dir
from grpoflow.training import common


def run_training(spec: dict) -> dict:
    start, total = model_path(spec["sft"]), spec["grpo"]["total_steps"]
    checkpoint_dir = Path(spec["checkpoint_dir"])
    final = checkpoint_dir / f"step-{total}"
    if not final.is_dir():
        with atomic_dir(final) as tmp:
            shutil.copytree(start, tmp, dirs_exist_ok=True)
    live = checkpoint_dir / "train_metrics.jsonl"
    common.keep_live_metrics_until(live, 0)
    for step in range(1, total + 1):
        common.append_live_metrics(live, common.map_metrics(step, {"reward": 0.0}, {"reward": "reward"}))
    return common.finish_run(spec, backend="toy", live=live, final_step=total, final_checkpoint=str(final))
