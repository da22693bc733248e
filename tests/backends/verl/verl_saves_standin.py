"""Stands in for verl's trainer process (``main_ppo``) in the checkpoint-rotation test: it trains nothing (verl needs a
GPU), but saves its checkpoints the way verl 0.9.1 does, one process per attempt:

- each save runs verl's own rotation code on a fresh ``BaseCheckpointManager`` (``previous_saved_paths`` starts
  empty in each process, as in verl): ``ensure_checkpoint_capacity`` before writing, ``register_checkpoint`` after
  (``FSDPCheckpointManager.save_checkpoint``);
- what it writes is a genuine verl FSDP2 checkpoint's ``actor/`` (copied), then ``data.pt`` and
  ``latest_checkpointed_iteration.txt`` in that order (``RayPPOTrainer._save_checkpoint``);
- it resumes after the step in ``latest_checkpointed_iteration.txt`` (``resume_mode=auto``) and saves every
  ``trainer.save_freq`` steps up to ``trainer.total_training_steps``.

Between two saves (a training step, minutes on real hardware) it waits until the checkpoint dir holds at most
``keep`` checkpoints again, for up to WAIT_S. After each write it records how many ``global_step_N`` dirs hold an
``actor/`` (the checkpoints on disk at that moment) in a JSON file.

usage: python verl_saves_standin.py GENUINE_STEP_DIR RECORD_JSON STOP_AFTER_STEP EXIT_CODE key=value...
(the key=value words are verl's overrides as grpoflow composes them; the stand-in exits with EXIT_CODE after
saving STOP_AFTER_STEP, as a job killed at its time limit would, or 0 at the last step).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

WAIT_S = 20


def on_disk(root: Path) -> list[int]:
    return sorted(int(p.name.split("_")[-1]) for p in root.glob("global_step_*") if (p / "actor").is_dir())


def main() -> int:
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    genuine, record, stop_after, code = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    ov = dict(w.split("=", 1) for w in sys.argv[5:] if "=" in w)
    root = Path(ov["trainer.default_local_dir"])
    keep = int(ov["trainer.max_actor_ckpt_to_keep"])
    freq, total = int(ov["trainer.save_freq"]), int(ov["trainer.total_training_steps"])
    latest = root / "latest_checkpointed_iteration.txt"
    start = int(latest.read_text()) if latest.is_file() else 0

    # Only the rotation bookkeeping of verl's manager is used: its __init__ needs torch.distributed and a model.
    manager = BaseCheckpointManager.__new__(BaseCheckpointManager)
    manager.previous_saved_paths = []
    seen = json.loads(record.read_text()) if record.is_file() else []
    for step in range(start + 1, total + 1):
        if step % freq and step != total:
            continue
        deadline = time.monotonic() + WAIT_S
        while len(on_disk(root)) > keep and time.monotonic() < deadline:
            time.sleep(0.2)
        manager.ensure_checkpoint_capacity(keep)
        actor = root / f"global_step_{step}" / "actor"
        shutil.copytree(genuine / "actor", actor)
        seen.append({"step": step, "on_disk": on_disk(root)})
        manager.register_checkpoint(str(actor), keep)
        shutil.copy(genuine / "data.pt", actor.parent / "data.pt")
        latest.write_text(str(step))
        record.write_text(json.dumps(seen))
        if step == stop_after:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
