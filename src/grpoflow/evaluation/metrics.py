"""Scoring completions with the project's verifier and aggregating them into benchmark metrics.

Per completion: the verifier's verdict (``grpoflow.rewards.verify``: correct / extracted / found / source /
reason), partial credit (``within_tolerance``: within ±10% of a numeric ground truth) and the format check
(``format_ok``), all from the reward library, so evaluation grades exactly as training rewards.

Per benchmark (over all completions, so a sampled run's accuracy is the mean per-sample accuracy = pass@1):
accuracy (+ its standard error over problems), format/partial accuracy, "no answer found" rate, truncation
rate, mean/median response tokens, which extraction rule found the answers; with k > 1 samples also the
unbiased pass@k estimator (Chen et al. 2021) for k = 1, 2, 4, … and maj@k (majority vote over the extracted
answers, equivalent answers voting together by the verifier's own comparison).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from grpoflow import rewards
from grpoflow.generation import Completion

PARTIAL_TOLERANCE = 0.10


def score_completion(completion: Completion, ground_truth: str, answer_format: dict | None = None) -> dict:
    """The verifier's verdict on one completion, plus partial credit and the format check (``answer_format``:
    the keyword arguments of ``grpoflow.rewards.format_ok``)."""
    verdict = rewards.verify(completion.text, ground_truth)
    return {
        "correct": bool(verdict.correct),
        "partial": bool(rewards.within_tolerance(completion.text, ground_truth, PARTIAL_TOLERANCE)),
        "format_ok": bool(rewards.format_ok(completion.text, **(answer_format or {}))),
        "found": bool(verdict.found),
        "extracted": verdict.extracted,
        "source": verdict.source,
        "reason": verdict.reason,
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator of pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    # Product form of the binomial ratio: exact in floating point where the factorials would overflow.
    return 1.0 - math.prod(1.0 - k / m for m in range(n - c + 1, n + 1))


def pass_k_values(n: int) -> list[int]:
    """k = 1, 2, 4, … up to n, and n itself."""
    ks = [k for k in (2**i for i in range(0, 32)) if k <= n]
    return ks if ks[-1] == n else ks + [n]


# Answer comparisons one problem's vote may make (each at most the verifier's math-verify deadline): 16 distinct
# answers need at most 120, but the usual handful of distinct answers a few; past the budget an answer that no
# comparison placed yet votes on its own.
MAX_VOTE_COMPARISONS = 64


def vote_clusters(answers: list[str]) -> list[int]:
    """The vote each answer casts: answers the verifier finds equal (``grpoflow.rewards.answers_equal``, the
    comparison it grades a ground truth with: ``1/2`` = ``0.5``, ``1,000`` = ``1000``, ``1,2`` ≠ ``12``) share one,
    numbered in order of first appearance. Identical texts are decided once; each new text is compared with the
    first answer of each vote so far, most votes first, within ``MAX_VOTE_COMPARISONS``."""
    first: list[str] = []  # each vote's first answer
    size: list[int] = []
    by_text: dict[str, int] = {}
    out = []
    budget = MAX_VOTE_COMPARISONS
    for answer in answers:
        text = str(answer).strip()
        vote = by_text.get(text)
        if vote is None:
            for j in sorted(range(len(first)), key=lambda j: -size[j]):
                if budget <= 0:
                    break
                budget -= 1
                if rewards.answers_equal(text, first[j])[0]:
                    vote = j
                    break
            if vote is None:
                vote = len(first)
                first.append(text)
                size.append(0)
            by_text[text] = vote
        size[vote] += 1
        out.append(vote)
    return out


def majority_correct(scores: list[dict]) -> bool:
    """maj@k: the answer with the most votes (equivalent answers vote together: ``vote_clusters``; ties: the one
    seen first) is correct. No answer at all → wrong."""
    votes = [s for s in scores if s["found"] and s["extracted"] is not None]
    if not votes:
        return False
    clusters = vote_clusters([s["extracted"] for s in votes])
    counts = Counter(clusters)
    winner = min(counts, key=lambda c: (-counts[c], c))  # clusters are numbered by first appearance
    return votes[clusters.index(winner)]["correct"]


def aggregate(scored: list[list[dict]]) -> dict:
    """Benchmark metrics from ``scored[problem][sample]`` records (score_completion + response_tokens/truncated)."""
    flat = [s for per in scored for s in per]
    n_problems, n = len(scored), len(flat)
    if n == 0:
        raise ValueError("no completions to aggregate")
    samples = len(scored[0])

    def rate(key: str) -> float:
        return sum(bool(s[key]) for s in flat) / n

    per_problem = [sum(s["correct"] for s in per) / len(per) for per in scored]
    tokens = [s["response_tokens"] for s in flat]
    metrics = {
        "accuracy": rate("correct"),
        "accuracy_stderr": statistics.stdev(per_problem) / math.sqrt(n_problems) if n_problems > 1 else 0.0,
        "format_accuracy": rate("format_ok"),
        "partial_accuracy": rate("partial"),
        "no_answer_rate": 1.0 - rate("found"),
        "truncation_rate": rate("truncated"),
        "mean_response_tokens": statistics.fmean(tokens),
        "median_response_tokens": float(statistics.median(tokens)),
    }
    if samples > 1:
        for k in pass_k_values(samples):
            metrics[f"pass@{k}"] = statistics.fmean(
                pass_at_k(len(per), sum(s["correct"] for s in per), k) for per in scored
            )
        metrics[f"maj@{samples}"] = statistics.fmean(majority_correct(per) for per in scored)
        # avg@n (lighteval's name; "pass@1" over n samples in DeepSeek-R1's tables): the mean accuracy.
        metrics[f"avg@{samples}"] = metrics["accuracy"]
    return {
        "n_problems": n_problems,
        "samples_per_problem": samples,
        "n_completions": n,
        "metrics": metrics,
        "answer_sources": dict(sorted(Counter(str(s["source"]) for s in flat).items())),
    }
