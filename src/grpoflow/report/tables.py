"""The report's CSV tables: ``summary.csv`` (one row per model) and ``comparisons.csv`` (one row per paired
comparison)."""

from __future__ import annotations

import csv
import io
import logging

from grpoflow.io import atomic_write_text
from grpoflow.report.analysis import METRICS, BenchmarkAnalysis
from grpoflow.report.text import sampled_order

log = logging.getLogger(__name__)


def write_csv(path: str, rows: list[dict], benchmarks: list[str], experiments: dict) -> None:
    hyper = [k for k in next(iter(experiments.values()), {}) if k != "sft_model"]
    stats = [
        "accuracy_ci_low",
        "accuracy_ci_high",
        "delta_vs_sft_ci_low",
        "delta_vs_sft_ci_high",
        "gained_vs_sft",
        "lost_vs_sft",
        "p_vs_sft",
        "p_holm_vs_sft",
        "delta_vs_best",
        "gained_vs_best",
        "lost_vs_best",
        "p_vs_best",
        "p_holm_vs_best",
        "indistinguishable_from_best",
        "tokens_p90",
        "tokens_mean_correct",
        "tokens_per_correct",
        "tokens_delta_vs_sft",
        "tokens_delta_vs_sft_ci_low",
        "tokens_delta_vs_sft_ci_high",
        "accuracy_math_verify",
        "disagreements_math_verify",
    ]
    per_bench = []
    for b in benchmarks:
        keys = [f"{b}.{k}" for k, _, _ in METRICS] + [f"{b}.delta_vs_sft", f"{b}.n_problems"]
        keys += [f"{b}.{k}" for k in stats]
        keys += [
            f"{b}.{k}"
            for k in sorted(
                {k.split(".", 1)[1] for r in rows for k in r if k.startswith((f"{b}.pass@", f"{b}.maj@", f"{b}.avg@"))},
                key=sampled_order,
            )
        ]
        per_bench += keys
    fields = ["rank", "model", "kind", "experiment", "baseline", "seed_group"] + hyper + per_bench
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    atomic_write_text(path, buf.getvalue())


def write_comparisons_csv(path: str, analyses: dict[str, BenchmarkAnalysis]) -> None:
    """One row per paired comparison (both families), with the MDE of its benchmark."""
    fields = [
        "benchmark",
        "model",
        "reference",
        "relation",
        "n",
        "delta",
        "ci_low",
        "ci_high",
        "gained",
        "lost",
        "test",
        "p_value",
        "p_holm",
        "refused",
        "benchmark_mde",
    ]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for b, a in analyses.items():
        for c in a.comparisons:
            row = {"benchmark": b, "model": c.model, "reference": c.reference, "relation": c.relation}
            row.update(c.result.as_dict() if c.result else {"refused": c.refused})
            row.update(p_holm=c.p_holm, benchmark_mde=a.mde)
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    atomic_write_text(path, buf.getvalue())
