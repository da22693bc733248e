"""merge_checkpoint on genuine verl FSDP2 checkpoints (written by verl's FSDPCheckpointManager under torchrun):
every merged tensor equals the gathered reference; LoRA is merged into the base with PEFT; the checks and the
one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from mergekit import copy_tree, load_merged

from grpoflow.errors import GrpoflowError
from grpoflow.merge import MERGE_RECORD, merge_checkpoint
from grpoflow.training.merging import LORA_SUBDIR

pytestmark = [pytest.mark.verl, pytest.mark.slow]


def test_full_checkpoint_merges_to_the_gathered_weights(verl_full_ckpt, run_files, tmp_path, tiny_base):
    sft, marker = run_files
    out = tmp_path / "results" / "model"
    info = merge_checkpoint("verl", str(verl_full_ckpt), "last", sft, marker(3), str(out))

    reference = torch.load(verl_full_ckpt / "reference.pt")["state_dict"]
    merged = load_merged(out)
    # tie_word_embeddings: HF saves the embedding once
    expected = {k: v for k, v in reference.items() if k != "lm_head.weight"}
    assert set(merged) == set(expected)
    for key, ref in expected.items():
        assert merged[key].dtype == torch.bfloat16
        assert torch.equal(merged[key], ref), key
    base = load_merged(Path(tiny_base))
    assert not torch.equal(
        merged["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"].bfloat16()
    ), "the trained step, not the base"

    assert info["step"] == 3 and info["lora"] is None
    assert info["checks"]["generation_config"] == "equal to the SFT start's"
    assert info["checks"]["tokenizer"]["chat_template"] is True
    assert json.loads((out / MERGE_RECORD).read_text())["source"].endswith("global_step_3/actor")
    assert not list(out.parent.glob(".*tmp")) and not list(out.parent.glob(".verl-merge.*")), "no scratch left behind"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    assert model.generate(**ids, max_new_tokens=3, do_sample=False).shape[-1] > ids["input_ids"].shape[-1]


def test_lora_checkpoint_is_merged_into_the_base(verl_lora_ckpt, run_files, tmp_path):
    sft, marker = run_files
    out = tmp_path / "model"
    info = merge_checkpoint("verl", str(verl_lora_ckpt), 2, sft, marker(2), str(out))

    ref = torch.load(verl_lora_ckpt / "reference.pt")
    state, scaling = ref["state_dict"], ref["lora_scaling"]
    merged = load_merged(out)
    assert not any("lora_" in k or "base_layer" in k for k in merged), "a plain HF model"
    checked = 0
    for key, value in state.items():
        if not key.endswith(".base_layer.weight"):
            continue
        prefix = key[: -len(".base_layer.weight")]
        a = state[f"{prefix}.lora_A.default.weight"].float()
        b = state[f"{prefix}.lora_B.default.weight"].float()
        expected = (value.float() + scaling * (b @ a)).to(torch.bfloat16)
        got = merged[prefix.replace("base_model.model.", "") + ".weight"]
        # float32 merge, one bfloat16 rounding: at most one ulp apart
        assert torch.allclose(got.float(), expected.float(), rtol=2**-7, atol=1e-6), prefix
        assert not torch.equal(got, value), f"{prefix}: the adapter changed nothing"
        checked += 1
    assert checked == 2 * 7  # 2 layers x (q, k, v, o, gate, up, down)
    plain = [k for k in state if "lora_" not in k and "base_layer" not in k and k != "base_model.model.lm_head.weight"]
    for key in plain:  # norms, embeddings: untouched by LoRA, exactly the checkpoint's
        assert torch.equal(merged[key.replace("base_model.model.", "")], state[key]), key
    assert info["lora"]["r"] == 4 and info["lora"]["lora_alpha"] == 8
    assert (out / LORA_SUBDIR / "adapter_model.safetensors").is_file()


def test_missing_fsdp_config_names_the_fix(verl_full_ckpt, run_files, tmp_path):
    sft, marker = run_files
    ckpt = copy_tree(verl_full_ckpt, tmp_path / "ckpt")
    (ckpt / "global_step_3" / "actor" / "fsdp_config.json").unlink()
    with pytest.raises(GrpoflowError) as err:
        merge_checkpoint("verl", str(ckpt), "last", sft, marker(3), str(tmp_path / "model"))
    msg = str(err.value)
    assert "fsdp_config.json" in msg and '{"FSDP_version": 2, "world_size": 2}' in msg and "\n" not in msg
    assert not (tmp_path / "model").exists()


def test_missing_step_lists_the_existing_ones(verl_full_ckpt, run_files, tmp_path):
    sft, marker = run_files
    with pytest.raises(GrpoflowError, match=r"global_step_7/actor does not exist \(steps in .*: \[3\]\).*merge_step"):
        merge_checkpoint("verl", str(verl_full_ckpt), 7, sft, marker(3), str(tmp_path / "model"))


def test_generation_config_must_match_the_sft_start(verl_full_ckpt, tmp_path, tiny_base):
    from grpoflow.discovery import discover_to_file
    from grpoflow.io import atomic_write_json

    other = copy_tree(Path(tiny_base), tmp_path / "other-sft")
    cfg = json.loads((other / "generation_config.json").read_text())
    cfg["temperature"] = 0.3
    (other / "generation_config.json").write_text(json.dumps(cfg))
    discover_to_file({"model": str(other)}, str(tmp_path / "sft.json"))
    atomic_write_json(tmp_path / "marker.json", {"final_step": 3})
    with pytest.raises(GrpoflowError, match="generation_config differs from the SFT start's .* in temperature"):
        merge_checkpoint(
            "verl",
            str(verl_full_ckpt),
            "last",
            str(tmp_path / "sft.json"),
            str(tmp_path / "marker.json"),
            str(tmp_path / "model"),
        )
    assert not (tmp_path / "model").exists()


def test_a_failed_merge_keeps_the_previous_model(verl_full_ckpt, run_files, tmp_path):
    sft, marker = run_files
    out = tmp_path / "model"
    merge_checkpoint("verl", str(verl_full_ckpt), "last", sft, marker(3), str(out))
    before = sorted(p.name for p in out.iterdir())
    ckpt = copy_tree(verl_full_ckpt, tmp_path / "broken")
    for shard in (ckpt / "global_step_3" / "actor").glob("model_world_size_2_rank_1.pt"):
        shard.write_bytes(b"truncated")
    with pytest.raises(GrpoflowError, match="verl's model merger failed"):
        merge_checkpoint("verl", str(ckpt), "last", sft, marker(3), str(out))
    assert sorted(p.name for p in out.iterdir()) == before
    shutil.rmtree(ckpt)
