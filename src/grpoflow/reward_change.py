"""Has a GRPO run's training reward changed? The comparisons grpoflow.health decides with, for many runs at once.

Every function takes the per-step mean rewards as an array of shape (runs, steps): the health monitor passes its one
run as a single row, ``benchmarks/health_simulation.py`` passes thousands of simulated runs, so the figures in
docs/measurements.md are those of this code.

At a look (every W steps, W = ``window_for(total_steps)``, and at the last step) three comparisons are made, each a
99.5 % interval of a change in mean reward:

- ``trend``: the last w steps against the first w (w = W, or half the steps seen while they are fewer than 2 W);
- ``from_start``: the last W steps against step 1, the start model's own reward (sampled before any update): it
  sees a run that learns, or is wrecked, within its first window;
- ``from_best``: the last W steps against the best earlier W-step window, the interval widened for every pair of
  windows the whole run compares (Bonferroni), since the best of several windows is high by chance.

The noise is measured on the run itself: the pooled variance of the steps around their own W-step window's mean,
so a rise between windows does not count as noise; it is never below a quarter of the square of the smallest step
between two rewards after step 1 (coarse rewards, e.g. means of 64 completions, repeat values: a window of equal
values is not exact knowledge). A comparison of one step with W (``from_start``) rests on that step's distribution,
which is skewed where rewards are coarse and near 0 or 1: its bounds are widened by the Cornish-Fisher term of the
rewards' skewness (never narrowed). The lower bound, which makes a run "learned", takes the skewness of all steps;
the upper bound, which makes it "diverged", that of the steps after step 1, whose own fall it would otherwise hide.
The simulation measures what this yields: a flat run is called "learned" in at most 1 % of runs at 5-500 steps,
rewards in multiples of 1/2 to continuous (docs/measurements.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

# Each end of a 99.5 % interval. Two comparisons can make a run "learned" (trend, from_start): together at most
# 0.5 % of flat runs, short of the 1 % a false "learned" may cost.
TAIL = 0.0025
CONFIDENCE = 1 - 2 * TAIL
# The Cornish-Fisher term is a first-order correction that overshoots at large skewness: one odd value among
# constant ones (a reward of 1/128 among 199 zeros) reads as a skewness of 14 and would hide any change. 3 keeps the
# simulated flat runs' false "learned" under 1 % with 8 completions per step and a mean reward of 0.95.
SKEW_CAP = 3.0


def window_for(total_steps: int) -> int:
    """W: a tenth of the run, at least 5 and at most 50 steps."""
    return max(5, min(50, total_steps // 10))


def is_look(steps: int, window: int, total_steps: int) -> bool:
    """The reward checks run every W steps and at the run's last step."""
    return steps >= 4 and (steps % window == 0 or steps == total_steps)


def window_pairs(window: int, total_steps: int) -> int:
    """How many pairs of W-step windows a run of ``total_steps`` compares (``from_best``), at least 1."""
    m = max(total_steps // window, 2)
    return m * (m - 1) // 2


@functools.lru_cache(maxsize=4096)
def _t(tail: float, df: int) -> float:
    """Student's t quantile (cached: the monitor asks for the same few at every look)."""
    from scipy.stats import t

    return float(t.ppf(1 - tail, df))


@dataclass(frozen=True)
class Noise:
    """The step-to-step spread of each run around its windows' means."""

    sd: np.ndarray  # per run, floored
    df: int
    skew: np.ndarray  # of all steps' deviations
    skew_after_start: np.ndarray  # of the deviations of steps 2..n


def _window_moments(rewards: np.ndarray, window: int, skip_first: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Sums of squared and cubed deviations from each W-step window's mean (windows from step 1), and their df."""
    runs, n = rewards.shape
    ss, s3, df = np.zeros(runs), np.zeros(runs), 0
    for lo in range(0, n, window):
        hi = min(lo + window, n)
        lo = max(lo, 1) if skip_first else lo
        if hi - lo < 2:
            continue
        dev = rewards[:, lo:hi] - rewards[:, lo:hi].mean(axis=1, keepdims=True)
        ss += (dev**2).sum(axis=1)
        s3 += (dev**3).sum(axis=1)
        df += hi - lo - 1
    return ss, s3, df


def _skewness(ss: np.ndarray, s3: np.ndarray, df: int) -> np.ndarray:
    """Sample skewness, within +-SKEW_CAP."""
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = (s3 / df) / (ss / df) ** 1.5
    return np.clip(np.where(ss > 0, skew, 0.0), -SKEW_CAP, SKEW_CAP)


def noise(rewards: np.ndarray, window: int) -> Noise | None:
    """The noise of each run (None with fewer than 3 steps or no df)."""
    ss, s3, df = _window_moments(rewards, window, skip_first=False)
    if rewards.shape[1] < 3 or df == 0:
        return None
    after_ss, after_s3, after_df = _window_moments(rewards, window, skip_first=True)
    later = np.sort(rewards[:, 1:], axis=1)
    gaps = np.diff(later, axis=1)
    gaps = np.where(gaps > 1e-12, gaps, np.inf)
    smallest = gaps.min(axis=1) if gaps.shape[1] else np.full(len(rewards), np.inf)
    floor = np.where(np.isfinite(smallest), smallest / 2, 0.0)
    return Noise(
        sd=np.maximum(np.sqrt(ss / df), floor),
        df=df,
        skew=_skewness(ss, s3, df),
        skew_after_start=_skewness(after_ss, after_s3, after_df) if after_df else np.zeros(len(rewards)),
    )


@dataclass(frozen=True)
class Change:
    """Mean reward of a later window (``last``, its ``steps`` steps) against an earlier one (``first``), per run,
    with the interval of the change (``low``, ``high``)."""

    first: np.ndarray
    last: np.ndarray
    low: np.ndarray
    high: np.ndarray
    steps: int
    level: float  # the interval's confidence

    @property
    def delta(self) -> np.ndarray:
        return self.last - self.first

    def row(self, i: int = 0) -> dict:
        """Run ``i``'s change as the health summary and the report show it."""
        return {
            "first": round(float(self.first[i]), 4),
            "last": round(float(self.last[i]), 4),
            "delta": round(float(self.delta[i]), 4),
            "ci": [round(float(self.low[i]), 4), round(float(self.high[i]), 4)],
            "steps": self.steps,
            "confidence": self.level,
        }


def _change(first, last, sizes: tuple[int, int], nz: Noise, tail: float) -> Change:
    """``last`` (mean of ``sizes[0]`` steps) minus ``first`` (of ``sizes[1]``): t interval with the pooled noise, its
    ends widened by the Cornish-Fisher term of the difference's skewness where the two sizes differ."""
    a, b = sizes
    t = _t(tail, nz.df)
    se = nz.sd * math.sqrt(1 / a + 1 / b)
    # Skewness of mean(a) - mean(b) per unit skewness of one step: 0 for equal sizes.
    shape = (1 / a**2 - 1 / b**2) / (1 / a + 1 / b) ** 1.5
    widen = (t * t - 1) / 6
    below = t + np.maximum(0.0, widen * nz.skew * shape)  # how far the lower bound lies below the change
    above = t + np.maximum(0.0, -widen * nz.skew_after_start * shape)
    delta = last - first
    return Change(first, last, delta - below * se, delta + above * se, a, round(1 - 2 * tail, 6))


@dataclass(frozen=True)
class RewardTests:
    """The comparisons of every run at one look (``steps`` steps seen)."""

    steps: int
    trend: Change
    from_start: Change
    from_best: Change | None
    best_window: np.ndarray | None  # per run, the first step (1-based) of its best earlier window
    trend_rising: np.ndarray  # the least-squares slope over every step seen lies above 0 (reward_flat only)

    @property
    def rise(self) -> np.ndarray:
        """The last window lies above the first window or above step 1 beyond noise."""
        return (self.trend.low > 0) | (self.from_start.low > 0)

    @property
    def below_start(self) -> np.ndarray:
        return (self.trend.high < 0) | (self.from_start.high < 0)

    @property
    def below_best(self) -> np.ndarray:
        if self.from_best is None:
            return np.zeros(len(self.rise), dtype=bool)
        return self.from_best.high < 0


def reward_tests(rewards: np.ndarray, window: int, total_steps: int) -> RewardTests | None:
    """Every run's comparisons after ``rewards.shape[1]`` steps (None before 4: windows of 2 steps at least)."""
    rewards = np.asarray(rewards, dtype=float)
    n = rewards.shape[1]
    nz = noise(rewards, window) if n >= 4 else None
    if nz is None:
        return None
    w = min(window, n // 2)
    trend = _change(rewards[:, :w].mean(axis=1), rewards[:, -w:].mean(axis=1), (w, w), nz, TAIL)
    tail_steps = min(window, n - 1)
    from_start = _change(rewards[:, 0], rewards[:, -tail_steps:].mean(axis=1), (tail_steps, 1), nz, TAIL)
    from_best, best_window = None, None
    earlier = (n - window) // window
    if earlier >= 1:
        means = rewards[:, : earlier * window].reshape(len(rewards), earlier, window).mean(axis=2)
        best = means.argmax(axis=1)
        tail = TAIL / window_pairs(window, total_steps)
        from_best = _change(means.max(axis=1), rewards[:, -window:].mean(axis=1), (window, window), nz, tail)
        best_window = best * window + 1
    steps = np.arange(n) - (n - 1) / 2
    slope = rewards @ steps / (steps @ steps)
    trend_rising = slope - _t(TAIL, nz.df) * nz.sd / math.sqrt(steps @ steps) > 0
    return RewardTests(n, trend, from_start, from_best, best_window, trend_rising)


# ---- the checks on the reward, look by look -------------------------------------------------------------------

REWARD_CHECKS = ("reward_flat", "reward_drop", "reward_drop_from_best")
FLAT_LOOKS_IN_A_ROW = 2
FLAT_FROM = 0.5  # reward_flat judges from half the run on: before, a slow rise is still within noise


class RewardChecks:
    """When each run's reward checks fire and are taken back, look by look (``advance``).

    - ``reward_drop``: the last window lies below the first window or below step 1 beyond noise;
    - ``reward_drop_from_best``: it lies below the best earlier window beyond noise;
    - ``reward_flat``: at two looks in a row from half the run (and 2 W) on, none of the three shows a change and
      nor does the trend over every step seen (least-squares slope).

    A check fires once; it is taken back at the first later look where its condition no longer holds (for
    ``reward_flat``: where the run is rising, by the same test that makes it "learned")."""

    def __init__(self, runs: int, window: int, total_steps: int):
        self.window, self.total_steps = window, total_steps
        self.fired = {c: np.zeros(runs, dtype=int) for c in REWARD_CHECKS}  # step, 0: not fired
        self.cleared = {c: np.zeros(runs, dtype=int) for c in REWARD_CHECKS}
        self._flat_in_a_row = np.zeros(runs, dtype=int)

    def advance(self, tests: RewardTests) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The look's conditions; returns the runs whose checks fired now and those taken back now."""
        n = tests.steps
        rise, below, fell = tests.rise, tests.below_start, tests.below_best
        flat = ~rise & ~tests.trend_rising & ~below & ~fell
        judged = n >= max(2 * self.window, math.ceil(FLAT_FROM * self.total_steps))
        self._flat_in_a_row = np.where(flat & judged, self._flat_in_a_row + 1, 0)
        holds = {"reward_flat": self._flat_in_a_row >= FLAT_LOOKS_IN_A_ROW, "reward_drop": below}
        holds["reward_drop_from_best"] = fell
        gone = {"reward_flat": rise, "reward_drop": ~below, "reward_drop_from_best": ~fell}
        fired, cleared = {}, {}
        for check in REWARD_CHECKS:
            was = self.fired[check] > 0
            fired[check] = holds[check] & ~was
            cleared[check] = was & (self.cleared[check] == 0) & gone[check]
            self.fired[check] = np.where(fired[check], n, self.fired[check])
            self.cleared[check] = np.where(cleared[check], n, self.cleared[check])
        return fired, cleared


def verdicts(tests: RewardTests | None, runs: int, diverged: np.ndarray | None = None) -> np.ndarray:
    """What each run's last window shows: "diverged" (below its start, or ``diverged``: a NaN/inf), "fell from its
    best" (below its best earlier window), "learned" (above its start), else "no evidence of learning"."""
    out = np.full(runs, "no evidence of learning", dtype=object)
    if tests is not None:
        out[tests.rise] = "learned"
        out[tests.below_best] = "fell from its best"
        out[tests.below_start] = "diverged"
    if diverged is not None:
        out[diverged] = "diverged"
    return out


def replay(rewards: np.ndarray, total_steps: int) -> tuple[np.ndarray, RewardChecks]:
    """Every run's verdict and reward checks over all its steps, as the health monitor reaches them look by look
    (the simulation's entry; grpoflow.health.HealthMonitor makes the same calls one run at a time)."""
    rewards = np.asarray(rewards, dtype=float)
    runs, n = rewards.shape
    window = window_for(total_steps)
    checks = RewardChecks(runs, window, total_steps)
    tests = None
    for steps in range(1, n + 1):
        if is_look(steps, window, total_steps):
            tests = reward_tests(rewards[:, :steps], window, total_steps)
            if tests is not None:
                checks.advance(tests)
    if tests is None or tests.steps != n:
        tests = reward_tests(rewards, window, total_steps)
    return verdicts(tests, runs), checks
