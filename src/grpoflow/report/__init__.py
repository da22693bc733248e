"""The cross-experiment report: results/report/summary.{md,csv}, comparisons.csv and plots/*.png.

Every number comes from the run's own files: accuracies, per-problem verdicts and token counts from each
evaluation's metrics JSON and per-sample file (``results/{model}/eval/{benchmark}.json`` + ``.samples.jsonl``),
curves from each experiment's ``train_metrics.jsonl``; the config only contributes names, hyperparameters,
reward settings and which runs differ only by seed. Models are ranked by accuracy on the primary benchmark
(``report.primary_benchmark``, default the first benchmark): only the cohort, the most models evaluated on the
same problems with the same decoding; the others are listed unranked with the reason, and never "Best". The
headline counts a seed group as one (its runs' mean accuracy) and states its comparison with the SFT start with
the Holm-adjusted p and the interval of the same test at that level.

What decides between models is paired (``grpoflow.report.statistics``): per benchmark, every GRPO model against
its SFT start, every model against the best one and each seed group's runs together against their SFT start,
problem by problem: Δ with Newcombe's paired interval, the
problems gained ↑ and lost ↓, an exact McNemar (greedy) or sign-flip permutation (sampled) p-value, Holm-adjusted
over the benchmark's distinct pairs (a GRPO model's SFT start against the best mirrors the GRPO model against its
SFT start when the GRPO model is the best: one test, counted once), the group indistinguishable from the best and
the minimum detectable effect. A comparison that could not be made (different problem sets, no per-sample file)
is shown as refused with its reason, and the report never counts the model as behind the best.
Runs that differ only in ``grpo.seed`` form a seed group: mean, SD, min–max and an interval over seeds.
"""

from __future__ import annotations

import logging

from grpoflow import health
from grpoflow.io import atomic_dir, atomic_write_text
from grpoflow.report.analysis import (
    add_statistics,
    analyse_benchmark,
    benchmark_warnings,
    load_evaluations,
    load_training_metrics,
    rank_rows,
    samples_path,
    summary_rows,
)
from grpoflow.report.experiments import experiment_rewards, experiment_summary, seed_groups
from grpoflow.report.markdown import render_markdown
from grpoflow.report.plots import write_plots
from grpoflow.report.tables import write_comparisons_csv, write_csv
from grpoflow.report.text import pct

__all__ = ["build_report", "experiment_rewards", "experiment_summary", "samples_path", "seed_groups"]

log = logging.getLogger(__name__)


# ---- the job ------------------------------------------------------------------------------------------------------


def build_report(
    evaluations: list[str],
    training: list[str],
    experiments: dict[str, dict],
    models: dict[str, dict],
    benchmarks: list[str],
    settings: dict,
    summary_path: str,
    table_path: str,
    plots_dir: str,
    comparisons_path: str | None = None,
    seed_groups: dict[str, list[str]] | None = None,
    rewards: dict[str, dict] | None = None,
) -> list[dict]:
    """Write the Markdown summary, the CSV tables and the plots; return the ranked rows.

    ``seed_groups``: {group: [experiments that differ only by seed]} (``seed_groups()``); ``rewards``:
    {experiment: ``experiment_rewards(exp)``} to score the training rewards on the evaluation completions."""
    evals = load_evaluations(evaluations)
    train = load_training_metrics(training)
    health_of = {
        name: health.assess(rows, experiments[name]["total_steps"])
        for name, rows in train.items()
        if name in experiments
    }
    primary = settings.get("primary_benchmark") or benchmarks[0]
    rows = summary_rows(evals, experiments, models, benchmarks, primary)
    cache: dict = {}
    groups = seed_groups or {}
    analyses = {
        b: analyse_benchmark(b, rows, evals, cache, rewards or {}, settings.get("second_grader"), groups)
        for b in benchmarks
    }
    for b, a in analyses.items():
        a.warnings = benchmark_warnings(b, evals, a.notes)
    rank_rows(rows, analyses[primary], primary)
    add_statistics(rows, analyses, groups)
    # A fresh directory replaces the old one whole: a plot of a removed experiment never survives.
    with atomic_dir(plots_dir) as tmp:
        names = write_plots(tmp, train, rows, benchmarks, analyses, evals)
    write_csv(table_path, rows, benchmarks, experiments)
    if comparisons_path:
        write_comparisons_csv(comparisons_path, analyses)
    atomic_write_text(
        summary_path,
        render_markdown(rows, evals, experiments, benchmarks, primary, names, analyses, groups, rewards, health_of),
    )
    if rows:
        log.info(
            "report: %d models, best on %s: %s (%s)",
            len(rows),
            primary,
            rows[0]["model"],
            pct(rows[0].get(f"{primary}.accuracy")),
        )
    return rows
