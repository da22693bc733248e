"""The report's plots: training curves from ``train_metrics.jsonl`` and the evaluation bar and scatter plots."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from grpoflow.io import atomic_path
from grpoflow.report.analysis import KIND_LABEL, BenchmarkAnalysis

log = logging.getLogger(__name__)


TRAINING_PLOTS = (
    ("reward", "training_reward", "mean total reward"),
    ("accuracy", "training_accuracy", "training accuracy"),
    ("val_accuracy", "validation_accuracy", "validation accuracy"),
    ("response_length", "training_response_length", "mean response length (tokens)"),
)

# ---- plots ------------------------------------------------------------------------------------------------------


def _smooth(values: list[float]) -> list[float]:
    """Trailing moving average over ~5% of the run: GRPO batch rewards are noisy step to step."""
    w = max(1, len(values) // 20)
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= w:
            acc -= values[i - w]
        out.append(acc / min(i + 1, w))
    return out


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None and r.get("step") is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def _line_plot(ax, training: dict[str, list[dict]], key: str, colors: dict) -> bool:
    drawn = False
    for exp, rows in training.items():
        x, y = _series(rows, key)
        if not x:
            continue
        smoothed = _smooth(y)
        if smoothed != y:
            ax.plot(x, y, color=colors[exp], alpha=0.25, linewidth=0.8)
        ax.plot(x, smoothed, color=colors[exp], linewidth=1.6, label=exp, marker="o" if len(x) < 20 else None)
        drawn = True
    return drawn


def _save(fig, plots_dir: Path, name: str) -> None:
    with atomic_path(plots_dir / f"{name}.png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png", metadata={"Software": None})


def write_plots(
    plots_dir: Path,
    training: dict[str, list[dict]],
    rows: list[dict],
    benchmarks: list[str],
    analyses: dict[str, BenchmarkAnalysis] | None = None,
    evals: dict | None = None,
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    analyses, evals = analyses or {}, evals or {}
    cmap = plt.get_cmap("tab10" if len(training) <= 10 else "tab20")
    colors = {e: cmap(i % cmap.N) for i, e in enumerate(training)}
    written = _training_plots(plt, plots_dir, training, colors)
    if _reward_components(plt, plots_dir, training, colors):
        written.append("training_reward_components")
    if _eval_accuracy(plt, plots_dir, rows, benchmarks, analyses):
        written.append("eval_accuracy")
    if _accuracy_vs_tokens(plt, plots_dir, rows, benchmarks, evals):
        written.append("accuracy_vs_tokens")
    return written


def _training_plots(plt, plots_dir: Path, training: dict[str, list[dict]], colors: dict) -> list[str]:
    """One plot per ``TRAINING_PLOTS`` metric any experiment logged, an experiment per line; the names written."""
    written = []
    for key, name, label in TRAINING_PLOTS:
        fig, ax = plt.subplots(figsize=(7, 4))
        if _line_plot(ax, training, key, colors):
            ax.set(xlabel="optimizer step", ylabel=label, title=f"{label} during GRPO training")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            _save(fig, plots_dir, name)
            written.append(name)
        plt.close(fig)
    return written


def _reward_components(plt, plots_dir: Path, training: dict[str, list[dict]], colors: dict) -> bool:
    """A panel per reward component (``reward/*``) over the steps; False when no experiment logged any."""
    components = sorted({k for rows_ in training.values() for r in rows_ for k in r if k.startswith("reward/")})
    if not components:
        return False
    cols = min(3, len(components))
    nrows = math.ceil(len(components) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.5 * cols, 3.2 * nrows), squeeze=False)
    for ax, comp in zip(axes.flat, components):
        _line_plot(ax, training, comp, colors)
        ax.set(title=comp.removeprefix("reward/"), xlabel="step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(components) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(4, len(labels)),
        fontsize=8,
        bbox_to_anchor=(0.5, -0.02 - 0.03 * math.ceil(len(labels) / 4)),
    )
    fig.suptitle("reward components (mean per step, before weights)")
    fig.tight_layout()
    _save(fig, plots_dir, "training_reward_components")
    plt.close(fig)
    return True


def _eval_accuracy(
    plt, plots_dir: Path, rows: list[dict], benchmarks: list[str], analyses: dict[str, BenchmarkAnalysis]
) -> bool:
    """Accuracy bars per model and benchmark with their 95% intervals; False when nothing was evaluated."""
    if not rows:
        return False
    models = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(models) * len(benchmarks) + 2), 4))
    width = 0.8 / max(1, len(benchmarks))
    for j, b in enumerate(benchmarks):
        acc = [100 * (r.get(f"{b}.accuracy") or 0.0) for r in rows]
        intervals = analyses[b].intervals if b in analyses else {}
        err = [
            [
                100 * max(0.0, (r.get(f"{b}.accuracy") or 0.0) - intervals[r["model"]][0])
                if r["model"] in intervals
                else 0.0
                for r in rows
            ],
            [
                100 * max(0.0, intervals[r["model"]][1] - (r.get(f"{b}.accuracy") or 0.0))
                if r["model"] in intervals
                else 0.0
                for r in rows
            ],
        ]
        pos = [i + (j - (len(benchmarks) - 1) / 2) * width for i in range(len(models))]
        ax.bar(pos, acc, width, yerr=err, capsize=2, label=b)
    ax.set_xticks(
        range(len(models)),
        [f"{r['model']}\n({KIND_LABEL.get(r['kind'], r['kind'])})" for r in rows],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set(ylabel="accuracy (%)", title="evaluation accuracy (ranked by the primary benchmark; bars: 95% CI)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, plots_dir, "eval_accuracy")
    plt.close(fig)
    return True


def _accuracy_vs_tokens(plt, plots_dir: Path, rows: list[dict], benchmarks: list[str], evals: dict) -> bool:
    """Accuracy against mean response tokens, one panel per benchmark, an arrow from each SFT start to its GRPO
    models (up and to the left: more accurate with fewer tokens)."""
    panels = [b for b in benchmarks if any((r["model"], b) in evals for r in rows)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, b in zip(axes.flat, panels):
        point = {
            r["model"]: (
                evals[(r["model"], b)]["metrics"]["mean_response_tokens"],
                100 * evals[(r["model"], b)]["metrics"]["accuracy"],
            )
            for r in rows
            if (r["model"], b) in evals
        }
        for i, (model, (x, y)) in enumerate(sorted(point.items())):
            ax.scatter([x], [y], color=cmap(i % 10), zorder=3, label=model)
        for r in rows:
            if r["kind"] == "grpo" and r["model"] in point and r["baseline"] in point:
                ax.annotate(
                    "",
                    xy=point[r["model"]],
                    xytext=point[r["baseline"]],
                    arrowprops={"arrowstyle": "->", "color": "0.4", "lw": 1.0},
                )
        # At least ±10 % of the length and ±5 points around the points: a 0.04-token difference is no trend.
        xs, ys = [p[0] for p in point.values()], [p[1] for p in point.values()]
        xc, yc = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
        xh, yh = max(0.6 * (max(xs) - min(xs)), 0.1 * xc, 1.0), max(0.6 * (max(ys) - min(ys)), 5.0)
        ax.set_xlim(max(0.0, xc - xh), xc + xh)
        ax.set_ylim(max(-1.0, yc - yh), min(101.0, yc + yh) if yc + yh > 5 else yc + yh)
        ax.set(title=b, xlabel="mean response tokens", ylabel="accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("accuracy vs response length (arrows: SFT start → GRPO model)")
    fig.tight_layout()
    _save(fig, plots_dir, "accuracy_vs_tokens")
    plt.close(fig)
    return True
