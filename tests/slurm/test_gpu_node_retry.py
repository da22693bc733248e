"""A failed GPU-node check (grpoflow.gpucheck) through profiles/slurm on the local SLURM (tests/slurm/start.sh: two
slurmd nodes): the retry goes to another node (sbatch --exclude, with the site's default-resources slurm_extra
kept), and the same failure on a second node ends the run with a one-CPU retry that fails at once naming both.
The experiment asks for SIGTERM ahead of its time limit as the shipped recipe-004 config does
(resources.term_before_limit_s, the profile's pointer for --signal): both GPU attempts carry it, and the retry
keeps its --exclude (a --signal under the profile's set-resources replaced the rule's slurm_extra, and with it the
retry's exclusion)."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from grpoflow_testing import (
    REPO,
    load_yaml,
    make_workdir,
    slurm_job,
    snakemake_slurm,
    submitted_jobs,
    verl_vllm_overlay,
)

from grpoflow import gpucheck

pytestmark = [pytest.mark.slurm]

EXP = "gpu-retry"
# A site flag a user keeps in the profile's default-resources; `--nice` shows in `scontrol show job` as Nice=.
SITE_EXTRA = "--nice=7"
# SIGTERM ahead of the time limit, as the shipped recipe-004 config asks for it.
SHIPPED_LEAD = load_yaml(REPO / "config" / "qwen2.5-math-1.5b-lora-binary.yaml")["defaults"]["resources"][
    "term_before_limit_s"
]


def test_a_failed_gpu_check_is_retried_on_another_node_then_fails_fast(local_slurm, tiny_base, tmp_path):
    """Each node's GPUs are in Exclusive_Process mode (a stand-in nvidia-smi on PATH: the local SLURM's GPUs are
    character devices). Attempt 1 (1 GPU) fails its check on node A; attempt 2 asks for the same GPU with
    --exclude=A and the site's --nice, and fails the same way on node B; attempt 3 is not the node's fault: one CPU,
    no GPU, fails at once naming both nodes."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '0, 580.82.07, Exclusive_Process'\n")
    (fake / "nvidia-smi").chmod(0o755)
    overlay = verl_vllm_overlay(
        tmp_path / "verl.yaml",
        EXP,
        str(tiny_base),
        verl={"env": {"GRPOFLOW_SKIP_ENV_CHECK": 1}},
        resources={"term_before_limit_s": SHIPPED_LEAD},
    )
    cfg = yaml.safe_load(overlay.read_text())
    cfg["evaluation"]["backend"] = "transformers"
    overlay.write_text(yaml.safe_dump(cfg))
    # The profile's default-resources as a user's site would extend them (given on the command line, which replaces
    # the profile's list: so all of it).
    defaults = {**load_yaml(REPO / "profiles" / "slurm" / "config.yaml")["default-resources"]}
    defaults["slurm_extra"] = repr(SITE_EXTRA)
    wd = make_workdir(tmp_path)
    target = f"results/{EXP}/training_complete.json"
    proc = snakemake_slurm(
        [target, "--configfile", str(overlay), "--retries", "2", "--verbose"]  # --verbose: the sbatch calls
        + ["--default-resources", *(f"{k}={v}" for k, v in defaults.items())],
        wd,
        env={"PATH": f"{fake}:{os.environ['PATH']}"},
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    jobs = submitted_jobs(out)
    assert proc.returncode != 0 and len(jobs) == 3, out[-4000:]
    first, elsewhere, fail_fast = (slurm_job(j) for j in jobs)
    node_a, node_b = first["NodeList"], elsewhere["NodeList"]
    assert first["ExcNodeList"] == "(null)" and first.get("TresPerJob") == "gres:gpu:1", first
    assert elsewhere["ExcNodeList"] == node_a != node_b and elsewhere.get("TresPerJob") == "gres:gpu:1", elsewhere
    assert first["Nice"] == elsewhere["Nice"] == fail_fast["Nice"] == "7", (first, elsewhere, fail_fast)
    assert "TresPerJob" not in fail_fast and fail_fast["TRES"].startswith("cpu=1,mem=1000M,node=1"), fail_fast
    assert fail_fast["TimeLimit"] == "00:05:00", fail_fast
    calls = [line for line in out.splitlines() if "sbatch call: " in line]
    assert len(calls) == 3, calls
    signal = f"--signal=TERM@{SHIPPED_LEAD}"
    assert signal in calls[0].split() and signal in calls[1].split(), calls  # both GPU attempts, --exclude kept
    assert "--signal" not in calls[2], calls[2]  # the one-CPU retry fails at once
    assert "set-resources gives rule train_grpo its own slurm_extra" not in out

    record = [json.loads(line) for line in gpucheck.record_path(wd / target).read_text().splitlines()]
    assert [(r["node"], r["kind"]) for r in record] == [(node_a, "compute-mode"), (node_b, "compute-mode")], record
    log = (wd / "logs" / "train_grpo" / f"{EXP}.log").read_text()
    assert (
        log.rstrip()
        .splitlines()[-1]
        .startswith(
            f"grpoflow: error: not retried on a GPU node: the same GPU check failed on nodes {node_a} and {node_b} (train_grpo (backend verl): compute mode GPU 0: Exclusive_Process"
        )
    ), log[-2000:]
