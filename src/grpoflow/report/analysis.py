"""The report's analysis: the run's files read back (evaluations, per-sample records, training metrics), each
benchmark's paired comparisons (grpoflow.report.statistics), the summary rows and their statistics."""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grpoflow.errors import DataError
from grpoflow.evaluation.run import TRUNCATION_WARNING
from grpoflow.io import read_json
from grpoflow.report import statistics as compare
from grpoflow.report.text import decoding_label, pct

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
    relation: str  # "sft": the model's SFT start; "best": the best model on the benchmark; "seeds": a seed group's
    # runs together (``model`` is the group) against their common SFT start
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
    decoding: str | None = None  # how the ranked models were decoded
    # The models evaluated on the same problems with the same decoding (the most of them): only they are paired
    # with the best and ranked. Every other model, and why: not_ranked.
    cohort: list[str] = field(default_factory=list)
    not_ranked: dict[str, str] = field(default_factory=dict)
    # What the headline ranks: a seed group (its runs' mean accuracy) or a single model, by name.
    units: dict[str, list[str]] = field(default_factory=dict)
    best_unit: str | None = None
    best: str | None = None  # the best unit's best model: what "vs best" compares with
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


def _decoding(evals: dict, model: str, bench: str) -> str:
    generation = evals[(model, bench)].get("generation")
    return decoding_label(generation) if generation else "decoding not recorded"


def _pair(model: str, reference: str, relation: str, bench: str, evals: dict, cache: dict, notes) -> Comparison:
    a = _outcomes(evals, model, bench, cache, notes)
    b = _outcomes(evals, reference, bench, cache, notes)
    comp = Comparison(model, reference, relation)
    ours, theirs = _decoding(evals, model, bench), _decoding(evals, reference, bench)
    if ours != theirs:  # a sampled average against a greedy verdict compares two decodings, not two models
        comp.refused = "different decoding"
        notes.append(f"`{model}` ({ours}) vs `{reference}` ({theirs}) not paired: different decoding")
        return comp
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
    groups: dict[str, list[str]] | None = None,
) -> BenchmarkAnalysis:
    """Every paired comparison of one benchmark, Holm-adjusted together, plus intervals, tokens and rewards."""
    out = BenchmarkAnalysis(bench)
    present = [r for r in rows if (r["model"], bench) in evals]
    if not present:
        return out
    compare_models(out, present, evals, cache, groups or {})
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


def compare_models(
    out: BenchmarkAnalysis, present: list[dict], evals: dict, cache: dict, groups: dict[str, list[str]]
) -> None:
    """The benchmark's decisions: the cohort, the best unit, every pairing (each GRPO model with its SFT start,
    every model with the best, each seed group with its start), Holm over them. ``cache`` may hold the outcomes
    already (benchmarks/health_simulation.py passes simulated evaluations this way)."""
    bench = out.name
    _choose_cohort(out, present, evals, cache)
    first = evals[((out.cohort or [present[0]["model"]])[0], bench)]
    out.n_problems, out.samples = first["n_problems"], first.get("samples_per_problem", 1)
    accuracy = {r["model"]: evals[(r["model"], bench)]["metrics"]["accuracy"] for r in present}
    _choose_best(out, present, accuracy, groups)
    for r in present:
        if r["kind"] == "grpo" and r["baseline"] and (r["baseline"], bench) in evals:
            out.comparisons.append(_pair(r["model"], r["baseline"], "sft", bench, evals, cache, out.notes))
    for r in sorted(present, key=lambda r: (-accuracy[r["model"]], r["model"])):
        if out.best is not None and r["model"] != out.best:
            out.comparisons.append(_pair(r["model"], out.best, "best", bench, evals, cache, out.notes))
    out.comparisons += _seed_comparisons(out, present, evals, cache)
    _adjust(out)


def headline_comparison(a: BenchmarkAnalysis) -> Comparison | None:
    """What the headline says of the best unit against its SFT start: a seed group's runs together, else the
    model's own comparison."""
    if a.best_unit is None:
        return None
    members = a.units[a.best_unit]
    return a.vs(a.best_unit, "seeds") if len(members) > 1 else a.vs(members[0], "sft")


def _choose_cohort(out: BenchmarkAnalysis, present: list[dict], evals: dict, cache: dict) -> None:
    """The cohort: the most models evaluated on the same problems (index, id, answer) with the same decoding (ties:
    the most GRPO models, then the decoding's name); every other model is not ranked, with the reason."""
    by_key: dict[tuple, list[dict]] = {}
    for r in present:
        o = _outcomes(evals, r["model"], out.name, cache, out.notes)
        if o is None:
            out.not_ranked[r["model"]] = "no per-sample file"
            continue
        by_key.setdefault((o.keys, _decoding(evals, r["model"], out.name)), []).append(r)
    if not by_key:
        return
    chosen = max(by_key, key=lambda k: (len(by_key[k]), sum(r["kind"] == "grpo" for r in by_key[k]), k[1]))
    out.cohort, out.decoding = [r["model"] for r in by_key[chosen]], chosen[1]
    for key, members in by_key.items():
        why = "evaluated on other problems" if key[0] != chosen[0] else f"decoded otherwise: {key[1]}"
        out.not_ranked.update({r["model"]: why for r in members if key != chosen})


def _choose_best(out: BenchmarkAnalysis, present: list[dict], accuracy: dict, groups: dict[str, list[str]]) -> None:
    """The units the headline ranks (a seed group whose runs are all in the cohort and share an SFT start: its
    runs' mean accuracy; else each model) and the best of them."""
    row_of = {r["model"]: r for r in present if r["model"] in out.cohort}
    model_of = {r["experiment"]: m for m, r in row_of.items() if r["experiment"]}
    grouped: set[str] = set()
    for name, experiments in groups.items():
        models = [model_of.get(e) for e in experiments]
        if len(models) > 1 and all(models) and len({row_of[m]["baseline"] for m in models}) == 1:
            out.units[name] = models
            grouped.update(models)
    out.units.update({m: [m] for m in out.cohort if m not in grouped})
    if not out.units:
        return
    mean = {u: statistics.fmean(accuracy[m] for m in members) for u, members in out.units.items()}
    out.best_unit = min(out.units, key=lambda u: (-mean[u], u))
    out.best = min(out.units[out.best_unit], key=lambda m: (-accuracy[m], m))


def _seed_comparisons(out: BenchmarkAnalysis, present: list[dict], evals: dict, cache: dict) -> list[Comparison]:
    """Each seed group's runs together against their SFT start: per problem, the mean over every run's
    completions (a sign-flip test over problems: the SFT start's own draws count once, as they are shared)."""
    baseline = {r["model"]: r["baseline"] for r in present}
    found = []
    for unit, members in out.units.items():
        base = baseline[members[0]]
        if len(members) < 2 or base not in out.cohort:
            continue
        runs = [_outcomes(evals, m, out.name, cache, out.notes) for m in members]
        together = compare.Outcomes(
            path=f"{unit} (seeds)",
            keys=runs[0].keys,
            correct=np.concatenate([o.correct for o in runs], axis=1),
            tokens=np.concatenate([o.tokens for o in runs], axis=1),
            truncated=np.concatenate([o.truncated for o in runs], axis=1),
        )
        comp = Comparison(unit, base, "seeds")
        comp.result = compare.paired(together, _outcomes(evals, base, out.name, cache, out.notes))
        found.append(comp)
    return found


def _adjust(out: BenchmarkAnalysis) -> None:
    """Holm over the benchmark's distinct pairs (the best's SFT start against the best is its GRPO-vs-SFT test
    mirrored: one test), the group indistinguishable from the best, and the MDE."""
    family: dict[frozenset, Comparison] = {}
    for c in out.comparisons:
        if c.result is not None:
            family.setdefault(c.pair, c)
    adjusted = dict(zip(family, compare.holm([c.result.p_value for c in family.values()])))
    for c in out.comparisons:
        if c.result is not None:
            c.p_holm = adjusted[c.pair]
    out.indistinguishable = [
        c.model for c in out.comparisons if c.relation == "best" and c.p_holm is not None and c.p_holm >= compare.ALPHA
    ]
    # How often two models of this benchmark disagree on a problem, typically: the median over its distinct pairs.
    moments = [c.result.second_moment for c in family.values() if c.relation != "seeds"]
    if moments and out.n_problems:
        out.mde_second_moment = statistics.median(moments)
        out.mde = compare.minimum_detectable_effect(out.n_problems, out.mde_second_moment)


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


def rank_rows(rows: list[dict], analysis: BenchmarkAnalysis, primary: str) -> None:
    """Rank only the primary benchmark's cohort (models compared on the same problems, decoded alike), by accuracy;
    the others follow without a rank."""
    ranked = set(analysis.cohort)
    rows.sort(key=lambda r: (r["model"] not in ranked, -(r.get(f"{primary}.accuracy") or 0.0), r["model"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i if r["model"] in ranked else None


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


def benchmark_warnings(bench: str, evals: dict, notes: list[str]) -> list[str]:
    """Completions cut at max_new_tokens and refused pairings on one benchmark."""
    out = []
    for (model, b), data in sorted(evals.items()):
        rate = data["metrics"].get("truncation_rate") or 0.0
        if b == bench and rate > TRUNCATION_WARNING:
            limit = (data.get("generation") or {}).get("max_new_tokens")
            out.append(
                f"⚠ `{model}` on `{bench}`: {pct(rate)} of completions hit max_new_tokens ({limit}): accuracy there "
                "measures the token limit too; raise evaluation.max_new_tokens (or the benchmark's)."
            )
    return out + [f"⚠ {n}" for n in dict.fromkeys(notes)]
