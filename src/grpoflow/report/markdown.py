"""The report's Markdown: the headline, the ranking, training health, each section, and ``render_markdown``."""

from __future__ import annotations

import json
import logging

from grpoflow.report import statistics as compare
from grpoflow.report.analysis import KIND_LABEL, METRICS, BenchmarkAnalysis, Comparison, headline_comparison
from grpoflow.report.text import (
    decoding_label,
    fmt,
    md_table,
    num,
    p_is,
    p_text,
    pct,
    pct_ci,
    pts,
    pts_ci,
    sampled_order,
)

log = logging.getLogger(__name__)


# ---- formatting -------------------------------------------------------------------------------------------------


def _hyperparameter_columns(experiments: dict[str, dict]) -> tuple[list[str], dict]:
    """Hyperparameters that differ between experiments (table columns) and those all share (one line)."""
    keys = [k for k in next(iter(experiments.values()), {}) if k != "sft_model"]
    varying = [k for k in keys if len({json.dumps(e.get(k), sort_keys=True) for e in experiments.values()}) > 1]
    shared = {k: next(iter(experiments.values()))[k] for k in keys if k not in varying}
    return varying, shared


def _accuracy_label(a: BenchmarkAnalysis) -> str:
    return "accuracy" if (a.samples or 1) == 1 else f"avg@{a.samples}"


def _adjusted_phrase(c: Comparison) -> str:
    """Δ with the interval of its own test at the level Holm puts that test at (statistics.inverted_interval): it holds
    0 exactly when the Holm-adjusted p is at least 0.05, which it states."""
    p = c.result
    level = compare.holm_level(p.p_value, c.p_holm)
    test = "exact McNemar" if p.test == "exact McNemar" else "sign-flip"
    what = "the runs' per-problem accuracy against it, " if c.relation == "seeds" else ""
    counts = "" if c.relation == "seeds" else f", ↑{p.gained} ↓{p.lost}"
    return (
        f"{pts_ci(p.delta, compare.inverted_interval(p, level))} ({what}the {test} test's interval at its Holm level, "
        f"{100 * level:.1f}%){counts}, {p_is(c.p_holm, 'p (Holm)')}"
    )


def _unit_phrase(a: BenchmarkAnalysis, rows: list[dict], primary: str) -> str:
    """What the best unit scored: a seed group's mean over its runs, or one model's accuracy and interval; and
    its paired change against its SFT start."""
    row = {r["model"]: r for r in rows}
    members = a.units[a.best_unit]
    w = row[members[0]]
    if len(members) > 1:
        accs = [row[m][f"{primary}.accuracy"] for m in members]
        seeds = ", ".join(str(row[m].get("seed")) for m in members)
        line = (
            f"({KIND_LABEL.get(w['kind'], w['kind'])}, seeds {seeds}) with {pct(sum(accs) / len(accs))} mean over "
            f"{len(members)} seeds ({pct(min(accs))}–{pct(max(accs))})"
        )
    else:
        line = f"({KIND_LABEL.get(w['kind'], w['kind'])}) with "
        if w["model"] in a.intervals:
            low, high, _ = a.intervals[w["model"]]
            line += f"{pct(w[f'{primary}.accuracy'])} (95% CI {pct(low)}–{pct(high)})"
        else:
            line += f"{pct(w[f'{primary}.accuracy'])} ± {pct(w[f'{primary}.accuracy_stderr'])}"
    c = headline_comparison(a)
    if c is not None and c.result is not None:
        return line + f"; vs its SFT start `{w['baseline']}`: {_adjusted_phrase(c)}"
    if c is not None and c.refused:
        return line + f"; not compared with its SFT start `{w['baseline']}`: {c.refused}"
    if len(members) == 1 and w.get(f"{primary}.delta_vs_sft") is not None:
        return line + f", {pts(w[f'{primary}.delta_vs_sft'])} vs its SFT start `{w['baseline']}`"
    return line


def _headline(rows, analyses, primary, evals, health=None) -> list[str]:
    a = analyses[primary]
    if a.best_unit is None:
        return []
    members = a.units[a.best_unit]
    title = "Best on" if len(a.units) > 1 else "Result on"
    line = f"**{title} `{primary}` (primary benchmark): `{a.best_unit}`** {_unit_phrase(a, rows, primary)}."
    unhealthy = [(m, (health or {}).get(m, {}).get("verdict")) for m in members]
    unhealthy = [(m, v) for m, v in unhealthy if v and v != "learned"]
    if len(members) == 1 and unhealthy:
        # Best on held-out accuracy, but its training reward did not rise beyond noise (or fell): say so here.
        line += f" Its training health: **{unhealthy[0][1]}** (see Training health)."
    elif unhealthy:
        line += " Training health: " + ", ".join(f"`{m}` **{v}**" for m, v in unhealthy) + " (see Training health)."
    out = [line, ""]
    it = "it" if len(members) == 1 else f"its best run `{a.best}`"
    level = [m for m in a.indistinguishable if m not in members]  # a group's own runs are not rivals
    rivals = [c for c in a.comparisons if c.relation == "best" and c.result and c.model not in members]
    if level:
        out += [
            f"Not distinguishable from {it} on `{primary}` (Holm-adjusted paired p ≥ {compare.ALPHA}): "
            + ", ".join(f"`{m}`" for m in level)
            + ".",
            "",
        ]
    elif rivals:
        # "Every other model" only when every other model was compared: a refused one may be level with it.
        who = "Every other model compared with it" if a.not_compared else "Every other model"
        out += [f"{who} is significantly behind {it} on `{primary}` (Holm-adjusted p < {compare.ALPHA}).", ""]
    if a.not_compared:
        out += [_not_compared_line(primary, a.not_compared), ""]
    if a.warnings:
        out += [f"⚠ The `{primary}` numbers come with warnings: see them under `{primary}` in Paired comparisons.", ""]
    return out


def _health_section(health: dict[str, dict]) -> list[str]:
    """One row per GRPO run: grpoflow.health's verdict (what its last window shows), the reward against the first
    window, step 1 and the best window, and the checks that fired, with the step that took one back (the same
    replay of train_metrics.jsonl as the lines in the run's log)."""
    if not health:
        return []

    def change(c: dict | None, label: str) -> str:
        if not c:
            return "—"
        low, high = c["ci"]
        return f"{c['first']:.3f} → {c['last']:.3f} ({c['delta']:+.3f} [{low:+.3f}, {high:+.3f}], {label})"

    def fired(h: dict) -> str:
        out = []
        for check, step in h["checks"].items():
            if step is not None:
                back = (h.get("cleared") or {}).get(check)
                out.append(f"{check} (step {step}" + (f", taken back at {back})" if back else ")"))
        return ", ".join(out) or "none"

    body = []
    for name, h in sorted(health.items()):
        trend, start, best = h["reward_trend"], h.get("reward_from_start"), h.get("reward_from_best")
        body.append(
            [
                f"`{name}`",
                f"**{h['verdict']}**",
                change(trend, f"first vs last {trend['steps']} steps") if trend else "—",
                change(start, f"step 1 vs last {start['steps']}") if start else "—",
                change(best, f"steps {best['best_steps'][0]}-{best['best_steps'][1]} vs last {best['steps']}")
                if best
                else "—",
                fired(h),
            ]
        )
    return [
        "## Training health",
        "",
        "What each run's last window of training reward shows: against its first window and against step 1 (the "
        "start model's own reward), 99.5 % intervals, and against its best earlier window (the interval widened "
        "for every pair of windows the run compares); and the checks that fired while it trained, with the step "
        "that took one back (grpoflow.health; their lines are in `logs/train_grpo/<run>.log`; "
        "docs/training-health.md).",
        "",
        md_table(
            ["run", "verdict", "training reward", "against step 1", "against its best window", "checks fired"],
            body,
            text_columns=6,
        ),
        "",
    ]


def _not_compared_line(bench: str, refused: list[Comparison]) -> str:
    return (
        f"Not compared with the best on `{bench}`, so neither behind it nor level with it: "
        + ", ".join(f"`{c.model}` ({c.refused})" for c in refused)
        + "."
    )


def _warnings(rows, analyses, evals, groups, experiments) -> list[str]:
    """The warnings about the comparison as a whole (the top of the report); those about one benchmark's numbers
    are that benchmark's (``benchmark_warnings``), shown with its table."""
    out = []
    arms = [g for g, members in groups.items() if members]
    single = [g for g in arms if len(groups[g]) == 1]
    if len(arms) > 1 and single:
        out.append(
            f"⚠ Single-seed comparison: {', '.join(f'`{g}`' for g in single)} ran with one seed, so a difference "
            "between configurations mixes their effect with seed-to-seed variation, which one seed cannot measure: "
            "give those experiments `seeds: [1, 2, 3]`."
        )
    return [line for w in out for line in (w, "")]


def _not_ranked_line(bench: str, a: BenchmarkAnalysis) -> list[str]:
    if not a.not_ranked:
        return []
    return [f"Not ranked on `{bench}`: " + ", ".join(f"`{m}` ({why})" for m, why in a.not_ranked.items()) + ".", ""]


def _ranking(rows, benchmarks, primary, experiments, analyses) -> list[str]:
    varying, shared = _hyperparameter_columns(experiments)
    out = [f"## Ranking on `{primary}`", ""]
    # Δ vs SFT columns only where some model has an SFT start (not in an evaluation-only config).
    with_delta = any(r["baseline"] for r in rows)
    header = ["rank", "model", "kind"]
    for b in benchmarks:
        header += [f"{b} acc", f"{b} Δ vs SFT"] if with_delta else [f"{b} acc"]
    header += [f"{primary} format", f"{primary} no answer", f"{primary} truncated", f"{primary} mean tokens"] + varying
    body = []
    for r in rows:
        cells = [
            str(r["rank"]) if r["rank"] else "–",
            f"**{r['model']}**" if r["rank"] == 1 else r["model"],
            KIND_LABEL.get(r["kind"], r["kind"]),
        ]
        for b in benchmarks:
            cells += [pct(r.get(f"{b}.accuracy"))] + ([pts(r.get(f"{b}.delta_vs_sft"))] if with_delta else [])
        cells += [
            pct(r.get(f"{primary}.format_accuracy")),
            pct(r.get(f"{primary}.no_answer_rate")),
            pct(r.get(f"{primary}.truncation_rate")),
            num(r.get(f"{primary}.mean_response_tokens")),
        ]
        cells += ["" if r.get(k) is None or r.get(k) == "" else str(r.get(k)) for k in varying]
        body.append(cells)
    out += [md_table(header, body, text_columns=3), ""]
    out += _not_ranked_line(primary, analyses[primary])
    if shared:
        out += [
            "Shared by every experiment: "
            + ", ".join(f"{k} = {v}" for k, v in shared.items() if v not in ("", None))
            + ".",
            "",
        ]
    if with_delta:
        out += [
            "Δ vs SFT: accuracy minus that of the experiment's SFT starting point on the same benchmark, in "
            "percentage points; its interval, the problems gained/lost and the p-value are under Paired comparisons.",
            "",
        ]
    return out


def _comparisons_section(rows, analyses, evals) -> list[str]:
    out = [
        "## Paired comparisons",
        "",
        "Problem by problem on the same benchmark, from the per-sample files: Δ with Newcombe's paired score 95% "
        "interval (over the problems' mean accuracies: a problem's samples stay together), ↑ problems the model does "
        "better on and ↓ worse on, the exact McNemar test (one completion per problem) or a sign-flip permutation "
        "test (several), and p Holm-adjusted over the benchmark's distinct pairs of models (a comparison and its "
        "mirror are one test). Accuracy intervals: Wilson (one completion per problem) or Wilson over the problems.",
        "",
    ]
    kind = {r["model"]: r["kind"] for r in rows}
    for b, a in analyses.items():
        if a.best is None:
            continue
        decoding = a.decoding or decoding_label(
            next(d for (m, bb), d in sorted(evals.items()) if bb == b)["generation"]
        )
        out += [f"### `{b}`: {a.n_problems} problems, {decoding}", ""]
        out += [line for w in a.warnings for line in (w, "")]
        header = ["model", "kind", f"{_accuracy_label(a)} [95% CI]", "vs", "Δ [95% CI]", "↑", "↓", "p", "p (Holm)"]
        body = []
        for r in rows:
            if r["model"] not in a.intervals and (r["model"], b) not in evals:
                continue
            acc = evals[(r["model"], b)]["metrics"]["accuracy"]
            ci = a.intervals.get(r["model"])
            acc_cell = pct_ci(acc, ci) if ci else pct(acc)
            comps = [c for c in a.comparisons if c.model == r["model"]]
            if not comps:
                body.append(
                    [
                        r["model"],
                        KIND_LABEL.get(kind[r["model"]], ""),
                        acc_cell,
                        "(best)" if r["model"] == a.best else "",
                        "",
                        "",
                        "",
                        "",
                        "",
                    ]
                )
            for i, c in enumerate(comps):
                label = f"SFT `{c.reference}`" if c.relation == "sft" else f"best `{c.reference}`"
                first = [r["model"], KIND_LABEL.get(kind[r["model"]], ""), acc_cell] if i == 0 else ["", "", ""]
                if c.result is None:
                    body.append(first + [label, f"not paired: {c.refused}", "", "", "", ""])
                    continue
                p = c.result
                body.append(
                    first
                    + [label, pts_ci(p.delta, p.ci), str(p.gained), str(p.lost), p_text(p.p_value), p_text(c.p_holm)]
                )
        out += [md_table(header, body, text_columns=4), ""]
        out += _benchmark_footer(b, a)
    return out


def _benchmark_footer(b: str, a: BenchmarkAnalysis) -> list[str]:
    """Under a benchmark's table: the MDE, who is level with the best, who was not compared or ranked."""
    out: list[str] = []
    if a.mde is not None and a.mde > 0:
        out += [
            f"**Minimum detectable effect on `{b}`:** with {a.n_problems} problems and the disagreement seen here "
            f"(median over its distinct pairs of the mean squared per-problem difference: {a.mde_second_moment:.3f}"
            + (", the fraction of problems whose verdict differs" if (a.samples or 1) == 1 else "")
            + f"), a paired test at α = {compare.ALPHA} detects a difference of {100 * a.mde:.1f} pts with "
            f"{100 * compare.POWER:.0f}% power; smaller differences here are not evidence either way.",
            "",
        ]
    elif a.mde is not None:
        out += [
            f"**Minimum detectable effect on `{b}`:** cannot be estimated: the models here agree on every problem.",
            "",
        ]
    if len(a.intervals) > 1:
        group = [a.best] + a.indistinguishable
        out += [
            f"**Indistinguishable from the best** (`{a.best}`; Holm-adjusted p ≥ {compare.ALPHA} against it): "
            + ", ".join(f"`{m}`" for m in group)
            + ".",
            "",
        ]
    if a.not_compared:
        out += [_not_compared_line(b, a.not_compared), ""]
    out += _not_ranked_line(b, a)
    return out


def _seed_section(rows, analyses, groups, evals, benchmarks) -> list[str]:
    multi = {g: m for g, m in groups.items() if len(m) > 1}
    if not multi:
        return []
    seed_of = {r["model"]: r.get("seed") for r in rows}
    out = [
        "## Seed groups",
        "",
        "Runs whose configurations differ only in `grpo.seed`: accuracy and Δ vs SFT as mean ± SD over seeds, "
        "min–max, a 95% t-interval over seeds, and each seed's paired Δ vs its SFT start.",
        "",
    ]
    header = [
        "group",
        "benchmark",
        "seeds",
        "accuracy mean ± SD",
        "min–max",
        "95% CI over seeds",
        "Δ vs SFT mean ± SD",
        "Δ vs SFT per seed [95% CI] (↑/↓, p)",
    ]
    body = []
    for g, members in multi.items():
        for b in benchmarks:
            accs = [evals[(m, b)]["metrics"]["accuracy"] for m in members if (m, b) in evals]
            if len(accs) != len(members):
                continue
            s = compare.seed_spread(accs)
            comps = [analyses[b].vs(m, "sft") for m in members]
            deltas = [c.result.delta for c in comps if c is not None and c.result is not None]
            ds = compare.seed_spread(deltas) if len(deltas) == len(members) else None
            per_seed = "; ".join(
                f"seed {seed_of.get(m)}: {pts_ci(c.result.delta, c.result.ci)} (↑{c.result.gained}/↓{c.result.lost}, {p_is(c.result.p_value)})"
                for m, c in zip(members, comps)
                if c is not None and c.result is not None
            )
            body.append(
                [
                    g,
                    b,
                    ", ".join(str(seed_of.get(m)) for m in members),
                    f"{pct(s.mean)} ± {100 * s.sd:.1f}",
                    f"{pct(s.low)}–{pct(s.high)}",
                    f"[{pct(s.ci[0])}, {pct(s.ci[1])}]",
                    f"{pts(ds.mean)} ± {100 * ds.sd:.1f}" if ds else "–",
                    per_seed or "–",
                ]
            )
    out += [md_table(header, body, text_columns=3), ""]
    return out


def _token_section(rows, analyses, plots) -> list[str]:
    out = ["## Token efficiency", ""]
    for b, a in analyses.items():
        if not a.tokens:
            continue
        out += [f"### `{b}`", ""]
        header = [
            "model",
            "mean",
            "median",
            "p90",
            "on correct answers",
            "per correct answer",
            "truncated",
            "Δ mean vs SFT [95% CI]",
        ]
        body = []
        for r in rows:
            t = a.tokens.get(r["model"])
            if not t:
                continue
            d = a.token_deltas.get(r["model"])
            delta = (
                f"{d['delta']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]"
                + (f" ({100 * d['relative']:+.1f}%)" if d["relative"] is not None else "")
                if d
                else "–"
            )
            body.append(
                [
                    r["model"],
                    num(t["mean"]),
                    num(t["median"]),
                    num(t["p90"]),
                    num(t["mean_correct"]),
                    num(t["per_correct"]),
                    pct(t["truncation_rate"]),
                    delta,
                ]
            )
        out += [md_table(header, body), ""]
    out += [
        "Tokens: generated tokens per completion (before the stop token). Per correct answer: all tokens spent "
        "divided by the number of correct completions. Δ: paired over problems against the SFT start, bootstrap interval.",
        "",
    ]
    if "accuracy_vs_tokens" in plots:
        out += ["![accuracy_vs_tokens](plots/accuracy_vs_tokens.png)", ""]
    return out


def _rewards_section(rows, analyses, scoring) -> list[str]:
    have = [(b, a) for b, a in analyses.items() if a.rewards]
    if not have:
        return []
    out = [
        "## Training rewards on the evaluation completions",
        "",
        "Each experiment's per-sample training rewards (its own parameters; group-level rewards such as `length` "
        "need a training group and are left out), averaged over the evaluation completions: SFT start → GRPO model.",
        "",
    ]
    for b, a in have:
        funcs = list(dict.fromkeys(f for r in rows if r["model"] in a.rewards for f in a.rewards[r["model"]]))
        body = []
        for r in rows:
            if r["model"] not in a.rewards:
                continue
            grpo, sft = a.rewards[r["model"]], a.rewards.get(f"{r['baseline']}@{r['experiment']}", {})
            body.append(
                [r["model"]]
                + [
                    (f"{sft[f]:.3g} → {grpo[f]:.3g}" if f in sft else f"{grpo[f]:.3g}") if f in grpo else ""
                    for f in funcs
                ]
            )
        out += [f"### `{b}`", "", md_table(["experiment"] + funcs, body), ""]
    return out


def _second_grader_section(rows, analyses) -> list[str]:
    from grpoflow.evaluation.second_grader import NAME

    have = [(b, a) for b, a in analyses.items() if a.second]
    if not have:
        return []
    out = [
        "## Second grader",
        "",
        f"Every completion graded again by {NAME}, the grader of lighteval's and open-r1's published numbers; "
        "disagreements: completions the two graders decide differently (ungraded: math-verify gave no verdict).",
        "",
    ]
    for b, a in have:
        body = [
            [
                r["model"],
                pct(r.get(f"{b}.accuracy")),
                pct(a.second[r["model"]]["accuracy"]),
                f"{a.second[r['model']]['disagree']} of {a.second[r['model']]['completions']}",
                str(a.second[r["model"]]["ungraded"]),
            ]
            for r in rows
            if r["model"] in a.second
        ]
        out += [
            f"### `{b}`",
            "",
            md_table(["model", "grpoflow", "math-verify", "disagreements", "ungraded"], body),
            "",
        ]
    return out


def _breakdown_section(rows, analyses) -> list[str]:
    have = [(b, a) for b, a in analyses.items() if a.breakdown]
    if not have:
        return []
    out = ["## Breakdowns", ""]
    for b, a in have:
        models = [r["model"] for r in rows if any(r["model"] in g for by in a.breakdown.values() for g in by.values())]
        for key, groups in a.breakdown.items():
            body = []
            for value in sorted(
                groups, key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit() else 0, v)
            ):
                n = next(iter(groups[value].values()))[1]
                body.append([value, str(n)] + [pct(groups[value][m][0]) if m in groups[value] else "–" for m in models])
            out += [f"### `{b}` by {key}", "", md_table([key, "problems"] + models, body), ""]
    return out


def _all_metrics(rows, evals, benchmarks) -> list[str]:
    out = ["## All metrics", ""]
    for b in benchmarks:
        extra = sorted(
            {
                k
                for (m, bb), d in evals.items()
                if bb == b
                for k in d["metrics"]
                if k.startswith(("pass@", "maj@", "avg@"))
            },
            key=sampled_order,
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
                + [fmt(m.get(k), how) for k, _, how in METRICS]
                + [pct(m.get(k)) for k in extra]
                + [str(d["n_problems"])]
            )
        first = next((d for (m, bb), d in sorted(evals.items()) if bb == b), None)
        out += [f"### `{b}`", ""]
        if first:
            g = first["generation"]
            out += [
                f"{decoding_label(g)}, max {g['max_new_tokens']} new tokens, backend {g['backend']}, seed {g['seed']}. Per-sample records: `results/<model>/eval/{b}.samples.jsonl`.",
                "",
            ]
        out += [md_table(header, body), ""]
    return out


def render_markdown(
    rows: list[dict],
    evals: dict,
    experiments: dict,
    benchmarks: list[str],
    primary: str,
    plots: list[str],
    analyses: dict[str, BenchmarkAnalysis] | None = None,
    groups: dict[str, list[str]] | None = None,
    scoring: dict | None = None,
    health: dict[str, dict] | None = None,
) -> str:
    analyses = analyses or {b: BenchmarkAnalysis(b) for b in benchmarks}
    groups = groups or {}
    health = health or {}
    out = ["# grpoflow report", ""]
    out += _headline(rows, analyses, primary, evals, health)
    out += _warnings(rows, analyses, evals, groups, experiments)
    out += _ranking(rows, benchmarks, primary, experiments, analyses)
    out += _health_section(health)
    out += _comparisons_section(rows, analyses, evals)
    out += _seed_section(rows, analyses, groups, evals, benchmarks)
    out += _token_section(rows, analyses, plots)
    out += _rewards_section(rows, analyses, scoring or {})
    out += _breakdown_section(rows, analyses)
    out += _second_grader_section(rows, analyses)
    out += _all_metrics(rows, evals, benchmarks)
    rest = [p for p in plots if p != "accuracy_vs_tokens"]
    if rest:
        out += ["## Plots", ""]
        out += [f"![{p}](plots/{p}.png)" for p in rest] + [""]
    return "\n".join(out)
