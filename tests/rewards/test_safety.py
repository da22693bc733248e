"""The verifier never executes model text, never hangs, never raises, works in any thread, and counts what it
could not decide. Plus the evaluation helpers (partial accuracy, format accuracy)."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rewardkit import verifier_pool

from grpoflow.rewards import format_ok, is_correct, reset_stats, stats, verify, within_tolerance
from grpoflow.rewards._sandbox import MathVerifyPool

B = "\\boxed"


# ---- model text is never executed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "__import__('os').system('touch {marker}')",
        "exec(\"open('{marker}', 'w').write('x')\")",
        "eval(\"open('{marker}', 'w')\")",
        "open('{marker}', 'w').write('pwned')",
        "(lambda: __import__('pathlib').Path('{marker}').touch())()",
        "[c for c in ().__class__.__base__.__subclasses__()]",
    ],
)
@pytest.mark.parametrize(
    "wrapper", ["{B}{{{p}}}", "<answer>{p}</answer>", "The answer is {p}", "#### {p}", "{B}{{{p}}} = 5"]
)
def test_injected_python_is_never_executed(tmp_path, payload, wrapper):
    marker = tmp_path / "pwned"
    p = payload.format(marker=marker)
    completion = wrapper.format(B=B, p=p)
    for truth in ("0", "5", "\\frac{1}{2}", "x^2"):
        v = verify(completion, truth)
        assert not v.correct
    assert not marker.exists(), "model text was executed"


def test_code_answer_reason():
    v = verify(f"{B}{{len([1, 2, 3])}}", "3")
    assert not v.correct and v.reason == "code is not an answer"


# ---- pathological inputs finish in bounded time --------------------------------------------------------------

PATHOLOGICAL = [
    (f"{B}{{9^{{9^{{9^9}}}}}}", "5"),
    (f"{B}{{100000!}}", "5"),
    (f"{B}{{(10^{{10}})!}}", "5"),
    (f"{B}{{2^{{123456789}}}}", "5"),
    (f"{B}{{{'9' * 5000}}}", "5"),
    ("\\boxed{" * 10000, "5"),
    ("{" * 20000 + "\\boxed{5}", "5"),
    ("}" * 20000 + "\\boxed{5}", "5"),
    ("1+" * 10000 + "1", "5"),
    ("The answer is " + "1, " * 7000, "5"),
    ("$" * 20000, "5"),
    ("<answer>" * 3000 + "</answer>" * 3000, "5"),
    ("#### " + "9" * 20000, "5"),
    ("\\frac{" * 5000 + "1" + "}{2}" * 5000, "5"),
    (f"{B}{{" + "x^{" * 300 + "2" + "}" * 300 + "}", "5"),
    ("So the total is " + "a " * 10000 + "72.", "72"),
    ("<think>" + "wait, " * 4000 + "</think>" + "\\boxed{72}", "72"),
]


@pytest.mark.parametrize("completion,truth", PATHOLOGICAL, ids=[f"p{i}" for i in range(len(PATHOLOGICAL))])
def test_pathological_inputs_finish_fast(completion, truth):
    start = time.monotonic()
    v = verify(completion, truth)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"{elapsed:.2f}s for {completion[:60]!r}"
    assert isinstance(v.correct, bool)


def test_sympy_timeout_is_counted_and_not_correct():
    """An input that gets past the guards and runs long inside sympy: the hard deadline kills the worker."""
    pool = MathVerifyPool(size=1, soft_timeout=0.5, hard_timeout=1.0)
    try:
        pool.start()  # the worker's start-up (seconds on a loaded machine) is not what is timed here
        start = time.monotonic()
        outcome = pool.compare("5", "9^{9^{9^{9}}}")
        assert time.monotonic() - start < 5
        assert outcome.status in ("timeout", "error") and not outcome.equal
        assert pool.compare("\\frac12", "0.5").equal  # a fresh worker serves the next comparison
    finally:
        pool.close()


def test_timeouts_reach_stats_and_the_verdict(monkeypatch):
    from grpoflow.rewards import _sandbox, verifier

    # A soft deadline far below what parsing takes: every comparison times out inside the worker.
    slow = MathVerifyPool(size=1, soft_timeout=0.001, hard_timeout=5.0, check_timeout=60.0)
    monkeypatch.setattr(_sandbox, "_default", slow)
    monkeypatch.setattr(verifier, "default_pool", lambda: slow)
    reset_stats()
    try:
        v = verify(f"{B}{{\\frac{{x^3 + 3x^2 + 3x + 1}}{{x + 1}}}}", "(x+1)^2")
    finally:
        slow.close()
    assert not v.correct and v.found and v.error and v.reason.startswith("timeout"), v
    assert stats().get("timeouts", 0) == 1
    # undecided comparisons are not cached: the next call tries again
    assert verifier._equal_cache.get((v.extracted, "(x+1)^2")) is None
    monkeypatch.undo()
    assert verify(f"{B}{{\\frac{{x^3 + 3x^2 + 3x + 1}}{{x + 1}}}}", "(x+1)^2").correct


def test_worker_crash_is_an_error_not_an_exception(monkeypatch):
    pool = MathVerifyPool(size=1)
    try:
        assert pool.compare("2", "2").equal
        worker = pool._idle[0]
        worker.proc.kill()
        worker.proc.wait()
        outcome = pool.compare("2", "2")  # the dead worker is detected...
        assert outcome.status == "error"
        assert pool.compare("2", "2").equal  # ...and replaced
    finally:
        pool.close()


# ---- threads --------------------------------------------------------------------------------------------------


def test_thread_safety_and_no_signal_errors_in_threads():
    """verl calls compute_score from a thread pool: math-verify's own signal timeouts would raise there."""
    cases = (
        [(f"{B}{{\\frac{{{i}}}{{{i + 1}}}}}", f"\\frac{{{2 * i}}}{{{2 * i + 2}}}", True) for i in range(1, 13)]
        + [(f"{B}{{\\sqrt{{{i * i * 2}}}}}", f"{i}\\sqrt{{2}}", True) for i in range(1, 9)]
        + [(f"The answer is {i}.", str(i + 1), False) for i in range(20)]
    )
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        results = list(ex.map(lambda c: (verify(c[0], c[1]).correct, c[2]), cases * 2))
    assert all(got == want for got, want in results)
    assert threading.current_thread() is threading.main_thread()


# ---- properties (hypothesis) ---------------------------------------------------------------------------------

_ALPHABET = st.sampled_from(
    list("0123456789+-*/^=,.$%(){}[]\\ xyab_\n#:")
    + [
        "\\boxed{",
        "\\frac",
        "\\sqrt",
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "####",
        "The answer is ",
        "\\text{",
        "**",
        "<|im_end|>",
        "\\pi",
        "\\infty",
        "\\cup",
        " or ",
        " and ",
        "!",
        "−",
    ]
)
_TEXT = st.lists(_ALPHABET, max_size=60).map("".join)
_TRUTH = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["\\frac12", "x^2+1", "(1,2)", "B", "-3, 2", "1011_2", "\\sqrt2"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=_TEXT, truth=_TRUTH)
def test_property_never_raises_and_is_consistent(completion, truth):
    start = time.monotonic()
    v = verify(completion, truth)
    assert time.monotonic() - start < 12  # one comparison (<= 3 s hard) and one ground-truth check (<= 7 s)
    assert isinstance(v.correct, bool) and isinstance(v.found, bool)
    assert v.found == (v.extracted is not None)
    if v.correct:
        assert v.found and v.reason is None
    else:
        assert v.reason
    assert verify(completion, truth) == v  # deterministic (and cached)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(-(10**9), 10**9), fmt=st.sampled_from(["{:,}", "{}", "{}.00", "${:,}", "0{}", "{} apples"]))
def test_property_formatted_numbers_equal_their_value(n, fmt):
    text = fmt.format(abs(n)) if fmt in ("0{}",) else fmt.format(n)
    truth = str(abs(n)) if fmt == "0{}" else str(n)
    if fmt == "${:,}" and n < 0:
        text = "-$" + f"{abs(n):,}"
    assert is_correct(f"The answer is {B}{{{text}}}.", truth), text
    assert not is_correct(f"The answer is {B}{{{text}}}.", str(int(truth) + 1))


@settings(max_examples=60, deadline=None)
@given(noise=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_property_reasoning_text_never_changes_the_verdict(noise):
    noise = noise.replace("</think>", "").replace("<think>", "")
    assert is_correct(f"<think>{noise}</think>\nSo {B}{{42}}.", "42")


# ---- evaluation helpers --------------------------------------------------------------------------------------


def test_within_tolerance_partial_accuracy():
    assert within_tolerance(f"{B}{{72}}", "72")  # correct counts
    assert within_tolerance(f"{B}{{75}}", "72")  # within 10 %
    assert not within_tolerance(f"{B}{{80}}", "72")
    assert within_tolerance(f"{B}{{80}}", "72", rel_tol=0.2)
    assert not within_tolerance(f"{B}{{x+1}}", "72")  # not a number
    assert not within_tolerance("<think>72", "72")  # no answer


def test_format_ok_boxed_and_tags():
    assert format_ok(f"<think>r</think>\n{B}{{72}}")
    assert format_ok(f"{B}{{72}}")  # no reasoning block at all is fine
    assert not format_ok(f"<think>r {B}{{72}}")  # reasoning never closed
    assert not format_ok("<think>r</think>\nThe answer is 72.")  # no box
    assert format_ok("<think>r</think><answer>72</answer>", style="tags")  # think/answer (default tags)
    assert format_ok("<reasoning>r</reasoning><answer>72</answer>", style="tags", reasoning_tag="reasoning")
    assert format_ok(
        "<think>x</think><reasoning>r</reasoning><answer>72</answer>", style="tags", reasoning_tag="reasoning"
    )
    assert not format_ok("<reasoning>r</reasoning>72", style="tags", reasoning_tag="reasoning")
    with pytest.raises(ValueError):
        format_ok("x", style="json")


def test_worker_runs_in_its_own_process():
    pool = MathVerifyPool(size=1)
    try:
        assert pool.compare("x^2+2x+1", "(x+1)^2").equal
        assert pool._idle[0].proc.pid != os.getpid()
    finally:
        pool.close()


# ---- issue 13: ground truths parsed once, bounded waits ---------------------------------------------------------


@pytest.fixture
def small_pool(monkeypatch):
    """A one-worker pool with a 0.5 s budget as the verifier's default pool, with fresh caches and counters."""
    with verifier_pool(
        monkeypatch, size=1, soft_timeout=0.5, hard_timeout=1.5, queue_timeout=1.0, check_timeout=0.5
    ) as pool:
        yield pool


@pytest.mark.parametrize("gold", ["9^{9^{9^{9}}}", "\\text{}"])
def test_an_unevaluable_ground_truth_is_recognised_once(small_pool, gold):
    from grpoflow.rewards import bad_ground_truths

    first = verify(f"{B}{{x+1}}", gold)
    assert not first.correct and first.error and "ground truth cannot be evaluated" in first.reason
    assert bad_ground_truths() == {gold: first.reason.split("(", 1)[1].rstrip(")")}
    start = time.monotonic()
    later = [verify(f"{B}{{x+{i}}}", gold) for i in range(2, 12)]
    assert time.monotonic() - start < 0.2, "comparisons against a known-bad ground truth must not reach a worker"
    assert all(v.error and not v.correct for v in later)
    s = stats()
    assert s["bad_ground_truths"] == 1 and s["errors"] == 11 and s.get("timeouts", 0) == 0
    assert s["math_verify"] == 1  # one comparison went to a worker; the check of the truth alone is not a comparison


def test_a_slow_answer_does_not_condemn_its_ground_truth(small_pool):
    from grpoflow.rewards import bad_ground_truths

    v = verify(f"{B}{{((999^{{999}})^{{999}})^{{99}}}}", "x^2+1")  # past the guards, too expensive: the answer's fault
    assert not v.correct and v.reason.startswith("timeout"), v
    assert bad_ground_truths() == {}
    assert verify(f"{B}{{1+x^2}}", "x^2+1").correct


def test_waiting_for_a_worker_is_bounded(small_pool):
    """Threads queued behind a worker that is busy get a counted timeout after queue_timeout, never a hang."""
    results = {}

    def slow():
        results["slow"] = small_pool.compare("5", "9^{9^{9^{9}}}")

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.1)
    start = time.monotonic()
    queued = small_pool.compare("\\frac12", "0.5")
    waited = time.monotonic() - start
    t.join()
    assert results["slow"].status in ("timeout", "error")
    # Either the worker freed up (soft deadline) within the queue timeout, or the wait gave up at 1 s.
    assert waited < 1.0 + 0.5, waited
    assert queued.status == "ok" or queued.detail.startswith("no idle math-verify worker")


def test_a_killed_worker_is_replaced_in_the_background(small_pool):
    worker = small_pool._idle[0]
    small_pool._retire(small_pool._idle.pop())
    assert worker.proc.poll() is not None  # killed at once
    deadline = time.monotonic() + 120
    while not small_pool._idle and time.monotonic() < deadline:  # nobody calls: the replacement starts by itself
        time.sleep(0.1)
    assert small_pool._idle and small_pool._idle[0] is not worker
    assert small_pool.compare("\\frac12", "0.5").equal
