"""Every reward of the source recipes, declared once in the registry.

Per-sample rewards take a ``Sample`` (completion text, ground truth, token count when the trainer gives one);
group-level rewards take the list of samples of one prompt. Names follow the recipes:

- Kaggle Fast-Math-R1 / verl (000): ``format2``, ``cosine``, ``length``
- TRL Qwen3-0.6B ablations (002): ``format``, ``tag_count``, ``accuracy``, ``cosine``, ``length``, ``repetition_penalty``
- Tunix TPU (003): ``match_format_exactly``, ``match_format_approximately``, ``check_answer``, ``check_numbers``
- binary verifier (004): ``binary``, ``boxed_binary`` (the recipe's own: boxed answers only)
- DAPO: ``soft_overlong``

Length unit: **tokens** when the trainer supplies them (TRL's ``completion_ids``, verl's response mask via the
grpoflow reward manager), otherwise characters — counted in ``stats()["length_in_chars"]`` and warned about
once, because ``max_len`` values are meant in tokens.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards import extract as _extract
from grpoflow.rewards.numbers import parse_number
from grpoflow.rewards.registry import BOOLEAN, TAG, Param, cross_check, integer, nullable, number, register
from grpoflow.rewards.tag_format import tag as _tag
from grpoflow.rewards.tag_format import tag_format_match, tag_format_text
from grpoflow.rewards.verifier import Verdict, count, verify

__all__ = ["Sample", "tag_format_match", "tag_format_text", "kimi_length"]

log = logging.getLogger("grpoflow.rewards")


@dataclass
class Sample:
    """One completion to score. ``n_tokens``: its length in tokens (incl. EOS) when the trainer knows it."""

    completion: str
    ground_truth: str
    n_tokens: int | None = None
    _verdict: Verdict | None = field(default=None, repr=False)

    @property
    def verdict(self) -> Verdict:
        if self._verdict is None:
            self._verdict = verify(self.completion, self.ground_truth)
        return self._verdict

    @property
    def text(self) -> str:
        """The completion without chat-template end tokens (convention §1.4)."""
        return _extract.strip_end_tokens(self.completion)

    def length(self) -> int:
        if self.n_tokens is not None:
            return int(self.n_tokens)
        _warn_chars()
        return len(self.text)


_chars_warned = False


def _warn_chars() -> None:
    global _chars_warned
    count("length_in_chars")
    if not _chars_warned:
        _chars_warned = True
        log.warning(
            "grpoflow.rewards: no token counts were given, so completion lengths are measured in characters "
            "(length parameters such as cosine.max_len are meant in tokens)"
        )


# ---------------------------------------------------------------------------------------------------------------
# Correctness


@register("accuracy", uses_verdict=True)
def accuracy(s: Sample) -> float:
    """1.0 if the final answer is correct (docs/answer-convention.md), else 0.0."""
    return 1.0 if s.verdict.correct else 0.0


@register(
    "binary",
    uses_verdict=True,
    params={
        "correct": Param(1.0, number(), "reward for a correct answer"),
        "wrong": Param(-1.0, number(), "reward for a wrong answer"),
        "no_answer": Param(-0.5, number(), "reward when no final answer is found"),
    },
)
def binary(s: Sample, correct: float, wrong: float, no_answer: float) -> float:
    """The binary verifier of the Qwen2.5-Math recipe: +1 correct, -1 wrong, -0.5 when no answer is found."""
    v = s.verdict
    return correct if v.correct else (wrong if v.found else no_answer)


@register(
    "boxed_binary",
    uses_verdict=True,
    params={
        "correct": Param(1.0, number(), "reward for a correct boxed answer"),
        "wrong": Param(-1.0, number(), "reward for a wrong boxed answer"),
        "no_answer": Param(-0.5, number(), "reward when the completion has no closed \\boxed{}"),
    },
)
def boxed_binary(s: Sample, correct: float, wrong: float, no_answer: float) -> float:
    """Recipe 004's reward as its reward_utils defines it: the answer is read from the last ``\\boxed{}`` only, so a
    completion whose final answer is in another form ("The answer is 42", ``<answer>``, ``####``) gets
    ``no_answer`` where ``binary`` would grade it."""
    v = s.verdict
    if v.source != "boxed":
        return no_answer
    return correct if v.correct else wrong


# ---------------------------------------------------------------------------------------------------------------
# Format (open-r1 / TRL recipe, Kaggle recipe)


def strict_format_ok(text: str, think: str, answer: str) -> bool:
    """``text`` is ``<think>C1</think><answer>C2</answer>`` with whitespace around and between the blocks only,
    no ``<think>`` inside C1 and no ``<answer>`` inside C2 (open-r1's format regex, decided by string scans in
    linear time: its tempered ``(?:(?!<think>).)*?`` backtracks, and RE2 has no look-ahead).

    Why the scans decide it: C2 cannot contain ``<answer>``, so the answer block opens at the last ``<answer>``;
    only whitespace may precede it after ``</think>``, which fixes C1."""
    (to, tc), (ao, ac) = _tag(think), _tag(answer)
    s = text.strip()
    if not (s.startswith(to) and s.endswith(ac)) or len(s) < len(to) + len(ac):
        return False
    middle = s[len(to) : len(s) - len(ac)]
    k = middle.rfind(ao)
    if k < 0:
        return False
    before = middle[:k].rstrip()
    return before.endswith(tc) and to not in before[: len(before) - len(tc)]


@register(
    "format",
    params={
        "reasoning_tag": Param("think", TAG, "tag around the reasoning"),
        "answer_tag": Param("answer", TAG, "tag around the answer"),
    },
)
def format_(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """1.0 if the completion is exactly ``<think>…</think><answer>…</answer>`` (whitespace between and around
    the blocks allowed, nothing else), else 0.0."""
    return 1.0 if strict_format_ok(s.text, reasoning_tag, answer_tag) else 0.0


@register(
    "tag_count",
    params={
        "reasoning_tag": Param("think", TAG, "tag around the reasoning"),
        "answer_tag": Param("answer", TAG, "tag around the answer"),
    },
)
def tag_count(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """0.25 for each of ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` that appears exactly once."""
    text = s.text
    return sum(0.25 for t in (*_tag(reasoning_tag), *_tag(answer_tag)) if text.count(t) == 1)


@register("format2")
def format2(s: Sample) -> float:
    """1.0 if a non-empty, closed ``\\boxed{…}`` appears before ``</think>`` (the Kaggle Fast-Math-R1 format:
    the answer is boxed inside the reasoning, so generation may stop at ``</think>``), else 0.0."""
    text = s.text
    cut = text.rfind(_extract.THINK_CLOSE)
    if cut < 0:
        return 0.0
    # Top-level boxes suffice: a non-empty box inside another makes that one non-empty too.
    return (
        1.0
        if any(_extract.unwrap_boxes(b.content) for b in _extract.top_level(_extract.find_boxes(text[:cut])))
        else 0.0
    )


# ---------------------------------------------------------------------------------------------------------------
# Length shaping


def _cosine_check(p: dict) -> str | None:
    if p["min_value_correct"] > p["max_value_correct"]:
        return "min_value_correct must be <= max_value_correct"
    # No order is required of the wrong-answer values: open-r1's GRPO script defaults (cosine_min_value_wrong 0.0,
    # cosine_max_value_wrong -0.5, src/open_r1/configs.py) give min > max, which recipe 002 ran with (a short wrong
    # answer earns 0.0, a long one -0.5).
    return None


cross_check("cosine")(_cosine_check)


@register(
    "cosine",
    uses_verdict=True,
    uses_length=True,
    params={
        "min_value_wrong": Param(-1.0, number(), "reward of a wrong answer of length 0"),
        "max_value_wrong": Param(-0.1, number(), "reward of a wrong answer of length >= max_len"),
        "min_value_correct": Param(0.1, number(), "reward of a correct answer of length >= max_len"),
        "max_value_correct": Param(1.0, number(), "reward of a correct answer of length 0"),
        "max_len": Param(30000, integer(exclusiveMinimum=0), "length (tokens) at which the schedule ends"),
        "clip_len": Param(True, BOOLEAN, "cap progress L/max_len at 1 (false: the cosine keeps oscillating)"),
        "length_unit": Param(
            "tokens",
            {"type": "string", "enum": ["tokens", "characters"]},
            "what L counts: tokens (characters when the trainer gives none), or characters of the completion "
            "text as open-r1's cosine_scaled_reward counts them (len(content))",
        ),
    },
)
def cosine(
    s: Sample,
    min_value_wrong: float,
    max_value_wrong: float,
    min_value_correct: float,
    max_value_correct: float,
    max_len: int,
    clip_len: bool,
    length_unit: str = "tokens",
) -> float:
    """Length-scaled correctness (open-r1 ``cosine_scaled_reward``): with progress p = L/max_len, a correct
    answer earns from ``max_value_correct`` (p=0) down to ``min_value_correct`` (p=1); a wrong one (or no answer)
    from ``min_value_wrong`` (p=0) up to ``max_value_wrong`` (p=1): short right answers are best, long wrong
    ones are punished less than short wrong ones. L is in tokens (characters when none are given), or with
    ``length_unit: characters`` the completion text's characters, as open-r1 counts (``gen_len = len(content)``;
    open-r1 also never clips: ``clip_len: false``)."""
    progress = (len(s.text) if length_unit == "characters" else s.length()) / max_len
    if clip_len:
        progress = min(progress, 1.0)
    if s.verdict.correct:
        lo, hi = min_value_correct, max_value_correct
    else:
        lo, hi = max_value_wrong, min_value_wrong  # swapped: wrong answers rise towards max_value_wrong
    return lo + 0.5 * (hi - lo) * (1.0 + math.cos(progress * math.pi))


def kimi_length(lengths: list[float], correct: list[bool]) -> list[float]:
    """Kimi 1.5 length reward for one group: λ = 0.5 − (L − Lmin)/(Lmax − Lmin); correct → λ, wrong → min(0, λ);
    all 0 when every length is equal. (Shared with the verl advantage estimator.)"""
    lo, hi = min(lengths, default=0), max(lengths, default=0)
    if hi == lo:
        return [0.0] * len(lengths)
    out = []
    for n, ok in zip(lengths, correct):
        lam = 0.5 - (n - lo) / (hi - lo)
        out.append(lam if ok else min(0.0, lam))
    return out


@register("length", group=True, uses_verdict=True, uses_length=True)
def length(samples: list[Sample]) -> list[float]:
    """Kimi 1.5 length reward, per prompt group: λ = 0.5 − (L − Lmin)/(Lmax − Lmin); a correct answer earns λ,
    a wrong one min(0, λ); all 0 when every length is equal. L in tokens when given, else characters."""
    return kimi_length([x.length() for x in samples], [x.verdict.correct for x in samples])


@register(
    "repetition_penalty",
    params={
        "ngram_size": Param(40, integer(minimum=1), "n-gram size in words"),
        "max_penalty": Param(-0.05, number(maximum=0), "penalty when every n-gram repeats (<= 0)"),
    },
)
def repetition_penalty(s: Sample, ngram_size: int, max_penalty: float) -> float:
    """open-r1 repetition penalty: ``max_penalty × (1 − distinct n-grams / n-grams)`` over lower-cased words;
    0 for completions shorter than one n-gram."""
    words = s.text.lower().split()
    if max_penalty == 0 or len(words) < ngram_size:
        return 0.0
    total = len(words) - ngram_size + 1
    distinct = len({tuple(words[i : i + ngram_size]) for i in range(total)})
    return (1.0 - distinct / total) * max_penalty


def _overlong_check(p: dict) -> str | None:
    if p["max_len"] is not None and p["cache"] >= p["max_len"]:
        return f"cache ({p['cache']}) must be smaller than max_len ({p['max_len']})"
    return None


cross_check("soft_overlong")(_overlong_check)


@register(
    "soft_overlong",
    uses_length=True,
    params={
        "max_len": Param(
            None,
            nullable(integer(exclusiveMinimum=0)),
            "maximum completion length in tokens (default: the run's grpo.max_response_length)",
        ),
        "cache": Param(4096, integer(exclusiveMinimum=0), "soft-punishment interval before max_len, in tokens"),
    },
)
def soft_overlong(s: Sample, max_len: int, cache: int) -> float:
    """DAPO soft overlong punishment: 0 up to ``max_len − cache`` tokens, then falling linearly to −1 at
    ``max_len``, −1 beyond."""
    n = s.length()
    if n <= max_len - cache:
        return 0.0
    if n <= max_len:
        return (max_len - cache - n) / cache
    return -1.0


# ---------------------------------------------------------------------------------------------------------------
# The Tunix TPU recipe (GSM8K with <reasoning>/<answer>)

_TPU_TAGS = {
    "reasoning_tag": Param("reasoning", TAG, "tag around the reasoning"),
    "answer_tag": Param("answer", TAG, "tag around the answer"),
}


@register("match_format_exactly", params=dict(_TPU_TAGS))
def match_format_exactly(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """+3.0 when the response is exactly ``<reasoning>…</reasoning>…<answer>…</answer>``, else 0."""
    matched = tag_format_match(tag_format_text(s.completion, reasoning_tag), reasoning_tag, answer_tag)
    return 3.0 if matched is not None else 0.0


@register("match_format_approximately", params=dict(_TPU_TAGS))
def match_format_approximately(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """+0.5 for each of the four tags that appears exactly once, −0.5 for each that does not (range −2…+2)."""
    text = tag_format_text(s.completion, reasoning_tag)
    return sum(0.5 if text.count(t) == 1 else -0.5 for t in (*_tag(reasoning_tag), *_tag(answer_tag)))


def _ratio_score(guess: str, truth: str) -> float:
    g, t = parse_number(guess), parse_number(truth)
    if g is None or t is None:
        return -0.5
    if t.value == 0:
        return 0.5 if g.value == 0 else -1.0
    ratio = g.value / t.value
    if 0.9 <= ratio <= 1.1:
        return 0.5
    if 0.8 <= ratio <= 1.2:
        return 0.25
    return -1.0


@register("check_answer", params=dict(_TPU_TAGS))
def check_answer(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """The TPU recipe's graded answer check on the ``<answer>`` content of an exactly formatted response:
    +3.0 identical to the ground truth, +1.5 identical up to surrounding whitespace, otherwise by the ratio
    answer/truth: +0.5 within ±10 %, +0.25 within ±20 %, −1.0 further off, −0.5 not a number; 0 when the
    format does not match. Numbers are read exactly (``$1,680`` is 1680)."""
    guess = tag_format_match(tag_format_text(s.completion, reasoning_tag), reasoning_tag, answer_tag)
    if guess is None:
        return 0.0
    truth = str(s.ground_truth)
    if guess == truth:
        return 3.0
    if guess.strip() == truth.strip():
        return 1.5
    return _ratio_score(guess, truth)


_FIRST_NUMBER_RE = lre.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


@register("check_numbers", params=dict(_TPU_TAGS))
def check_numbers(s: Sample, reasoning_tag: str, answer_tag: str) -> float:
    """+1.5 when the first number after ``<answer>`` equals the ground truth (exactly, as numbers), else 0."""
    text = tag_format_text(s.completion, reasoning_tag)
    ao, ac = _tag(answer_tag)
    start = text.find(ao)
    if start < 0:
        return 0.0
    body = text[start + len(ao) :]
    end = body.find(ac)
    m = _FIRST_NUMBER_RE.search(body if end < 0 else body[:end])
    if m is None:
        return 0.0
    g, t = parse_number(m.group(0)), parse_number(str(s.ground_truth))
    return 1.5 if g is not None and t is not None and g.value == t.value else 0.0
