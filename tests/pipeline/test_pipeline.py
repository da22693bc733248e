"""The embedded default end to end, shortened (same rules, fewer steps): every output exists and parses, the
report's numbers are the run's own, a second run does nothing, and an evaluation-only change reruns only
evaluate + report."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from grpoflow_testing import LOCAL_PROFILE as LOCAL
from grpoflow_testing import SHORT_CONFIG as SHORT
from grpoflow_testing import snakemake

HERE = Path(__file__).resolve().parent
EXPERIMENTS = ["tiny-arith-seed1", "tiny-arith-seed2"]
MODELS = EXPERIMENTS + ["tiny-arith-sft"]
BENCHMARKS = {"arith": 20, "gsm8k_sample": 8}


def planned_jobs(proc) -> dict[str, int]:
    out = proc.stdout + proc.stderr
    if "Job stats:" not in out:
        return {}
    table = out.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


@pytest.fixture(scope="module")
def finished_run(short_local_run):
    """The session's shortened run (conftest.short_local_run), shared with the fault tests: only read and dry-run here."""
    return short_local_run


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_every_output_exists_and_parses(finished_run):
    wd = finished_run
    for ds, splits in {"arith": ["train", "val", "test"], "gsm8k_sample": ["test"]}.items():  # only what the DAG uses
        assert json.loads((wd / f"resources/data/{ds}/manifest.json").read_text())["files"]
        for split in splits:
            table = pq.read_table(wd / f"results/data/{ds}/{split}.parquet")
            assert table.num_rows > 0 and {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(
                table.column_names
            )
    run_dir = wd / "resources/demo/sft-run"
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "40"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for exp in EXPERIMENTS:
        sft = json.loads((wd / f"results/{exp}/sft.json").read_text())
        assert sft["step"] == 40 and sft["found_by"] == "latest_checkpointed_iteration.txt"
        marker = json.loads((wd / f"results/{exp}/training_complete.json").read_text())
        assert marker["final_step"] == marker["planned_steps"] == 4
        assert marker["provenance"]["packages"]["trl"]
        metrics = read_jsonl(wd / f"results/{exp}/train_metrics.jsonl")
        assert [m["step"] for m in metrics] == [1, 2, 3, 4]
        assert all(0.0 <= m["accuracy"] <= 1.0 and "reward" in m for m in metrics)
        model_dir = wd / f"results/{exp}/model"
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        tok = AutoTokenizer.from_pretrained(model_dir)
        assert tok.chat_template and model.config.model_type == "qwen3"
        assert json.loads((wd / f"results/{exp}/upload.json").read_text())["sent"] is False
    for model in MODELS:
        for bench, n in BENCHMARKS.items():
            result = json.loads((wd / f"results/{model}/eval/{bench}.json").read_text())
            assert result["n_problems"] == n and 0.0 <= result["metrics"]["accuracy"] <= 1.0
            samples = read_jsonl(wd / f"results/{model}/eval/{bench}.samples.jsonl")
            assert len(samples) == n and all({"response", "extracted", "correct"} <= set(s) for s in samples)
            assert sum(s["correct"] for s in samples) / n == pytest.approx(result["metrics"]["accuracy"])
    assert (wd / "results/report/summary.md").read_text().strip()
    assert sorted(p.name for p in (wd / "results/report/plots").glob("*.png"))


@pytest.mark.slow
def test_report_numbers_come_from_the_runs_files(finished_run):
    wd = finished_run
    with open(wd / "results/report/summary.csv") as fh:
        rows = {r["model"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(MODELS)
    for model in MODELS:
        for bench in BENCHMARKS:
            result = json.loads((wd / f"results/{model}/eval/{bench}.json").read_text())
            assert float(rows[model][f"{bench}.accuracy"]) == pytest.approx(result["metrics"]["accuracy"])
    sft_acc = json.loads((wd / "results/tiny-arith-sft/eval/arith.json").read_text())["metrics"]["accuracy"]
    for exp in EXPERIMENTS:
        acc = json.loads((wd / f"results/{exp}/eval/arith.json").read_text())["metrics"]["accuracy"]
        assert float(rows[exp]["arith.delta_vs_sft"]) == pytest.approx(acc - sft_acc)


@pytest.mark.slow
def test_second_run_does_nothing_and_eval_change_reruns_only_evaluation(finished_run):
    wd = finished_run
    again = snakemake([*LOCAL, *SHORT, "-n"], wd)
    assert "Nothing to be done" in again.stdout + again.stderr
    changed = snakemake([*LOCAL, *SHORT, str(HERE / "short_eval_change.yaml"), "-n"], wd)
    jobs = planned_jobs(changed)
    assert jobs.pop("evaluate") == len(MODELS) * len(BENCHMARKS)
    assert jobs.pop("report") == 1
    assert set(jobs) <= {"all"}, f"an evaluation-only change scheduled upstream jobs: {jobs}"


@pytest.mark.slow
def test_same_config_in_another_key_order_and_formatting_reruns_nothing(finished_run, tmp_path):
    """A YAML formatter's copy (yaml.safe_dump(sort_keys=True)) of the run's config, with a default spelled as an
    integer (max_grad_norm: 1 for 1.0): the same settings, so nothing reruns (Snakemake compares params as written)."""
    import yaml

    from grpoflow.config import load_config_files

    merged = load_config_files([w for w in SHORT if w != "--configfile"])
    merged["defaults"]["grpo"]["max_grad_norm"] = 1
    sorted_copy = tmp_path / "sorted.yaml"
    sorted_copy.write_text(yaml.safe_dump(merged, sort_keys=True))
    again = snakemake([*LOCAL, "--configfile", str(sorted_copy), "-n"], finished_run)
    assert "Nothing to be done" in again.stdout + again.stderr, planned_jobs(again)
