"""The report reads every number from the run's own files and ranks the winner first."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from grpoflow.config import resolve_config
from grpoflow.errors import DataError
from grpoflow.report import build_report, experiment_summary

BENCHMARKS = ["arith", "gsm8k_sample"]


def _eval(root: Path, model: str, bench: str, acc: float, tokens: float, n: int = 200, **extra) -> str:
    path = root / "results" / model / "eval" / f"{bench}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = {
        "accuracy": acc,
        "accuracy_stderr": (acc * (1 - acc) / n) ** 0.5,
        "format_accuracy": 0.9,
        "partial_accuracy": min(1.0, acc + 0.05),
        "no_answer_rate": 0.02,
        "truncation_rate": 0.01,
        "mean_response_tokens": tokens,
        "median_response_tokens": tokens - 1,
        **extra,
    }
    path.write_text(
        json.dumps(
            {
                "model": model,
                "benchmark": bench,
                "n_problems": n,
                "samples_per_problem": 1,
                "n_completions": n,
                "metrics": metrics,
                "generation": {
                    "backend": "transformers",
                    "preset": "greedy",
                    "greedy": True,
                    "temperature": 0.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "samples": 1,
                    "max_new_tokens": 48,
                    "seed": 0,
                },
            }
        )
    )
    return str(path)


def _train(root: Path, exp: str, steps: int, slope: float) -> str:
    path = root / "results" / exp / "train_metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "step": s,
            "reward": slope * s,
            "reward/accuracy": slope * s,
            "reward/format": 0.5,
            "accuracy": slope * s,
            "response_length": 20 - s / 10,
        }
        for s in range(1, steps + 1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def config():
    raw = {
        "datasets": {"arith": {"source": "synthetic", "synthetic": {}, "validation": {"size": 20}}},
        "defaults": {
            "backend": "trl",
            "data": {"dataset": "arith"},
            "sft": {"model": "some/model", "name": "base-sft"},
            "grpo": {"total_steps": 10},
        },
        "experiments": {"lr-low": {"grpo": {"learning_rate": 1e-6}}, "lr-high": {"grpo": {"learning_rate": 1e-5}}},
        "evaluation": {"benchmarks": {"arith": {"dataset": "arith"}, "gsm8k_sample": {"path": "x.jsonl"}}},
    }
    return resolve_config(raw)


def test_report_numbers_come_from_the_files(tmp_path, config):
    evals = [
        _eval(tmp_path, "base-sft", "arith", 0.30, 25.0),
        _eval(tmp_path, "base-sft", "gsm8k_sample", 0.01, 40.0),
        _eval(tmp_path, "lr-low", "arith", 0.35, 22.0),
        _eval(tmp_path, "lr-low", "gsm8k_sample", 0.02, 38.0),
        _eval(tmp_path, "lr-high", "arith", 0.4125, 18.5),
        _eval(tmp_path, "lr-high", "gsm8k_sample", 0.0, 35.0),
    ]
    training = [_train(tmp_path, "lr-low", 30, 0.01), _train(tmp_path, "lr-high", 30, 0.02)]
    out = tmp_path / "results" / "report"
    experiments = {e: experiment_summary(config.experiment(e)) for e in config.experiments}
    rows = build_report(
        evals,
        training,
        experiments,
        config.models,
        BENCHMARKS,
        {"primary_benchmark": None},
        str(out / "summary.md"),
        str(out / "summary.csv"),
        str(out / "plots"),
    )

    assert [r["model"] for r in rows] == ["lr-high", "lr-low", "base-sft"]  # ranked on the first benchmark
    with open(out / "summary.csv") as fh:
        table = list(csv.DictReader(fh))
    best = table[0]
    assert (best["rank"], best["model"], best["kind"], best["baseline"]) == ("1", "lr-high", "grpo", "base-sft")
    assert float(best["arith.accuracy"]) == 0.4125 and float(best["arith.mean_response_tokens"]) == 18.5
    assert float(best["arith.delta_vs_sft"]) == pytest.approx(0.4125 - 0.30)
    assert float(best["learning_rate"]) == 1e-5 and best["lora_rank"] == "0"
    assert table[2]["model"] == "base-sft" and table[2]["arith.delta_vs_sft"] == ""

    md = (out / "summary.md").read_text()
    assert (
        "**Best on `arith` (primary benchmark): `lr-high`** (GRPO) with 41.2% ± 3.5%, +11.2 pts vs its SFT start `base-sft`"
        in md
    )
    assert "| 1 | **lr-high** | GRPO | 41.2% | +11.2 pts | 0.0% | -1.0 pts |" in md
    # Only the hyperparameter that differs gets a column; the shared ones are listed once.
    assert (
        "learning_rate |"
        in md.splitlines()[next(i for i, line in enumerate(md.splitlines()) if line.startswith("| rank"))]
    )
    assert "Shared by every experiment: backend = trl, lora_rank = 0" in md

    plots = sorted(p.name for p in (out / "plots").iterdir())
    assert plots == [
        "eval_accuracy.png",
        "training_accuracy.png",
        "training_response_length.png",
        "training_reward.png",
        "training_reward_components.png",
    ]
    assert all((out / "plots" / p).read_bytes().startswith(b"\x89PNG") for p in plots)
    assert "![training_reward](plots/training_reward.png)" in md


def test_primary_benchmark_decides_the_ranking(tmp_path, config):
    evals = [
        _eval(tmp_path, "lr-low", "arith", 0.5, 10),
        _eval(tmp_path, "lr-low", "gsm8k_sample", 0.18, 10),
        _eval(tmp_path, "lr-high", "arith", 0.4, 10),
        _eval(tmp_path, "lr-high", "gsm8k_sample", 0.2, 10),
    ]
    out = tmp_path / "r"
    rows = build_report(
        evals,
        [],
        {},
        config.models,
        BENCHMARKS,
        {"primary_benchmark": "gsm8k_sample"},
        str(out / "s.md"),
        str(out / "s.csv"),
        str(out / "plots"),
    )
    assert [r["model"] for r in rows] == ["lr-high", "lr-low"]
    md = (out / "s.md").read_text()
    assert "## Ranking on `gsm8k_sample`" in md and "(within 2 standard errors: not a clear win)" in md
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["eval_accuracy.png"]


def test_sampled_metrics_get_columns(tmp_path, config):
    evals = [_eval(tmp_path, "lr-low", "arith", 0.5, 10, **{"pass@1": 0.5, "pass@4": 0.8, "maj@4": 0.6})]
    out = tmp_path / "r"
    build_report(evals, [], {}, config.models, ["arith"], {}, str(out / "s.md"), str(out / "s.csv"), str(out / "plots"))
    with open(out / "s.csv") as fh:
        row = next(csv.DictReader(fh))
    assert (row["arith.pass@4"], row["arith.maj@4"]) == ("0.8", "0.6")
    assert "| pass@1 | pass@4 | maj@4 |" in (out / "s.md").read_text().replace(" | problems", "")


def test_a_misplaced_evaluation_file_is_refused(tmp_path):
    path = Path(_eval(tmp_path, "a", "arith", 0.5, 10))
    moved = tmp_path / "results" / "b" / "eval" / "arith.json"
    moved.parent.mkdir(parents=True)
    path.rename(moved)
    with pytest.raises(DataError, match="holds the evaluation of model 'a' on 'arith', not 'b' on 'arith'"):
        build_report(
            [str(moved)],
            [],
            {},
            {},
            ["arith"],
            {},
            str(tmp_path / "s.md"),
            str(tmp_path / "s.csv"),
            str(tmp_path / "p"),
        )
