"""The answer verifier: docs/answer-convention.md, for training rewards and evaluation alike.

``verify(completion, ground_truth) -> Verdict`` reads the final answer (``extract.extract_answer``) and decides
whether it equals the ground truth (convention §3):

1. code, hedges and lists-against-a-single-value are settled by their shape (read in ``shapes``);
2. multiple-choice letters and numbers written in a base (``1011_2``) are compared as strings;
3. plain numbers — GSM8K answers and most MATH/AIME ones — are compared exactly as rationals (``numbers``), no
   sympy: the fast path;
4. everything else goes to math-verify in a worker process with a deadline (``_sandbox``), with decimals made
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

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards import extract as _extract
from grpoflow.rewards._sandbox import default_pool
from grpoflow.rewards.numbers import numbers_equal, parse_number
from grpoflow.rewards.shapes import (
    BASE_RE,
    HEDGE_WORD_RE,
    INEQUALITY_RE,
    PATHOLOGICAL_RE,
    GoldShape,
    choice_letter,
    clean_gold,
    clear_caches,
    equation,
    for_math_verify,
    gold_shape,
    is_set,
    labelled,
    latex_key,
    membership,
    number_format,
    or_union,
    or_values,
    plain_number,
    plainly_not_a_number,
    split_list,
    text_words,
    tuple_items,
    unicode_math_to_latex,
    unknown,
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
    "bad_ground_truths",
    "reset_stats",
    "reset_caches",
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


def _count(key: str, n: int = 1) -> None:
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
        _count("bad_ground_truths")
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
    _count("timeouts" if kind == "timeout" else "errors")
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

MAX_ANSWER_CHARS = 1000
# Reading a completion is linear in its length (RE2 and single scans); this cap turns "linear" into a bound on
# one call's in-process work. 1,000,000 characters is ~250k tokens, beyond any configured response length.
MAX_COMPLETION_CHARS = 1_000_000


# ---------------------------------------------------------------------------------------------------------------
# Equality of an answer and a ground truth

# Decided comparisons only (a timeout or error is tried again), so no decorator cache: cachetools' LRU under a lock.
_EQUAL_CACHE_SIZE = 65536
_equal_cache: LRUCache = LRUCache(maxsize=_EQUAL_CACHE_SIZE)  # (answer, truth) -> (equal, method, reason)
_equal_lock = threading.Lock()


def answers_equal(answer: str, ground_truth: str) -> tuple[bool, str, str | None]:
    """(equal, method, reason-if-not-equal) for an extracted answer and a ground truth (convention §3)."""
    answer = answer.strip()
    key = (
        number_format(unicode_math_to_latex(answer)) if len(answer) <= MAX_ANSWER_CHARS else answer,
        clean_gold(ground_truth),
    )
    with _equal_lock:
        hit = _equal_cache.get(key)
    if hit is not None:
        _count("cache_hits")
        return hit
    result = _answers_equal(*key)
    if not result[2] or not result[2].startswith(("timeout", "error")):  # only definitive results are cached
        with _equal_lock:
            _equal_cache[key] = result
    return result


def _answers_equal(answer: str, gold: str) -> tuple[bool, str, str | None]:
    local = _decide_locally(answer, gold)
    if not isinstance(local, _Forward):
        result, counter = local
        if counter:
            _count(counter)
        return result
    gold = local.gold
    with _gold_lock:
        bad = _bad_golds.get(gold)
    if bad is not None:
        _count("errors")
        return False, "math_verify", f"error: ground truth cannot be evaluated ({bad})"
    _count("math_verify")
    outcome = default_pool().compare(gold, local.answer)
    if outcome.status != "ok":
        problem = _bad_gold_problem(gold, outcome)
        if problem is not None:
            _mark_bad_gold(gold, problem)
            _count("errors")
            return False, "math_verify", f"error: ground truth cannot be evaluated ({problem})"
        _report(outcome.status, outcome.detail, gold, answer)
        return False, "math_verify", f"{outcome.status}: {outcome.detail}"
    return (True, "math_verify", None) if outcome.equal else (False, "math_verify", "wrong answer")


_PLAIN_DECIMAL_RE = lre.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")  # "72", "-1,680.5"
_UPPER_TEXT_CMD_RE = lre.compile(r"^\\TEXT\s*\{(.*)\}$")  # \text{1011} after .upper()

_Result = tuple[bool, str, "str | None"]
_Decision = tuple[_Result, "str | None"]  # (equal, method, reason), the counter to bump


@dataclass(frozen=True)
class _Forward:
    """Not decided locally: math-verify compares these texts (as its worker is given them)."""

    gold: str
    answer: str


def _decide_locally(answer: str, gold: str) -> _Decision | _Forward:
    """Everything decided without sympy — ((equal, method, reason), counter to bump) — or what math-verify is to
    compare."""
    if not gold:
        return (False, "shape", "error: empty ground truth"), None
    if len(answer) > MAX_ANSWER_CHARS:
        return (False, "shape", f"answer longer than {MAX_ANSWER_CHARS} characters"), "guarded"
    g = gold_shape(gold)
    gold_unknown = g.unknown
    if g.membership is not None:  # "x \in [1, 2)": the set is the ground truth, stated for x
        gold = g.membership[1]
        g = gold_shape(gold)
    # A plain decimal ("72", "1,680.5") is never code, a hedge, a choice letter, a label or a list.
    plain = _PLAIN_DECIMAL_RE.fullmatch(answer) is not None
    if not plain:
        read = _read_shape(answer, g, gold_unknown)
        if not isinstance(read, str):
            return read
        answer = read
    decided = _decide_values(answer, g, plain)
    return decided if decided is not None else _Forward(for_math_verify(gold), for_math_verify(answer))


def _read_shape(answer: str, g: GoldShape, gold_unknown: str | None) -> _Decision | str:
    """Code, hedges, choice letters and unknowns, settled by their shape; else the answer as compared further (a
    membership's set, the solutions an "or" lists)."""
    if _extract.looks_like_code(answer):
        return (False, "shape", "code is not an answer"), None
    if not g.hedge and HEDGE_WORD_RE.search(answer) and or_union(answer) is None:
        # Inequalities joined by "or" are one union; equations joined by "or" list every solution, which only a
        # list can equal; any other "or" offers alternatives.
        solutions = or_values(answer) if g.items else None
        if solutions is None:
            return (False, "shape", "hedge (the answer offers alternatives)"), None
        answer = ", ".join(solutions)
    # Multiple choice: the letter in any wrapper.
    if g.choice is not None:
        letter = choice_letter(answer)
        if letter is not None:
            return ((True, "choice", None) if letter == g.choice else (False, "choice", "wrong choice")), None
    if "\\in" in answer or INEQUALITY_RE.search(answer):
        # A membership or inequality about another unknown than the ground truth's is another answer.
        answer_unknown = unknown(answer)
        if answer_unknown and gold_unknown and answer_unknown != gold_unknown:
            return (False, "relation", "wrong answer (about another unknown)"), None
        member = membership(answer)
        if member is not None:
            answer = member[1]
    return answer


def _decide_values(answer: str, g: GoldShape, plain: bool) -> _Decision | None:
    """Bases, labels, lists, equations, numbers and words, decided without sympy; None for math-verify."""
    # A number written in a base: the digits as written ("1011" for 1011_2), not its decimal value.
    if g.base is not None:
        digits, base = g.base
        mm = BASE_RE.match(answer)
        pred = mm.group(1).upper() if mm and mm.group(2) == base else answer.strip().strip("$").upper()
        pred = _UPPER_TEXT_CMD_RE.sub(r"\1", pred).strip()
        return (
            (True, "base", None) if pred.lstrip("0") == digits.lstrip("0") else (False, "base", "wrong answer")
        ), None
    a_items, g_items = (None if plain else split_list(answer)), g.items
    if g.labels and not plain:
        labels = _compare_to_labels(answer, a_items, g)
        if labels is not None:
            return labels, None
    # A decimal comma ("2,74", "1000,99") against a single number: the comma is no list separator there.
    if a_items and not g_items and g.number is not None and _DECIMAL_COMMA_RE.fullmatch(answer.strip().strip("$")):
        value = parse_number(answer.strip().strip("$").replace(",", "."))
        if value is not None:
            same = numbers_equal(value, g.number)
            return ((True, "number", None) if same else (False, "number", "wrong answer")), "fast_path"
    # Equations: a relation ("x + y = 5") equals only the same relation (decided by sympy); a value given for a
    # name ("x = 5") equals that value, and another assignment only for the same name.
    if g.equation is not None or not plain:
        verdict = _compare_equations(answer, g)
        if verdict is not None:
            return verdict, None
    if a_items and not g_items and g.number is not None:
        if len(set(a_items)) == 1:
            a_items = None  # "5 and 5" states one value twice
        else:
            return (False, "list", "hedge (several answers for one value)"), None
    an = plain_number(answer) if not a_items else None
    if g_items and not a_items and an is not None and all(g.item_numbers):  # type: ignore[arg-type]
        return (False, "list", "wrong answer (one value for a list)"), "fast_path"
    if a_items and g_items:
        a_nums, g_nums = [plain_number(x) for x in a_items], g.item_numbers
        if all(a_nums) and all(g_nums):  # type: ignore[arg-type]
            same = sorted(n.value for n in a_nums) == sorted(n.value for n in g_nums)  # type: ignore[union-attr]
            return ((True, "list", None) if same else (False, "list", "wrong answer")), "fast_path"
    return _decide_scalars(answer, an, g)


def _decide_scalars(answer: str, an, g: GoldShape) -> _Decision | None:
    """Plain numbers (exact, no sympy), answers in words, identical LaTeX; None for math-verify."""
    gn = g.number
    if gn is not None and an is not None:
        return ((True, "number", None) if numbers_equal(an, gn) else (False, "number", "wrong answer")), "fast_path"
    if gn is not None and an is None and plainly_not_a_number(answer):
        return (False, "number", "wrong answer (not a number)"), "fast_path"
    if g.words is not None:  # "odd" for odd, "\text{odd}", "odd $n$"
        words = text_words(answer)
        if words is not None:
            return ((True, "words", None) if words == g.words else (False, "words", "wrong answer")), "fast_path"
    # The same LaTeX up to spacing and delimiters is the same answer.
    if latex_key(answer) == g.key:
        return (True, "string", None), "fast_path"
    if not g.pathological and PATHOLOGICAL_RE.search(answer):
        return (False, "shape", "too expensive to evaluate (huge power, factorial or number): not correct"), "guarded"
    return None


_DECIMAL_COMMA_RE = lre.compile(r"[-+]?\d+,(?:\d{1,2}|\d{4,})")


def _compare_to_labels(answer: str, a_items: list[str] | None, g: GoldShape) -> _Result | None:
    """Against values given for distinct names ("a = 3, b = 4"): a labelled answer compares name by name; an
    unlabelled list or tuple ("3, 4", "(3, 4)") compares value by value in the ground truth's order; a set
    (``\\{3, 4\\}``) does not say which value is which name. None when the answer is none of these."""
    assert g.labels is not None and g.items is not None
    if a_items:
        a_labels = labelled(a_items)
        if a_labels is not None:
            return _compare_labelled(a_labels, g.labels)
    ordered = a_items or tuple_items(answer)
    if ordered and len(ordered) == len(g.labels):
        for value, gold_item in zip(ordered, g.items):
            equal, _, reason = answers_equal(value, gold_item)
            if not equal:
                return False, "labels", reason or "wrong answer"
        return True, "labels", None
    if is_set(answer):
        return False, "labels", "wrong answer (a set does not say which value is which name)"
    return None


def _compare_labelled(answer: tuple[tuple[str, str], ...], gold: tuple[tuple[str, str], ...]) -> _Result:
    if {label for label, _ in answer} != {label for label, _ in gold}:
        return False, "labels", "wrong answer (other names)"
    values = dict(gold)
    for label, value in answer:
        equal, _, reason = answers_equal(value, values[label])
        if not equal:
            return False, "labels", reason or "wrong answer"
    return True, "labels", None


def _compare_equations(answer: str, g: GoldShape) -> _Result | None:
    """Equality settled by the shapes of equations, or None (then numbers or math-verify decide)."""
    a_eq = equation(answer) if "=" in answer else None
    g_eq = g.equation
    if g_eq is not None and g_eq[1] is None:  # the ground truth is a relation between unknowns
        if a_eq is None and not INEQUALITY_RE.search(answer):
            return False, "equation", "wrong answer (a value for an equation)"
        return None  # relation against equation: sympy, in the worker
    if a_eq is not None and g_eq is not None and a_eq[1] is not None and g_eq[1] is not None:
        if a_eq[0] and g_eq[0] and a_eq[0] != g_eq[0]:
            return False, "equation", "wrong answer (a value for another name)"
        a_num, g_num = parse_number(a_eq[1]), parse_number(g_eq[1])
        if a_num is not None and g_num is not None:
            return (True, "number", None) if numbers_equal(a_num, g_num) else (False, "number", "wrong answer")
    return None  # e.g. y = 5 - 2x against y = -2x + 5: the worker compares the relations


# ---------------------------------------------------------------------------------------------------------------
# The public verifier

_VERDICT_CACHE_SIZE = 2048
_verdict_cache: LRUCache = LRUCache(maxsize=_VERDICT_CACHE_SIZE)  # (completion, truth) -> Verdict, errors excluded


def verify(completion: str, ground_truth: str) -> Verdict:
    """The completion's final answer and whether it is correct (docs/answer-convention.md). Never raises."""
    return _verify_cached(str(completion), str(ground_truth), None)


def verify_many(pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
    """``verify`` for a batch of (completion, ground truth): the comparisons that need math-verify run
    concurrently, one per worker process; everything else as ``verify``. Same verdicts, same counters."""
    pairs = [(str(c), str(t)) for c, t in pairs]
    exts: list[_extract.Extraction | None] = [None] * len(pairs)
    pending: set[tuple[str, str]] = set()
    for i, (completion, truth) in enumerate(pairs):
        with _equal_lock:
            if (completion, truth) in _verdict_cache:
                continue
        if len(completion) > MAX_COMPLETION_CHARS:
            continue
        try:
            ext = exts[i] = _extract.extract_answer(completion)
        except Exception:  # noqa: BLE001 - verify() reports it
            continue
        if ext.answer is None or ext.hedge:
            continue
        key = (ext.answer.strip(), clean_gold(truth))
        with _equal_lock:
            cached = key in _equal_cache
        if not cached and key[1] and isinstance(_decide_locally(*key), _Forward):
            pending.add(key)
    pool = default_pool()
    if len(pending) > 1 and pool.size > 1:
        with ThreadPoolExecutor(max_workers=min(pool.size, len(pending)), thread_name_prefix="grpoflow-verify") as ex:
            list(ex.map(lambda key: answers_equal(*key), sorted(pending)))
    return [_verify_cached(c, t, e) for (c, t), e in zip(pairs, exts)]


def _verify_cached(completion: str, ground_truth: str, ext: _extract.Extraction | None) -> Verdict:
    key = (completion, ground_truth)
    with _equal_lock:
        hit = _verdict_cache.get(key)
    if hit is not None:
        return hit
    try:
        verdict = _verify(completion, ground_truth, ext)
    except Exception as exc:  # noqa: BLE001 - a verifier bug must not kill a training run: count it, log it
        _report("error", f"{type(exc).__name__}: {exc}", ground_truth, completion[-200:])
        log.exception("grpoflow.rewards: internal verifier error")
        verdict = Verdict(False, False, None, None, f"error: {type(exc).__name__}: {exc}")
    _count("verified")
    if verdict.correct:
        _count("correct")
    if not verdict.found:
        _count("no_answer")
    if not verdict.error:
        with _equal_lock:
            _verdict_cache[key] = verdict
    return verdict


def _verify(completion: str, ground_truth: str, ext: _extract.Extraction | None = None) -> Verdict:
    if len(completion) > MAX_COMPLETION_CHARS:
        _count("guarded")
        return Verdict(
            False, False, None, None, f"no answer: completion longer than {MAX_COMPLETION_CHARS:,} characters"
        )
    ext = ext if ext is not None else _extract.extract_answer(completion)
    if ext.answer is None:
        return Verdict(False, False, None, None, f"no answer: {ext.reason}")
    if ext.hedge and not HEDGE_WORD_RE.search(ground_truth):
        return Verdict(False, True, ext.answer, ext.source, "hedge (the answer offers alternatives)", "shape")
    equal, method, reason = answers_equal(ext.answer, ground_truth)
    return Verdict(equal, True, ext.answer, ext.source, reason, method)


def is_correct(completion: str, ground_truth: str) -> bool:
    return verify(completion, ground_truth).correct


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
