"""merge_checkpoint on genuine TRL checkpoints (grpoflow's TRL backend trained the tiny model for 2 steps):
a full fine-tune is taken as saved, a PEFT adapter is merged into the SFT start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mergekit import load_merged

from grpoflow.errors import GrpoflowError
from grpoflow.merge import merge_checkpoint
from grpoflow.training.merging import LORA_SUBDIR

pytestmark = pytest.mark.slow


def test_full_finetune_checkpoint(trl_full_run: Path, tmp_path):
    ckpt = trl_full_run / "checkpoints" / "checkpoint-2"
    out = tmp_path / "model"
    info = merge_checkpoint(
        "trl",
        str(trl_full_run / "checkpoints"),
        "last",
        str(trl_full_run / "sft.json"),
        str(trl_full_run / "training_complete.json"),
        str(out),
    )
    saved, merged = load_merged(ckpt), load_merged(out)
    assert set(saved) == set(merged)
    assert all(torch.equal(saved[k], merged[k]) for k in saved)
    assert not any(
        (out / f).exists() for f in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin")
    )
    assert info["lora"] is None and info["checks"]["tokenizer"]["chat_template"]
    assert info["checks"]["generation_config"] == "equal to the SFT start's"


def test_peft_adapter_is_merged_into_the_sft_start(trl_lora_run: Path, tmp_path):
    import shutil

    from peft import PeftModel
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    sft = json.loads((trl_lora_run / "sft.json").read_text())["path"]
    # Two GRPO steps on a tiny model barely move LoRA's zero-initialised B; give B visible values so the test
    # can tell a merged adapter from an ignored one (the checkpoint's layout stays TRL's own).
    ckpts = tmp_path / "checkpoints"
    shutil.copytree(trl_lora_run / "checkpoints", ckpts)
    ckpt = ckpts / "checkpoint-2"
    adapter = load_file(ckpt / "adapter_model.safetensors")
    gen = torch.Generator().manual_seed(0)
    adapter = {
        k: (torch.randn(v.shape, generator=gen) * 0.05).to(v.dtype) if "lora_B" in k else v for k, v in adapter.items()
    }
    save_file(adapter, ckpt / "adapter_model.safetensors")
    out = tmp_path / "model"
    info = merge_checkpoint(
        "trl", str(ckpts), 2, str(trl_lora_run / "sft.json"), str(trl_lora_run / "training_complete.json"), str(out)
    )
    assert info["lora"]["r"] == 4
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sft), str(ckpt))
    ids = torch.arange(3, 20).unsqueeze(0)
    with torch.no_grad():
        want, got = reference(input_ids=ids).logits, merged(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(sft)(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4), "merged model = base + adapter"
    assert not torch.allclose(got, base, atol=1e-4), "the adapter changed the model"
    assert (out / LORA_SUBDIR / "adapter_config.json").is_file()


def test_incomplete_checkpoint_is_refused(trl_full_run: Path, tmp_path):
    import shutil

    ckpts = tmp_path / "checkpoints"
    shutil.copytree(trl_full_run / "checkpoints", ckpts)
    (ckpts / "checkpoint-2" / "trainer_state.json").unlink()
    with pytest.raises(GrpoflowError, match="checkpoint-2 is incomplete"):
        merge_checkpoint(
            "trl",
            str(ckpts),
            "last",
            str(trl_full_run / "sft.json"),
            str(trl_full_run / "training_complete.json"),
            str(tmp_path / "model"),
        )
