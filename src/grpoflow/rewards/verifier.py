"""The answer verifier: docs/answer-convention.md, for training rewards and evaluation alike.

``verify(completion, ground_truth) -> Verdict`` reads the final answer (``extract.extract_answer``) and decides
whether it equals the ground truth (convention §3):

1. without sympy (``compare``): code, hedges, labels, memberships and lists-against-a-single-value by their shape
   (read in ``shapes``); multiple-choice letters and numbers written in a base as strings; plain numbers — GSM8K
   answers and most MATH/AIME ones — exactly as rationals (``numbers``); answers in words word by word; intervals,
   tuples, sets and matrices of numbers exactly (``intervals``); arithmetic by its value to 60 digits
   (``numeric``: a different value is a wrong answer, an equal constant or polynomial a right one);
2. everything else goes to math-verify in a worker process with a deadline (``_sandbox``), with decimals made
   exact so that a rounded decimal never equals an irrational value.

It never raises for a completion or ground truth (any text), never executes model text, and works in any
thread. A timeout or internal error is "not correct" with the reason in ``Verdict.reason``, logged and counted
in ``stats()`` — a reward that stays at 0 because of a broken verifier shows up there, not as a quiet 0.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from cachetools import LRUCache

from grpoflow.rewards import extract as _extract
from grpoflow.rewards._sandbox import default_pool
from grpoflow.rewards.compare import MAX_ANSWER_CHARS, Decision, Forward, Result, decide_locally
from grpoflow.rewards.shapes import (
    HEDGE_WORD_RE,
    clean_gold,
    clear_caches,
    number_format,
    plain_number,
    unicode_math_to_latex,
)
from grpoflow.rewards.tag_format import tag_format_match, tag_format_text

__all__ = [
    "Verdict",
    "verify",
    "verify_many",
    "is_correct",
    "answers_equal",
    "within_tolerance",
    "format_ok",
    "stats",
    "count",
    "bad_ground_truths",
    "reset_stats",
    "reset_caches",
    "warm_up",
]

log = logging.getLogger("grpoflow.rewards")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    found: bool  # a final answer was found
    extracted: str | None  # the final answer as read (None when not found)
    source: str | None  # the convention rule that produced it: boxed | answer_tag | hashes | phrase | conclusion
    reason: str | None  # why not correct ("wrong answer", "hedge", "code", "timeout: ...", "no answer: ...")
    method: str | None = None  # how equality was decided: number | list | choice | base | labels | equation |
    # relation | words | string | math_verify | shape

    @property
    def error(self) -> bool:
        """The verifier could not decide (timeout or internal error): counted separately from wrong answers."""
        return bool(self.reason) and self.reason.startswith(("timeout", "error"))


# ---------------------------------------------------------------------------------------------------------------
# Counters (thread-safe), exposed as metrics

_stats: Counter = Counter()
_stats_lock = threading.Lock()


def count(key: str, n: int = 1) -> None:
    """Add ``n`` to the counter ``key`` of ``stats()`` (the rewards count what they could not do as asked, e.g.
    ``length_in_chars``)."""
    with _stats_lock:
        _stats[key] += n


def stats() -> dict[str, int]:
    """Counters since start (or ``reset_stats``): ``verified``, ``correct``, ``no_answer``, ``fast_path``,
    ``math_verify``, ``timeouts``, ``errors``, ``guarded``, ``cache_hits``, ``bad_ground_truths`` (distinct ground
    truths math-verify cannot evaluate: ``bad_ground_truths()`` names them) and ``length_in_chars`` (rewards that
    had to measure length in characters because the trainer gave no token counts)."""
    with _stats_lock:
        return dict(_stats)


def reset_stats() -> None:
    with _stats_lock:
        _stats.clear()


def reset_caches() -> None:
    """Forget cached verdicts, comparisons and ground-truth checks (benchmarks and tests; a run never needs to)."""
    with _equal_lock:
        _equal_cache.clear()
        _verdict_cache.clear()
    with _gold_lock:
        _bad_golds.clear()
        _checked_golds.clear()
    clear_caches()


# ---------------------------------------------------------------------------------------------------------------
# Ground truths math-verify cannot evaluate: recognised once per distinct value, then decided without a worker.
# Otherwise every completion of such a problem would pay the full comparison deadline (issue 13).

_bad_golds: dict[str, str] = {}  # cleaned ground truth -> why it cannot be evaluated
_checked_golds: set[str] = set()  # ground truths already checked alone after a failed comparison
_gold_lock = threading.Lock()


def bad_ground_truths() -> dict[str, str]:
    """Every ground truth found unevaluable since start (or ``reset_caches``) → the problem with it."""
    with _gold_lock:
        return dict(_bad_golds)


def _bad_gold_problem(gold: str, outcome) -> str | None:
    """Why ``gold`` itself cannot be evaluated, judging from a failed comparison against it (checking the ground
    truth alone once, in a worker under the same deadline), or None when the answer was the problem."""
    if outcome.status == "error" and "cannot read the ground truth" in outcome.detail:
        return outcome.detail
    with _gold_lock:
        if gold in _checked_golds:
            return None
    check = default_pool().check_gold(gold)
    if check.status == "timeout" and check.detail.startswith("no idle"):
        return None  # the pool was busy: nothing learnt about this ground truth, check again next time
    with _gold_lock:
        if len(_checked_golds) >= _EQUAL_CACHE_SIZE:
            _checked_golds.clear()
        _checked_golds.add(gold)
    return None if check.status == "ok" else f"{check.status}: {check.detail}"


def _mark_bad_gold(gold: str, problem: str) -> None:
    with _gold_lock:
        new = gold not in _bad_golds
        _bad_golds[gold] = problem
    if new:
        count("bad_ground_truths")
        log.warning(
            "grpoflow.rewards: ground truth %r cannot be evaluated (%s): every answer to it is scored "
            "'not correct' with an error, without a comparison [see grpoflow.rewards.bad_ground_truths()]",
            gold[:120],
            problem,
        )


_warned = 0


def _report(kind: str, detail: str, gold: str, pred: str) -> None:
    """Log a timeout/error (the first 20 in full, then every 100th) and count it."""
    global _warned
    count("timeouts" if kind == "timeout" else "errors")
    with _stats_lock:
        _warned += 1
        n = _warned
    if n <= 20 or n % 100 == 0:
        log.warning(
            "grpoflow.rewards: %s comparing answer %r with ground truth %r (%s): scored as not correct "
            "[%d so far; see grpoflow.rewards.stats()]",
            kind,
            pred[:120],
            gold[:120],
            detail,
            n,
        )


# ---------------------------------------------------------------------------------------------------------------
# Bounds on one call's work (the shapes of answers and ground truths are read in ``shapes``)

# Reading a completion is linear in its length (RE2 and single scans); this cap turns "linear" into a bound on
# one call's in-process work. 1,000,000 characters is ~250k tokens, beyond any configured response length.
MAX_COMPLETION_CHARS = 1_000_000


# ---------------------------------------------------------------------------------------------------------------
# Equality of an answer and a ground truth


# Decided comparisons only (a timeout or error is tried again), so no decorator cache: cachetools' LRU under a lock.
_EQUAL_CACHE_SIZE = 65536
_equal_cache: LRUCache = LRUCache(maxsize=_EQUAL_CACHE_SIZE)  # (answer, truth) -> (equal, method, reason)
_equal_lock = threading.Lock()


def _equal_key(answer: str, ground_truth: str) -> tuple[str, str]:
    """The cache key of a comparison: the answer as compared (MATH's thousands separators, Unicode math as LaTeX)
    and the cleaned ground truth."""
    answer = answer.strip()
    if len(answer) <= MAX_ANSWER_CHARS:
        answer = number_format(unicode_math_to_latex(answer))
    return answer, clean_gold(ground_truth)


def answers_equal(answer: str, ground_truth: str) -> tuple[bool, str, str | None]:
    """(equal, method, reason-if-not-equal) for an extracted answer and a ground truth (convention §3)."""
    key = _equal_key(answer, ground_truth)
    with _equal_lock:
        hit = _equal_cache.get(key)
    if hit is not None:
        count("cache_hits")
        return hit
    return _remember(key, _answers_equal(*key))


def _remember(key: tuple[str, str], result: Result) -> Result:
    if not result[2] or not result[2].startswith(("timeout", "error")):  # only definitive results are cached
        with _equal_lock:
            _equal_cache[key] = result
    return result


def _answers_equal(answer: str, gold: str, local: Decision | Forward | None = None) -> Result:
    local = local if local is not None else decide_locally(answer, gold, answers_equal)
    if not isinstance(local, Forward):
        result, counter = local
        if counter:
            count(counter)
        return result
    gold = local.gold
    with _gold_lock:
        bad = _bad_golds.get(gold)
    if bad is not None:
        count("errors")
        return False, "math_verify", f"error: ground truth cannot be evaluated ({bad})"
    count("math_verify")
    outcome = default_pool().compare(gold, local.answer)
    if outcome.status != "ok":
        problem = _bad_gold_problem(gold, outcome)
        if problem is not None:
            _mark_bad_gold(gold, problem)
            count("errors")
            return False, "math_verify", f"error: ground truth cannot be evaluated ({problem})"
        _report(outcome.status, outcome.detail, gold, answer)
        return False, "math_verify", f"{outcome.status}: {outcome.detail}"
    return (True, "math_verify", None) if outcome.equal else (False, "math_verify", "wrong answer")


# ---------------------------------------------------------------------------------------------------------------
# The public verifier

_VERDICT_CACHE_SIZE = 2048
_verdict_cache: LRUCache = LRUCache(maxsize=_VERDICT_CACHE_SIZE)  # (completion, truth) -> Verdict, errors excluded


def verify(completion: str, ground_truth: str) -> Verdict:
    """The completion's final answer and whether it is correct (docs/answer-convention.md). Never raises."""
    return _verify_cached(str(completion), str(ground_truth), None)


def verify_many(pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
    """``verify`` for a batch of (completion, ground truth): the comparisons that need math-verify run
    concurrently, one per worker process; everything else as ``verify``. Same verdicts and counters (a
    comparison made before the batch is read counts as a cache hit)."""
    pairs = [(str(c), str(t)) for c, t in pairs]
    exts: list[_extract.Extraction | None] = [None] * len(pairs)
    decided: list[Result | None] = [None] * len(pairs)  # settled here, locally: not looked up again
    fresh: set[int] = set()  # first occurrences of pairs not in the verdict cache when the batch was read
    pending: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()
    for i, pair in enumerate(pairs):
        with _equal_lock:
            if pair in _verdict_cache or pair in seen:
                continue
        seen.add(pair)
        fresh.add(i)
        key = _read_for_batch(pair[0], pair[1], i, exts)
        if key is None or key in pending:
            continue
        local = decide_locally(*key, answers_equal)
        if isinstance(local, Forward):
            pending.add(key)
        else:
            decided[i] = _remember(key, _answers_equal(*key, local=local))
    pool = default_pool()
    if len(pending) > 1 and pool.size > 1:
        with ThreadPoolExecutor(max_workers=min(pool.size, len(pending)), thread_name_prefix="grpoflow-verify") as ex:
            list(ex.map(lambda key: answers_equal(*key), sorted(pending)))
    out, tally, store = [], Counter(), []
    for i, (completion, truth) in enumerate(pairs):
        if i not in fresh:
            out.append(_verify_cached(completion, truth, exts[i], decided[i]))
            continue
        verdict = _verdict(completion, truth, exts[i], decided[i])
        _tally(verdict, tally)
        if not verdict.error:
            store.append(((completion, truth), verdict))
        out.append(verdict)
    with _stats_lock:
        _stats.update(tally)
    with _equal_lock:
        for key, verdict in store:
            _verdict_cache[key] = verdict
    return out


def _read_for_batch(
    completion: str, truth: str, i: int, exts: list[_extract.Extraction | None]
) -> tuple[str, str] | None:
    """The comparison key of one completion of a batch (its extraction kept in ``exts``), or None when there is
    nothing to compare or the comparison is cached already."""
    if len(completion) > MAX_COMPLETION_CHARS:
        return None
    try:
        ext = exts[i] = _extract.extract_answer(completion)
    except Exception:  # noqa: BLE001 - verify() reports it
        return None
    if ext.answer is None or ext.hedge:
        return None
    key = _equal_key(ext.answer, truth)
    with _equal_lock:
        cached = key in _equal_cache
    return None if cached or not key[1] else key


def _verify_cached(
    completion: str, ground_truth: str, ext: _extract.Extraction | None, equal: Result | None = None
) -> Verdict:
    key = (completion, ground_truth)
    with _equal_lock:
        hit = _verdict_cache.get(key)
    if hit is not None:
        return hit
    verdict = _verdict(completion, ground_truth, ext, equal)
    tally: Counter = Counter()
    _tally(verdict, tally)
    with _stats_lock:
        _stats.update(tally)
    if not verdict.error:
        with _equal_lock:
            _verdict_cache[key] = verdict
    return verdict


def _verdict(completion: str, ground_truth: str, ext: _extract.Extraction | None, equal: Result | None) -> Verdict:
    try:
        return _verify(completion, ground_truth, ext, equal)
    except Exception as exc:  # noqa: BLE001 - a verifier bug must not kill a training run: count it, log it
        _report("error", f"{type(exc).__name__}: {exc}", ground_truth, completion[-200:])
        log.exception("grpoflow.rewards: internal verifier error")
        return Verdict(False, False, None, None, f"error: {type(exc).__name__}: {exc}")


def _tally(verdict: Verdict, tally: Counter) -> None:
    tally["verified"] += 1
    if verdict.correct:
        tally["correct"] += 1
    if not verdict.found:
        tally["no_answer"] += 1


def _verify(
    completion: str, ground_truth: str, ext: _extract.Extraction | None = None, equal: Result | None = None
) -> Verdict:
    if len(completion) > MAX_COMPLETION_CHARS:
        count("guarded")
        return Verdict(
            False, False, None, None, f"no answer: completion longer than {MAX_COMPLETION_CHARS:,} characters"
        )
    ext = ext if ext is not None else _extract.extract_answer(completion)
    if ext.answer is None:
        return Verdict(False, False, None, None, f"no answer: {ext.reason}")
    if ext.hedge and not HEDGE_WORD_RE.search(ground_truth):
        return Verdict(False, True, ext.answer, ext.source, "hedge (the answer offers alternatives)", "shape")
    same, method, reason = equal if equal is not None else answers_equal(ext.answer, ground_truth)
    return Verdict(same, True, ext.answer, ext.source, reason, method)


def is_correct(completion: str, ground_truth: str) -> bool:
    return verify(completion, ground_truth).correct


# Generic completions in the forms the convention reads (no answer keys), each decided without math-verify.
_WARMUP = [
    ("<think>\n2 + 2 = 4\n</think>\n\nSo the answer is $\\boxed{4}$.<|im_end|>", "4"),
    ("<think>\n</think>\n\n**Final Answer**\n\\[\n\\boxed{\\frac{3}{4}}\n\\]<|im_end|>", "0.75"),
    ("Adding: 3 + 4 = 7 apples.\n#### 7", "7"),
    ("Tom earns $1,680 in 4 weeks, so the answer is 1,680.", "1680"),
    ("So the total is **72** muffins, which is 6 dozen.", "72"),
    ("<answer>\n12 x 35 x 4 = 1680\n</answer>", "1680"),
    ("Therefore $x = 5$.", "x = 5"),
    ("The answer is $\\boxed{(-\\infty, 2)}$.", "x < 2"),
    ("The answer is $\\boxed{2\\sqrt{2}}$.", "\\sqrt{8}"),
    ("The answer is (B).", "B"),
]


def warm_up() -> None:
    """Read and compare a few generic completions once, so that the regular-expression engine's lazily built parts
    (RE2 builds a pattern's reverse program and its automaton's states on first use) exist before the first real
    batch; nothing of them is kept (caches and counters as before)."""
    with _stats_lock:
        counters = Counter(_stats)
    verdicts = verify_many(_WARMUP)
    with _equal_lock:
        for (completion, truth), verdict in zip(_WARMUP, verdicts):
            _verdict_cache.pop((completion, truth), None)
            if verdict.extracted is not None:
                _equal_cache.pop(_equal_key(verdict.extracted, truth), None)
    with _stats_lock:
        _stats.clear()
        _stats.update(counters)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation helpers


def within_tolerance(completion: str, ground_truth: str, rel_tol: float = 0.1) -> bool:
    """ "Partial accuracy" (the TPU recipe): the final answer is a number within ±``rel_tol`` of a numeric ground
    truth (correct answers included). Non-numeric answers or ground truths are never partially correct."""
    verdict = verify(completion, ground_truth)
    if verdict.correct:
        return True
    if verdict.extracted is None:
        return False
    a, g = plain_number(verdict.extracted), plain_number(clean_gold(ground_truth))
    if a is None or g is None:
        return False
    return abs(a.value - g.value) <= abs(g.value) * Fraction(str(rel_tol))


def format_ok(
    completion: str, *, style: str = "boxed", reasoning_tag: str = "think", answer_tag: str = "answer"
) -> bool:
    """ "Format accuracy": did the completion follow the answer format?

    - ``style="boxed"`` (Qwen3 / MATH style): the reasoning block, if opened, is closed, and the final answer is
      read from a ``\\boxed{}`` after it.
    - ``style="tags"`` (the TPU recipe / open-r1 style): ``<reasoning_tag>…</reasoning_tag>`` followed by
      ``<answer_tag>…</answer_tag>`` and nothing else (the ``match_format_exactly`` pattern), read on the
      response after any ``</think>`` — or on the whole completion when ``reasoning_tag`` is ``think``."""
    if style == "boxed":
        v = _extract.extract_answer(completion)
        return v.source == "boxed"
    if style == "tags":
        return tag_format_match(tag_format_text(completion, reasoning_tag), reasoning_tag, answer_tag) is not None
    raise ValueError(f"format_ok: unknown style {style!r} (boxed or tags)")
