"""merge_checkpoint for the TRL backend: an HF Trainer ``checkpoint-N/`` → a plain Hugging Face model dir. A full
fine-tune's model files are taken as they are; a PEFT adapter is merged into the SFT start
(grpoflow.training.merging.peft_merge) and kept beside it in ``lora_adapter/``."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpoflow.errors import DataError
from grpoflow.training.merging import LORA_SUBDIR, adapter_info, copy_tokenizer, peft_merge

# HF Trainer files in a checkpoint-N/ that are training state, not the model.
TRAINER_STATE_FILES = {"optimizer.pt", "scheduler.pt", "training_args.bin", "trainer_state.json", "scaler.pt"}


def merge(checkpoint_dir: str, step: int, base: str, out: Path) -> dict:
    from grpoflow.backends.trl import ckpt as tc

    ckpt = Path(checkpoint_dir) / f"checkpoint-{step}"
    if not ckpt.is_dir():
        have = sorted(tc.step_dirs(checkpoint_dir))
        raise DataError(
            f"{ckpt} does not exist (checkpoints in {checkpoint_dir}: {have or 'none'}): set merge_step to one of them"
        )
    if not tc.is_complete(ckpt, step):
        raise DataError(
            f"{ckpt} is incomplete (no trainer_state.json naming step {step}): it was cut off while saving; merge another step (merge_step)"
        )
    if tc.is_peft_checkpoint(ckpt):
        peft_merge(base, ckpt, out)
        copy_tokenizer(ckpt, out)
        shutil.copytree(
            ckpt,
            out / LORA_SUBDIR,
            ignore=shutil.ignore_patterns(
                *TRAINER_STATE_FILES, "rng_state*", "tokenizer*", "chat_template*", "special_tokens_map.json", "*.jsonl"
            ),
        )
        lora = adapter_info(ckpt)
    else:
        for item in ckpt.iterdir():
            if (
                item.is_file()
                and item.name not in TRAINER_STATE_FILES
                and not item.name.startswith("rng_state")
                and not item.name.endswith(".jsonl")
            ):
                shutil.copy2(item, out / item.name)
        lora = None
    return {"source": str(ckpt), "lora": lora}
