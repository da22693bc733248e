"""Bad input as a user meets it: through the `snakemake` command line (or the documented module CLI), each one
fails with exit status != 0, one `grpoflow: ...` line that names the cause and the fix, no traceback, and no
output a rerun could take as complete.

Config mistakes are caught while the Snakefile loads (before anything runs or is submitted to SLURM); data and
model problems fail the job that meets them, whose log ends in the same one line (printed by show-failed-logs).
The messages are listed in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import (
    LOCAL_PROFILE,
    PYTHON,
    REPO,
    SHORT_CONFIG,
    SLURM_PROFILE,
    copy_workdir,
    make_workdir,
    snakemake,
)

DEFAULT = str(REPO / "config" / "config.yaml")


def run(
    wd: Path, overlay: dict | None, *args: str, profile=LOCAL_PROFILE, configs=(DEFAULT,), env=None
) -> tuple[subprocess.CompletedProcess, str]:
    """snakemake with the config files + an overlay written from ``overlay``; targets in ``args``."""
    files = list(configs)
    if overlay is not None:
        path = wd / "overlay.yaml"
        path.write_text(yaml.safe_dump(overlay))
        files.append(str(path))
    proc = snakemake([*profile, *args, "--configfile", *files], wd, check=False, env=env)
    return proc, proc.stdout + proc.stderr


def one_line(out: str, prefix: str = "grpoflow: ") -> str:
    """The single grpoflow line of a failed run (a job's error may be printed twice: as it happens and in the
    failed log that show-failed-logs prints; the message is the same)."""
    lines = {ln.strip() for ln in out.splitlines() if ln.strip().startswith(prefix)}
    assert len(lines) == 1, f"expected one grpoflow message, got {lines}:\n{out[-3000:]}"
    return lines.pop()


def config_error(wd: Path, overlay: dict | None, *args: str, **kw) -> str:
    proc, out = run(wd, overlay, "-n", *args, **kw)
    assert proc.returncode == 1
    assert "Traceback" not in out and "Building DAG" not in out  # stopped while loading the config
    return one_line(out, "grpoflow: config error: ")


def job_error(wd: Path, overlay: dict | None, target: str, log: str, **kw) -> str:
    """Run ``target``; its job must fail with one line that is also the last line of the job's log."""
    proc, out = run(wd, overlay, target, **kw)
    assert proc.returncode == 1
    assert "Traceback" not in out
    line = one_line(out, "grpoflow: error: ")
    assert (wd / log).read_text().rstrip().splitlines()[-1] == line
    assert not (wd / target).exists()
    return line


@pytest.fixture
def wd(tmp_path) -> Path:
    return make_workdir(tmp_path)


# ---- config: caught while the Snakefile loads ---------------------------------------------------------------------


def test_unknown_config_key(wd):
    msg = config_error(wd, {"defaults": {"grpo": {"lerning_rate": 1e-5}}})
    assert (
        msg.startswith("grpoflow: config error: unknown key 'lerning_rate' under defaults.grpo (allowed: ")
        and "learning_rate" in msg
    )


def test_schema_invalid_values(wd):
    assert (
        config_error(wd, {"defaults": {"grpo": {"learning_rate": -1}}})
        == "grpoflow: config error: defaults.grpo.learning_rate = -1: must be a number > 0"
    )
    msg = config_error(wd, {"experiments": {"tiny-arith-seed1": {"resources": {"gpus_per_node": "eight"}}}})
    assert "experiments.tiny-arith-seed1.resources.gpus_per_node = 'eight'" in msg


def test_unknown_reward_name(wd):
    msg = config_error(wd, {"defaults": {"rewards": {"funcs": ["accuracy", "acuracy"]}}})
    assert "rewards.funcs: unknown reward 'acuracy' (known: " in msg and "accuracy" in msg


def test_verl_batch_arithmetic_that_cannot_work_on_the_requested_gpus(wd):
    """Caught when the config loads: with the SLURM profile nothing is submitted (no cluster needed to see it)."""
    msg = config_error(
        wd,
        {"defaults": {"resources": {"gpus_per_node": 3}}},
        profile=SLURM_PROFILE,
        configs=(str(REPO / "config" / "qwen3-8b-gsm8k.yaml"),),
    )
    assert msg.startswith(
        "grpoflow: config error: experiments.qwen3-8b-gsm8k.grpo.prompts_per_step × num_generations = 64 × 2 = 128 "
        "is not divisible by the 3 GPUs (1 node(s) × 3)"
    )


# ---- data files: the job that reads them fails --------------------------------------------------------------------

GSM8K_TEST = "results/data/gsm8k_sample/test.parquet"
GSM8K_LOG = "logs/download_data/gsm8k_sample.log"


def _local_test_file(wd: Path, name: str, content: bytes | None) -> dict:
    if content is not None:
        (wd / name).write_bytes(content)
    return {"datasets": {"gsm8k_sample": {"local": {"test": name}}}}


def test_missing_data_file(wd):
    msg = job_error(wd, _local_test_file(wd, "nope.jsonl", None), GSM8K_TEST, GSM8K_LOG)
    assert msg.startswith(
        "grpoflow: error: datasets.gsm8k_sample.local.test: file 'nope.jsonl' not found"
    ) and msg.endswith("fix the path")
    assert not (wd / "resources/data/gsm8k_sample/manifest.json").exists()


def test_empty_data_file(wd):
    msg = job_error(wd, _local_test_file(wd, "empty.jsonl", b""), GSM8K_TEST, GSM8K_LOG)
    assert (
        msg
        == "grpoflow: error: datasets.gsm8k_sample.local.test = 'empty.jsonl', read from its copy (resources/data/gsm8k_sample/test.jsonl): file is empty"
    )


def test_corrupt_jsonl_data_file(wd):
    good = (REPO / "data/gsm8k_sample/test.jsonl").read_bytes().splitlines(keepends=True)
    msg = job_error(
        wd,
        _local_test_file(wd, "cut.jsonl", b"".join(good[:3]) + good[3][:40] + b"\n" + b"".join(good[4:])),
        GSM8K_TEST,
        GSM8K_LOG,
    )
    assert msg.startswith(
        "grpoflow: error: datasets.gsm8k_sample.local.test = 'cut.jsonl', read from its copy (resources/data/gsm8k_sample/test.jsonl): line 4 is not valid JSON ("
    )


def test_corrupt_parquet_data_file(wd):
    msg = job_error(wd, _local_test_file(wd, "bad.parquet", b"PAR1" + os.urandom(200)), GSM8K_TEST, GSM8K_LOG)
    assert msg.startswith(
        "grpoflow: error: datasets.gsm8k_sample.local.test = 'bad.parquet', read from its copy (resources/data/gsm8k_sample/test.parquet): not a readable Parquet file ("
    )


def test_benchmark_file_without_the_answer_column(wd):
    rows = [json.loads(line) for line in (REPO / "data/gsm8k_sample/test.jsonl").read_text().splitlines()[:4]]
    (wd / "bench.jsonl").write_text("".join(json.dumps({"question": r["question"]}) + "\n" for r in rows))
    (wd / "some-model").mkdir()  # a local dir: the benchmark file fails before any model is loaded (a Hub id would
    # first be fetched by download_model)
    overlay = {
        "evaluation": {
            "models": {"ext": {"path": "some-model"}},
            "benchmarks": {
                "mine": {"path": "bench.jsonl", "prompt_key": "question", "answer_key": "answer", "format": "gsm8k"}
            },
        }
    }
    msg = job_error(wd, overlay, "results/ext/eval/mine.json", "logs/evaluate/ext/mine.log")
    assert (
        "bench.jsonl" in msg
        and "'answer' not found (columns: question)" in msg
        and "evaluation.benchmarks.mine.answer_key" in msg
    )
    assert not (wd / "results/ext/eval/mine.samples.jsonl").exists()


# ---- the SFT start --------------------------------------------------------------------------------------------

SFT_JSON = "results/tiny-arith-seed1/sft.json"
SFT_LOG = "logs/discover_sft_checkpoint/tiny-arith-seed1.log"


def _user_sft(run_dir: Path) -> dict:
    return {"defaults": {"sft": {"run_dir": str(run_dir)}}}


def test_sft_dir_without_a_checkpoint(wd):
    (wd / "my-sft").mkdir()
    (wd / "my-sft" / "train.log").write_text("epoch 1\n")
    msg = job_error(wd, _user_sft(wd / "my-sft"), SFT_JSON, SFT_LOG)
    assert f"sft.run_dir '{wd / 'my-sft'}' holds no checkpoint" in msg and "set sft.model" in msg


def _hf_dir(path: Path, tokenizer: bool) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (path / "model.safetensors").write_bytes(b"\0" * 64)
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")


def test_sft_checkpoint_without_a_tokenizer(wd):
    run_dir = wd / "my-sft"
    _hf_dir(run_dir / "global_step_100" / "huggingface", tokenizer=True)
    _hf_dir(run_dir / "global_step_200" / "huggingface", tokenizer=False)
    (run_dir / "latest_checkpointed_iteration.txt").write_text("200")
    msg = job_error(wd, _user_sft(run_dir), SFT_JSON, SFT_LOG)
    assert "global_step_200/huggingface: not a complete Hugging Face model: missing a tokenizer" in msg


def test_verl_checkpoint_without_fsdp_config(tmp_path):
    """An older verl's checkpoint (no fsdp_config.json) given to the merge, as docs/cluster.md says to run it by
    hand: the fix names the file and its content."""
    actor = tmp_path / "ckpt" / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    for rank in (0, 1):
        (actor / f"model_world_size_2_rank_{rank}.pt").write_bytes(b"")
    (tmp_path / "sft.json").write_text(json.dumps({"path": str(tmp_path / "base")}))
    (tmp_path / "training_complete.json").write_text(json.dumps({"final_step": 2}))
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "grpoflow.merge",
            "verl",
            str(tmp_path / "ckpt"),
            "last",
            str(tmp_path / "sft.json"),
            str(tmp_path / "training_complete.json"),
            str(tmp_path / "model"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    msg = one_line(proc.stderr, "grpoflow: error: ")
    assert f"{actor} has no fsdp_config.json" in msg and '{"FSDP_version": 2, "world_size": 2}' in msg
    assert not (tmp_path / "model").exists() and not list(tmp_path.glob(".model*"))


# ---- upload without a token ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_upload_enabled_without_a_token(short_local_run, tmp_path):
    wd = copy_workdir(short_local_run, tmp_path / "wd")
    env = {"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": "", "HF_ENDPOINT": "http://127.0.0.1:9"}
    overlay = {"defaults": {"upload": {"enabled": True, "repo_id": "me/tiny-arith"}}}
    msg = job_error(
        wd,
        overlay,
        "results/tiny-arith-seed1/upload.json",
        "logs/upload_to_hub/tiny-arith-seed1.log",
        configs=SHORT_CONFIG[1:],
        env=env,
    )
    assert msg == (
        "grpoflow: error: no Hugging Face token for uploading tiny-arith-seed1 to me/tiny-arith: set HF_TOKEN or run "
        "`hf auth login` on the machine that runs upload_to_hub (nothing was uploaded)"
    )
