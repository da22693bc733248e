"""evaluate / report / upload_to_hub through Snakemake itself, in scratch working directories:

- a config with only `evaluation.models` + a benchmark file evaluates and reports with no training at all,
  and `snakemake --report` renders the HTML report;
- with a finished pipeline, changing an evaluation setting schedules evaluate + report and nothing upstream,
  switching upload on schedules upload_to_hub only, and the upload runs against the stand-in Hub.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from evalkit import tiny_model  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "hub"))
from fakehub import FakeHub  # noqa: E402


from grpoflow_testing import make_workdir, snakemake  # noqa: E402


def job_counts(stdout: str) -> dict[str, int]:
    if "Job stats:" not in stdout:
        return {}
    table = stdout.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def _gsm8k_file(path: Path, n: int) -> Path:
    lines = (REPO / "data" / "gsm8k_sample" / "test.jsonl").read_text().splitlines()[:n]
    path.write_text("\n".join(lines) + "\n")
    return path


def _write(path: Path, config: dict) -> str:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def _dry(wd: Path, cfg: str) -> dict[str, int]:
    return job_counts(snakemake(["-n", "--configfile", cfg], wd).stdout)


@pytest.mark.slow
def test_evaluate_and_report_without_training(tmp_path, tiny_model):
    wd = make_workdir(tmp_path)
    _gsm8k_file(wd / "bench.jsonl", 6)
    config = {
        "evaluation": {
            "max_new_tokens": 8, "batch_size": 6,
            "models": {"tiny-base": {"path": str(tiny_model)}},
            "benchmarks": {"gsm8k6": {"path": "bench.jsonl", "prompt_key": "question", "format": "gsm8k"}},
            "resources": {"gpus": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10},
        },
    }
    cfg = _write(wd / "eval-only.yaml", config)
    assert _dry(wd, cfg) == {"evaluate": 1, "report": 1, "all": 1}
    snakemake(["-c1", "--configfile", cfg], wd)

    metrics = json.loads((wd / "results/tiny-base/eval/gsm8k6.json").read_text())
    samples = [json.loads(line) for line in (wd / "results/tiny-base/eval/gsm8k6.samples.jsonl").read_text().splitlines()]
    assert metrics["n_problems"] == len(samples) == 6 and metrics["generation"]["max_new_tokens"] == 8
    with open(wd / "results/report/summary.csv") as fh:
        row = next(csv.DictReader(fh))
    assert row["model"] == "tiny-base" and row["kind"] == "external"
    assert float(row["gsm8k6.accuracy"]) == metrics["metrics"]["accuracy"] == sum(s["correct"] for s in samples) / 6
    assert float(row["gsm8k6.mean_response_tokens"]) == metrics["metrics"]["mean_response_tokens"]
    assert (wd / "results/report/plots/eval_accuracy.png").is_file()

    snakemake(["--report", "report.html", "--configfile", cfg], wd)
    html = (wd / "report.html").read_text()
    assert "summary.csv" in html and "eval_accuracy.png" in html and "accuracy with the project" in html
    assert "evaluation accuracy of every model on every benchmark" in html  # the per-plot caption

    # Only an evaluation setting changes: evaluate + report rerun, nothing else.
    assert _dry(wd, cfg) == {}
    config["evaluation"]["max_new_tokens"] = 4
    assert _dry(wd, _write(wd / "eval-only.yaml", config)) == {"evaluate": 1, "report": 1, "all": 1}


def _pipeline_config(tiny: Path) -> dict:
    return {
        "datasets": {"mini": {"source": "local", "local": {"train": "train.jsonl", "test": "test.jsonl"}, "format": "gsm8k",
                              "prompt": {"system": "Put the final answer in \\boxed{}.", "template": "{question}"}}},
        "defaults": {
            "backend": "trl", "data": {"dataset": "mini", "val_split": None}, "sft": {"model": str(tiny), "name": "tiny-sft"},
            "grpo": {"total_steps": 2, "prompts_per_step": 2, "num_generations": 2, "max_prompt_length": 64, "max_response_length": 8},
            "resources": {"gpus_per_node": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10},
        },
        "experiments": {"e1": {}},
        "evaluation": {"max_new_tokens": 6, "batch_size": 4, "benchmarks": {"mini": {"dataset": "mini", "split": "test"}},
                       "resources": {"gpus": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10}},
        "report": {"primary_benchmark": "mini"},
    }


@pytest.mark.slow
def test_changing_only_evaluation_settings_reruns_only_evaluate_and_report(tmp_path, tiny_model):
    """A finished pipeline: data and SFT discovery really run; training and merging are recorded as done with
    `--touch` over hand-made outputs (training itself is tested elsewhere); evaluate/report/upload really run."""
    wd = make_workdir(tmp_path)
    _gsm8k_file(wd / "test.jsonl", 4)
    shutil.copy(REPO / "data" / "gsm8k_sample" / "train.jsonl", wd / "train.jsonl")
    config = _pipeline_config(tiny_model)
    cfg = _write(wd / "pipeline.yaml", config)
    snakemake(["-c1", "results/data/mini/test.parquet", "results/data/mini/train.parquet", "results/e1/sft.json", "--configfile", cfg], wd)
    # `snakemake baselines`: the SFT start is evaluated with no training job in the DAG.
    assert job_counts(snakemake(["-n", "baselines", "--configfile", cfg], wd).stdout) == {"evaluate": 1, "baselines": 1}
    run = wd / "results" / "e1"
    (run / "training_complete.json").write_text(json.dumps({"experiment": "e1", "planned_steps": 2, "final_step": 2, "provenance": {"git_commit": "abc"}}))
    (run / "train_metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1 * s, "reward/accuracy": 0.1 * s, "accuracy": 0.1 * s, "response_length": 8 - s}) + "\n" for s in (1, 2)))
    shutil.copytree(tiny_model, run / "model")
    snakemake(["-c1", "--configfile", cfg, "--touch", "--forcerun", "train_grpo", "merge_checkpoint", "--until", "merge_checkpoint", "--", "results/e1/model"], wd)
    assert _dry(wd, cfg) == {"evaluate": 2, "report": 1, "upload_to_hub": 1, "all": 1}
    snakemake(["-c1", "--configfile", cfg], wd)
    assert _dry(wd, cfg) == {}
    record = json.loads((run / "upload.json").read_text())
    assert record["sent"] is False and record["enabled"] is False

    md = (wd / "results/report/summary.md").read_text()
    before = json.loads((wd / "results/tiny-sft/eval/mini.json").read_text())["metrics"]["accuracy"]
    after = json.loads((run / "eval/mini.json").read_text())["metrics"]["accuracy"]
    assert f"{100 * after:.1f}%" in md and f"{100 * (after - before):+.1f} pts" in md
    assert (wd / "results/report/plots/training_reward.png").is_file() and (wd / "results/report/plots/training_reward_components.png").is_file()

    # 1. An evaluation setting: evaluate (both models) + report; no data, training, merge or upload job.
    config["evaluation"]["max_new_tokens"] = 5
    assert _dry(wd, _write(wd / "pipeline.yaml", config)) == {"evaluate": 2, "report": 1, "all": 1}
    config["evaluation"]["max_new_tokens"] = 6
    # 2. The control: a change upstream (the dataset's prompt) is seen and reruns from the conversion on.
    config["datasets"]["mini"]["prompt"]["system"] = "Think, then answer."
    assert {"convert_to_parquet", "evaluate", "report"} <= set(_dry(wd, _write(wd / "pipeline.yaml", config)))
    config["datasets"]["mini"]["prompt"]["system"] = "Put the final answer in \\boxed{}."
    # 3. Switching upload on (dry run): upload_to_hub alone.
    config["experiments"]["e1"] = {"upload": {"enabled": True, "repo_id": "grpoflow-test/e1", "dry_run": True}}
    cfg = _write(wd / "pipeline.yaml", config)
    assert _dry(wd, cfg) == {"upload_to_hub": 1, "all": 1}
    snakemake(["-c1", "--configfile", cfg], wd)
    record = json.loads((run / "upload.json").read_text())
    assert record["dry_run"] and not record["sent"] and "README.md" in [f["path"] for f in record["files"]]

    # 4. The real upload, through the rule, to the stand-in Hub; the token never reaches a file.
    token = "hf_" + "a1b2c3d4" * 4 + "e5"
    config["experiments"]["e1"]["upload"]["dry_run"] = False
    cfg = _write(wd / "pipeline.yaml", config)
    with FakeHub(token) as hub:
        no_token = snakemake(["-c1", "--configfile", cfg], wd, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": "", "HF_HOME": str(tmp_path / "hf")}, check=False)
        assert no_token.returncode != 0 and hub.requests == []
        assert "grpoflow: error: no Hugging Face token for uploading e1 to grpoflow-test/e1" in (wd / "logs/upload_to_hub/e1.log").read_text()
        snakemake(["-c1", "--configfile", cfg], wd, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HOME": str(tmp_path / "hf")})
        files = hub.repos["grpoflow-test/e1"].files("main")
        assert files["model.safetensors"] == (run / "model" / "model.safetensors").read_bytes()
        assert "| mini |" in files["README.md"].decode()
    record = json.loads((run / "upload.json").read_text())
    assert record["sent"] and record["changed"]
    for path in [*wd.joinpath("logs").rglob("*"), *wd.joinpath("results").rglob("*.json"), *wd.joinpath(".snakemake/log").rglob("*")]:
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
