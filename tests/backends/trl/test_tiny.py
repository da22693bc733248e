"""The demo's tiny Qwen3: reproducible to the byte, loadable like any HF checkpoint, Qwen3-style chat format."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainkit import TINY_SPEC

from grpoflow.demo.tiny import build_tiny_model
from grpoflow.errors import ConfigError


def files(model_dir: str) -> dict[str, bytes]:
    root = Path(model_dir)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_spec_same_bytes_other_seed_other_weights(tmp_path, arith_parquet, tiny_model):
    again = tmp_path / "again"
    build_tiny_model(TINY_SPEC, arith_parquet["train"], str(again))
    assert files(tiny_model) == files(again)
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
    } <= set(files(again))

    other = tmp_path / "other"
    build_tiny_model({**TINY_SPEC, "seed": 1}, arith_parquet["train"], str(other))
    a, b = files(again), files(other)
    assert a["tokenizer.json"] == b["tokenizer.json"] and a["model.safetensors"] != b["model.safetensors"]


def test_loads_as_a_qwen3_checkpoint_with_a_qwen_chat_format(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.config.model_type == "qwen3" and model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tok) < 300
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert model.config.eos_token_id == tok.eos_token_id
    assert tok.eos_token_id in model.generation_config.eos_token_id

    messages = [{"role": "user", "content": "What is 37 + 45?"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nWhat is 37 + 45?<|im_end|>\n<|im_start|>assistant\n"
    no_think = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think == prompt + "<think>\n\n</think>\n\n"

    completion = "<think>\n37 + 45 = 82\n</think>\n\\boxed{82}"
    ids = tok(completion + "<|im_end|>", add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[0] == "<think>" and "</think>" in pieces and pieces[-1] == "<|im_end|>"
    assert all(len(p.lstrip("Ġ")) <= 1 for p in pieces if p.lstrip("Ġ").isdigit())  # one digit per token
    # <think> is not special: it survives the decoding the verifier sees; <|im_end|> does not.
    assert tok.decode(ids, skip_special_tokens=True) == completion

    import torch

    out = model.generate(
        **tok(prompt, return_tensors="pt", add_special_tokens=False), max_new_tokens=4, do_sample=False
    )
    assert out.shape[1] > len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert isinstance(out, torch.Tensor)


def test_sizes_that_do_not_divide_are_config_errors(tmp_path, arith_parquet):
    with pytest.raises(ConfigError, match="demo.tiny_model.hidden_size"):
        build_tiny_model({**TINY_SPEC, "hidden_size": 66}, arith_parquet["train"], str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()
