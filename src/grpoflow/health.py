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
- ``reward_flat``: at two successive multiples of W (from 2 W on), the last W steps' mean reward is within noise of
  the first W steps' (the 99 % t interval of the change holds 0).
- ``reward_drop``: at each multiple of W, the last W steps' mean reward is below the first W steps' or below step
  1's (the start model's own reward, sampled before any update) beyond noise: training is making the start model
  worse (typically a learning rate too high for it, which can wreck it within the first window).
- ``entropy_collapse``: the last W steps' mean policy entropy fell below ``ENTROPY_COLLAPSE_RATIO`` of the first W
  steps'. Sampling has become near-greedy: completions of a group stop differing and the signal dries up.
- ``is_ratio_drift``: the mean importance-sampling ratio between the trainer's and the rollout engine's log-probs
  (TRL with vLLM) is off 1 by more than ``IS_RATIO_DRIFT`` over the last W steps: the two engines disagree about the
  policy (precision, a truncated-sampling bias, weights not synced).
- ``truncation``: over the last W steps, more than ``TRUNCATED_FRACTION`` of the completions hit
  ``grpo.max_response_length``: their answers are cut off and cannot be rewarded.

The verdict of a finished run compares its last W steps' mean reward with its first W steps' (a 99 % Welch t
interval, steps as samples) and with step 1's (step 1 given the run's step-to-step spread): "learned" when the
window interval lies above 0, "diverged" when ``nonfinite`` fired or either interval lies below 0, else "no evidence
of learning". Adjacent steps are correlated, so the intervals are optimistic; W of at least 5 steps keeps them from
resting on a handful.
Thresholds and the evidence for them: docs/training-health.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from statistics import fmean, stdev, variance
from typing import Iterable, Mapping

from grpoflow.errors import GrpoflowError

log = logging.getLogger("grpoflow.health")

NO_SIGNAL_FRACTION = 0.9
ENTROPY_COLLAPSE_RATIO = 0.1
IS_RATIO_DRIFT = 0.1
TRUNCATED_FRACTION = 0.5
CHECKS = ("nonfinite", "no_signal", "reward_flat", "reward_drop", "entropy_collapse", "is_ratio_drift", "truncation")
STOP_ON_DEFAULT = ("nonfinite",)
# Keys whose NaN/inf means the run diverged (backends.common.map_metrics lists them under "nonfinite").
DIVERGENCE_KEYS = ("loss", "grad_norm", "reward")


class HealthStop(GrpoflowError):
    """A check in ``health.stop_on`` fired: the run stops at this step with its line as the error."""


def window_for(total_steps: int) -> int:
    """W: a tenth of the run, at least 5 and at most 50 steps."""
    return max(5, min(50, total_steps // 10))


def _mean(rows: list[Mapping], key: str) -> float | None:
    values = [float(r[key]) for r in rows if _finite(r.get(key))]
    return fmean(values) if values else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _t(df: float) -> float:
    """The two-sided 99 % critical value of Student's t (windows are a few steps: z would be too narrow)."""
    from scipy.stats import t

    return float(t.ppf(0.995, df)) if df > 0 else math.inf


def reward_trend(first: list[float], last: list[float]) -> dict | None:
    """Last window's mean reward minus the first's, with a 99 % Welch interval (per-step means as samples)."""
    if len(first) < 2 or len(last) < 2:
        return None
    delta = fmean(last) - fmean(first)
    v1, v2 = variance(first) / len(first), variance(last) / len(last)
    se = math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / (len(first) - 1) + v2**2 / (len(last) - 1)) if se else len(first) + len(last) - 2
    half = _t(df) * se
    return {
        "first": round(fmean(first), 4),
        "last": round(fmean(last), 4),
        "delta": round(delta, 4),
        "ci": [round(delta - half, 4), round(delta + half, 4)],
        "steps": len(first),
    }


@dataclass
class HealthMonitor:
    """Feed it each step's metrics row (``observe``); it logs a check's line the first time it fires."""

    total_steps: int
    stop_on: Iterable[str] = STOP_ON_DEFAULT
    experiment: str = ""
    rows: list[dict] = field(default_factory=list)
    fired: dict[str, dict] = field(default_factory=dict)  # check -> {"step", "line"}

    def __post_init__(self):
        self.window = window_for(self.total_steps)
        self.stop_on = tuple(self.stop_on)
        self._flat_in_a_row = 0

    def observe(self, row: Mapping) -> list[str]:
        """Check the run after this row; returns the lines that fired now (already logged). Raises HealthStop when
        one of them is in ``stop_on``."""
        self.rows.append(dict(row))
        step = int(row.get("step", len(self.rows)))
        new = []
        for check in CHECKS:
            if check in self.fired:
                continue
            line = getattr(self, f"_{check}")(step)
            if line:
                self.fired[check] = {"step": step, "line": line}
                log.warning("%s", line)  # "WARNING grpoflow.health: <line>"
                new.append(line)
        for check in CHECKS:
            if check in self.stop_on and check in self.fired and self.fired[check]["step"] == step:
                raise HealthStop(
                    f"training of {self.experiment or 'the run'} stopped by its health check {check} at step {step}: "
                    f"{self.fired[check]['line']} (health.stop_on lists {check})"
                )
        return new

    # ---- the checks: each returns its line when the condition holds at ``step`` ----------------------------------

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

    def _reward_flat(self, step: int) -> str | None:
        n = len(self.rows)
        if n < 2 * self.window or n % self.window:
            return None
        trend, start = self.trend(), self.from_start()
        fell = start is not None and start["ci"][1] < 0  # that is reward_drop's line, not a flat reward
        flat = trend is not None and trend["ci"][0] <= 0 <= trend["ci"][1] and not fell
        # Twice in a row: a run that starts slowly is within noise at 2 W and clearly up at 3 W; its line would be
        # a false alarm that no later step takes back.
        self._flat_in_a_row = self._flat_in_a_row + 1 if flat else 0
        if self._flat_in_a_row < 2:
            return None
        return (
            f"reward flat: {self._change(step, trend, f'over the first {self.window}')}: no rise beyond noise; "
            "check grpo.learning_rate, the rewards, and the no_signal check"
        )

    def _change(self, step: int, change: dict, against: str) -> str:
        return (
            f"mean reward {change['last']:.3f} over steps {step - self.window + 1}-{step} against "
            f"{change['first']:.3f} {against} (change {change['delta']:+.3f}, 99 % interval "
            f"[{change['ci'][0]:+.3f}, {change['ci'][1]:+.3f}])"
        )

    def _reward_drop(self, step: int) -> str | None:
        n = len(self.rows)
        if n < self.window or n % self.window:
            return None
        for against, change in (
            ("at step 1 (the start model)", self.from_start()),
            (f"at the first {self.window}", self.trend()),
        ):
            if change is not None and change["ci"][1] < 0 and (n >= 2 * self.window or "step 1" in against):
                return (
                    f"reward fell: {self._change(step, change, against)}: training is making the start model worse; "
                    "lower grpo.learning_rate or grpo.max_grad_norm"
                )
        return None

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

    # ---- the verdict ------------------------------------------------------------------------------------------------

    def trend(self) -> dict | None:
        rewards = [float(r["reward"]) for r in self.rows if _finite(r.get("reward"))]
        w = min(self.window, len(rewards) // 2)
        return reward_trend(rewards[:w], rewards[-w:]) if w >= 2 else None

    def from_start(self) -> dict | None:
        """The last window's mean reward against step 1's: the start model's own reward, before any update. Step 1
        is one sample of the step-to-step noise, measured over the whole run so far (a run that moves inflates it:
        conservative)."""
        rewards = [float(r["reward"]) for r in self.rows if _finite(r.get("reward"))]
        last = rewards[-self.window :] if len(rewards) > self.window else rewards[1:]
        if len(last) < 2 or not _finite(self.rows[0].get("reward")):
            return None
        start = float(self.rows[0]["reward"])
        delta = fmean(last) - start
        half = _t(len(rewards) - 1) * stdev(rewards) * math.sqrt(1 + 1 / len(last))
        return {
            "first": round(start, 4),
            "last": round(fmean(last), 4),
            "delta": round(delta, 4),
            "ci": [round(delta - half, 4), round(delta + half, 4)],
            "steps": len(last),
        }

    def summary(self) -> dict:
        trend, start = self.trend(), self.from_start()
        changes = [c for c in (trend, start) if c is not None]
        if "nonfinite" in self.fired or any(c["ci"][1] < 0 for c in changes):
            verdict = "diverged"
        elif trend and trend["ci"][0] > 0:  # step 1 alone never makes a run "learned": one noisy step could
            verdict = "learned"
        else:
            verdict = "no evidence of learning"
        return {
            "verdict": verdict,
            "steps": len(self.rows),
            "window": self.window,
            "reward_trend": trend,
            "reward_from_start": start,
            "checks": {c: (self.fired[c]["step"] if c in self.fired else None) for c in CHECKS},
            "lines": {c: f["line"] for c, f in self.fired.items()},
        }


def assess(rows: Iterable[Mapping], total_steps: int) -> dict:
    """The health summary of a finished run's ``train_metrics.jsonl`` rows (the monitor replayed, nothing logged
    and nothing stopped)."""
    monitor = HealthMonitor(total_steps, stop_on=())
    previous = log.disabled
    log.disabled = True
    try:
        for row in rows:
            monitor.observe(row)
    finally:
        log.disabled = previous
    return monitor.summary()
