"""The TRL backend's checkpoint dir: which checkpoints exist, which are complete (light: no torch import).

``GRPOTrainer`` (HF ``Trainer``) writes ``checkpoint_dir/checkpoint-N/`` every ``grpo.save_freq`` steps and at the
last step; ``trainer_state.json`` is written after the weights, optimizer and RNG states, so a checkpoint whose
``trainer_state.json`` parses and names step N is complete, and one without it was cut off mid-save.
Layout of a complete checkpoint (documented in docs/training-local.md)::

    checkpoint-N/
      model.safetensors, config.json, generation_config.json   full fine-tune
      adapter_model.safetensors, adapter_config.json           LoRA (grpo.lora.rank > 0): PEFT adapter only
      tokenizer.json, tokenizer_config.json, chat_template.jinja
      trainer_state.json ("global_step": N), optimizer.pt, scheduler.pt, rng_state.pth, training_args.bin
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from grpoflow.training import common

CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
LIVE_METRICS = "train_metrics.jsonl"  # the metrics of the run so far, next to its checkpoints (survives restarts)
RUN_RECORD = "grpoflow_run.json"  # what the checkpoints were trained with (resume refuses a different setup)


def step_dirs(checkpoint_dir: str | Path) -> dict[int, Path]:
    """``checkpoint-N`` dirs by step N (complete or not)."""
    return common.step_dirs(checkpoint_dir, CHECKPOINT_DIR)


def checkpoints(checkpoint_dir: str | Path) -> dict[int, Path]:
    """The complete ``checkpoint-N`` dirs by step N (the backend interface)."""
    return common.scan_checkpoints(checkpoint_dir, CHECKPOINT_DIR, is_complete)


def is_complete(checkpoint: Path, step: int) -> bool:
    try:
        state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return state.get("global_step") == step


def latest_complete(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    """The highest-step complete checkpoint, or None."""
    return common.latest_checkpoint(checkpoints(checkpoint_dir))


def is_peft_checkpoint(checkpoint: Path) -> bool:
    return (checkpoint / "adapter_config.json").is_file()
