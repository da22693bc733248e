"""Benchmark metrics: pass@k, maj@k, aggregation, presets, and scoring through the project's verifier."""

from __future__ import annotations

import math
from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.errors import ConfigError
from grpoflow.evaluation.metrics import aggregate, majority_correct, pass_at_k, pass_k_values, score_completion
from grpoflow.evaluation.settings import (
    PRESETS,
    benchmark_settings,
    chat_template_kwargs,
    generation_settings,
    with_defaults,
)
from grpoflow.generation import Completion


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_probability_that_a_random_k_subset_has_a_correct_sample(nck):
    n, c, k = nck
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    exact = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_edges():
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(10, 10, 1) == 1.0 and pass_at_k(10, 6, 5) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(1000, 1, 100) == pytest.approx(0.1)  # no factorial overflow
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    assert pass_k_values(1) == [1] and pass_k_values(8) == [1, 2, 4, 8] and pass_k_values(6) == [1, 2, 4, 6]


def _s(extracted, correct, found=True, tokens=10, truncated=False, source="boxed"):
    return {
        "extracted": extracted,
        "correct": correct,
        "found": found,
        "partial": correct,
        "format_ok": found and source == "boxed",
        "source": source if found else None,
        "response_tokens": tokens,
        "truncated": truncated,
    }


def test_majority_vote():
    assert majority_correct([_s("72", True), _s("71", False), _s("72", True)])
    assert not majority_correct([_s("71", False), _s("7 1", False), _s("72", True)])  # spacing does not split a vote
    assert majority_correct([_s("1,000", True), _s("9", False), _s("1000", True)])
    assert majority_correct([_s("72", True), _s("71", False)])  # tie: the answer seen first
    assert not majority_correct([_s(None, False, found=False), _s(None, False, found=False)])
    assert majority_correct(
        [_s(None, False, found=False), _s(None, False, found=False), _s("5", True)]
    )  # no-answers do not vote


def test_aggregate_greedy():
    scored = [
        [_s("1", True, tokens=4)],
        [_s("2", False, tokens=10, truncated=True)],
        [_s(None, False, found=False, tokens=7)],
        [_s("4", True, tokens=5)],
    ]
    out = aggregate(scored)
    m = out["metrics"]
    assert (out["n_problems"], out["samples_per_problem"], out["n_completions"]) == (4, 1, 4)
    assert m["accuracy"] == 0.5 and m["no_answer_rate"] == 0.25 and m["truncation_rate"] == 0.25
    assert m["format_accuracy"] == 0.75 and m["partial_accuracy"] == 0.5
    assert m["mean_response_tokens"] == 6.5 and m["median_response_tokens"] == 6.0
    assert m["accuracy_stderr"] == pytest.approx(math.sqrt(1 / 3) / 2)  # sample std of [1,0,0,1] / sqrt(4)
    assert not any(k.startswith(("pass@", "maj@")) for k in m)
    assert out["answer_sources"] == {"None": 1, "boxed": 3}


def test_aggregate_sampled_reports_pass_at_k_and_maj_at_k():
    scored = [
        [_s("7", True), _s("8", False), _s("7", True), _s("9", False)],  # 2 of 4, majority 7 (right)
        [_s("1", False), _s("1", False), _s("2", True), _s("3", False)],  # 1 of 4, majority 1 (wrong)
    ]
    m = aggregate(scored)["metrics"]
    assert m["accuracy"] == m["pass@1"] == 3 / 8
    assert m["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 2)
    assert m["pass@4"] == 1.0 and m["maj@4"] == 0.5


def test_presets_and_overrides():
    assert generation_settings(with_defaults({})).greedy and generation_settings(with_defaults({})).top_k == -1
    std = generation_settings(with_defaults({"preset": "standard", "samples": 4}))
    assert (std.temperature, std.top_p, std.top_k, std.samples) == (0.7, 0.95, 50, 4) and not std.greedy
    lib = generation_settings(with_defaults({"preset": "liberal", "top_k": 0, "temperature": 1.0}))
    assert (lib.temperature, lib.top_p, lib.top_k) == (1.0, 1.0, -1)
    assert generation_settings(with_defaults({"preset": "standard", "temperature": 0})).greedy
    assert set(PRESETS) == {"greedy", "standard", "liberal", "qwen3-thinking"}
    with pytest.raises(ConfigError, match="evaluation.samples = 4 with greedy decoding gives 4 identical completions"):
        generation_settings(with_defaults({"samples": 4}))


def test_qwen3_thinking_preset_brings_its_token_budget_and_thinking_mode():
    q = generation_settings(with_defaults({"preset": "qwen3-thinking", "samples": 8}))
    assert (q.temperature, q.top_p, q.top_k, q.samples, q.max_new_tokens) == (0.6, 0.95, 20, 8, 32768)
    assert (
        generation_settings(with_defaults({"preset": "qwen3-thinking", "max_new_tokens": 4096})).max_new_tokens == 4096
    )
    assert generation_settings(with_defaults({})).max_new_tokens == 1024
    assert chat_template_kwargs(with_defaults({"preset": "qwen3-thinking"})) == {"enable_thinking": True}
    assert chat_template_kwargs(with_defaults({"preset": "qwen3-thinking", "chat_template_kwargs": {"x": 1}})) == {
        "x": 1
    }


def test_a_benchmark_decodes_its_own_way():
    """Greedy GSM8K and avg@16 AIME in one config: each benchmark's decoding keys win for that benchmark."""
    evaluation = with_defaults(
        {"preset": "greedy", "max_new_tokens": 512, "chat_template_kwargs": {"enable_thinking": False}}
    )
    aime = generation_settings(
        benchmark_settings(evaluation, {"preset": "standard", "temperature": 0.6, "samples": 16})
    )
    assert (aime.temperature, aime.top_p, aime.top_k, aime.samples, aime.max_new_tokens) == (0.6, 0.95, 50, 16, 512)
    assert generation_settings(benchmark_settings(evaluation, {"dataset": "gsm8k"})).greedy
    # A benchmark with another preset does not inherit the evaluation-wide sampling overrides.
    sampled = with_defaults({"preset": "standard", "temperature": 1.0})
    assert generation_settings(benchmark_settings(sampled, {"preset": "liberal"})).temperature == 0.85
    assert benchmark_settings(evaluation, {"chat_template_kwargs": {}})["chat_template_kwargs"] == {
        "enable_thinking": False
    }


def _verdict(text, truth, **fmt):
    return score_completion(Completion(text=text, n_tokens=5, finish_reason="stop"), truth, fmt)


def test_scoring_uses_the_project_verifier():
    right = _verdict("<think>\n12 + 35 = 47\n</think>\nSo the answer is \\boxed{47}.", "47")
    assert right["correct"] and right["found"] and right["extracted"] == "47" and right["source"] == "boxed"
    assert right["partial"] and right["format_ok"]
    close = _verdict("The total is 25 + 25.\n#### 50", "47")
    assert not close["correct"] and close["partial"] and close["extracted"] == "50" and close["source"] == "hashes"
    assert not close["format_ok"]  # asked for \boxed{}
    far = _verdict("\\boxed{60}", "47")
    assert not far["correct"] and not far["partial"] and far["reason"]
    cut = _verdict("<think>\nLet me add 12 and 35, which gives \\boxed{47", "47")
    assert not cut["found"] and not cut["correct"] and cut["extracted"] is None and cut["reason"]
    tags = _verdict(
        "<think>\nadd\n</think>\n<answer>47</answer>", "47", style="tags", reasoning_tag="think", answer_tag="answer"
    )
    assert tags["correct"] and tags["source"] == "answer_tag" and tags["format_ok"]
