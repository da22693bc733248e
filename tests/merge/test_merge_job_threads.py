"""The CPU threads of the merge job, in the project's own `merge_checkpoint` rule run by Snakemake.

The merge computes on the host CPU (PEFT's merge, verl's merger, the load check), and Snakemake exports the six
thread variables = the rule's threads in its job: a rule without `threads:` runs 1 thread, whatever CPUs SLURM gave
the job (profiles/slurm asked for 16). The job here is the project's rule on a genuine TRL checkpoint (the files
train_grpo leaves stand in for the rest: `--allowed-rules merge_checkpoint`), with `--cores 16` as a 16-CPU node
gives it; the merge record (grpoflow_merge.json) states the thread variables and torch's thread count of the job's
process. The SLURM side: the same rule, dry-run through profiles/slurm, asks sbatch for as many CPUs (a dry-run caps threads at
its --cores, 1, so only the request is shown)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from grpoflow_testing import REPO, make_workdir, snakemake
from mergekit import trl_config

pytestmark = [pytest.mark.slow]

THREADS = 16  # rules/train.smk MERGE_CPUS


def torch_threads_with(value: int) -> int:
    """torch.get_num_threads() on this machine with OMP_NUM_THREADS = MKL_NUM_THREADS = value (MKL caps it at the
    machine's physical cores: 2 on the CI machine)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(value), "MKL_NUM_THREADS": str(value)}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


def test_the_merge_job_runs_the_threads_it_asks_slurm_for(tmp_path, trl_full_run, tiny_base):
    wd = make_workdir(tmp_path)
    config = trl_config(tiny_base, 0)  # the run trl_full_run trained
    (wd / "t.yaml").write_text(yaml.safe_dump(config))
    # What train_grpo leaves (mergekit.train_trl ran grpoflow's TRL backend): the SFT record, marker, checkpoints.
    results = wd / "results" / "t"
    shutil.copytree(trl_full_run / "checkpoints", results / "checkpoints")
    for name in ("sft.json", "training_complete.json", "train_metrics.jsonl"):
        shutil.copy2(trl_full_run / name, results / name)
    target = ["results/t/model", "--configfile", "t.yaml", "--allowed-rules", "merge_checkpoint"]

    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "SLURM_JOB_ID"}
    snakemake([*target, "--cores", str(THREADS)], wd, env=env)
    compute = json.loads((results / "model" / "grpoflow_merge.json").read_text())["compute"]
    assert compute["kernel_env"]["OMP_NUM_THREADS"] == compute["kernel_env"]["MKL_NUM_THREADS"] == str(THREADS)
    assert compute["torch"]["threads"] == torch_threads_with(THREADS), compute

    plan = snakemake([*target, "-n", "-f", "--profile", str(REPO / "profiles" / "slurm")], wd).stdout
    job = plan.split("rule merge_checkpoint:", 1)[1].split("\n\n", 1)[0]
    assert re.search(rf"cpus_per_task={THREADS}\b", job), job  # sbatch --cpus-per-task
