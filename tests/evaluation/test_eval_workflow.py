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
from grpoflow_testing import LOCAL_PROFILE, SHORT_CONFIG, copy_workdir, load_yaml, make_workdir, snakemake  # noqa: E402

from grpoflow.config import resolve_config  # noqa: E402


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


def _serve_builtin(hub: FakeHub, name: str, files: dict[str, bytes]) -> None:
    """Stand-in rows for a built-in benchmark, at the repo, revision and path its registry entry pins."""
    from grpoflow.schema.benchmarks import BUILTIN

    spec = BUILTIN[name]["dataset"]["hub"]
    hub.add_dataset(spec["repo_id"], files, commit=spec["revision"])


def _parquet_bytes(rows: list[dict]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


@pytest.mark.slow
def test_evaluate_and_report_without_training(tmp_path, tiny_model):
    """An evaluation-only config: a file benchmark, MATH-500 greedy and AIME 2024 avg@n from the built-in
    registry (downloaded by download_data from the stand-in Hub at their pinned revisions), one report."""
    wd = make_workdir(tmp_path)
    _gsm8k_file(wd / "bench.jsonl", 6)
    config = {
        "evaluation": {
            "max_new_tokens": 8,
            "batch_size": 6,
            "models": {"tiny-base": {"path": str(tiny_model)}},
            "benchmarks": {
                "gsm8k6": {"path": "bench.jsonl", "prompt_key": "question", "format": "gsm8k"},
                "math500": {"builtin": "math500"},
                "aime2024": {"builtin": "aime2024", "samples": 3},
            },
            "resources": {"gpus": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10},
        },
    }
    cfg = _write(wd / "eval-only.yaml", config)
    assert _dry(wd, cfg) == {"download_data": 2, "convert_to_parquet": 2, "evaluate": 3, "report": 1, "all": 1}
    math500 = [
        {"problem": f"What is {a} + {b}?", "answer": str(a + b), "subject": s, "level": lv, "unique_id": f"t/{a}.json"}
        for a, b, s, lv in ((1, 2, "Algebra", 1), (3, 4, "Algebra", 2), (5, 6, "Geometry", 2))
    ]
    aime = [
        {"id": 60 + i, "problem": f"Find {i} + 100.", "answer": str(100 + i), "url": "", "year": "2024"}
        for i in range(3)
    ]
    with FakeHub("unused") as hub:
        _serve_builtin(hub, "math500", {"test.jsonl": "".join(json.dumps(r) + "\n" for r in math500).encode()})
        _serve_builtin(hub, "aime2024", {"data/train-00000-of-00001.parquet": _parquet_bytes(aime)})
        snakemake(["-c1", "--configfile", cfg], wd, env={"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")})
    manifest = json.loads((wd / "resources/data/math500/manifest.json").read_text())
    assert manifest["origin"]["resolved_commit"] == "ff5b20257d8185524591543f8ff5993951537bb8"
    aime_eval = json.loads((wd / "results/tiny-base/eval/aime2024.json").read_text())
    assert aime_eval["samples_per_problem"] == 3 and aime_eval["generation"]["temperature"] == 0.6
    assert "avg@3" in aime_eval["metrics"] and aime_eval["n_completions"] == 9
    assert json.loads((wd / "results/tiny-base/eval/math500.json").read_text())["generation"]["greedy"]
    md = (wd / "results/report/summary.md").read_text()
    assert "### `math500`: 3 problems, greedy" in md and "### `aime2024`: 3 problems, standard sampling (T 0.6" in md
    assert "### `math500` by subject" in md and "| Geometry | 1 |" in md

    metrics = json.loads((wd / "results/tiny-base/eval/gsm8k6.json").read_text())
    samples = [
        json.loads(line) for line in (wd / "results/tiny-base/eval/gsm8k6.samples.jsonl").read_text().splitlines()
    ]
    assert metrics["n_problems"] == len(samples) == 6 and metrics["generation"]["max_new_tokens"] == 8
    # Each job generated and scored with what config load resolved for its benchmark (WorkflowConfig.benchmark_runs).
    for bench, run in resolve_config(load_yaml(cfg)).benchmark_runs.items():
        recorded = json.loads((wd / f"results/tiny-base/eval/{bench}.json").read_text())
        gen = recorded["generation"]
        assert {k: gen[k] for k in run.generation.as_dict()} == run.generation.as_dict()
        assert (gen["backend"], gen["chat_template_kwargs"]) == (run.backend, run.chat_template_kwargs)
        assert recorded["answer_format"] == run.answer_format
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
    assert _dry(wd, _write(wd / "eval-only.yaml", config)) == {"evaluate": 3, "report": 1, "all": 1}
    # A benchmark's own decoding reruns that benchmark only.
    config["evaluation"]["max_new_tokens"] = 8
    config["evaluation"]["benchmarks"]["aime2024"]["samples"] = 2
    assert _dry(wd, _write(wd / "eval-only.yaml", config)) == {"evaluate": 1, "report": 1, "all": 1}


E1 = "tiny-arith-seed1"


@pytest.mark.slow
def test_changing_only_evaluation_settings_reruns_only_evaluate_and_report(tmp_path, short_local_run):
    """On a copy of the session's finished shortened run (conftest.short_local_run): what each kind of change
    schedules, and upload_to_hub really running (dry run, refused without a token, accepted by a stand-in Hub)."""
    wd = copy_workdir(short_local_run, tmp_path / "wd")
    run = wd / "results" / E1
    overlay = wd / "overlay.yaml"

    def plan(extra: dict | None = None) -> dict[str, int]:
        overlay.write_text(yaml.safe_dump(extra or {}))
        return job_counts(snakemake([*LOCAL_PROFILE, "-n", *SHORT_CONFIG, str(overlay)], wd).stdout)

    assert plan() == {}
    md = (wd / "results/report/summary.md").read_text()
    before = json.loads((wd / "results/tiny-arith-sft/eval/arith.json").read_text())["metrics"]["accuracy"]
    after = json.loads((run / "eval/arith.json").read_text())["metrics"]["accuracy"]
    assert f"{100 * after:.1f}%" in md and f"{100 * (after - before):+.1f} pts" in md
    assert (wd / "results/report/plots/training_reward.png").is_file() and (
        wd / "results/report/plots/training_reward_components.png"
    ).is_file()

    # 1. An evaluation setting: evaluate (3 models x 2 benchmarks) + report; no data, training, merge or upload job.
    assert plan({"evaluation": {"max_new_tokens": 5}}) == {"evaluate": 6, "report": 1, "all": 1}
    # 2. The control: a change upstream (the dataset's prompt) is seen and reruns from the conversion on.
    assert {"convert_to_parquet", "train_grpo", "evaluate", "report"} <= set(
        plan({"datasets": {"arith": {"prompt": {"system": "Think, then answer."}}}})
    )
    # 3. Switching upload on (dry run): upload_to_hub alone.
    upload = {"experiments": {E1: {"upload": {"enabled": True, "repo_id": "grpoflow-test/e1", "dry_run": True}}}}
    assert plan(upload) == {"upload_to_hub": 1, "all": 1}
    snakemake([*LOCAL_PROFILE, *SHORT_CONFIG, str(overlay)], wd)
    record = json.loads((run / "upload.json").read_text())
    assert record["dry_run"] and not record["sent"] and "README.md" in [f["path"] for f in record["files"]]

    # 4. The real upload, through the rule, to the stand-in Hub; the token never reaches a file.
    token = "hf_" + "a1b2c3d4" * 4 + "e5"
    upload["experiments"][E1]["upload"]["dry_run"] = False
    overlay.write_text(yaml.safe_dump(upload))
    args = [*LOCAL_PROFILE, *SHORT_CONFIG, str(overlay)]
    with FakeHub(token) as hub:
        no_token = snakemake(
            args, wd, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": "", "HF_HOME": str(tmp_path / "hf")}, check=False
        )
        assert no_token.returncode != 0 and hub.requests == []
        assert (
            f"grpoflow: error: no Hugging Face token for uploading {E1} to grpoflow-test/e1"
            in (wd / f"logs/upload_to_hub/{E1}.log").read_text()
        )
        snakemake(args, wd, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HOME": str(tmp_path / "hf")})
        files = hub.repos["grpoflow-test/e1"].files("main")
        assert files["model.safetensors"] == (run / "model" / "model.safetensors").read_bytes()
        assert "| arith |" in files["README.md"].decode()
    record = json.loads((run / "upload.json").read_text())
    assert record["sent"] and record["changed"]
    for path in [
        *wd.joinpath("logs").rglob("*"),
        *wd.joinpath("results").rglob("*.json"),
        *wd.joinpath(".snakemake/log").rglob("*"),
    ]:
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path

    # 5. `snakemake baselines` before any training: the SFT start is evaluated, no training job is in the DAG.
    for exp in ("tiny-arith-seed1", "tiny-arith-seed2"):
        shutil.rmtree(wd / "results" / exp)
    shutil.rmtree(wd / "results/tiny-arith-sft/eval")
    assert job_counts(snakemake([*LOCAL_PROFILE, "-n", "baselines", *SHORT_CONFIG], wd).stdout) == {
        "evaluate": 2,
        "discover_sft_checkpoint": 1,
        "baselines": 1,
    }
