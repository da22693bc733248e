"""The cross-experiment report: results/report/summary.{md,csv}, comparisons.csv and plots/*.png.

Every number comes from the run's own files: accuracies, per-problem verdicts and token counts from each
evaluation's metrics JSON and per-sample file (``results/{model}/eval/{benchmark}.json`` + ``.samples.jsonl``),
curves from each experiment's ``train_metrics.jsonl``; the config only contributes names, hyperparameters,
reward settings and which runs differ only by seed. Models are ranked by accuracy on the primary benchmark
(``report.primary_benchmark``, default the first benchmark), so the winner is the first row.

What decides between models is paired (``grpoflow.evaluation.compare``): per benchmark, every GRPO model against
its SFT start and every model against the best one, problem by problem: Δ with Newcombe's paired interval, the
problems gained ↑ and lost ↓, an exact McNemar (greedy) or sign-flip permutation (sampled) p-value, Holm-adjusted
over the benchmark's distinct pairs (a GRPO model's SFT start against the best mirrors the GRPO model against its
SFT start when the GRPO model is the best: one test, counted once), the group indistinguishable from the best and
the minimum detectable effect. A comparison that could not be made (different problem sets, no per-sample file)
is shown as refused with its reason, and the report never counts the model as behind the best.
Runs that differ only in ``grpo.seed`` form a seed group: mean, SD, min–max and an interval over seeds.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from grpoflow import health
from grpoflow.errors import DataError
from grpoflow.evaluation import compare
from grpoflow.evaluation.run import TRUNCATION_WARNING
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
    ("val_accuracy", "validation_accuracy", "validation accuracy"),
    ("response_length", "training_response_length", "mean response length (tokens)"),
)
# Keys of a resolved experiment that do not change what is trained: runs equal in all else form a seed group.
# Not what is trained: where it runs (resources: the same run on 1 or 8 GPUs is one seed group), where it is kept.
_NOT_TRAINING = ("description", "checkpoint_dir", "upload", "resume_across_changes", "resources", "health")
_SEED_SUFFIX = re.compile(r"-seed\d+$")


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


def experiment_rewards(exp: dict) -> dict:
    """What scoring the experiment's training rewards on evaluation completions needs."""
    return {"rewards": exp["rewards"], "max_response_length": exp["grpo"]["max_response_length"]}


def seed_groups(experiments: dict[str, dict]) -> dict[str, list[str]]:
    """Experiments whose resolved configs differ only in ``grpo.seed`` (and the SFT start's display name, the
    description, the job's resources, where checkpoints go and upload settings), by group name: the members' common name without
    ``-seed<k>`` when they share one (``seeds:`` expansion names runs so), else the first member's name.
    Experiments without a partner form a group of one."""
    by_key: dict[str, list[str]] = {}
    for name, exp in sorted(experiments.items()):
        trained = {k: v for k, v in exp.items() if k not in _NOT_TRAINING}
        trained["grpo"] = {k: v for k, v in exp["grpo"].items() if k != "seed"}
        trained["sft"] = {k: v for k, v in exp["sft"].items() if k != "name"}
        by_key.setdefault(json.dumps(trained, sort_keys=True, default=str), []).append(name)
    groups = {}
    for members in by_key.values():
        members.sort(key=lambda m: (experiments[m]["grpo"]["seed"], m))
        stems = {_SEED_SUFFIX.sub("", m) for m in members}
        name = stems.pop() if len(stems) == 1 and len(members) > 1 else members[0]
        if name in groups or (name in experiments and name not in members):
            name = members[0]
        groups[name] = members
    return dict(sorted(groups.items()))


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
        data["_path"] = p
        out[(model, bench)] = data
    return out


def samples_path(metrics_path: str) -> str:
    """The per-sample file ``evaluate`` writes next to a metrics JSON."""
    return str(metrics_path).removesuffix(".json") + ".samples.jsonl"


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


# ---- the analysis ---------------------------------------------------------------------------------------------


def baseline_of(experiment: str, summary: dict) -> str:
    return summary.get("sft_model") or f"{experiment}-sft"


@dataclass
class Comparison:
    model: str
    reference: str
    relation: str  # "sft": the model's SFT start; "best": the best model on the benchmark
    result: compare.Paired | None = None
    refused: str | None = None  # why the two could not be paired
    p_holm: float | None = None

    @property
    def pair(self) -> frozenset:
        """The two models, unordered: a comparison and its mirror are one test."""
        return frozenset((self.model, self.reference))


@dataclass
class BenchmarkAnalysis:
    name: str
    n_problems: int | None = None
    samples: int | None = None
    best: str | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    intervals: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    tokens: dict[str, dict] = field(default_factory=dict)
    token_deltas: dict[str, dict] = field(default_factory=dict)
    rewards: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> reward name -> mean
    # column -> group value -> model -> (accuracy, problems): the benchmark's `breakdown` (MATH-500 subject/level)
    breakdown: dict[str, dict[str, dict[str, tuple[float, int]]]] = field(default_factory=dict)
    # model -> {"accuracy", "disagree", "ungraded", "completions"}: report.second_grader's verdicts
    second: dict[str, dict] = field(default_factory=dict)
    indistinguishable: list[str] = field(default_factory=list)
    mde: float | None = None
    mde_second_moment: float | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # about this benchmark's numbers: shown with its table

    def vs(self, model: str, relation: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.model == model and c.relation == relation), None)

    @property
    def not_compared(self) -> list[Comparison]:
        """The comparisons against the best that were refused: neither behind it nor indistinguishable."""
        return [c for c in self.comparisons if c.relation == "best" and c.result is None]


def _outcomes(evals: dict, model: str, bench: str, cache: dict, notes: list[str]) -> compare.Outcomes | None:
    key = (model, bench)
    if key not in cache:
        data = evals.get(key)
        cache[key] = None
        if data is not None:
            path = samples_path(data["_path"])
            if Path(path).is_file():
                cache[key] = compare.read_outcomes(path, keep_records=True)
            else:
                notes.append(f"`{model}` has no per-sample file ({path}): no paired statistics for it.")
    return cache[key]


def _pair(model: str, reference: str, relation: str, bench: str, evals: dict, cache: dict, notes) -> Comparison:
    a = _outcomes(evals, model, bench, cache, notes)
    b = _outcomes(evals, reference, bench, cache, notes)
    comp = Comparison(model, reference, relation)
    if a is None or b is None:
        comp.refused = "no per-sample file"
        return comp
    try:
        comp.result = compare.paired(a, b)
    except DataError as exc:
        comp.refused = "different problem sets"
        notes.append(f"`{model}` vs `{reference}` not paired: {exc}")
    return comp


def analyse_benchmark(
    bench: str,
    rows: list[dict],
    evals: dict,
    cache: dict,
    scoring: dict[str, dict],
    second_grader: str | None = None,
) -> BenchmarkAnalysis:
    """Every paired comparison of one benchmark, Holm-adjusted together, plus intervals, tokens and rewards."""
    out = BenchmarkAnalysis(bench)
    present = [r for r in rows if (r["model"], bench) in evals]
    if not present:
        return out
    first = evals[(present[0]["model"], bench)]
    out.n_problems, out.samples = first["n_problems"], first.get("samples_per_problem", 1)
    ranked = sorted(present, key=lambda r: (-evals[(r["model"], bench)]["metrics"]["accuracy"], r["model"]))
    out.best = ranked[0]["model"]
    for r in present:
        if r["kind"] == "grpo" and r["baseline"] and (r["baseline"], bench) in evals:
            out.comparisons.append(_pair(r["model"], r["baseline"], "sft", bench, evals, cache, out.notes))
    for r in ranked[1:]:
        out.comparisons.append(_pair(r["model"], out.best, "best", bench, evals, cache, out.notes))
    tested = [c for c in out.comparisons if c.result is not None]
    # One test per pair of models: the best's SFT start against the best is its GRPO-vs-SFT test mirrored.
    family: dict[frozenset, compare.Paired] = {}
    for c in tested:
        family.setdefault(c.pair, c.result)
    adjusted = dict(zip(family, compare.holm([r.p_value for r in family.values()])))
    for c in tested:
        c.p_holm = adjusted[c.pair]
    out.indistinguishable = [
        c.model for c in out.comparisons if c.relation == "best" and c.p_holm is not None and c.p_holm >= compare.ALPHA
    ]
    # How often two models of this benchmark disagree on a problem, typically: the median over its distinct pairs.
    moments = [r.second_moment for r in family.values()]
    if moments and out.n_problems:
        out.mde_second_moment = statistics.median(moments)
        out.mde = compare.minimum_detectable_effect(out.n_problems, out.mde_second_moment)

    for r in present:
        o = _outcomes(evals, r["model"], bench, cache, out.notes)
        if o is None:
            continue
        out.intervals[r["model"]] = compare.accuracy_interval(o)
        out.tokens[r["model"]] = compare.token_summary(o)
        base = _outcomes(evals, r["baseline"], bench, cache, out.notes) if r["baseline"] else None
        if base is not None and r["kind"] == "grpo":
            try:
                out.token_deltas[r["model"]] = compare.paired_tokens(o, base)
            except DataError:
                pass  # already noted by the accuracy comparison
    out.rewards = _training_rewards(present, bench, evals, cache, scoring, out.notes)
    out.breakdown = _breakdown(present, bench, evals, cache, out.notes)
    if second_grader:
        out.second = _second_grades(present, bench, evals, cache, out.notes)
    return out


def _second_grades(rows, bench, evals, cache, notes) -> dict[str, dict]:
    """lighteval's math-verify verdict on every completion of every model (one worker for the benchmark),
    against grpoflow's own: its accuracy and how many completions the two graders decide differently."""
    from grpoflow.evaluation import second_grader

    records = {}
    for r in rows:
        o = _outcomes(evals, r["model"], bench, cache, notes)
        if o is not None:
            records[r["model"]] = [rec for recs in o.records for rec in recs]
    pairs = [(str(rec["ground_truth"]), rec.get("response") or "") for recs in records.values() for rec in recs]
    verdicts = iter(second_grader.grade(pairs))
    out = {}
    for model, recs in records.items():
        mine = [(next(verdicts), bool(rec["correct"])) for rec in recs]
        out[model] = {
            "accuracy": sum(bool(v) for v, _ in mine) / len(mine),
            "disagree": sum(v is not None and v != c for v, c in mine),
            "ungraded": sum(v is None for v, _ in mine),
            "completions": len(mine),
        }
    return out


def _breakdown(rows, bench, evals, cache, notes) -> dict:
    """Accuracy per value of each ``meta`` column the per-sample records carry (a benchmark's `breakdown`)."""
    out: dict[str, dict[str, dict[str, tuple[float, int]]]] = {}
    for r in rows:
        o = _outcomes(evals, r["model"], bench, cache, notes)
        if o is None or not o.records or not o.records[0][0].get("meta"):
            continue
        for key in o.records[0][0]["meta"]:
            groups: dict[str, list[float]] = {}
            for recs, acc in zip(o.records, o.per_problem):
                groups.setdefault(str(recs[0].get("meta", {}).get(key)), []).append(float(acc))
            for value, accs in groups.items():
                out.setdefault(key, {}).setdefault(value, {})[r["model"]] = (statistics.fmean(accs), len(accs))
    return out


def _training_rewards(rows, bench, evals, cache, scoring, notes) -> dict[str, dict[str, float]]:
    """Each GRPO experiment's per-sample training rewards, averaged over the evaluation completions of the
    GRPO model and of its SFT start (scored with the experiment's own parameters): {model: {reward: mean}},
    the SFT start keyed as ``<sft>@<experiment>``."""
    from grpoflow.rewards import Sample, Verdict, registry, resolve_params

    reg = registry()
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        exp = r["experiment"]
        if r["kind"] != "grpo" or exp not in scoring:
            continue
        spec = scoring[exp]
        params = resolve_params(spec["rewards"], max_response_length=spec["max_response_length"])
        funcs = [f for f in spec["rewards"]["funcs"] if not reg[f].group]
        for model, key in ((r["model"], r["model"]), (r["baseline"], f"{r['baseline']}@{exp}")):
            o = _outcomes(evals, model, bench, cache, notes) if model else None
            if o is None:
                continue
            samples = [
                Sample(
                    rec.get("response") or "",
                    rec["ground_truth"],
                    # Training counts the stop token in a completion's length; the samples file does not.
                    n_tokens=int(rec.get("response_tokens") or 0) + (rec.get("finish_reason") == "stop"),
                    _verdict=Verdict(
                        correct=bool(rec["correct"]),
                        found=bool(rec.get("found")),
                        extracted=rec.get("extracted"),
                        source=rec.get("source"),
                        reason=rec.get("reason"),
                    ),
                )
                for recs in o.records
                for rec in recs
            ]
            out[key] = {f: statistics.fmean(reg[f].fn(s, **params[f]) for s in samples) for f in funcs}
    return out


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
            for key in sorted(k for k in m if k.startswith(("pass@", "maj@", "avg@"))):
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


def add_statistics(rows: list[dict], analyses: dict[str, BenchmarkAnalysis], groups: dict[str, list[str]]) -> None:
    """The paired statistics, intervals and token numbers as columns of the summary rows (the CSV)."""
    group_of = {m: g for g, members in groups.items() for m in members}
    for r in rows:
        r["seed_group"] = group_of.get(r["experiment"], "")
        for b, a in analyses.items():
            if r["model"] in a.intervals:
                low, high, _ = a.intervals[r["model"]]
                r[f"{b}.accuracy_ci_low"], r[f"{b}.accuracy_ci_high"] = low, high
            for rel in ("sft", "best"):
                c = a.vs(r["model"], rel)
                if c is None or c.result is None:
                    continue
                p = c.result
                if rel == "sft":
                    r[f"{b}.delta_vs_sft_ci_low"], r[f"{b}.delta_vs_sft_ci_high"] = p.ci
                else:
                    r[f"{b}.delta_vs_best"] = p.delta
                r[f"{b}.gained_vs_{rel}"], r[f"{b}.lost_vs_{rel}"] = p.gained, p.lost
                r[f"{b}.p_vs_{rel}"], r[f"{b}.p_holm_vs_{rel}"] = p.p_value, c.p_holm
            best = a.vs(r["model"], "best")
            if r["model"] in a.intervals and (r["model"] == a.best or (best is not None and best.result is not None)):
                # A model the best could not be compared with is neither behind it nor level with it: left empty.
                r[f"{b}.indistinguishable_from_best"] = r["model"] == a.best or r["model"] in a.indistinguishable
            if r["model"] in a.second:
                r[f"{b}.accuracy_math_verify"] = a.second[r["model"]]["accuracy"]
                r[f"{b}.disagreements_math_verify"] = a.second[r["model"]]["disagree"]
            t = a.tokens.get(r["model"])
            if t:
                for key in ("p90", "mean_correct", "per_correct"):
                    r[f"{b}.tokens_{key}"] = t[key]
            d = a.token_deltas.get(r["model"])
            if d:
                r[f"{b}.tokens_delta_vs_sft"] = d["delta"]
                r[f"{b}.tokens_delta_vs_sft_ci_low"], r[f"{b}.tokens_delta_vs_sft_ci_high"] = d["ci_low"], d["ci_high"]


# ---- formatting -------------------------------------------------------------------------------------------------


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _pts(x) -> str:
    return "–" if x is None else f"{100 * x:+.1f} pts"


def _num(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def _fmt(x, how: str) -> str:
    return {"pct": _pct, "pts": _pts, "num": _num}[how](x)


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def _p_is(p: float) -> str:
    """``p < 0.001`` or ``p = 0.70``."""
    return "p < 0.001" if p < 0.001 else f"p = {_p(p)}"


def _pct_ci(value: float, ci) -> str:
    return f"{100 * value:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _pts_ci(delta: float, ci) -> str:
    return f"{100 * delta:+.1f} pts [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _sampled_order(key: str) -> tuple:
    """pass@1, pass@2, … then avg@n, then maj@k."""
    kind, k = key.split("@")
    return ({"pass": 0, "avg": 1}.get(kind, 2), int(k))


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


def decoding_label(generation: dict) -> str:
    """How a benchmark was decoded, as the report and the model card say it."""
    if generation.get("greedy"):
        return "greedy"
    return (
        f"{generation['preset']} sampling (T {generation['temperature']}, top_p {generation['top_p']}, "
        f"top_k {generation['top_k']}), avg@{generation['samples']}"
    )


def _accuracy_label(a: BenchmarkAnalysis) -> str:
    return "accuracy" if (a.samples or 1) == 1 else f"avg@{a.samples}"


def _vs_sft_phrase(c: Comparison) -> str:
    p = c.result
    return (
        f"{_pts_ci(p.delta, p.ci)}, ↑{p.gained} ↓{p.lost}, "
        f"{'exact McNemar' if p.test == 'exact McNemar' else 'permutation'} {_p_is(p.p_value)}"
    )


def _headline(rows, analyses, primary, evals, health=None) -> list[str]:
    if not rows or rows[0].get(f"{primary}.accuracy") is None:
        return []
    w, a = rows[0], analyses[primary]
    line = f"**Best on `{primary}` (primary benchmark): `{w['model']}`** ({KIND_LABEL.get(w['kind'], w['kind'])}) with "
    if w["model"] in a.intervals:
        low, high, _ = a.intervals[w["model"]]
        line += f"{_pct(w[f'{primary}.accuracy'])} (95% CI {_pct(low)}–{_pct(high)})"
    else:
        line += f"{_pct(w[f'{primary}.accuracy'])} ± {_pct(w[f'{primary}.accuracy_stderr'])}"
    c = a.vs(w["model"], "sft")
    if c is not None and c.result is not None:
        line += f"; vs its SFT start `{w['baseline']}`: {_vs_sft_phrase(c)}"
    elif c is not None and c.refused == "different problem sets":
        line += f"; not compared with its SFT start `{w['baseline']}`: {c.refused}"
    elif w.get(f"{primary}.delta_vs_sft") is not None:
        line += f", {_pts(w[f'{primary}.delta_vs_sft'])} vs its SFT start `{w['baseline']}`"
    line += "."
    verdict = (health or {}).get(w["model"], {}).get("verdict")
    if verdict and verdict != "learned":
        # Best on held-out accuracy, but its training reward did not rise beyond noise (or fell): say so here.
        line += f" Its training health: **{verdict}** (see Training health)."
    out = [line, ""]
    if len(rows) > 1 and a.comparisons:
        refused = a.not_compared
        if a.indistinguishable:
            out += [
                f"Not distinguishable from it on `{primary}` (Holm-adjusted paired p ≥ {compare.ALPHA}): "
                + ", ".join(f"`{m}`" for m in a.indistinguishable)
                + ".",
                "",
            ]
        elif any(c.relation == "best" and c.result for c in a.comparisons):
            # "Every other model" only when every other model was compared: a refused one may be level with it.
            who = "Every other model compared with it" if refused else "Every other model"
            out += [f"{who} is significantly behind it on `{primary}` (Holm-adjusted p < {compare.ALPHA}).", ""]
        if refused:
            out += [_not_compared_line(primary, refused), ""]
    if a.warnings:
        out += [f"⚠ The `{primary}` numbers come with warnings: see them under `{primary}` in Paired comparisons.", ""]
    return out


def _health_section(health: dict[str, dict]) -> list[str]:
    """One row per GRPO run: grpoflow.health's verdict, the reward trend and the checks that fired (the same
    replay of train_metrics.jsonl as the lines in the run's log)."""
    if not health:
        return []
    body = []
    for name, h in sorted(health.items()):
        trend = h["reward_trend"]
        shown = "—"
        if trend:
            low, high = trend["ci"]
            shown = (
                f"{trend['first']:.3f} → {trend['last']:.3f} ({trend['delta']:+.3f} [{low:+.3f}, {high:+.3f}], "
                f"first vs last {trend['steps']} steps)"
            )
        fired = ", ".join(f"{check} (step {step})" for check, step in h["checks"].items() if step is not None)
        body.append([f"`{name}`", f"**{h['verdict']}**", shown, fired or "none"])
    return [
        "## Training health",
        "",
        "Each run's training reward, last window against first (95 % interval), and the checks that fired while it "
        "trained (grpoflow.health; their lines are in `logs/train_grpo/<run>.log`; docs/training-health.md).",
        "",
        _md_table(["run", "verdict", "training reward", "checks fired"], body, text_columns=4),
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
    are that benchmark's (``_benchmark_warnings``), shown with its table."""
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


def _benchmark_warnings(bench: str, evals: dict, notes: list[str]) -> list[str]:
    """Completions cut at max_new_tokens and refused pairings on one benchmark."""
    out = []
    for (model, b), data in sorted(evals.items()):
        rate = data["metrics"].get("truncation_rate") or 0.0
        if b == bench and rate > TRUNCATION_WARNING:
            limit = (data.get("generation") or {}).get("max_new_tokens")
            out.append(
                f"⚠ `{model}` on `{bench}`: {_pct(rate)} of completions hit max_new_tokens ({limit}): accuracy there "
                "measures the token limit too; raise evaluation.max_new_tokens (or the benchmark's)."
            )
    return out + [f"⚠ {n}" for n in dict.fromkeys(notes)]


def _ranking(rows, benchmarks, primary, experiments) -> list[str]:
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
            str(r["rank"]),
            f"**{r['model']}**" if r["rank"] == 1 else r["model"],
            KIND_LABEL.get(r["kind"], r["kind"]),
        ]
        for b in benchmarks:
            cells += [_pct(r.get(f"{b}.accuracy"))] + ([_pts(r.get(f"{b}.delta_vs_sft"))] if with_delta else [])
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
        g = next(d for (m, bb), d in sorted(evals.items()) if bb == b)["generation"]
        out += [f"### `{b}`: {a.n_problems} problems, {decoding_label(g)}", ""]
        out += [line for w in a.warnings for line in (w, "")]
        header = ["model", "kind", f"{_accuracy_label(a)} [95% CI]", "vs", "Δ [95% CI]", "↑", "↓", "p", "p (Holm)"]
        body = []
        for r in rows:
            if r["model"] not in a.intervals and (r["model"], b) not in evals:
                continue
            acc = evals[(r["model"], b)]["metrics"]["accuracy"]
            ci = a.intervals.get(r["model"])
            acc_cell = _pct_ci(acc, ci) if ci else _pct(acc)
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
                    first + [label, _pts_ci(p.delta, p.ci), str(p.gained), str(p.lost), _p(p.p_value), _p(c.p_holm)]
                )
        out += [_md_table(header, body, text_columns=4), ""]
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
                f"seed {seed_of.get(m)}: {_pts_ci(c.result.delta, c.result.ci)} (↑{c.result.gained}/↓{c.result.lost}, {_p_is(c.result.p_value)})"
                for m, c in zip(members, comps)
                if c is not None and c.result is not None
            )
            body.append(
                [
                    g,
                    b,
                    ", ".join(str(seed_of.get(m)) for m in members),
                    f"{_pct(s.mean)} ± {100 * s.sd:.1f}",
                    f"{_pct(s.low)}–{_pct(s.high)}",
                    f"[{_pct(s.ci[0])}, {_pct(s.ci[1])}]",
                    f"{_pts(ds.mean)} ± {100 * ds.sd:.1f}" if ds else "–",
                    per_seed or "–",
                ]
            )
    out += [_md_table(header, body, text_columns=3), ""]
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
                    _num(t["mean"]),
                    _num(t["median"]),
                    _num(t["p90"]),
                    _num(t["mean_correct"]),
                    _num(t["per_correct"]),
                    _pct(t["truncation_rate"]),
                    delta,
                ]
            )
        out += [_md_table(header, body), ""]
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
        out += [f"### `{b}`", "", _md_table(["experiment"] + funcs, body), ""]
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
                _pct(r.get(f"{b}.accuracy")),
                _pct(a.second[r["model"]]["accuracy"]),
                f"{a.second[r['model']]['disagree']} of {a.second[r['model']]['completions']}",
                str(a.second[r["model"]]["ungraded"]),
            ]
            for r in rows
            if r["model"] in a.second
        ]
        out += [
            f"### `{b}`",
            "",
            _md_table(["model", "grpoflow", "math-verify", "disagreements", "ungraded"], body),
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
                body.append(
                    [value, str(n)] + [_pct(groups[value][m][0]) if m in groups[value] else "–" for m in models]
                )
            out += [f"### `{b}` by {key}", "", _md_table([key, "problems"] + models, body), ""]
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
            out += [
                f"{decoding_label(g)}, max {g['max_new_tokens']} new tokens, backend {g['backend']}, seed {g['seed']}. Per-sample records: `results/<model>/eval/{b}.samples.jsonl`.",
                "",
            ]
        out += [_md_table(header, body), ""]
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
    out += _ranking(rows, benchmarks, primary, experiments)
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
                key=_sampled_order,
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
        written.append("eval_accuracy")
        plt.close(fig)

    if _accuracy_vs_tokens(plt, plots_dir, rows, benchmarks, evals):
        written.append("accuracy_vs_tokens")
    return written


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
    analyses = {
        b: analyse_benchmark(b, rows, evals, cache, rewards or {}, settings.get("second_grader")) for b in benchmarks
    }
    for b, a in analyses.items():
        a.warnings = _benchmark_warnings(b, evals, a.notes)
    groups = seed_groups or {}
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
            _pct(rows[0].get(f"{primary}.accuracy")),
        )
    return rows
