"""The Tunix backend's checkpoint dir (light: no JAX import).

Tunix's ``RLCluster`` saves the actor with Orbax under ``<checkpoint_dir>/actor/<step>/`` every ``grpo.save_freq``
steps and when training ends (also when a SIGTERM ends it early)::

    actor/<step>/
      _CHECKPOINT_METADATA, commit_success.txt
      model_params/       the actor's weights (all of them: full fine-tuning)
      optimizer_state/    AdamW's moments and step count
      custom_metadata/    Tunix's global step (absent in the save at the end of a run: tunix/sft/peft_trainer.py)

Orbax writes ``<step>.orbax-checkpoint-tmp*`` and renames it to ``<step>`` once the save is committed, so a dir
named ``<step>`` with ``_CHECKPOINT_METADATA`` and ``model_params/`` is complete; the temporary name is a save that
a kill cut off.
"""

from __future__ import annotations

import re
from pathlib import Path

from grpoflow.training import common

ACTOR_SUBDIR = "actor"  # Tunix's RLCluster: <checkpoint_root_directory>/actor
STEP_DIR = re.compile(r"^(\d+)(?:\.orbax-checkpoint-tmp.*)?$")
LIVE_METRICS = "train_metrics.jsonl"  # the run's metrics so far, next to its checkpoints (survives restarts)


def step_dirs(checkpoint_dir: str | Path) -> dict[int, Path]:
    """``actor/<step>`` dirs by step, complete or not (a cut-off save's temporary name included)."""
    return common.step_dirs(Path(checkpoint_dir) / ACTOR_SUBDIR, STEP_DIR)


def checkpoints(checkpoint_dir: str | Path) -> dict[int, Path]:
    """The complete ``actor/<step>`` checkpoints by step (the backend interface)."""
    return common.scan_checkpoints(Path(checkpoint_dir) / ACTOR_SUBDIR, STEP_DIR, is_complete)


def is_complete(checkpoint: Path, step: int) -> bool:
    return (
        checkpoint.name == str(step)
        and (checkpoint / "_CHECKPOINT_METADATA").is_file()
        and (checkpoint / "model_params").is_dir()
    )


def latest_complete(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    return common.latest_checkpoint(checkpoints(checkpoint_dir))


def cut_off_saves(checkpoint_dir: str | Path) -> list[Path]:
    """Step dirs that are not complete checkpoints (a save a kill cut off): Orbax would refuse to save that step
    again, and nothing may mistake them for a checkpoint."""
    actor = Path(checkpoint_dir) / ACTOR_SUBDIR
    if not actor.is_dir():
        return []
    found = []
    for entry in sorted(actor.iterdir()):
        m = STEP_DIR.match(entry.name)
        if m and entry.is_dir() and not is_complete(entry, int(m.group(1))):
            found.append(entry)
    return found
