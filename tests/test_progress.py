"""The per-step progress line every training backend writes to its job log, and the verl log follower behind it."""

from __future__ import annotations

import json
import threading

import pytest

from grpoflow.backends.verl import metrics as vm
from grpoflow.progress import StepProgress, duration


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (42.4, "42s"), (282, "4m42s"), (11220, "3h07m"), (190800, "2d05h")]
)
def test_duration_is_short_and_exact_enough(seconds, text):
    assert duration(seconds) == text


def test_line_has_step_reward_accuracy_speed_and_eta_measured_on_this_attempt():
    now = [1000.0]
    progress = StepProgress(100, clock=lambda: now[0])
    # A resumed attempt: its first reported step is 41; until a second step, the trainer's own step time stands in.
    assert (
        progress.line(41, {"reward": 0.5312, "accuracy": 0.41, "time_s": 3.0})
        == "step 41/100 (41%) | reward 0.531 | accuracy 0.410 | 3.0 s/step | ETA 2m57s"
    )
    now[0] += 8.0  # two steps in 8 s of wall clock (the step time the trainer reports leaves out logging, saving...)
    assert (
        progress.line(43, {"reward": 0.6, "time_s": 3.0}) == "step 43/100 (43%) | reward 0.600 | 4.0 s/step | ETA 3m48s"
    )


def test_line_without_any_timing_says_only_what_it_knows():
    assert StepProgress(10, clock=lambda: 0.0).line(1, {"reward": 1}) == "step 1/10 (10%) | reward 1.000"


def _record(step: int, score: float) -> str:
    return json.dumps({"step": step, "data": {"critic/score/mean": score, "timing_s/step": 2.0}}) + "\n"


def test_follow_reports_each_training_step_verl_appends_and_restarts_on_truncation(tmp_path):
    log = tmp_path / "attempt.jsonl"
    rows: list[dict] = []
    stop = threading.Event()
    follower = threading.Thread(target=vm.follow, args=(log, rows.append, stop, 0.01))
    follower.start()
    try:
        with open(log, "w") as fh:  # validation-only records are not training steps
            fh.write(_record(1, 0.25) + json.dumps({"step": 1, "data": {"val-core/acc": 0.5}}) + "\n")
            fh.write(_record(2, 0.5)[:20])  # verl is still writing this line
        _wait_for(lambda: len(rows) == 1)
        with open(log, "a") as fh:
            fh.write(_record(2, 0.5)[20:])
        _wait_for(lambda: len(rows) == 2)
        log.write_text(_record(1, 0.75))  # a new verl process truncates the file and starts again
        _wait_for(lambda: len(rows) == 3)
    finally:
        stop.set()
        follower.join(5)
    assert not follower.is_alive()
    assert [(r["step"], r["reward"]) for r in rows] == [(1, 0.25), (2, 0.5), (1, 0.75)]


def test_follow_reads_the_last_steps_once_more_when_stopped(tmp_path):
    log = tmp_path / "attempt.jsonl"
    log.write_text(_record(1, 0.25) + _record(2, 0.5))
    rows: list[dict] = []
    stop = threading.Event()
    stop.set()  # verl has already exited: one final read, then return
    vm.follow(log, rows.append, stop, poll_s=60)
    assert [r["step"] for r in rows] == [1, 2]


def test_vllm_progress_bar_updates_rarely_in_a_log_file(monkeypatch, tmp_path):
    import io
    import sys

    from grpoflow.evaluation.vllm_backend import progress_bar

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = progress_bar(total=10, desc="Processed prompts", file=io.StringIO())
    assert bar.mininterval == 30.0 and bar.total == 10
    bar.close()


def _wait_for(condition, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the follower did not report the step"
        time.sleep(0.01)
