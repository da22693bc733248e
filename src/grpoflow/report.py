"""The cross-experiment report: results/report/summary.{md,csv} and results/report/plots/*.png.

Every number comes from the run's own files: accuracies and token counts from each evaluation's metrics JSON
(``results/{model}/eval/{benchmark}.json``), curves from each experiment's ``train_metrics.jsonl``; the config
only contributes names and hyperparameters. Models are ranked by accuracy on the primary benchmark
(``report.primary_benchmark``, default the first benchmark), so the winner is the first row.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path

from grpoflow.errors import DataError
from grpoflow.io import atomic_dir, atomic_path, atomic_write_text, read_json

log = logging.getLogger(__name__)

# Metrics per benchmark, in table order, with how the Markdown shows them.
METRICS = (
    ("accuracy", "accuracy", "pct"),
    ("accuracy_stderr", "± s.e.", "pct"),
    ("format_accuracy", "format", "pct"),
    ("partial_accuracy", "partial (±10%)", "pct"),
    ("no_answer_rate", "no answer", "pct"),
    ("truncation_rate", "truncated", "pct"),
    ("mean_response_tokens", "mean tokens", "num"),
    ("median_response_tokens", "median tokens", "num"),
)
KIND_LABEL = {"grpo": "GRPO", "sft": "SFT start", "external": "external"}
TRAINING_PLOTS = (
    ("reward", "training_reward", "mean total reward"),
    ("accuracy", "training_accuracy", "training accuracy"),
    ("response_length", "training_response_length", "mean response length (tokens)"),
)


def experiment_summary(exp: dict) -> dict:
    """The hyperparameters the summary table shows for an experiment (plus ``sft_model``, its baseline's name
    when the config names it)."""
    grpo, rewards = exp["grpo"], exp["rewards"]
    params = rewards.get("params") or {}
    return {
        "backend": exp["backend"],
        "lora_rank": grpo["lora"]["rank"],
        "prompts_per_step": grpo["prompts_per_step"],
        "num_generations": grpo["num_generations"],
        "learning_rate": grpo["learning_rate"],
        "kl_coef": grpo["kl_coef"],
        "total_steps": grpo["total_steps"],
        "temperature": grpo["temperature"],
        "top_p": grpo["top_p"],
        "top_k": grpo["top_k"],
        "rewards": "+".join(rewards["funcs"]),
        "reward_weights": "" if rewards.get("weights") is None else "/".join(f"{w:g}" for w in rewards["weights"]),
        "reward_params": json.dumps(params, sort_keys=True, separators=(",", ":")) if params else "",
        "normalize": rewards["normalize"],
        "seed": grpo["seed"],
        "sft_model": exp["sft"].get("name"),
    }


# ---- reading the run's files ----------------------------------------------------------------------------------


def load_evaluations(paths: list[str]) -> dict[tuple[str, str], dict]:
    """{(model, benchmark): metrics JSON}; the names are read from each file and checked against its path."""
    out = {}
    for p in paths:
        data = read_json(p)
        model, bench = data.get("model"), data.get("benchmark")
        expected = (Path(p).parent.parent.name, Path(p).name.removesuffix(".json"))
        if (model, bench) != expected:
            raise DataError(
                f"{p} holds the evaluation of model {model!r} on {bench!r}, not {expected[0]!r} on {expected[1]!r}: rerun it (snakemake -R evaluate)"
            )
        out[(model, bench)] = data
    return out


def load_training_metrics(paths: list[str]) -> dict[str, list[dict]]:
    """{experiment: [one dict per optimizer step]}, the experiment being the file's directory name."""
    out = {}
    for p in paths:
        rows = []
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        raise DataError(
                            f"{p}: line {lineno} is not valid JSON: the training log is damaged; rerun train_grpo"
                        ) from None
        out[Path(p).parent.name] = sorted(rows, key=lambda r: r.get("step", 0))
    return out


# ---- the table --------------------------------------------------------------------------------------------------


def baseline_of(experiment: str, summary: dict) -> str:
    return summary.get("sft_model") or f"{experiment}-sft"


def summary_rows(
    evals: dict, experiments: dict[str, dict], models: dict[str, dict], benchmarks: list[str], primary: str
) -> list[dict]:
    """One row per evaluated model, ranked by accuracy on ``primary`` (missing last, ties by name)."""
    rows = []
    for name in sorted({m for m, _ in evals}):
        entry = models.get(name, {})
        kind = entry.get("kind", "external")
        exp = entry.get("experiment") if kind == "grpo" else None
        row = {"model": name, "kind": kind, "experiment": exp or "", "baseline": ""}
        if exp in experiments:
            row["baseline"] = baseline_of(exp, experiments[exp])
            row.update({k: v for k, v in experiments[exp].items() if k != "sft_model"})
        for b in benchmarks:
            data = evals.get((name, b))
            if data is None:
                continue
            m = data["metrics"]
            for key, _, _ in METRICS:
                row[f"{b}.{key}"] = m.get(key)
            for key in sorted(k for k in m if k.startswith(("pass@", "maj@"))):
                row[f"{b}.{key}"] = m[key]
            row[f"{b}.n_problems"] = data["n_problems"]
            base = evals.get((row["baseline"], b)) if row["baseline"] else None
            # Rounded: a difference of two fractions of n problems needs no 17 digits of float noise.
            row[f"{b}.delta_vs_sft"] = round(m["accuracy"] - base["metrics"]["accuracy"], 12) if base else None
        rows.append(row)
    rows.sort(key=lambda r: (r.get(f"{primary}.accuracy") is None, -(r.get(f"{primary}.accuracy") or 0.0), r["model"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _pts(x) -> str:
    return "–" if x is None else f"{100 * x:+.1f} pts"


def _num(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def _fmt(x, how: str) -> str:
    return {"pct": _pct, "pts": _pts, "num": _num}[how](x)


def _sampled_order(key: str) -> tuple:
    """pass@1, pass@2, … then maj@k."""
    kind, k = key.split("@")
    return (kind != "pass", int(k))


def _md_table(header: list[str], body: list[list[str]], text_columns: int = 1) -> str:
    """A Markdown table; the first ``text_columns`` are left-aligned, the (numeric) rest right-aligned."""
    esc = [[str(c).replace("|", "\\|") for c in row] for row in [header] + body]
    lines = [
        "| " + " | ".join(esc[0]) + " |",
        "|" + "|".join(":---" if i < text_columns else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def _hyperparameter_columns(experiments: dict[str, dict]) -> tuple[list[str], dict]:
    """Hyperparameters that differ between experiments (table columns) and those all share (one line)."""
    keys = [k for k in next(iter(experiments.values()), {}) if k != "sft_model"]
    varying = [k for k in keys if len({json.dumps(e.get(k), sort_keys=True) for e in experiments.values()}) > 1]
    shared = {k: next(iter(experiments.values()))[k] for k in keys if k not in varying}
    return varying, shared


def render_markdown(
    rows: list[dict], evals: dict, experiments: dict, benchmarks: list[str], primary: str, plots: list[str]
) -> str:
    out = ["# grpoflow report", ""]
    if rows and rows[0].get(f"{primary}.accuracy") is not None:
        w = rows[0]
        line = f"**Best on `{primary}` (primary benchmark): `{w['model']}`** ({KIND_LABEL.get(w['kind'], w['kind'])}) with {_pct(w[f'{primary}.accuracy'])} ± {_pct(w[f'{primary}.accuracy_stderr'])}"
        if w.get(f"{primary}.delta_vs_sft") is not None:
            line += f", {_pts(w[f'{primary}.delta_vs_sft'])} vs its SFT start `{w['baseline']}`"
        if len(rows) > 1 and rows[1].get(f"{primary}.accuracy") is not None:
            gap = w[f"{primary}.accuracy"] - rows[1][f"{primary}.accuracy"]
            se = math.hypot(w[f"{primary}.accuracy_stderr"] or 0.0, rows[1][f"{primary}.accuracy_stderr"] or 0.0)
            line += f"; {_pts(gap)} ahead of `{rows[1]['model']}`" + (
                " (within 2 standard errors: not a clear win)" if gap <= 2 * se else ""
            )
        out += [line + ".", ""]

    varying, shared = _hyperparameter_columns(experiments)
    out += [f"## Ranking on `{primary}`", ""]
    header = ["rank", "model", "kind"]
    for b in benchmarks:
        header += [f"{b} acc", f"{b} Δ vs SFT"]
    header += [f"{primary} format", f"{primary} no answer", f"{primary} truncated", f"{primary} mean tokens"] + varying
    body = []
    for r in rows:
        cells = [
            str(r["rank"]),
            f"**{r['model']}**" if r["rank"] == 1 else r["model"],
            KIND_LABEL.get(r["kind"], r["kind"]),
        ]
        for b in benchmarks:
            cells += [_pct(r.get(f"{b}.accuracy")), _pts(r.get(f"{b}.delta_vs_sft"))]
        cells += [
            _pct(r.get(f"{primary}.format_accuracy")),
            _pct(r.get(f"{primary}.no_answer_rate")),
            _pct(r.get(f"{primary}.truncation_rate")),
            _num(r.get(f"{primary}.mean_response_tokens")),
        ]
        cells += ["" if r.get(k) is None or r.get(k) == "" else str(r.get(k)) for k in varying]
        body.append(cells)
    out += [_md_table(header, body, text_columns=3), ""]
    if shared:
        out += [
            "Shared by every experiment: "
            + ", ".join(f"{k} = {v}" for k, v in shared.items() if v not in ("", None))
            + ".",
            "",
        ]
    out += [
        "Δ vs SFT: accuracy minus that of the experiment's SFT starting point on the same benchmark, in percentage points.",
        "",
    ]

    out += ["## All metrics", ""]
    for b in benchmarks:
        extra = sorted(
            {k for (m, bb), d in evals.items() if bb == b for k in d["metrics"] if k.startswith(("pass@", "maj@"))},
            key=_sampled_order,
        )
        header = ["model"] + [label for _, label, _ in METRICS] + extra + ["problems"]
        body = []
        for r in rows:
            d = evals.get((r["model"], b))
            if d is None:
                continue
            m = d["metrics"]
            body.append(
                [r["model"]]
                + [_fmt(m.get(k), how) for k, _, how in METRICS]
                + [_pct(m.get(k)) for k in extra]
                + [str(d["n_problems"])]
            )
        first = next((d for (m, bb), d in sorted(evals.items()) if bb == b), None)
        out += [f"### `{b}`", ""]
        if first:
            g = first["generation"]
            how = (
                "greedy"
                if g.get("greedy")
                else f"{g['preset']} sampling (T {g['temperature']}, top_p {g['top_p']}, top_k {g['top_k']}, k = {g['samples']})"
            )
            out += [
                f"{how}, max {g['max_new_tokens']} new tokens, backend {g['backend']}, seed {g['seed']}. Per-sample records: `results/<model>/eval/{b}.samples.jsonl`.",
                "",
            ]
        out += [_md_table(header, body), ""]

    if plots:
        out += ["## Plots", ""]
        out += [f"![{p}](plots/{p}.png)" for p in plots] + [""]
    return "\n".join(out)


def write_csv(path: str, rows: list[dict], benchmarks: list[str], experiments: dict) -> None:
    hyper = [k for k in next(iter(experiments.values()), {}) if k != "sft_model"]
    per_bench = []
    for b in benchmarks:
        keys = [f"{b}.{k}" for k, _, _ in METRICS] + [f"{b}.delta_vs_sft", f"{b}.n_problems"]
        keys += [
            f"{b}.{k}"
            for k in sorted(
                {k.split(".", 1)[1] for r in rows for k in r if k.startswith((f"{b}.pass@", f"{b}.maj@"))},
                key=_sampled_order,
            )
        ]
        per_bench += keys
    fields = ["rank", "model", "kind", "experiment", "baseline"] + hyper + per_bench
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    atomic_write_text(path, buf.getvalue())


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
        ax.plot(x, smoothed, color=colors[exp], linewidth=1.6, label=exp)
        drawn = True
    return drawn


def _save(fig, plots_dir: Path, name: str) -> None:
    with atomic_path(plots_dir / f"{name}.png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png", metadata={"Software": None})


def write_plots(plots_dir: Path, training: dict[str, list[dict]], rows: list[dict], benchmarks: list[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    cmap = plt.get_cmap("tab10" if len(training) <= 10 else "tab20")
    colors = {e: cmap(i % cmap.N) for i, e in enumerate(training)}
    for key, name, label in TRAINING_PLOTS:
        fig, ax = plt.subplots(figsize=(7, 4))
        if _line_plot(ax, training, key, colors):
            ax.set(xlabel="optimizer step", ylabel=label, title=f"{label} during GRPO training")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            _save(fig, plots_dir, name)
            written.append(name)
        plt.close(fig)

    components = sorted({k for rows_ in training.values() for r in rows_ for k in r if k.startswith("reward/")})
    if components:
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
        written.append("training_reward_components")
        plt.close(fig)

    if rows:
        models = [r["model"] for r in rows]
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(models) * len(benchmarks) + 2), 4))
        width = 0.8 / max(1, len(benchmarks))
        for j, b in enumerate(benchmarks):
            acc = [100 * (r.get(f"{b}.accuracy") or 0.0) for r in rows]
            err = [100 * (r.get(f"{b}.accuracy_stderr") or 0.0) for r in rows]
            pos = [i + (j - (len(benchmarks) - 1) / 2) * width for i in range(len(models))]
            ax.bar(pos, acc, width, yerr=err, capsize=2, label=b)
        ax.set_xticks(
            range(len(models)),
            [f"{r['model']}\n({KIND_LABEL.get(r['kind'], r['kind'])})" for r in rows],
            rotation=30,
            ha="right",
            fontsize=8,
        )
        ax.set(ylabel="accuracy (%)", title="evaluation accuracy (ranked by the primary benchmark; bars ±1 s.e.)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        _save(fig, plots_dir, "eval_accuracy")
        written.append("eval_accuracy")
        plt.close(fig)
    return written


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
) -> list[dict]:
    """Write the Markdown summary, the CSV table and the plots; return the ranked rows."""
    evals = load_evaluations(evaluations)
    train = load_training_metrics(training)
    primary = settings.get("primary_benchmark") or benchmarks[0]
    rows = summary_rows(evals, experiments, models, benchmarks, primary)
    # A fresh directory replaces the old one whole: a plot of a removed experiment never survives.
    with atomic_dir(plots_dir) as tmp:
        names = write_plots(tmp, train, rows, benchmarks)
    write_csv(table_path, rows, benchmarks, experiments)
    atomic_write_text(summary_path, render_markdown(rows, evals, experiments, benchmarks, primary, names))
    if rows:
        log.info(
            "report: %d models, best on %s: %s (%s)",
            len(rows),
            primary,
            rows[0]["model"],
            _pct(rows[0].get(f"{primary}.accuracy")),
        )
    return rows
