"""Issue 13's fuzzer: hypothesis over completions built from the answer convention's grammar plus hostile
fragments (``grpoflow.rewards.adversarial``), scored the way verl's reward loop scores them — a thread pool —
with every call under a deadline. Fixed seed (derandomized), about a minute in CI in all; a longer run is
``benchmarks/fuzz_verifier.py``.

Two bounds, two tests:
- the verifier's own work (extraction, exact numbers, guards) with an instant stand-in for math-verify: every
  call under 1 s of its own thread's CPU time (completions here are up to ~50,000 characters; the work is linear,
  see test_linear_time.py; the most CPU one call took here is ~0.15 s). CPU time, not wall time: in CI's busy run a call
  that had done ~0.05 s of work was still running after 1 s of wall time, preempted, and a wall bound failed on a
  machine's load rather than on the verifier. A call still running after 30 s of wall time fails as a hang;
- the whole call with real math-verify workers on a 1 s budget: every call under the bound the pool states
  (two requests at most — the comparison, and once per ground truth a check of it alone — each at most the
  queue wait plus the hard deadline) plus the in-process second.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rewardkit import verifier_pool

from grpoflow.rewards import Verdict, adversarial, reset_caches, verifier
from grpoflow.rewards._sandbox import Outcome

_hostile = st.builds(adversarial.hostile, st.sampled_from(sorted(adversarial.HOSTILE)), st.integers(1, 5000))
_value = st.one_of(
    st.sampled_from(adversarial.VALUES),
    st.sampled_from(adversarial.PATHOLOGICAL_ANSWERS),
    _hostile,
    st.tuples(st.sampled_from(adversarial.VALUES), _hostile).map("".join),  # a number, then a letter run...
    st.text(max_size=30),
)
_fragment = st.one_of(st.sampled_from(adversarial.PROSE), _hostile, st.text(max_size=30))
_completion = st.builds(
    adversarial.completion,
    prose=st.lists(_fragment, max_size=6),
    answer_form=st.sampled_from(adversarial.ANSWER_FORMS),
    value=_value,
    think=st.sampled_from(["closed", "none", "open"]),
)
_batch = st.lists(st.tuples(_completion, st.sampled_from(adversarial.GROUND_TRUTHS)), min_size=1, max_size=8)


class _InstantPool:
    size = 4

    def compare(self, gold, pred):
        return Outcome(False, "ok")

    check_gold = compare


def _fuzz(
    budget_s: float, max_examples: int, deadline_s: float, cpu_deadline_s: float | None = None
) -> tuple[int, float]:
    """Run the fuzzer; returns (completions checked, slowest call: its CPU seconds where ``cpu_deadline_s`` bounds
    them, else its wall seconds). Fails on any call over a deadline or any unfinished (hung) call. Stops drawing
    new batches once ``budget_s`` is spent: this process's CPU seconds where the work is in this process
    (``cpu_deadline_s``), so that a busy machine does not shrink what is fuzzed; else wall seconds."""
    checked, slowest = 0, 0.0
    clock = time.process_time if cpu_deadline_s is not None else time.monotonic
    start = clock()

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(batch=_batch)
    def run(batch):
        nonlocal checked, slowest
        if clock() - start > budget_s:
            return  # the CI budget is spent: the remaining examples are not run
        report = adversarial.run_in_scorer_threads(
            batch, threads=4, deadline_s=deadline_s, cpu_deadline_s=cpu_deadline_s
        )
        bound = f"{deadline_s}s" + (f" wall or {cpu_deadline_s}s CPU" if cpu_deadline_s is not None else "")
        assert report.unfinished == 0 and not report.over_deadline, (
            f"{len(report.over_deadline)} call(s) over {bound}, {report.unfinished} unfinished, e.g. "
            f"{[(t, c[:200], g) for t, c, g in report.over_deadline[:2]]}"
        )
        checked += report.n
        slowest = max(slowest, report.most_cpu_s if cpu_deadline_s is not None else report.slowest_s)

    run()
    return checked, slowest


@pytest.mark.slow
def test_fuzz_verifier_own_work_is_bounded(monkeypatch):
    monkeypatch.setattr(verifier, "default_pool", lambda: _InstantPool())
    reset_caches()
    checked, most_cpu = _fuzz(budget_s=25, max_examples=1500, deadline_s=30.0, cpu_deadline_s=1.0)
    assert checked >= 1000, f"only {checked} completions fuzzed within the budget"
    print(f"fuzzed {checked} completions (verifier's own work), most CPU in one call {most_cpu:.3f}s")


@pytest.mark.slow
def test_fuzz_whole_call_with_math_verify_workers_is_bounded(monkeypatch):
    with verifier_pool(
        monkeypatch, size=2, soft_timeout=1.0, hard_timeout=2.0, queue_timeout=5.0, check_timeout=1.0
    ) as pool:
        bound = 2 * (pool.queue_timeout + pool.hard_timeout) + 1.0
        checked, slowest = _fuzz(budget_s=30, max_examples=60, deadline_s=bound)
    assert checked >= 40, f"only {checked} completions fuzzed within the budget"
    print(f"fuzzed {checked} completions (with math-verify), slowest call {slowest:.3f}s, bound {bound:g}s")


def test_the_runner_reports_a_call_over_its_cpu_bound_and_a_hung_call():
    """The runner the fuzzer relies on catches both failures it is there for: a call whose own work is over the
    CPU bound, and a call that never returns (here one blocked for longer than the wall deadline)."""

    def spin(completion, truth):
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        return Verdict(False, False, None, None, "spun")

    def block(completion, truth):
        time.sleep(0 if completion == "quick" else 5)
        return Verdict(False, False, None, None, "slept")

    busy = adversarial.run_in_scorer_threads([("x", "1")], threads=1, deadline_s=30, cpu_deadline_s=0.2, verify=spin)
    assert busy.over_deadline and busy.over_deadline[0][0] >= 0.3 and busy.unfinished == 0
    hung = adversarial.run_in_scorer_threads([("quick", "1"), ("hang", "1")], threads=2, deadline_s=0.5, verify=block)
    assert hung.unfinished == 1 and hung.over_deadline[0][1:] == ("hang", "1") and hung.seconds < 5
