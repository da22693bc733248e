"""What the backends' merges share (``merge_checkpoint``, grpoflow.merge): a PEFT LoRA adapter's settings and its merge
into the start model, and the tokenizer copy. Below every backend, which imports it; grpoflow.merge, above them, asks
each backend's ``merge`` through the registry.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from grpoflow.errors import GrpoflowError

log = logging.getLogger("grpoflow.merge")

LORA_SUBDIR = "lora_adapter"  # where verl's merger puts the adapter; kept in the output for LoRA serving


def adapter_info(adapter: Path) -> dict | None:
    cfg = adapter / "adapter_config.json"
    if not cfg.is_file():
        return None
    data = json.loads(cfg.read_text())
    return {k: data.get(k) for k in ("r", "lora_alpha", "target_modules", "use_rslora")}


def peft_merge(base: str, adapter: Path, out: Path) -> None:
    """Merge a PEFT LoRA adapter into ``base`` (computed in float32, saved in the base's dtype)."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(base)
    dtype = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model, info = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, output_loading_info=True)
    missing = info.get("missing_keys") or []
    if missing:
        raise GrpoflowError(
            f"the base model {base} lacks {len(missing)} weight(s) (e.g. {missing[0]}): cannot merge the LoRA adapter into it"
        )
    model = PeftModel.from_pretrained(model, str(adapter))
    merged = model.merge_and_unload()
    if any("lora_" in n for n, _ in merged.named_parameters()):
        raise GrpoflowError(f"PEFT left LoRA layers in the model after merging {adapter}")
    merged.to(dtype).save_pretrained(out, safe_serialization=True)
    log.info("merged LoRA adapter %s into %s (saved as %s)", adapter, base, dtype)


def copy_tokenizer(src: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src).save_pretrained(out)
