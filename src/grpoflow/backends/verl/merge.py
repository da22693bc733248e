"""merge_checkpoint for the verl backend: FSDP/FSDP2 shards → a plain Hugging Face model dir, with verl's merger::

    python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <tmp>

With LoRA, verl's merger writes the frozen base weights plus the adapter in ``lora_adapter/`` and leaves them
unmerged; the adapter is merged into those base weights with PEFT (grpoflow.training.merging.peft_merge). A LoRA-only
checkpoint (``checkpoint.save_lora_only``) has no base weights: its adapter is merged into the SFT start instead.
Runs in the cluster environment (verl).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grpoflow.errors import DataError, GrpoflowError
from grpoflow.training.merging import LORA_SUBDIR, adapter_info, copy_tokenizer, peft_merge

log = logging.getLogger("grpoflow.merge")


def _world_size_from_shards(actor: Path) -> int | None:
    sizes = {p.name.split("_")[3] for p in actor.glob("model_world_size_*_rank_*.pt")}
    return int(sizes.pop()) if len(sizes) == 1 and next(iter(sizes), "").isdigit() else None


def _is_lora_only(actor: Path, world_size: int) -> bool:
    """True when the shards hold only LoRA tensors (verl's checkpoint.save_lora_only)."""
    import torch

    shard = actor / f"model_world_size_{world_size}_rank_0.pt"
    state = torch.load(shard, map_location="cpu", mmap=True, weights_only=False)  # keys only; mmap: no copy
    keys = list(state)
    return bool(keys) and all("lora_" in k or ".adapter_" in k for k in keys)


def merge(checkpoint_dir: str, step: int, base: str, out: Path) -> dict:
    from grpoflow.backends.verl import ckpt as ck

    actor = ck.actor_dir(checkpoint_dir, step)
    if not actor.is_dir():
        have = sorted(ck.step_dirs(checkpoint_dir))
        raise DataError(
            f"{actor} does not exist (steps in {checkpoint_dir}: {have or 'none'}): set merge_step to one of them, or keep more checkpoints (grpo.max_checkpoints_to_keep)"
        )
    world = _world_size_from_shards(actor)
    if not (actor / "fsdp_config.json").is_file():
        fix = (
            f"write {actor}/fsdp_config.json containing {json.dumps({'FSDP_version': 2, 'world_size': world})} (world size from the shard names; FSDP_version 1 for strategy fsdp)"
            if world
            else "the checkpoint has no model_world_size_*_rank_*.pt shards either: it is incomplete; merge another step (merge_step)"
        )
        raise DataError(
            f"{actor} has no fsdp_config.json, which verl's merger needs (checkpoints from older verl lack it): {fix}"
        )
    if not (actor / "huggingface" / "config.json").is_file():
        raise DataError(
            f"{actor}/huggingface/config.json is missing: rank 0 did not finish saving step {step}; merge another step (merge_step)"
        )
    world = json.loads((actor / "fsdp_config.json").read_text())["world_size"]
    lora_only = _is_lora_only(actor, world)

    scratch = Path(tempfile.mkdtemp(prefix=".verl-merge.", dir=out.parent))
    try:
        cmd = [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor),
            "--target_dir",
            str(scratch),
        ]
        log.info("running: %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(proc.stdout[-20000:] + proc.stderr[-20000:])
        if proc.returncode != 0:
            last = next((ln for ln in reversed(proc.stderr.strip().splitlines()) if ln.strip()), "no output")
            raise GrpoflowError(f"verl's model merger failed on {actor} (exit {proc.returncode}): {last}")
        adapter = scratch / LORA_SUBDIR
        if adapter.is_dir():
            merge_base = base if lora_only else str(scratch)
            peft_merge(merge_base, adapter, out)
            shutil.copytree(adapter, out / LORA_SUBDIR)
            copy_tokenizer(scratch, out)
        else:
            for item in scratch.iterdir():
                shutil.move(str(item), out / item.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "source": str(actor),
        "command": " ".join(cmd[1:]),
        "lora": adapter_info(out / LORA_SUBDIR),
        "lora_only_checkpoint": lora_only,
    }
