"""merge_checkpoint for the Tunix backend: an Orbax checkpoint → a plain Hugging Face model dir.

The start model (the SFT checkpoint the run began from) is loaded into Tunix's Qwen3, the step's trained weights
are restored into it with Tunix's own checkpoint manager (``tunix.sft.checkpoint_manager``: the ``model_params``
item of ``<checkpoint_dir>/actor/<step>``; the optimizer state is not read), and the result is exported with the
start's tensor names, shapes and dtype, config, generation config and tokenizer (grpoflow.backends.tunix.qwen3).
Runs in the Tunix environment, on the host CPU (JAX_PLATFORMS=cpu unless set).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from grpoflow.backends.tunix.ckpt import ACTOR_SUBDIR, checkpoints
from grpoflow.errors import DataError

log = logging.getLogger(__name__)


def merge(checkpoint_dir: str, step: int, base: str, out: Path) -> dict:
    # On the host CPU: a TPU is held by one process at a time (a training of another experiment may hold it),
    # and exporting needs no accelerator.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    from tunix.sft.checkpoint_manager import CheckpointManager

    from grpoflow.backends.tunix import qwen3

    found = checkpoints(checkpoint_dir)
    if step not in found:
        raise DataError(
            f"{Path(checkpoint_dir) / ACTOR_SUBDIR / str(step)} is not a complete Tunix checkpoint (complete ones in {checkpoint_dir}: {sorted(found) or 'none'}): set merge_step to one of them"
        )
    lora = _lora_of(checkpoint_dir)
    mesh = jax.make_mesh(
        (1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2, devices=jax.devices()[:1]
    )
    model = qwen3.load(base, mesh)
    if lora:
        model = qwen3.with_lora(model, lora)  # Tunix saved the adapters only: restore them onto the start model
    manager = CheckpointManager(str((Path(checkpoint_dir) / ACTOR_SUBDIR).absolute()))  # Orbax: absolute only
    try:
        restored, _ = manager.maybe_restore(model, step=step, restore_only_lora_params=bool(lora))
    finally:
        manager.close()
    if restored != step:
        raise DataError(f"Tunix restored step {restored} of {checkpoint_dir}, not {step}")
    info = qwen3.export(model, base, out, lora=lora)
    log.info("exported Tunix step %d (%d tensors) from %s", step, info["tensors"], found[step])
    lora_info = {k: lora[k] for k in ("rank", "alpha", "dropout", "target_modules")} if lora else None
    return {"source": str(found[step]), "lora": lora_info, **info}


def _lora_of(checkpoint_dir: str) -> dict | None:
    """The run's ``grpo.lora`` from the checkpoint dir's record (grpoflow.checkpoint_record), when LoRA was on."""
    from grpoflow import checkpoint_record

    record = checkpoint_record.read_record(checkpoint_dir) or {}
    lora = (((record.get("identity") or {}).get("settings") or {}).get("grpo") or {}).get("lora") or {}
    return lora if lora.get("rank", 0) > 0 else None
