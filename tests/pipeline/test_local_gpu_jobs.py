"""Issue 38, item 3: on one GPU machine (profiles/local) GPU jobs take turns. Recipe 004's DAG
(config/qwen2.5-math-1.5b-lora-binary.yaml) has two GPU jobs that do not depend on each other, TRL training (vLLM at
0.3 of the card) and the start model's vLLM evaluation (0.85), and a third after the merge.

What stands in for what:
- a 1-GPU machine: a stand-in ``nvidia-smi`` on PATH whose ``-L`` lists one GPU (the count grpoflow.local_gpus
  reads), CUDA_VISIBLE_DEVICES unset; ``--cores 32``, the cores of a GPU box (on this 2-core machine the jobs'
  threads alone would serialise them: train_grpo asks for 16, evaluate for 8);
- the trainer, the merge and vLLM evaluation: tests/pipeline/standin_cluster_python.py as the cluster environment's
  interpreter (``--config cluster_env={python: ...}``), which the real shell commands of train_grpo,
  merge_checkpoint and evaluate call; it writes the rules' outputs and records when each job starts and ends;
- the data and start-model jobs upstream: their output files, written first (``--allowed-rules`` keeps them).
The start checks that would read the stand-in environment and the disk are off (GRPOFLOW_SKIP_ENV_CHECK,
GRPOFLOW_SKIP_DISK_CHECK)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from grpoflow_testing import LOCAL_PROFILE, REPO, SLURM_PROFILE, make_workdir, snakemake

HERE = Path(__file__).resolve().parent
RECIPE_004 = ["--configfile", str(REPO / "config" / "qwen2.5-math-1.5b-lora-binary.yaml")]
EXP, START = "qwen2.5-math-1.5b-lora-binary", "qwen2.5-math-1.5b"
UPSTREAM = [
    "resources/data/gsm8k/manifest.json",
    "resources/models/Qwen--Qwen2.5-Math-1.5B/manifest.json",
    "results/data/gsm8k/train.parquet",
    "results/data/gsm8k/train.summary.json",
    "results/data/gsm8k/test.parquet",
    "results/data/gsm8k/test.summary.json",
    f"results/{EXP}/sft.json",
]
TARGETS = [f"results/{START}/eval/gsm8k_test.json", f"results/{EXP}/eval/gsm8k_test.json"]
GPU_JOBS = {f"train_grpo {EXP}", f"evaluate {START} gsm8k_test", f"evaluate {EXP} gsm8k_test"}


def machine(tmp_path: Path, gpus: int) -> dict:
    """The environment of a machine with ``gpus`` GPUs that nvidia-smi lists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    lines = "".join(
        f"echo 'GPU {i}: NVIDIA Stand-in (UUID: GPU-0000000{i}-0000-0000-0000-000000000000)'\n" for i in range(gpus)
    )
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{lines}")
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def standin_python(tmp_path: Path) -> Path:
    wrapper = tmp_path / "cluster-env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "standin_cluster_python.py"} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def intervals(log: Path) -> dict[str, tuple[float, float]]:
    events = [json.loads(line) for line in log.read_text().splitlines()]
    start = {e["job"]: e["t"] for e in events if e["event"] == "start"}
    end = {e["job"]: e["t"] for e in events if e["event"] == "end"}
    assert start.keys() == end.keys(), events
    return {job: (start[job], end[job]) for job in start}


@pytest.mark.slow
def test_recipe_004s_gpu_jobs_on_a_one_gpu_machine_never_overlap(tmp_path):
    wd = make_workdir(tmp_path)
    for rel in UPSTREAM:  # in DAG order, so each is newer than what it is made from
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        (wd / rel).write_text("{}")
        os.utime(wd / rel)
    log = tmp_path / "gpu_jobs.jsonl"
    env = machine(tmp_path, gpus=1)
    env.update(
        GPU_JOBS_LOG=str(log),
        GPU_JOB_HOLD_S="10",
        GRPOFLOW_SKIP_ENV_CHECK="1",
        GRPOFLOW_SKIP_DISK_CHECK="1",
    )
    proc = snakemake(
        [
            *TARGETS,
            *LOCAL_PROFILE,
            *RECIPE_004,
            "--cores",
            "32",
            "--config",
            f"cluster_env={{python: {standin_python(tmp_path)}}}",
            "--allowed-rules",
            "train_grpo",
            "merge_checkpoint",
            "evaluate",
        ],
        wd,
        env=env,
        timeout=600,
    )
    jobs = intervals(log)
    assert GPU_JOBS <= jobs.keys(), jobs
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(sorted(GPU_JOBS), 2)
        if jobs[a][0] < jobs[b][1] and jobs[b][0] < jobs[a][1]
    ]
    assert not overlapping, f"GPU jobs ran at the same time on one GPU: {overlapping} ({jobs})"
    out = proc.stdout + proc.stderr
    assert "grpoflow: at most 1 GPU(s) in use at once on this machine: gpu = 1" in out, out[-3000:]


def dry_run(tmp_path: Path, profile: list[str], gpus: int, *extra: str) -> str:
    wd = make_workdir(tmp_path)
    proc = snakemake([*profile, *RECIPE_004, "-n", *extra], wd, env=machine(tmp_path, gpus), timeout=300)
    return proc.stdout + proc.stderr


def gpu_requests(out: str) -> list[str]:
    """The gpu= of each job's resources line in the dry-run's listing."""
    lines = [line for line in out.splitlines() if line.strip().startswith("resources:") and " gpu=" in line]
    return [line.split(" gpu=")[1].split(",")[0] for line in lines]


@pytest.mark.parametrize(
    "gpus, extra, line, requested",
    [
        (
            1,
            [],
            "at most 1 GPU(s) in use at once on this machine: gpu = 1 (the GPUs visible here: nvidia-smi -L lists 1)",
            "1",
        ),
        (2, ["--resources", "gpu=1"], "at most 1 GPU(s) in use at once on this machine: gpu = 1 (--resources)", "1"),
        (0, [], "GPU jobs are not held apart on this machine: gpu = 0", "0"),
    ],
    ids=["one-gpu", "resources-override", "cpu-machine"],
)
def test_the_local_dry_run_says_how_many_gpu_jobs_run_at_once(tmp_path, gpus, extra, line, requested):
    out = dry_run(tmp_path, LOCAL_PROFILE, gpus, *extra)
    assert f"grpoflow: {line}" in out, out[-3000:]
    assert gpu_requests(out) == [requested] * 3, out[-3000:]


def test_under_the_slurm_profile_gpu_requests_stay_whole_on_a_login_node_without_gpus(tmp_path):
    """The scheduler places SLURM jobs: no global gpu there, so a login node's 0 GPUs never cut sbatch's request."""
    out = dry_run(tmp_path, SLURM_PROFILE, 0)
    assert "GPU(s) in use at once" not in out and "not held apart" not in out, out[-3000:]
    assert gpu_requests(out) == ["1"] * 3, out[-3000:]


@pytest.mark.parametrize(
    "cuda, expected",
    [
        (None, 2),
        ("", 0),
        ("1", 1),
        ("0,1,2,3", 2),  # CUDA enumerates no more devices than exist
        ("GPU-8a1f2c3d-0000-0000-0000-000000000000,1", 2),
        ("0,-1,1", 1),  # CUDA stops at the first invalid entry
        ("-1", 0),
        ("NoDevFiles", 0),  # SLURM's value in a job without GPUs
    ],
)
def test_the_gpu_count_is_what_this_machines_jobs_see(tmp_path, cuda, expected):
    """Two GPUs that the stand-in nvidia-smi lists, under each CUDA_VISIBLE_DEVICES the jobs would inherit."""
    from grpoflow.local_gpus import visible_gpus

    env = machine(tmp_path, gpus=2)
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    assert visible_gpus(env)[0] == expected


def test_a_missing_or_hung_nvidia_smi_counts_no_gpu(tmp_path, monkeypatch):
    from grpoflow import local_gpus

    assert local_gpus.visible_gpus({"PATH": str(tmp_path)}) == (0, "nvidia-smi not found")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 30\n")
    smi.chmod(0o755)
    monkeypatch.setattr(local_gpus, "SMI_TIMEOUT_S", 1)
    assert local_gpus.visible_gpus({"PATH": str(tmp_path)}) == (0, "nvidia-smi -L did not answer within 1 s")
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert local_gpus.visible_gpus({"PATH": str(tmp_path)}) == (0, "nvidia-smi -L failed (exit 9)")
