"""Checks before anything queues (grpoflow.preflight, Snakemake's onstart) through profiles/slurm on the local SLURM
(tests/slurm/start.sh): a cluster environment that lacks vLLM, a time limit beyond the partition's, a GPU type the
partition lacks and a checkpoint dir on a filesystem too small for the kept checkpoints are each refused in one
line naming the config key, before any sbatch."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import (
    SHORT_CONFIG,
    make_workdir,
    snakemake_slurm,
    submitted_jobs,
    unavailable,
    verl_vllm_overlay,
)

from grpoflow.slurm_nodes import Request, check, query_nodes

pytestmark = [pytest.mark.slurm]

EXP = "env-verl"


def verl_overlay(tmp_path: Path, **exp_extra) -> Path:
    """One verl experiment (1 GPU) on the shipped GSM8K sample, evaluated with vLLM. Nothing runs: every test
    here is refused at onstart, so the start model need not exist."""
    return verl_vllm_overlay(tmp_path / "verl.yaml", EXP, str(tmp_path / "no-such-start-model"), **exp_extra)


def refused(tmp_path: Path, args: list[str]) -> tuple[list[str], float]:
    """Run Snakemake through the SLURM profile; it must stop before any sbatch. Returns its grpoflow lines."""
    wd = make_workdir(tmp_path)
    started = time.monotonic()
    proc = snakemake_slurm(args, wd, timeout=300, check=False)
    seconds = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert submitted_jobs(out) == [] and "Traceback" not in out, out[-3000:]
    return [ln for ln in out.splitlines() if ln.startswith("grpoflow: ")], seconds


def test_a_cluster_env_without_vllm_is_refused_at_onstart(tmp_path):
    """cluster_env.python names an interpreter that has verl but not vLLM, TransferQueue or flash-attn (this venv):
    one line names them, the jobs that need them and the setting; no job is submitted."""
    py = sys.executable
    lines, _ = refused(
        tmp_path, ["--configfile", str(verl_overlay(tmp_path)), "--config", f"cluster_env={{python: {py}}}"]
    )
    env = [ln for ln in lines if ln.startswith("grpoflow: cluster_env.python: ")]
    assert len(env) == 1, lines
    assert env[0].startswith(f"grpoflow: cluster_env.python: {py} lacks flash-attn (for train_grpo ({EXP}): ")
    assert (
        f"vllm (verl[vllm]) (for evaluate ({EXP}, gsm8k_sample) +1 more: evaluation.backend: vllm; train_grpo ({EXP}): actor_rollout_ref.rollout.name=vllm)"
        in env[0]
    )
    assert "TransferQueue (verl[vllm])" in env[0] and "verl==0.9.1" not in env[0]


def test_an_interpreter_that_does_not_run_is_refused_naming_the_setting(tmp_path):
    missing = tmp_path / "nowhere" / "bin" / "python"
    lines, _ = refused(
        tmp_path, ["--configfile", str(verl_overlay(tmp_path)), "--config", f"cluster_env={{python: {missing}}}"]
    )
    assert any(
        ln.startswith(f"grpoflow: cluster_env.python: `{missing}` does not run on this host (exit 127") for ln in lines
    ), lines


def test_unset_cluster_env_is_refused_naming_it(tmp_path):
    lines, _ = refused(tmp_path, ["--configfile", str(verl_overlay(tmp_path))])
    assert any(ln.startswith("grpoflow: cluster_env (unset: Snakemake's own interpreter): ") for ln in lines), lines


@pytest.fixture
def short_partition(local_slurm):
    """A second partition on the local nodes with a 60-minute limit (removed afterwards)."""
    name = f"gfshort{os.getpid()}"
    proc = subprocess.run(
        ["scontrol", "create", f"PartitionName={name}", "Nodes=ALL", "MaxTime=60", "State=UP"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        unavailable(f"scontrol create partition failed: {proc.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={name}"], capture_output=True)


def test_sinfo_reads_the_partitions_time_limit_and_gpu_type(short_partition):
    nodes, _ = query_nodes()
    short = [n for n in nodes if n.partition == short_partition]
    assert short and {(n.time_limit_min, n.gpu_types) for n in short} == {(60, ("h100",))}
    keys = {"runtime": "experiments.e.resources.runtime", "gpu_type": "gpu_model", "gpu_mem_gb": "x.gpu_mem_gb"}
    req = Request("rule train_grpo (e)", short_partition, 1, 8, 1000, 8, keys, runtime_min=60, gpu_type="h100")
    check([req], nodes, None)
    with pytest.raises(
        Exception,
        match=r"asks for 61 min but partition \S+ allows at most 60 min \(sinfo %l\): lower experiments.e.resources.runtime",
    ):
        check([Request(**{**req.__dict__, "runtime_min": 61})], nodes, None)
    with pytest.raises(
        Exception, match=r"asks for GPU type a100 but partition \S+ has h100 \(sinfo %G\): change gpu_model"
    ):
        check([Request(**{**req.__dict__, "gpu_type": "a100"})], nodes, None)
    with pytest.raises(Exception, match=r"x.gpu_mem_gb = 141 but partition \S+'s GPUs are h100 \(94 GB\)"):
        check([Request(**{**req.__dict__, "gpu_mem_gb": 141})], nodes, None)


def test_a_job_longer_than_the_partitions_limit_is_refused_naming_resources_runtime(short_partition, tmp_path):
    """The shortened demo with one TRL experiment asking for 120 min on the 60-minute partition."""
    (tmp_path / "long.yaml").write_text(
        yaml.safe_dump({"experiments": {"tiny-arith-seed2": {"resources": {"runtime": 120}}}})
    )
    args = [
        "--configfile",
        *SHORT_CONFIG[1:],
        str(tmp_path / "long.yaml"),
        "--set-resources",
        f"train_grpo:slurm_partition={short_partition}",
    ]
    lines, _ = refused(tmp_path, args)
    line = f"grpoflow: rule train_grpo (tiny-arith-seed2) asks for 120 min but partition {short_partition} allows at most 60 min (sinfo %l): lower experiments.tiny-arith-seed2.resources.runtime (a longer run resumes across attempts: the profile's retries) (or GRPOFLOW_SKIP_PARTITION_CHECK=1 to skip this check)"
    assert line in lines, lines
    # retry_runtime counts too: the retries would ask for it.
    (tmp_path / "long.yaml").write_text(
        yaml.safe_dump({"experiments": {"tiny-arith-seed2": {"resources": {"runtime": 30, "retry_runtime": 90}}}})
    )
    lines, _ = refused(tmp_path, args)
    assert any(
        "asks for 90 min" in ln
        and ln.endswith(
            "lower experiments.tiny-arith-seed2.resources.retry_runtime (a longer run resumes across attempts: the profile's retries) (or GRPOFLOW_SKIP_PARTITION_CHECK=1 to skip this check)"
        )
        for ln in lines
    ), lines


@pytest.fixture
def small_fs(tmp_path):
    """A real 64 MiB filesystem (tmpfs; needs root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_checkpoint_dir_on_a_too_small_filesystem_is_refused(small_fs, tmp_path):
    """Qwen3-0.6B (architecture preset) with fp32 masters: 0.596 B × (4 + 8) B ≈ 7.15 GB a checkpoint; 2 kept + 1
    is ~21 GB on a 64 MiB filesystem. The environment check is skipped for this experiment (verl.env), so the
    disk line is the refusal."""
    overlay = verl_overlay(
        tmp_path,
        architecture="qwen3-0.6b",
        checkpoint_dir=str(small_fs / "ckpt"),
        verl={"env": {"GRPOFLOW_SKIP_ENV_CHECK": 1}},
        grpo={"total_steps": 4, "save_freq": 1, "max_checkpoints_to_keep": 2},
        resources={"mem_mb": 16000},
    )
    cfg = yaml.safe_load(overlay.read_text())
    cfg["evaluation"]["backend"] = "transformers"
    overlay.write_text(yaml.safe_dump(cfg))
    lines, _ = refused(tmp_path, ["--configfile", str(overlay)])
    disk = [ln for ln in lines if ln.startswith(f"grpoflow: experiments.{EXP}.checkpoint_dir {small_fs / 'ckpt'}: ")]
    assert len(disk) == 1, lines
    assert (
        "0.07 GB free on its filesystem, but grpo.max_checkpoints_to_keep + 1 = 3 checkpoints of ~7.15 GB (qwen3-0.6b (architecture: qwen3-0.6b), fp32 params + AdamW state) need 21 GB more"
        in disk[0]
    ), disk
    assert disk[0].endswith(
        f"point experiments.{EXP}.checkpoint_dir at a larger filesystem or free space; no grpo.max_checkpoints_to_keep fits here (1 keeps 2 during a save: 14 GB) (or GRPOFLOW_SKIP_DISK_CHECK=1 to skip this check)"
    )
