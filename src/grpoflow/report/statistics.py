"""Deciding between models from the per-sample files evaluation already wrote (no regeneration).

Two models evaluated on the same problems are compared *paired*, problem by problem, which is far more
sensitive than comparing two accuracies with their separate standard errors:

- ``paired(model, base)``: Δ = accuracy(model) − accuracy(base) with Newcombe's hybrid score 95 % interval for
  paired proportions (``paired_interval``: the two Wilson intervals combined through the correlation of the
  per-problem accuracies; with k > 1 samples per problem it works on the problems' mean accuracies, so a
  problem's samples stay together), the problems gained (↑: the model does better on them) and lost (↓), and a
  two-sided p-value: the exact McNemar test (binomial on the discordant problems) when both sides have one
  completion per problem, else a sign-flip permutation test on the per-problem accuracy differences. The
  percentile bootstrap used before covers too little on the 30-40 problems of AIME and AMC: 77-93 % for a
  nominal 95 % in four of the six simulated cases of tests/evaluation/test_compare.py (2,000 benchmarks of 30
  problems each), where Newcombe's interval covers 94.9-100 %.
- ``accuracy_interval``: Wilson's 95 % score interval for one model (k = 1), or Wilson over the problems with
  their mean accuracies (k > 1: the k samples of a problem are not independent draws; conservative, since a
  problem's mean accuracy varies less than one completion's verdict).
- ``holm``: Holm's step-down adjustment over the comparisons of one benchmark; ``inverted_interval``: the interval that
  inverts a comparison's own test (exact McNemar: Clopper-Pearson on the discordant problems; sign-flip: the
  shifts it does not reject) at a given level, so it holds 0 exactly when that test does not reject there. The
  headline shows it at the level Holm puts the test at (``holm_level``): it then excludes 0 exactly when the
  Holm-adjusted p is below 0.05, and never claims more than the adjusted test.
- ``minimum_detectable_effect``: the smallest difference a paired test at α = 0.05 finds with 80 % power, given
  the number of problems and how often two models disagree on a problem.
- ``seed_spread``: mean, SD, min–max and a t-interval over the seeds of one configuration.
- ``token_summary`` and ``paired_tokens``: response lengths and their paired change, with a studentized (bootstrap-t)
  interval: a percentile bootstrap covered 87.3 % and 84.8 % for a nominal 95 % on 30 problems of lognormal(0, 1)
  and (0, 1.25) differences, the studentized one 92.3 % and 91.2 % (tests/evaluation/test_compare.py).
- ``reward_rise``: a training run's mean reward over its last steps against its first (train_metrics.jsonl).

Runs evaluated on different problem sets (another benchmark file, limit or split) are never paired: ``pair``
raises ``DataError`` naming both files.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from grpoflow.errors import DataError

CONFIDENCE = 0.95
ALPHA = 0.05
POWER = 0.80
BOOTSTRAP_RESAMPLES = 10_000
PERMUTATION_RESAMPLES = 9_999
BOOTSTRAP_SEED = 0
_CHUNK = 1_000  # bootstrap resamples drawn at a time (memory: chunk × problems indices)


@dataclass(frozen=True)
class Outcomes:
    """One model's per-sample results on one benchmark, problems in benchmark order.

    ``keys``: what identifies each problem (index, id, ground truth); ``correct`` and ``tokens``: arrays of shape
    (problems, samples per problem)."""

    path: str
    keys: tuple[tuple, ...]
    correct: np.ndarray
    tokens: np.ndarray
    truncated: np.ndarray
    records: tuple[tuple[dict, ...], ...] = ()

    @property
    def n(self) -> int:
        return len(self.keys)

    @property
    def k(self) -> int:
        return int(self.correct.shape[1])

    @property
    def per_problem(self) -> np.ndarray:
        """Each problem's accuracy: the fraction of its samples that are correct."""
        return self.correct.mean(axis=1)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean())


def read_outcomes(path: str, keep_records: bool = False) -> Outcomes:
    """The ``.samples.jsonl`` file ``evaluate`` wrote, grouped by problem (``keep_records``: keep each record too,
    for scoring rewards or a second grader on the completions)."""
    by_problem: dict[int, list[dict]] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    raise DataError(f"{path}: line {lineno} is not valid JSON: rerun its evaluation") from None
                by_problem.setdefault(int(rec["index"]), []).append(rec)
    except FileNotFoundError:
        raise DataError(f"{path} not found: the per-sample file of an evaluation; rerun it (snakemake -R evaluate)")
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{path}: a record without an integer 'index': not a samples file of evaluate") from None
    if not by_problem:
        raise DataError(f"{path} has no samples: rerun its evaluation")
    problems = [sorted(recs, key=lambda r: r.get("sample", 0)) for _, recs in sorted(by_problem.items())]
    ks = {len(p) for p in problems}
    if len(ks) != 1:
        raise DataError(f"{path}: problems have different numbers of samples ({sorted(ks)}): rerun its evaluation")
    return Outcomes(
        path=path,
        keys=tuple((p[0]["index"], p[0].get("id"), str(p[0].get("ground_truth"))) for p in problems),
        correct=np.array([[bool(r["correct"]) for r in p] for p in problems], dtype=bool),
        tokens=np.array([[int(r.get("response_tokens") or 0) for r in p] for p in problems], dtype=np.int64),
        truncated=np.array([[bool(r.get("truncated")) for r in p] for p in problems], dtype=bool),
        records=tuple(tuple(p) for p in problems) if keep_records else (),
    )


def check_same_problems(a: Outcomes, b: Outcomes) -> None:
    """Refuse to pair evaluations of different problem sets (``DataError`` naming both files)."""
    if a.keys == b.keys:
        return
    if a.n != b.n:
        why = f"{a.n} vs {b.n} problems"
    else:
        i = next(i for i, (x, y) in enumerate(zip(a.keys, b.keys)) if x != y)
        why = f"problem {i} differs: index/id/answer {a.keys[i]} vs {b.keys[i]}"
    raise DataError(
        f"cannot pair {a.path} with {b.path}: they were evaluated on different problem sets ({why}); rerun the older evaluation (snakemake -R evaluate)"
    )


# ---- intervals and tests --------------------------------------------------------------------------------------


def wilson_interval(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (no continuity correction; scipy's
    ``binomtest(...).proportion_ci(method="wilson")`` for whole counts). ``successes`` may be fractional (a
    mean accuracy times the number of problems)."""
    from scipy.stats import norm

    if n <= 0:
        raise ValueError("a proportion needs at least one trial")
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_means(values: np.ndarray, seed: int = BOOTSTRAP_SEED, resamples: int = BOOTSTRAP_RESAMPLES) -> np.ndarray:
    """Means of ``resamples`` resamples (with replacement) of the rows of ``values`` (per-problem numbers)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        out[start : start + size] = values[rng.integers(0, n, size=(size, n))].mean(axis=1)
    return out


def percentile_interval(draws: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return float(low), float(high)


def accuracy_interval(o: Outcomes) -> tuple[float, float, str]:
    """95 % interval of a model's accuracy and the method: Wilson (one sample per problem), else Wilson over the
    problems, the mean accuracy as the proportion of ``n`` problems. A percentile bootstrap over 30 problems
    covers too little (module docstring); Wilson over problems never less than Wilson's own coverage, because a
    problem's mean accuracy over k samples varies at most as much as one 0/1 verdict."""
    if o.k == 1:
        return (*wilson_interval(int(o.correct.sum()), o.n), "Wilson")
    return (*wilson_interval(float(o.per_problem.sum()), o.n), "Wilson over problems")


def paired_interval(x: np.ndarray, y: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's square-and-add interval (his method 10, Stat Med 1998;17:2635, as Fagerland, Lydersen & Laake
    give it, BMC Med Res Methodol 2014;14:1) for mean(x) − mean(y), where x and y are two models' per-problem
    accuracies on the same problems: each side's Wilson interval over the problems, combined through the
    correlation φ of x and y: for 0/1 verdicts the φ coefficient of the 2x2 table, with AD − BC reduced by N/2 when
    positive (here: the covariance by 1/(2n)); 0 when either side is constant (an empty margin). Without that
    correction its coverage at 30 problems dips to 92.5 % (20 % of problems discordant, 20,000 simulated
    benchmarks); with it, 94.9-100 % in the simulations of tests/evaluation/test_compare.py."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    p1, p2 = float(x.mean()), float(y.mean())
    l1, u1 = wilson_interval(float(x.sum()), n, confidence)
    l2, u2 = wilson_interval(float(y.sum()), n, confidence)
    sx, sy = float(x.std()), float(y.std())
    cov = float(np.mean((x - p1) * (y - p2)))
    phi = 0.0 if sx == 0 or sy == 0 else (max(cov - 1 / (2 * n), 0.0) if cov > 0 else cov) / (sx * sy)
    delta = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return max(-1.0, delta - math.sqrt(max(below, 0.0))), min(1.0, delta + math.sqrt(max(above, 0.0)))


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of ``gained`` of the discordant problems at 1/2."""
    from scipy.stats import binomtest

    if gained + lost == 0:
        return 1.0
    return float(binomtest(int(gained), int(gained + lost), 0.5).pvalue)


@functools.lru_cache(maxsize=8)
def _sign_patterns(m: int, seed: int) -> tuple[np.ndarray, bool]:
    """Every one of the 2^m sign patterns of m differences when there are at most PERMUTATION_RESAMPLES + 1, else
    that many seeded random ones; and whether they are all of them."""
    if 2**m <= PERMUTATION_RESAMPLES + 1:
        return (((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1).astype(np.int8), True
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, size=(PERMUTATION_RESAMPLES, m), dtype=np.int8) * 2 - 1).astype(np.int8), False


def sign_flip_p(differences: np.ndarray, seed: int = BOOTSTRAP_SEED) -> float:
    """Two-sided p-value of a paired permutation test: the mean difference against its distribution when each
    problem's difference flips sign at random (every sign pattern when at most 13 problems differ, else 9,999
    seeded ones, the observed pattern counted in: (hits + 1) / (resamples + 1))."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]  # a zero difference flips to itself
    if len(d) == 0:
        return 1.0
    signs, exact = _sign_patterns(len(d), seed)
    observed = abs(float(d.sum()))
    hits = int(np.count_nonzero(np.abs(signs @ d) >= observed - 1e-9 * max(1.0, observed)))
    return min(1.0, hits / len(signs) if exact else (hits + 1) / (len(signs) + 1))


@dataclass(frozen=True)
class Paired:
    """A model against a reference model on the same problems."""

    n: int  # problems
    accuracy: float  # the model's
    reference_accuracy: float
    delta: float  # accuracy − reference accuracy
    ci: tuple[float, float]  # Newcombe's paired 95 % interval of delta (paired_interval)
    gained: int  # ↑ problems the model does better on
    lost: int  # ↓ problems it does worse on
    p_value: float
    test: str  # "exact McNemar" | "sign-flip permutation"
    second_moment: float  # mean squared per-problem difference (the MDE's variance term)
    differences: np.ndarray = field(default=None, repr=False, compare=False)  # per problem, for inverted_interval

    @property
    def standard_error(self) -> float:
        """Of ``delta``: the per-problem differences' SD over the square root of the number of problems."""
        return math.sqrt(max(self.second_moment - self.delta**2, 0.0) / self.n)

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "delta": self.delta,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "gained": self.gained,
            "lost": self.lost,
            "p_value": self.p_value,
            "test": self.test,
        }


def paired(model: Outcomes, reference: Outcomes, seed: int = BOOTSTRAP_SEED) -> Paired:
    check_same_problems(model, reference)
    d = model.per_problem - reference.per_problem
    gained, lost = int((d > 0).sum()), int((d < 0).sum())
    if model.k == 1 and reference.k == 1:
        p, test = mcnemar_exact(gained, lost), "exact McNemar"
    else:
        p, test = sign_flip_p(d, seed), "sign-flip permutation"
    return Paired(
        n=model.n,
        accuracy=model.accuracy,
        reference_accuracy=reference.accuracy,
        # Means of per-problem accuracies: the benchmark accuracy of both sides (equal sample counts per problem).
        delta=float(model.per_problem.mean() - reference.per_problem.mean()),
        ci=paired_interval(model.per_problem, reference.per_problem),
        gained=gained,
        lost=lost,
        p_value=p,
        test=test,
        second_moment=float(np.mean(d**2)),
        differences=d,
    )


def holm_level(p_value: float, p_holm: float, alpha: float = ALPHA) -> float:
    """The confidence at which a test's own interval agrees with its Holm-adjusted p: Holm multiplies the test's
    p by c = p_holm / p (at most the number of tests), so the test is rejected exactly when its p is below
    alpha / c, and its interval at 1 - alpha / c excludes 0 exactly then. Between the unadjusted 95 % and
    Bonferroni's 1 - alpha / m."""
    return 1 - alpha * p_value / p_holm if p_holm > 0 else 1 - alpha


def inverted_interval(p: Paired, confidence: float, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The interval of ``p.delta`` that inverts ``p``'s own test at ``confidence``: it excludes 0 exactly when the
    test's p is below 1 - confidence.

    Exact McNemar (one completion per problem): conditional on the d discordant problems, the gained ones are
    Binomial(d, pi) and delta = (d / n)(2 pi - 1); Clopper-Pearson's interval for pi excludes 1/2 exactly when
    the two-sided exact test (twice the smaller tail at pi = 1/2, scipy's binomtest) rejects. Sign-flip
    permutation (several per problem): the shifts delta0 whose differences d - delta0 the test does not reject,
    found by bisection between the estimate and the far end on each side (started at 0 on the side of 0, so
    the agreement at 0 holds even where the randomized test's p is not monotone)."""
    from scipy.stats import binomtest

    if p.test == "exact McNemar":
        discordant = p.gained + p.lost
        if discordant == 0:
            return 0.0, 0.0
        ci = binomtest(p.gained, discordant).proportion_ci(confidence_level=confidence, method="exact")
        scale = discordant / p.n
        return scale * (2 * ci.low - 1), scale * (2 * ci.high - 1)
    d = np.asarray(p.differences, dtype=float)
    alpha = 1 - confidence

    def rejected(shift: float) -> bool:
        return sign_flip_p(d - shift, seed) < alpha

    def bound(far: float) -> float:
        near = float(d.mean())  # d - mean(d) has mean 0: never rejected
        towards_zero = (far - near) * (0.0 - near) > 0
        if towards_zero and not rejected(0.0):
            near = 0.0  # the test keeps 0: so does the interval
        outer = 0.0 if towards_zero and near != 0.0 else far
        if not rejected(outer):
            return outer
        for _ in range(40):  # |far - near| <= 2: 1e-12 of accuracy
            mid = (near + outer) / 2
            near, outer = (near, mid) if rejected(mid) else (mid, outer)
        return near

    return bound(-1.0), bound(1.0)


@dataclass(frozen=True)
class RewardRise:
    first: float  # mean reward of the first ``window`` steps
    last: float  # of the last ``window`` steps
    delta: float
    standard_error: float  # Welch's, of delta


def reward_rise(rewards: list[float], window: int = 25) -> RewardRise:
    """How far a run's training reward rose: the mean over its last ``window`` steps against its first. Steps see
    different prompts, so per-step rewards scatter widely; the standard error is Welch's over the two windows."""
    if len(rewards) < 2 * window:
        raise DataError(f"{len(rewards)} training steps: reward_rise compares two windows of {window} steps")
    first, last = np.asarray(rewards[:window], float), np.asarray(rewards[-window:], float)
    se = math.sqrt(first.var(ddof=1) / window + last.var(ddof=1) / window)
    return RewardRise(float(first.mean()), float(last.mean()), float(last.mean() - first.mean()), se)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest p times (m − i + 1), made
    monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def minimum_detectable_effect(n: int, second_moment: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference in accuracy a two-sided paired test at ``alpha`` detects with probability ``power``, for
    ``n`` problems whose per-problem differences have mean square ``second_moment`` (one sample per problem:
    the fraction of discordant problems). Normal approximation: (z₁₋α/₂ + z_power) · √(second_moment / n)."""
    from scipy.stats import norm

    return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * math.sqrt(second_moment / n))


# ---- seeds ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One number measured once per seed."""

    n: int
    mean: float
    sd: float | None  # sample SD (n − 1); None for a single seed
    low: float
    high: float
    ci: tuple[float, float] | None  # t-interval of the mean over seeds; None for a single seed


def seed_spread(values: list[float], confidence: float = CONFIDENCE) -> Spread:
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    mean = float(x.mean())
    if n == 1:
        return Spread(1, mean, None, mean, mean, None)
    sd = float(x.std(ddof=1))
    half = float(t.ppf(1 - (1 - confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return Spread(n, mean, sd, float(x.min()), float(x.max()), (mean - half, mean + half))


# ---- tokens -----------------------------------------------------------------------------------------------------


def token_summary(o: Outcomes) -> dict:
    """Response lengths over all completions, on the correct ones, and per correct answer."""
    tokens, correct = o.tokens.ravel(), o.correct.ravel()
    n_correct = int(correct.sum())
    return {
        "mean": float(tokens.mean()),
        "median": float(np.median(tokens)),
        "p90": float(np.percentile(tokens, 90)),
        "mean_correct": float(tokens[correct].mean()) if n_correct else None,
        "per_correct": float(tokens.sum() / n_correct) if n_correct else None,
        "truncation_rate": float(o.truncated.mean()),
    }


def studentized_interval(
    values: np.ndarray, confidence: float = CONFIDENCE, seed: int = BOOTSTRAP_SEED, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Bootstrap-t interval of the mean of ``values``: the resamples' t statistics (mean minus the sample's mean,
    over the resample's own standard error) give the quantiles, the sample's standard error the scale. Second-order
    accurate where the percentile bootstrap is first-order, which is what a skewed distribution of 30 problems
    needs (module docstring). Resamples whose values are all equal have no t and are left out."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    if se == 0:
        return mean, mean
    rng = np.random.default_rng(seed)
    t = []
    for start in range(0, resamples, _CHUNK):
        draws = x[rng.integers(0, n, size=(min(_CHUNK, resamples - start), n))]
        se_b = draws.std(axis=1, ddof=1) / math.sqrt(n)
        keep = se_b > 0
        t.append((draws.mean(axis=1)[keep] - mean) / se_b[keep])
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.concatenate(t), [tail, 1 - tail])
    return mean - float(high) * se, mean - float(low) * se


def paired_tokens(model: Outcomes, reference: Outcomes, seed: int = BOOTSTRAP_SEED) -> dict:
    """Change in mean response tokens against ``reference`` on the same problems, with a paired studentized
    bootstrap interval (per-problem mean tokens), also as a fraction of the reference's mean."""
    check_same_problems(model, reference)
    d = model.tokens.mean(axis=1) - reference.tokens.mean(axis=1)
    low, high = studentized_interval(d, seed=seed)
    base = float(reference.tokens.mean())
    return {
        "delta": float(d.mean()),
        "ci_low": low,
        "ci_high": high,
        "relative": float(d.mean() / base) if base else None,
    }
