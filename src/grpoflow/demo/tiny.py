"""The embedded demo's tiny Qwen3 model: built from a config, tokenizer trained locally, nothing downloaded.

``build_tiny_model(spec, corpus_parquet, out_dir)`` writes a Hugging Face model dir that loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` like any Qwen3 checkpoint:

- a byte-level BPE tokenizer trained with ``tokenizers`` on the corpus Parquet (verl RL rows: the prompts, the
  original answers and the SFT completions built from them), digits split one per token (a tiny model learns
  arithmetic far more easily when ``45`` is ``4`` ``5``), ``<|im_end|>`` as eos, ``<|endoftext|>`` as pad and
  ``<think>``/``</think>`` as added non-special tokens (they must survive ``skip_special_tokens`` decoding, which
  the answer verifier relies on);
- a Qwen3-style chat template (``<|im_start|>role\\n...<|im_end|>\\n``; ``enable_thinking=False`` adds the empty
  think block as Qwen3's own template does);
- randomly initialised Qwen3 weights, seeded by ``spec["seed"]``.

The same spec and corpus give the same bytes (tested), so the rule's output is reproducible.
"""

from __future__ import annotations

import json
import logging
import re

from grpoflow.errors import ConfigError
from grpoflow.io import atomic_dir

log = logging.getLogger(__name__)

EOS = "<|im_end|>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = [PAD, "<|im_start|>", EOS]
THINK_TOKENS = ["<think>", "</think>"]
_THINK_TAG = re.compile("|".join(re.escape(t) for t in THINK_TOKENS))

# Qwen3's template reduced to what a plain chat needs; prefix-preserving (the rendered prompt is a prefix of the
# rendered prompt + completion), which TRL's prompt/completion SFT and GRPO tokenisation rely on.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def corpus_texts(corpus_parquet: str) -> list[str]:
    """The texts the tokenizer is trained on: every message (with its role), original answer and demo SFT
    completion."""
    from grpoflow.demo.sft import row_completion
    from grpoflow.training.common import read_rl_rows

    rows = read_rl_rows(corpus_parquet, "the tiny model's tokenizer corpus (demo.sft.dataset)")
    texts = []
    for row in rows:
        texts.extend(f"{m['role']}\n{m['content']}" for m in row["prompt"])
        texts.append((row.get("extra_info") or {}).get("answer") or "")
        texts.append("assistant\n" + row_completion(row))
    # The think tags become whole tokens of their own: keep BPE from spending merges on their pieces.
    return [piece for t in texts for piece in _THINK_TAG.split(t)]


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` with single-digit pre-tokenisation and the Qwen special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tok


def model_config(spec: dict, vocab_size: int, eos_id: int, pad_id: int):
    """The tiny model's ``Qwen3Config`` for ``spec`` (the config's ``demo.tiny_model``, schema defaults filled)."""
    from transformers import Qwen3Config

    hidden, heads = spec["hidden_size"], spec["num_attention_heads"]
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=spec["num_key_value_heads"],
        head_dim=hidden // heads,
        max_position_embeddings=spec["max_position_embeddings"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )


def build_tiny_model(spec: dict, corpus_parquet: str, out_dir: str) -> dict:
    """Write the tiny model + tokenizer to ``out_dir`` (atomically); returns a summary (sizes, token ids)."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3ForCausalLM

    hidden, heads = spec["hidden_size"], spec["num_attention_heads"]
    if hidden % heads:
        raise ConfigError(
            f"config error: demo.tiny_model.hidden_size = {hidden} is not divisible by num_attention_heads = {heads}: pick sizes that divide"
        )
    if heads % spec["num_key_value_heads"]:
        raise ConfigError(
            f"config error: demo.tiny_model.num_attention_heads = {heads} is not a multiple of num_key_value_heads = {spec['num_key_value_heads']}: pick values that divide"
        )

    raw = train_tokenizer(corpus_texts(corpus_parquet), spec["vocab_size"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=spec["max_position_embeddings"],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(EOS), tokenizer.convert_tokens_to_ids(PAD)
    config = model_config(spec, len(tokenizer), eos_id, pad_id)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(spec["seed"])
    try:
        model = Qwen3ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False)
    n_params = sum(p.numel() for p in model.parameters())

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    summary = {"parameters": n_params, "vocab_size": len(tokenizer), "eos_token_id": eos_id, "pad_token_id": pad_id}
    log.info("tiny Qwen3 model in %s: %s", out_dir, json.dumps(summary))
    return summary
