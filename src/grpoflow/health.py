"""Is a GRPO run learning? Checks over the per-step metrics every backend writes, while it trains and in the report.

Each backend hands every ``train_metrics.jsonl`` row to a ``HealthMonitor`` as it appends it (the same row the
progress line is made from). A check that fires logs one line in the job's log, at most once per condition: what,
since which step, the likely cause and the knob. ``assess`` replays the same monitor over a finished run's rows for
the report, so the log and the report cannot disagree. A check named in ``health.stop_on`` (default: ``nonfinite``
only) stops the run with one error line instead.

The checks (W, the window: a tenth of ``grpo.total_steps``, at least 5 and at most 50 steps):

- ``nonfinite``: the loss, gradient norm or reward is NaN/inf at a step. The run has diverged; nothing after it
  trains anything.
- ``no_signal``: over the last W steps, on average at least ``NO_SIGNAL_FRACTION`` of the groups had the same reward
  for every completion. GRPO's advantage is zero in such a group: it contributes no gradient. All-correct groups mean
  the task is too easy for the start model, all-wrong ones that it is too hard (or the reward never pays).
- ``reward_flat``, ``reward_drop``, ``reward_drop_from_best``: the training reward at each look (every W steps and
  the last step) against the run's start and its best window (grpoflow.reward_change: the comparisons, when the
  checks fire and when they are taken back).
- ``entropy_collapse``: the last W steps' mean policy entropy fell below ``ENTROPY_COLLAPSE_RATIO`` of the first W
  steps'. Sampling has become near-greedy: completions of a group stop differing and the signal dries up.
- ``is_ratio_drift``: the mean importance-sampling ratio between the trainer's and the rollout engine's log-probs
  (TRL with vLLM) is off 1 by more than ``IS_RATIO_DRIFT`` over the last W steps: the two engines disagree about the
  policy (precision, a truncated-sampling bias, weights not synced).
- ``truncation``: over the last W steps, more than ``TRUNCATED_FRACTION`` of the completions hit
  ``grpo.max_response_length``: their answers are cut off and cannot be rewarded.

The verdict of a finished run says what its last window shows (grpoflow.reward_change.verdicts): "diverged" (a
NaN/inf, or below the first window or step 1 beyond noise), "fell from its best" (below its best earlier window),
"learned" (above the first window or step 1), else "no evidence of learning". A run resumed from a checkpoint
continues the monitor of the rows written before (``HealthMonitor.resumed``), so its log and the report agree.
Thresholds and the evidence for them: docs/training-health.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from statistics import fmean
from typing import Iterable, Mapping

import numpy as np

from grpoflow import reward_change as rc
from grpoflow.errors import GrpoflowError
from grpoflow.reward_change import window_for

log = logging.getLogger("grpoflow.health")

__all__ = ["CHECKS", "HealthMonitor", "HealthStop", "assess", "window_for"]

NO_SIGNAL_FRACTION = 0.9
ENTROPY_COLLAPSE_RATIO = 0.1
IS_RATIO_DRIFT = 0.1
TRUNCATED_FRACTION = 0.5
CHECKS = (
    "nonfinite",
    "no_signal",
    "reward_flat",
    "reward_drop",
    "reward_drop_from_best",
    "entropy_collapse",
    "is_ratio_drift",
    "truncation",
)
STOP_ON_DEFAULT = ("nonfinite",)
# Keys whose NaN/inf means the run diverged (training.common.map_metrics lists them under "nonfinite").
DIVERGENCE_KEYS = ("loss", "grad_norm", "reward")


class HealthStop(GrpoflowError):
    """A check in ``health.stop_on`` fired: the run stops at this step with its line as the error."""


def _mean(rows: list[Mapping], key: str) -> float | None:
    values = [float(r[key]) for r in rows if _finite(r.get(key))]
    return fmean(values) if values else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _level(change: dict) -> str:
    """``99.5 %`` (an interval's confidence as the lines write it)."""
    return f"{100 * change['confidence']:.4g} %"


@dataclass
class HealthMonitor:
    """Feed it each step's metrics row (``observe``); it logs a check's line the first time it fires, and the line
    that takes a reward check back. ``quiet``: log nothing (the report's replay)."""

    total_steps: int
    stop_on: Iterable[str] = STOP_ON_DEFAULT
    experiment: str = ""
    quiet: bool = False
    rows: list[dict] = field(default_factory=list)
    fired: dict[str, dict] = field(default_factory=dict)  # check -> {"step", "line"}
    cleared: dict[str, int] = field(default_factory=dict)  # reward check -> the step that took it back
    lines: list[str] = field(default_factory=list)  # every line, in the order logged

    def __post_init__(self):
        self.window = window_for(self.total_steps)
        self.stop_on = tuple(self.stop_on)
        self._rewards: list[float] = []  # the finite rewards, and their steps
        self._reward_steps: list[int] = []
        self._reward_checks = rc.RewardChecks(1, self.window, self.total_steps)
        self._tests: rc.RewardTests | None = None  # at the latest look

    @classmethod
    def resumed(cls, total_steps: int, rows: Iterable[Mapping], **kwargs) -> HealthMonitor:
        """The monitor of a run resumed after ``rows`` (the rows it wrote before): they are replayed without
        stopping, their lines logged again (the new attempt's log holds every line the report's replay does), and
        a check of ``stop_on`` that fired in them and still holds stops the run now."""
        stop_on, quiet = tuple(kwargs.pop("stop_on", STOP_ON_DEFAULT)), kwargs.pop("quiet", False)
        monitor = cls(total_steps, stop_on=(), quiet=True, **kwargs)
        for row in rows:
            monitor.observe(row)
        monitor.stop_on, monitor.quiet = stop_on, quiet
        for line in monitor.lines:
            monitor._log(line, logging.WARNING if line in monitor._fired_lines() else logging.INFO, keep=False)
        held = [c for c in CHECKS if c in monitor.stop_on and c in monitor.fired and c not in monitor.cleared]
        if held:
            monitor._stop(held[0], monitor.fired[held[0]]["step"])
        return monitor

    def observe(self, row: Mapping) -> list[str]:
        """Check the run after this row; returns the lines that fired now (already logged). Raises HealthStop when
        one of them is in ``stop_on``."""
        self.rows.append(dict(row))
        step = int(row.get("step", len(self.rows)))
        if _finite(row.get("reward")):
            self._rewards.append(float(row["reward"]))
            self._reward_steps.append(step)
        reward_lines = self._reward_looks(step)
        new = []
        for check in CHECKS:
            if check in self.fired:
                continue
            line = reward_lines.get(check) if check in rc.REWARD_CHECKS else getattr(self, f"_{check}")(step)
            if line:
                self.fired[check] = {"step": step, "line": line}
                self._log(line, logging.WARNING)  # "WARNING grpoflow.health: <line>"
                new.append(line)
        for check, line in reward_lines.items():
            if check.endswith(" taken back"):
                self._log(line, logging.INFO)
        for check in CHECKS:
            if check in self.stop_on and check in self.fired and self.fired[check]["step"] == step:
                self._stop(check, step)
        return new

    def _log(self, line: str, level: int, keep: bool = True) -> None:
        if keep:
            self.lines.append(line)
        if not self.quiet:
            log.log(level, "%s", line)

    def _fired_lines(self) -> set[str]:
        return {f["line"] for f in self.fired.values()}

    def _stop(self, check: str, step: int) -> None:
        raise HealthStop(
            f"training of {self.experiment or 'the run'} stopped by its health check {check} at step {step}: "
            f"{self.fired[check]['line']} (health.stop_on lists {check})"
        )

    # ---- the reward checks: at each look, grpoflow.reward_change on this run ------------------------------------

    def _reward_looks(self, step: int) -> dict[str, str]:
        """At a look, the lines of the reward checks that fire now (by check) and of those taken back now (by
        ``"<check> taken back"``); {} between looks."""
        if not rc.is_look(len(self.rows), self.window, self.total_steps):
            return {}
        tests = rc.reward_tests(np.array([self._rewards]), self.window, self.total_steps)
        if tests is None:
            return {}
        self._tests = tests
        fired, cleared = self._reward_checks.advance(tests)
        out = {}
        for check in rc.REWARD_CHECKS:
            if fired[check][0] and check not in self.fired:
                out[check] = getattr(self, f"_{check}_line")(step, tests)
            if cleared[check][0] and check in self.fired and check not in self.cleared:
                self.cleared[check] = step
                out[f"{check} taken back"] = self._taken_back_line(check, step, tests)
        return out

    def _steps(self, count: int) -> str:
        """Steps a-b of the last ``count`` rewards."""
        return f"steps {self._reward_steps[-count]}-{self._reward_steps[-1]}"

    def _change(self, change: dict, against: str) -> str:
        return (
            f"mean reward {change['last']:.3f} over {self._steps(change['steps'])} against {change['first']:.3f} "
            f"{against} (change {change['delta']:+.3f}, {_level(change)} interval "
            f"[{change['ci'][0]:+.3f}, {change['ci'][1]:+.3f}])"
        )

    def _against_first(self, tests: rc.RewardTests) -> str:
        return f"over the first {tests.trend.steps}"

    def _reward_flat_line(self, step: int, tests: rc.RewardTests) -> str:
        start = tests.from_start.row()
        return (
            f"reward flat: {self._change(tests.trend.row(), self._against_first(tests))}, and "
            f"{start['first']:.3f} at step 1 (change {start['delta']:+.3f}, {_level(start)} interval "
            f"[{start['ci'][0]:+.3f}, {start['ci'][1]:+.3f}]): no rise beyond noise at two looks in a row, nor in "
            f"the trend over the {len(self._rewards)} steps so far; check grpo.learning_rate, the rewards, and the "
            "no_signal check"
        )

    def _reward_drop_line(self, step: int, tests: rc.RewardTests) -> str:
        for against, change in (
            ("at step 1 (the start model)", tests.from_start),
            (self._against_first(tests), tests.trend),
        ):
            if change.high[0] < 0:
                return (
                    f"reward fell: {self._change(change.row(), against)}: training is making the start model worse; "
                    "lower grpo.learning_rate or grpo.max_grad_norm"
                )
        raise AssertionError("reward_drop fired without a change below 0")

    def _reward_drop_from_best_line(self, step: int, tests: rc.RewardTests) -> str:
        best = tests.from_best.row()
        first = int(tests.best_window[0])
        where = f"steps {self._reward_steps[first - 1]}-{self._reward_steps[first + self.window - 2]}"
        pairs = rc.window_pairs(self.window, self.total_steps)
        return (
            f"reward fell from its best: mean reward {best['last']:.3f} over {self._steps(best['steps'])} against "
            f"{best['first']:.3f} over {where}, its best window (change {best['delta']:+.3f}, {_level(best)} "
            f"interval for the best of {pairs} pairs of windows [{best['ci'][0]:+.3f}, {best['ci'][1]:+.3f}]): the "
            "run learned, then lost part of it; lower grpo.learning_rate or raise grpo.kl_coef, or keep the "
            "checkpoint of its best steps (grpo.save_freq)"
        )

    def _taken_back_line(self, check: str, step: int, tests: rc.RewardTests) -> str:
        what = {
            "reward_flat": ("reward flat", "the reward is rising", tests.trend, self._against_first(tests)),
            "reward_drop": (
                "reward fell",
                "the last window is no longer below the start beyond noise",
                tests.trend,
                self._against_first(tests),
            ),
            "reward_drop_from_best": (
                "reward fell from its best",
                "the last window is no longer below the best beyond noise",
                tests.from_best,
                "at its best window",
            ),
        }[check]
        title, why, change, against = what
        if check == "reward_flat" and not tests.trend.low[0] > 0:
            change, against = tests.from_start, "at step 1 (the start model)"
        return f"{title} (step {self.fired[check]['step']}) taken back at step {step}: {why}: " + self._change(
            change.row(), against
        )

    # ---- the per-step checks: each returns its line when the condition holds at ``step`` ----------------------
    def _last(self) -> list[dict]:
        return self.rows[-self.window :]

    def _nonfinite(self, step: int) -> str | None:
        row = self.rows[-1]
        bad = [k for k in row.get("nonfinite", []) if k in DIVERGENCE_KEYS]
        bad += [k for k in DIVERGENCE_KEYS if isinstance(row.get(k), float) and not math.isfinite(row[k])]
        if not bad:
            return None
        return (
            f"{', '.join(sorted(set(bad)))} not finite (NaN/inf) at step {step}: training diverged; lower "
            "grpo.learning_rate, or grpo.max_grad_norm"
        )

    def _no_signal(self, step: int) -> str | None:
        if len(self.rows) < self.window:
            return None
        frac = _mean(self._last(), "frac_reward_zero_std")
        if frac is None or frac < NO_SIGNAL_FRACTION:
            return None
        reward = _mean(self._last(), "reward")
        which = "too hard for the start model, or the reward never pays" if (reward or 0) < 0.5 else "too easy"
        return (
            f"no learning signal since step {step - self.window + 1}: {100 * frac:.0f} % of groups over the last "
            f"{self.window} steps gave every completion the same reward (mean reward {reward:.3f}); the task looks "
            f"{which}: check the start model's accuracy (snakemake baselines), the rewards, or raise "
            "grpo.num_generations / grpo.temperature"
        )

    def _entropy_collapse(self, step: int) -> str | None:
        if len(self.rows) < 2 * self.window:
            return None
        first, last = _mean(self.rows[: self.window], "entropy"), _mean(self._last(), "entropy")
        if first is None or last is None or first <= 0 or last >= ENTROPY_COLLAPSE_RATIO * first:
            return None
        return (
            f"entropy collapse since step {step - self.window + 1}: mean policy entropy {last:.4f} over the last "
            f"{self.window} steps, {first:.4f} over the first (below {ENTROPY_COLLAPSE_RATIO:g}x): sampling is "
            "near-greedy and groups stop differing; lower grpo.learning_rate, raise grpo.temperature, or set "
            "grpo.clip_ratio_high above grpo.clip_ratio"
        )

    def _is_ratio_drift(self, step: int) -> str | None:
        if len(self.rows) < self.window:
            return None
        ratio = _mean(self._last(), "is_ratio_mean")
        if ratio is None or abs(ratio - 1) <= IS_RATIO_DRIFT:
            return None
        return (
            f"importance-sampling ratio {ratio:.3f} (mean over steps {step - self.window + 1}-{step}), off 1 by more "
            f"than {IS_RATIO_DRIFT:g}: the trainer's and the rollout engine's log-probs disagree (truncated sampling "
            "with grpo.top_p/top_k, precision, or weights not synced); see docs/training-health.md"
        )

    def _truncation(self, step: int) -> str | None:
        if len(self.rows) < self.window:
            return None
        frac = _mean(self._last(), "truncated_fraction")
        if frac is None or frac <= TRUNCATED_FRACTION:
            return None
        return (
            f"{100 * frac:.0f} % of completions truncated over steps {step - self.window + 1}-{step}: their answers "
            "are cut off and cannot be rewarded; raise grpo.max_response_length"
        )

    # ---- the verdict ------------------------------------------------------------------------------------------

    def summary(self) -> dict:
        """The verdict (what the last window shows), the three reward comparisons, and every check's history."""
        tests = self._tests
        if tests is None or tests.steps != len(self._rewards):
            tests = rc.reward_tests(np.array([self._rewards]), self.window, self.total_steps) if self._rewards else None
        verdict = rc.verdicts(tests, 1, diverged=np.array(["nonfinite" in self.fired]))[0]
        best = None
        if tests is not None and tests.from_best is not None:
            first = int(tests.best_window[0])
            best = {
                **tests.from_best.row(),
                "best_steps": [self._reward_steps[first - 1], self._reward_steps[first + self.window - 2]],
            }
        return {
            "verdict": verdict,
            "steps": len(self.rows),
            "window": self.window,
            "reward_trend": tests.trend.row() if tests else None,
            "reward_from_start": tests.from_start.row() if tests else None,
            "reward_from_best": best,
            "checks": {c: (self.fired[c]["step"] if c in self.fired else None) for c in CHECKS},
            "cleared": {c: self.cleared.get(c) for c in CHECKS},
            "lines": {c: f["line"] for c, f in self.fired.items()},
            "log": list(self.lines),
        }


def assess(rows: Iterable[Mapping], total_steps: int) -> dict:
    """The health summary of a finished run's ``train_metrics.jsonl`` rows (the monitor replayed, nothing logged
    and nothing stopped)."""
    monitor = HealthMonitor(total_steps, stop_on=(), quiet=True)
    for row in rows:
        monitor.observe(row)
    return monitor.summary()
