"""Fixtures for the reward-library tests: a small real tokenizer (for verl's reward loop and TRL's decoding)."""

from __future__ import annotations

import pytest

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_CORPUS = [
    "<think>Natalia sold 48 clips in April and half as many in May: 48 / 2 = 24. Total 48 + 24 = 72.</think>",
    "The answer is \\boxed{72}. So the total is **72** muffins. #### 18",
    "<answer>Tom earns $1,680 in 4 weeks.</answer> \\frac{\\sqrt{3}}{2} x^2 + 2x + 1 = 0",
    "user\nWhat is 12 times 35? assistant\nLet me think step by step.",
] * 20


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> str:
    """A byte-level BPE tokenizer saved as an HF tokenizer dir: ``<|im_end|>`` eos (special), think tags added
    as normal tokens (as Qwen3's, they survive ``skip_special_tokens``)."""
    from transformers import PreTrainedTokenizerFast

    from grpoflow.demo.tiny import EOS, PAD, train_tokenizer

    raw = train_tokenizer(_CORPUS, 400)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)
