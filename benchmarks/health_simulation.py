"""Simulated runs and reports through grpoflow's own code (issue 40): how often the training-health verdict and the
report's headline say the right thing.

    .venv/bin/python benchmarks/health_simulation.py            # --runs 2000 --reports 2000 --seed 0

1. Flat rewards (nothing learned) at 5-500 steps, rewards in multiples of 1/2, 1/8, 1/64, 1/128 and continuous,
   each at a mean reward of 0.05, 0.5 and 0.95 (the worst of the three is shown): how often the verdict is
   "learned", "diverged" or "fell from its best", and how often reward_drop or reward_drop_from_best fired at some
   look (a false alarm; reward_flat is the right alarm here).
2. Runs that change: rising (0.3 -> 0.7), fast (0.1 -> 0.7 within 5 steps), slow (flat at 0.3 for 40 % of the run,
   then to 0.6), collapsing (0.2 -> 0.8 -> 0.45), wrecked (0.4 at step 1, then 0): the share of right verdicts
   ("learned", "learned", "learned", "fell from its best", "diverged") and of runs where reward_flat fired (and was
   not taken back).
3. Resumed: runs of every shape through ``HealthMonitor.resumed`` at a random step, then the rest: the share whose
   summary (verdict, checks, lines) equals the report's replay of all rows.
4. Reports of 8 GRPO runs no better than their SFT start, 30 problems, greedy: how often the headline claims a
   significant gain (its Holm-adjusted p < 0.05), as 8 configurations of one seed and as one configuration of 8
   seeds; beside it, what the headline printed before (the best run's raw p, Newcombe's interval).

The reward of a step is the mean of its completions' 0/1 rewards: ``prompts`` prompts (accuracy Beta-spread around
the step's mean, concentration 2: at 0.5 a fifth of the groups answer all alike, as in the demo) with
``generations`` completions each; "continuous" adds normal noise of SD 0.08 (the demo run's step-to-step SD).
Verdicts come from grpoflow.reward_change.replay, the code grpoflow.health.HealthMonitor runs one run at a time;
the headline's decision from grpoflow.report.analysis.compare_models and headline_comparison.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from grpoflow import reward_change
from grpoflow.health import HealthMonitor, assess
from grpoflow.report import statistics as compare
from grpoflow.report.analysis import BenchmarkAnalysis, compare_models, headline_comparison

GRANULARITY = {  # name: (prompts, completions per prompt); None: continuous
    "1/2": (1, 2),
    "1/8": (1, 8),
    "1/64": (8, 8),
    "1/128": (16, 8),
    "continuous": None,
}
FLAT_STEPS = (5, 10, 20, 50, 100, 200, 500)
FLAT_MEANS = (0.05, 0.5, 0.95)


def rewards(rng, runs: int, mean: np.ndarray, granularity: str) -> np.ndarray:
    """(runs, steps) per-step mean rewards around the curve ``mean``."""
    shape = GRANULARITY[granularity]
    if shape is None:
        return mean[None, :] + rng.normal(0, 0.08, size=(runs, len(mean)))
    prompts, generations = shape
    m = np.clip(mean, 1e-6, 1 - 1e-6)
    accuracy = rng.beta(m * 2, (1 - m) * 2, size=(runs, prompts, len(mean)))
    return rng.binomial(generations, accuracy).sum(axis=1) / (prompts * generations)


def shape(name: str, steps: int) -> np.ndarray:
    s = np.arange(1, steps + 1)
    f = s / steps
    return {
        "rising": lambda: 0.3 + 0.4 * (s - 1) / (steps - 1),
        "fast": lambda: np.minimum(0.1 + 0.12 * (s - 1), 0.7),
        "slow": lambda: np.interp(f, [0, 0.4, 1], [0.3, 0.3, 0.6]),
        "collapsing": lambda: np.interp(f, [0, 0.4, 0.5, 0.7, 1], [0.2, 0.8, 0.8, 0.45, 0.45]),
        "wrecked": lambda: np.where(s == 1, 0.4, 0.0),
    }[name]()


RIGHT = {
    "rising": "learned",
    "fast": "learned",
    "slow": "learned",
    "collapsing": "fell from its best",
    "wrecked": "diverged",
}


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def flat_table(rng, runs: int) -> list[str]:
    out = [
        "| steps | rewards | false learned | false diverged | false fell from its best | false alarms |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for steps in FLAT_STEPS:
        for granularity in GRANULARITY:
            worst = np.zeros(4)
            for mean in FLAT_MEANS:
                verdicts, checks = reward_change.replay(rewards(rng, runs, np.full(steps, mean), granularity), steps)
                alarm = (checks.fired["reward_drop"] > 0) | (checks.fired["reward_drop_from_best"] > 0)
                rates = [np.mean(verdicts == v) for v in ("learned", "diverged", "fell from its best")]
                worst = np.maximum(worst, [*rates, alarm.mean()])
            out.append(f"| {steps} | {granularity} | " + " | ".join(pct(x) for x in worst) + " |")
    return out


def shapes_table(rng, runs: int) -> list[str]:
    out = [
        "| run | steps | rewards | right verdict | reward_flat fired | ... and not taken back |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, right in RIGHT.items():
        for steps in (50, 100, 200):
            for granularity in ("1/128", "1/64"):
                verdicts, checks = reward_change.replay(rewards(rng, runs, shape(name, steps), granularity), steps)
                flat = checks.fired["reward_flat"] > 0
                standing = flat & (checks.cleared["reward_flat"] == 0)
                out.append(
                    f"| {name} ({right}) | {steps} | {granularity} | {pct(np.mean(verdicts == right))} | "
                    f"{pct(flat.mean())} | {pct(standing.mean())} |"
                )
    return out


def resumed_share(rng, runs: int) -> tuple[int, int]:
    same = 0
    for i in range(runs):
        name = list(RIGHT)[i % len(RIGHT)]
        steps = (50, 100, 200)[i % 3]
        series = rewards(rng, 1, shape(name, steps), "1/128")[0]
        rows = [{"step": s, "reward": float(r)} for s, r in enumerate(series, 1)]
        cut = int(rng.integers(1, steps))
        monitor = HealthMonitor.resumed(steps, rows[:cut], stop_on=(), quiet=True)
        for row in rows[cut:]:
            monitor.observe(row)
        same += monitor.summary() == assess(rows, steps)
    return same, runs


GREEDY = {"greedy": True}


def null_report(rng, n: int, runs: int, seeds: bool) -> tuple[bool, bool, bool]:
    """One report of an SFT start and ``runs`` GRPO runs that are no better (each problem solved with the same
    probability by every model): (the headline claims a significant gain now, the old headline's raw p < 0.05,
    its Newcombe interval above 0)."""
    difficulty = rng.beta(1, 1, size=n)
    names = ["sft"] + [f"cfg-seed{i}" if seeds else f"cfg{i}" for i in range(1, runs + 1)]
    cache, evals, rows = {}, {}, []
    keys = tuple((i, str(i), "7") for i in range(n))
    for name in names:
        correct = (rng.random(n) < difficulty)[:, None]
        cache[(name, "sim")] = compare.Outcomes(name, keys, correct, np.zeros_like(correct, int), correct & False)
        evals[(name, "sim")] = {"metrics": {"accuracy": float(correct.mean())}, "n_problems": n, "generation": GREEDY}
        kind = "sft" if name == "sft" else "grpo"
        rows.append({"model": name, "kind": kind, "experiment": "" if kind == "sft" else name, "baseline": "sft"})
    rows[0]["baseline"] = ""
    groups = {"cfg": names[1:]} if seeds else {}
    a = BenchmarkAnalysis("sim")
    compare_models(a, rows, evals, cache, groups)
    c = headline_comparison(a)
    claims = c is not None and c.result is not None and c.p_holm < compare.ALPHA and c.result.delta > 0
    # Before: the best run by accuracy, its raw p and Newcombe's interval.
    top = max(names[1:], key=lambda m: (evals[(m, "sim")]["metrics"]["accuracy"], m))
    old = compare.paired(cache[(top, "sim")], cache[("sft", "sim")])
    return claims, old.p_value < compare.ALPHA and old.delta > 0, old.ci[0] > 0


def headline_table(rng, reports: int) -> list[str]:
    out = [
        "| 8 null GRPO runs, 30 problems | headline claims a significant gain | before: raw p < 0.05 | before: interval above 0 |",
        "|---|---:|---:|---:|",
    ]
    for seeds in (False, True):
        counts = np.sum([null_report(rng, 30, 8, seeds) for _ in range(reports)], axis=0) / reports
        label = "one configuration, 8 seeds" if seeds else "8 configurations, one seed each"
        out.append(f"| {label} | " + " | ".join(pct(x) for x in counts) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="simulated runs per cell")
    parser.add_argument("--reports", type=int, default=2000, help="simulated reports per case")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    for title, lines in (
        (f"Flat rewards ({args.runs} runs per cell, worst of mean rewards {FLAT_MEANS})", flat_table(rng, args.runs)),
        (f"Runs that change ({args.runs} runs per cell)", shapes_table(rng, args.runs)),
        ("Headline", headline_table(rng, args.reports)),
    ):
        print(f"### {title}\n")
        print("\n".join(lines) + "\n", flush=True)
    same, runs = resumed_share(rng, 300)
    print(f"Resumed: {same} of {runs} runs resumed at a random step give the summary of the replay of all rows.\n")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
