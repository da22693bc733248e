"""What both generation backends share: which model to load, prompt rendering, stop tokens, decoding.

Prompts are rendered once, here, with the model's own tokenizer chat template (the one training used) and
tokenized here too; the backends only turn token ids into token ids. So transformers and vLLM see the same
prompt tokens and their completions are cut, counted and decoded the same way.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from grpoflow.discovery import check_remote_code
from grpoflow.errors import DataError, GrpoflowError
from grpoflow.hubid import HUB_ID
from grpoflow.io import read_json

log = logging.getLogger(__name__)

# End-of-turn / end-of-text tokens of the Qwen family (and ChatML templates generally): generation stops at any.
_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


@dataclass(frozen=True)
class ModelSource:
    name: str
    kind: str  # grpo | sft | external
    path: str  # local HF model dir or Hub id
    trust_remote_code: bool = False
    experiment: str | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "trust_remote_code": self.trust_remote_code,
            "experiment": self.experiment,
        }


@dataclass(frozen=True)
class Completion:
    text: str  # the response, up to (not including) the stop token
    n_tokens: int  # generated tokens, not counting the stop token
    finish_reason: str  # "stop": a stop token ended it; "length": it hit max_new_tokens

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


def resolve_model(name: str, entry: dict, inputs: dict) -> ModelSource:
    """Where model ``name`` (an entry of the resolved config's ``models``) is loaded from."""
    kind = entry["kind"]
    if kind == "grpo":
        return ModelSource(name, kind, inputs["model"], experiment=entry.get("experiment"))
    if kind == "sft":
        record = read_json(inputs["sft"])
        path = record.get("path")
        if not path:
            raise DataError(
                f"{inputs['sft']} has no 'path' of the SFT model: rerun discover_sft_checkpoint (snakemake -R discover_sft_checkpoint)"
            )
        trust = record.get("trust_remote_code", (entry.get("sft") or {}).get("trust_remote_code", False))
        return ModelSource(name, kind, path, trust_remote_code=bool(trust), experiment=entry.get("experiment"))
    path = entry["path"]
    if inputs.get("hub_manifest"):
        # A Hub id fetched by download_model: its pinned snapshot (jobs run offline).
        from grpoflow.models import snapshot_of

        path = snapshot_of(inputs["hub_manifest"])
    if not os.path.isdir(path) and (os.path.exists(path) or not HUB_ID.match(path)):
        raise DataError(
            f"evaluation.models.{name}.path = {path!r} is neither a model directory nor a Hub id (org/name)"
        )
    trust = bool(entry.get("trust_remote_code", False))
    if os.path.isdir(path):
        check_remote_code(Path(path), trust, f"evaluation.models.{name}.trust_remote_code")
    return ModelSource(name, kind, path, trust_remote_code=trust)


def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, trust_remote_code=source.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise GrpoflowError(
            f"cannot load the tokenizer of model {source.name} from {source.path}: {first_line(exc)}"
        ) from None
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"model {source.name} ({source.path}) has no chat template: evaluation renders prompts with the template training used; save the tokenizer with one (chat_template.jinja)"
        )
    return tokenizer


def render_prompts(tokenizer, conversations: list[list[dict]], chat_template_kwargs: dict | None = None) -> list[str]:
    """Each conversation as the text the model sees, ending in the assistant turn's opening."""
    kwargs = dict(chat_template_kwargs or {})
    return [
        tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)
        for msgs in conversations
    ]


def encode_prompts(tokenizer, texts: list[str]) -> list[list[int]]:
    # The rendered template already holds every special token; adding BOS/EOS again would change the prompt.
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def stop_token_ids(tokenizer, source: ModelSource) -> list[int]:
    """Token ids that end a completion: the tokenizer's EOS, the model's generation_config EOS, and the
    ChatML end-of-turn/end-of-text tokens when the vocabulary has them."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen_cfg = os.path.join(source.path, "generation_config.json")
    if os.path.isfile(gen_cfg):
        with open(gen_cfg, encoding="utf-8") as fh:
            eos = json.load(fh).get("eos_token_id")
        ids.extend(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
    vocab = tokenizer.get_vocab()
    ids.extend(vocab[t] for t in _STOP_TOKENS if t in vocab)
    return sorted(set(ids))


def warn_beyond_positions(prompt_ids: list[list[int]], max_new_tokens: int, limit: int | None) -> None:
    """Log when the longest prompt plus ``max_new_tokens`` runs past the model's ``max_position_embeddings``."""
    longest = max(len(p) for p in prompt_ids)
    if limit and longest + max_new_tokens > limit:
        log.warning(
            "the longest prompt (%d tokens) + max_new_tokens (%d) exceeds the model's max_position_embeddings (%d): late tokens may degrade",
            longest,
            max_new_tokens,
            limit,
        )


def pad_token_id(tokenizer, stop_ids: list[int]) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return stop_ids[0]


def completion_from_ids(tokenizer, token_ids, stop_ids: list[int], finish_reason: str | None = None) -> Completion:
    """Cut generated ids at the first stop token and decode. ``finish_reason`` (vLLM's) wins when given;
    otherwise a completion without a stop token ran out of max_new_tokens."""
    stops = set(stop_ids)
    ids = [int(t) for t in token_ids]
    cut = next((i for i, t in enumerate(ids) if t in stops), None)
    content = ids if cut is None else ids[:cut]
    if finish_reason is None:
        finish_reason = "length" if cut is None else "stop"
    # Decoded as verl's and TRL's reward paths decode completions (skip_special_tokens), so evaluation grades
    # the very text training rewards saw; Qwen's <think> tags are not special tokens and survive.
    text = tokenizer.decode(content, skip_special_tokens=True)
    return Completion(text=text, n_tokens=len(content), finish_reason="length" if finish_reason == "length" else "stop")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
