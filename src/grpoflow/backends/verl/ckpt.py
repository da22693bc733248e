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
from grpoflow.training import common

LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


def latest_step(checkpoint_dir: str | os.PathLike) -> int | None:
    """The step in latest_checkpointed_iteration.txt, or None when no checkpoint was saved yet."""
    path = Path(checkpoint_dir) / LATEST
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise DataError(
            f"{path} holds {text!r}, not a step number: it was damaged; write the last complete step into it (see the global_step_N dirs) or delete it to start over"
        )
    return int(text)


def step_dirs(checkpoint_dir: str | os.PathLike) -> dict[int, Path]:
    """``global_step_N`` dirs by step N (complete or not)."""
    return common.step_dirs(checkpoint_dir, STEP_DIR)


def checkpoints(checkpoint_dir: str | os.PathLike) -> dict[int, Path]:
    """The complete ``global_step_N`` dirs by step N (the backend interface)."""
    return common.scan_checkpoints(checkpoint_dir, STEP_DIR, lambda path, step: is_complete(path.parent, step))


def actor_dir(checkpoint_dir: str | os.PathLike, step: int) -> Path:
    return Path(checkpoint_dir) / f"global_step_{step}" / "actor"


def is_complete(checkpoint_dir: str | os.PathLike, step: int) -> bool:
    """Rank 0 writes fsdp_config.json after its shards; the trainer writes data.pt after every rank saved."""
    step_root = Path(checkpoint_dir) / f"global_step_{step}"
    return (step_root / "actor" / "fsdp_config.json").is_file() and (step_root / "data.pt").is_file()


# ---- what the checkpoints were trained from (grpoflow.checkpoint_record) ------------------------------------------

# verl overrides that do not change what a step trains, so a rerun may change them and still resume: where and how
# often to save and validate, logging, names, and memory/throughput knobs (a run that ran out of memory must be
# able to resume with offloading or smaller micro-batches). The cluster shape is not here either: verl's FSDP
# shards are per rank, so verl itself refuses to load them on another world size.
NOT_TRAINING = {
    "trainer.total_training_steps",
    "trainer.total_epochs",
    "trainer.save_freq",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "trainer.default_local_dir",
    "trainer.val_before_train",
    "trainer.test_freq",
    "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.n_gpus_per_node",
    "trainer.nnodes",
    "data.val_files",
    "actor_rollout_ref.model.path",
    "data.train_files",  # identified by content instead (start_model, data)
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.actor.fsdp_config.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    # verl.offload_policy: where FSDP2 keeps params, grads and AdamW state (host RAM) and steps the optimizer; the
    # checkpoint holds the same tensors either way (switching it on after an OOM must not block the resume).
    "actor_rollout_ref.actor.fsdp_config.offload_policy",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.enforce_eager",
    "actor_rollout_ref.rollout.free_cache_engine",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "reward.num_workers",
}
# The same kinds of knobs as they appear in verl.extra_overrides (any section).
NOT_TRAINING_SUFFIXES = (
    "micro_batch_size_per_gpu",
    "max_token_len_per_gpu",
    "param_offload",
    "optimizer_offload",
    "offload_policy",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
)


def training_settings(overrides: dict[str, str]) -> dict[str, str]:
    """The overrides that change what is trained (verl key -> value as written on the command line).
    ``trainer.total_training_steps`` counts when the learning-rate schedule is stretched over it (cosine, or a
    warmup ratio): continuing under another total changes the rate of every remaining step."""
    # Paths inside the project (the reward module: $PWD/src/...) as relative ones: moving the project, or a node
    # that mounts it elsewhere, is not a change of settings.
    root = os.getcwd().rstrip("/") + "/"
    out = {
        k: v[len(root) :] if v.startswith(root) else v
        for k, v in overrides.items()
        if k not in NOT_TRAINING and not k.endswith(NOT_TRAINING_SUFFIXES)
    }
    scheduler = overrides.get("actor_rollout_ref.actor.optim.lr_scheduler_type", "constant")
    warmup = overrides.get("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", "0")
    if scheduler != "constant" or warmup not in ("0", "0.0"):
        out["trainer.total_training_steps"] = overrides["trainer.total_training_steps"]
    return dict(sorted(out.items()))


# ---- rotation across attempts -----------------------------------------------------------------------------------

TRASH_PREFIX = ".deleting-"


def rotate(
    checkpoint_dir: str | os.PathLike, keep: int | None, protect: set[int] = frozenset(), while_running: bool = False
) -> list[int]:
    """Keep the newest ``keep`` complete checkpoints at or below ``latest_checkpointed_iteration.txt``, and every
    step in ``protect``; remove the other ``global_step_N`` dirs: older checkpoints, verl's own rotation leftovers
    (it deletes ``actor/`` but leaves ``data.pt``), and saves above the latest step (cut off: verl writes that file
    last and redoes those steps). verl rotates only what its own process saved, so after a resume the earlier
    attempts' checkpoints (~393 GB each for Qwen3-32B: fp32 params + AdamW moments, 12 B × 32.76 B) would otherwise stay forever.

    The newest complete checkpoint is never removed. Each dir is renamed to ``.deleting-global_step_N`` first
    (atomic), then deleted: a kill half-way leaves a hidden dir that the next call finishes, never a
    ``global_step_N`` that looks complete but lacks shards. Returns the removed steps.

    ``while_running``: verl is writing its next save above the latest step, so nothing above it is touched."""
    import shutil

    root = Path(checkpoint_dir)
    for trash in root.glob(f"{TRASH_PREFIX}global_step_*") if root.is_dir() else ():
        shutil.rmtree(trash, ignore_errors=True)
    latest = latest_step(root)
    dirs = step_dirs(root)
    complete = sorted(s for s in dirs if latest is not None and s <= latest and is_complete(root, s))
    kept = set(complete[-keep:] if keep else complete) | (set(protect) & set(complete))
    if complete:
        kept.add(complete[-1])
    if latest is not None:
        kept.add(
            latest
        )  # what resume_mode=auto will load, even if it looks incomplete here: verl must say so, not start over
    removed = []
    for step in sorted(dirs):
        if step in kept or (while_running and (latest is None or step > latest)):
            continue
        trash = root / f"{TRASH_PREFIX}{dirs[step].name}"
        os.replace(dirs[step], trash)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(step)
    return removed
