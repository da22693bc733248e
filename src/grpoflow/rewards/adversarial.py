"""Completions that attack the verifier, and a runner that calls it the way verl's reward loop does.

The completions are built from the answer convention's own grammar — reasoning, a ``<think>`` block (closed or
cut off), a final answer in one of the convention's forms (box, adjacent boxes, ``<answer>`` tag, ``####``,
answer phrase, bold or math conclusion) holding a value of one of its kinds (integer, thousands, decimal,
percent, fraction, radical, interval, tuple, list, polynomial, choice, base, text) — mixed with hostile
fragments: long unbroken letter runs after a number (issue 13's hang), huge exponents and towers, factorials,
deep brace/``\\frac``/power nesting, runs of digits, ``$``, ``{``, tags, separators and number words.

Used by the fuzzer (``tests/rewards/test_fuzz.py``, hypothesis drawing from these lists), by the long fuzz run
(``benchmarks/fuzz_verifier.py``) and by the hostile-batch case of ``benchmarks/rewards.py``.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = [
    "VALUES",
    "GROUND_TRUTHS",
    "ANSWER_FORMS",
    "PROSE",
    "HOSTILE",
    "PATHOLOGICAL_ANSWERS",
    "hostile",
    "completion",
    "random_completion",
    "random_hostile_completion",
    "run_in_scorer_threads",
    "RunReport",
]

# Values of every kind the convention compares (§3), as a model would write them.
VALUES = [
    "72",
    "-3",
    "0",
    "1,680",
    "1680.00",
    "$18.90",
    "25\\%",
    "0.5",
    "\\frac{3}{4}",
    "\\dfrac94",
    "-\\frac{7}{2}",
    "2\\frac{1}{4}",
    "3/4",
    "\\sqrt{2}",
    "2\\sqrt{2}",
    "\\frac{\\sqrt{3}}{2}",
    "4\\pi",
    "\\infty",
    "e^{2}",
    "(-\\infty, 2)",
    "[1, 3) \\cup (4, 5]",
    "(3, -2)",
    "-3, 2",
    "x^2 + 2x + 1",
    "1 + 2i",
    "\\{1, 2, 3\\}",
    "\\begin{pmatrix} 1 \\\\ -2 \\end{pmatrix}",
    "1011_2",
    "\\text{(B)}",
    "B",
    "30^\\circ",
    "y = -2x + 5",
    "x = 5",
    "72 muffins",
    "seventy-two",
    "5 \\text{ cm}",
    "10^{5}",
    "3!",
    "\\log_2 8",
    "x < 2",
    "72 or 73",
    "√2",
    "−3",
    "∞",
    "3 × 4 = 12",
    "print(72)",
]
# Ground truths: the same kinds, plus ones math-verify cannot evaluate (an empty text, a tower, broken LaTeX).
GROUND_TRUTHS = [v for v in VALUES if v not in ("72 or 73", "print(72)", "72 muffins", "seventy-two")] + [
    "",
    "9^{9^{9^{9}}}",
    "\\text{}",
    "}{",
    "\\frac{",
    "(10^{10})!",
]
# Where the final answer goes ("@" is the value).
ANSWER_FORMS = [
    "\\boxed{@}",
    "$\\boxed{@}$",
    "\\fbox{@}",
    "The answer is \\boxed{@}.",
    "\\boxed{@} and \\boxed{@}",
    "<answer>@</answer>",
    "<answer>The answer is @.</answer>",
    "#### @",
    "The answer is @.",
    "Answer: @",
    "**Final Answer:** @",
    "**Final Answer**\n\\[\n\\boxed{@}\n\\]",
    "So the total is **@**.",
    "So $x = @$.",
    "Therefore the result is @.",
    "答案是@",
    "The final answer is $@$. I hope this helps!",
    "\\boxed{@",
]
PROSE = [
    "Let me think step by step. ",
    "48 / 2 = 24, and 48 + 24 = 72. ",
    "Wait, let me re-check that. ",
    "We have $f(x) = x^2 - 4x + 3$ so $f'(x) = 2x - 4$. ",
    "Tom earns $1,680 in 4 weeks. ",
    "\n\n",
    "\n- ",
    "1. First step.\n",
    "```python\nprint(1)\n```\n",
    "So ",
    "Hmm, ",
    "the answer to the question is ",
]


def _rep(fragment: str) -> Callable[[int], str]:
    return lambda n: fragment * n


# Hostile fragments: name -> size (repetitions, 1..) -> text. Sizes run to tens of thousands of characters.
HOSTILE: dict[str, Callable[[int], str]] = {
    "letter_run_after_number": lambda n: "1 " + "word" * n + "{",  # issue 13
    "letter_run_in_box": lambda n: "\\boxed{1 " + "ab" * n + "}",
    "repeated_phrase": _rep("the answer is "),
    "words": _rep("muffins "),
    "number_words": _rep("seventy two and "),
    "digits": lambda n: "9" * (n * 4),
    "thousands": lambda n: "1" + ",000" * n,
    "list": _rep("1, "),
    "ops": lambda n: "1+" * n + "1",
    "equals": lambda n: "x = 1 = " * n,
    "dollars": _rep("$"),
    "currency": _rep("$5 and "),
    "open_braces": _rep("{"),
    "close_braces": _rep("}"),
    "nested_frac": lambda n: "\\frac{" * n + "1" + "}{2}" * n,
    "nested_power": lambda n: "x^{" * min(n, 400) + "2" + "}" * min(n, 400),
    "nested_boxes": lambda n: "\\boxed{" * n + "5" + "}" * n,
    "open_boxes": _rep("\\boxed{"),
    "tags": lambda n: "<answer>" * n + "</answer>" * n,
    "think_tags": _rep("<think></think>"),
    "hashes": _rep("#### "),
    "stars": _rep("**"),
    "dots": _rep("1. "),
    "newlines": _rep("\n \n"),
    "backslashes": _rep("\\\\"),
    "unicode_math": _rep("√∞−×÷²"),
    "no_spaces": _rep("abc123"),
    "approx": _rep("\\approx 0.1 "),
}
# Answers that would make sympy compute for minutes or exhaust memory.
PATHOLOGICAL_ANSWERS = [
    "9^{9^{9^{9}}}",
    "2^{123456789}",
    "100000!",
    "(10^{10})!",
    "((999^{999})^{999})^{99}",
    "9" * 5000,
    "\\prod_{n=1}^{\\infty} n",
    "x^{" * 300 + "2" + "}" * 300,
    "\\frac{" * 200 + "1" + "}{2}" * 200,
]


def hostile(name: str, size: int) -> str:
    return HOSTILE[name](max(1, size))


def completion(
    prose: Sequence[str], answer_form: str, value: str, *, think: str = "closed", fragments: Sequence[str] = ()
) -> str:
    """One completion: ``<think>`` reasoning (``closed``, ``open`` = cut off, ``none``), prose with the hostile
    fragments interleaved, then the final answer."""
    body = list(prose)
    for i, frag in enumerate(fragments):
        body.insert(min(len(body), 2 * i + 1), frag)
    text = "".join(body)
    final = answer_form.replace("@", value)
    if think == "closed":
        return f"<think>{text}</think>\n{final}"
    if think == "open":
        return f"<think>{text}{final}"
    return text + final


def random_completion(rng: random.Random, hostile_rate: float = 0.1, max_size: int = 3000) -> tuple[str, str]:
    """(completion, ground truth): the convention's grammar; with probability ``hostile_rate`` hostile fragments
    or a pathological answer are mixed in."""
    truth = rng.choice(GROUND_TRUTHS)
    value = truth if truth and rng.random() < 0.5 else rng.choice(VALUES)
    fragments: list[str] = []
    if rng.random() < hostile_rate:
        if rng.random() < 0.3:
            value = rng.choice(PATHOLOGICAL_ANSWERS)
        fragments = [hostile(rng.choice(list(HOSTILE)), rng.randint(1, max_size)) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            value = value + fragments.pop()  # hostile text inside the answer itself
    prose = [rng.choice(PROSE) for _ in range(rng.randint(0, 6))]
    think = rng.choice(["closed", "closed", "none", "open"])
    return completion(prose, rng.choice(ANSWER_FORMS), value, think=think, fragments=fragments), truth


def random_hostile_completion(rng: random.Random, max_size: int = 3000) -> tuple[str, str]:
    """A completion that is certainly hostile (huge exponent, factorial, deep nesting, long letter run, ...)."""
    while True:
        pair = random_completion(rng, hostile_rate=1.0, max_size=max_size)
        if pair[1]:
            return pair


@dataclass
class RunReport:
    n: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0
    slowest: tuple[str, str] | None = None
    most_cpu_s: float = 0.0  # the largest CPU time one call spent in its own thread
    # (seconds or inf, completion, truth): wall seconds over deadline_s, or CPU seconds over cpu_deadline_s
    over_deadline: list[tuple[float, str, str]] = field(default_factory=list)
    unfinished: int = 0  # calls still running when the run gave up on them (a hang)
    errors: int = 0  # verdicts the verifier could not decide (timeouts, errors)
    correct: int = 0


def run_in_scorer_threads(
    pairs: Sequence[tuple[str, str]],
    *,
    threads: int = 8,
    deadline_s: float = 30.0,
    cpu_deadline_s: float | None = None,
    verify: Callable | None = None,
) -> RunReport:
    """``verify`` over ``pairs`` from ``threads`` threads at once (verl's reward workers score a batch in a thread
    pool), timing every call. A call over ``deadline_s`` (wall clock) is reported; one still running ``deadline_s``
    after it started is reported as unfinished and abandoned (daemon threads: a hang cannot block the caller).

    ``cpu_deadline_s`` bounds the CPU time each call spends in its own thread (``time.thread_time``), which is the
    verifier's own work when its comparisons are done in the calling thread: unlike wall time it does not grow when
    a loaded machine preempts the thread or other threads hold the GIL, so a bound on the work holds on any
    machine. It does not count work done in other threads or processes (math-verify's workers): bound whole
    calls with ``deadline_s``."""
    if verify is None:
        from grpoflow.rewards import verify
    todo: queue.Queue = queue.Queue()
    for pair in pairs:
        todo.put(pair)
    report = RunReport(n=len(pairs))
    lock = threading.Lock()
    running: dict[int, tuple[float, tuple[str, str]]] = {}

    def work() -> None:
        while True:
            try:
                pair = todo.get_nowait()
            except queue.Empty:
                return
            start, cpu_start = time.perf_counter(), time.thread_time()
            with lock:
                running[threading.get_ident()] = (start, pair)
            v = verify(*pair)
            took, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
            with lock:
                running.pop(threading.get_ident(), None)
                report.errors += v.error
                report.correct += v.correct
                if took > report.slowest_s:
                    report.slowest_s, report.slowest = took, pair
                report.most_cpu_s = max(report.most_cpu_s, cpu)
                if took > deadline_s:
                    report.over_deadline.append((took, *pair))
                elif cpu_deadline_s is not None and cpu > cpu_deadline_s:
                    report.over_deadline.append((cpu, *pair))

    start = time.perf_counter()
    workers = [threading.Thread(target=work, daemon=True, name=f"reward-{i}") for i in range(threads)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        for w in workers:
            w.join(timeout=0.05)
        now = time.perf_counter()
        with lock:
            stuck = [(now - t0, pair) for t0, pair in running.values() if now - t0 > deadline_s]
        if stuck and (todo.empty() or len(stuck) >= sum(w.is_alive() for w in workers)):
            with lock:
                report.unfinished = len(stuck)
                report.over_deadline += [(float("inf"), *pair) for _, pair in stuck]
            break
    report.seconds = time.perf_counter() - start
    return report
