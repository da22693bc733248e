"""The node-shape check (grpoflow.slurm_nodes) against the local SLURM's real nodes (tests/slurm/start.sh: 2 nodes
of 96 CPUs, 512000 MB, gpu:h100:8 in partition gpu): a request that fits passes, one that does not is refused
before anything is submitted, in one line naming the config key."""

from __future__ import annotations

import pytest
import yaml
from grpoflow_testing import SHORT_CONFIG, make_workdir, snakemake_slurm, submitted_jobs

from grpoflow.errors import ConfigError
from grpoflow.slurm_nodes import Request, check, query_nodes

pytestmark = [pytest.mark.slurm]

KEYS = {
    "nodes": "experiments.e.resources.nodes",
    "cpus": "experiments.e.resources.cpus_per_task",
    "mem_mb": "experiments.e.resources.mem_mb",
    "gpus": "experiments.e.resources.gpus_per_node",
}


def request(**kw) -> Request:
    return Request(
        **{
            "job": "rule train_grpo (e)",
            "partition": "gpu",
            "nodes": 1,
            "cpus": 96,
            "mem_mb": 512000,
            "gpus": 8,
            "keys": KEYS,
            **kw,
        }
    )


def test_sinfo_reads_the_local_clusters_node_shapes(local_slurm):
    nodes, default = query_nodes()
    assert default == "gpu"
    assert sorted(n.name for n in nodes) == local_slurm["nodes"]
    assert {(n.partition, n.cpus, n.mem_mb, n.gpus) for n in nodes} == {("gpu", 96, 512000, 8)}


def test_a_job_that_fits_passes_and_one_that_does_not_names_its_key(local_slurm):
    nodes, default = query_nodes()
    check([request(), request(nodes=2), request(partition=None, cpus=8, gpus=1)], nodes, default)
    with pytest.raises(
        ConfigError,
        match=r"asks for 240 CPUs per node but the largest node of partition gpu has 96 \(sinfo\): lower experiments.e.resources.cpus_per_task$",
    ):
        check([request(cpus=240)], nodes, default)
    with pytest.raises(ConfigError, match=r"16 GPUs .* has 8 .*lower experiments.e.resources.gpus_per_node$"):
        check([request(gpus=16)], nodes, default)
    with pytest.raises(
        ConfigError, match=r"asks for 3 nodes .* has 2 such node\(s\) \(sinfo\): lower experiments.e.resources.nodes"
    ):
        check([request(nodes=3)], nodes, default)
    with pytest.raises(ConfigError, match=r"partition 'cpu' does not exist here \(sinfo lists gpu\)"):
        check([request(partition="cpu")], nodes, default)


def test_snakemake_refuses_before_submitting_a_job_no_node_can_hold(local_slurm, tmp_path):
    """The shortened default with one experiment asking for 240 CPUs per task (more than common 8-GPU nodes have,
    and more than the local nodes' 96): the run stops at onstart, nothing reaches sbatch."""
    wd = make_workdir(tmp_path)
    (tmp_path / "too-big.yaml").write_text(
        yaml.safe_dump({"experiments": {"tiny-arith-seed2": {"resources": {"cpus_per_task": 240}}}})
    )
    proc = snakemake_slurm(
        ["--configfile", *SHORT_CONFIG[1:], str(tmp_path / "too-big.yaml")], wd, timeout=300, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = "grpoflow: rule train_grpo (tiny-arith-seed2) asks for 240 CPUs per node but the largest node of partition gpu has 96 (sinfo): lower experiments.tiny-arith-seed2.resources.cpus_per_task (or GRPOFLOW_SKIP_PARTITION_CHECK=1 to skip this check)"
    assert line in out.splitlines(), out[-3000:]
    assert submitted_jobs(out) == [] and "Traceback" not in out


def test_snakemake_passes_the_check_when_every_job_fits(local_slurm, tmp_path):
    """Only the local data rules and the tiny model's SLURM job: the check runs and passes, the job is submitted."""
    wd = make_workdir(tmp_path)
    proc = snakemake_slurm(["resources/demo/tiny-qwen3", "--configfile", *SHORT_CONFIG[1:]], wd, timeout=600)
    out = proc.stdout + proc.stderr
    assert (
        "grpoflow: node-shape check passed: 1 job(s) fit the partition's nodes, time limits and GPU types (sinfo)"
        in out
    ), out[-3000:]
    assert len(submitted_jobs(out)) == 1


def test_a_hidden_partition_is_checked_not_refused(local_slurm):
    """Issue 30 item 6: a partition created Hidden=YES takes `sbatch -p` jobs but plain sinfo omits it for an
    ordinary user (root sees it anyway: sinfo runs here as `nobody`, as a site's users run it); the check reads it
    (sinfo -a) and holds the request against its nodes."""
    import os
    import shutil
    import subprocess

    from grpoflow_testing import unavailable

    if os.geteuid() != 0 or not shutil.which("runuser"):
        unavailable("needs root and runuser to run sinfo as an ordinary user")

    def as_user(argv, **kw):
        return subprocess.run(["runuser", "-u", "nobody", "--", *argv], **kw)

    name = f"gfhidden{os.getpid()}"
    proc = subprocess.run(
        ["scontrol", "create", f"PartitionName={name}", "Nodes=ALL", "Hidden=YES", "State=UP"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        unavailable(f"scontrol create partition failed: {proc.stderr.strip()}")
    try:
        nodes, _ = query_nodes(run=as_user)
        assert {n.partition for n in nodes} >= {"gpu", name}
        check([request(partition=name)], nodes, "gpu")
        with pytest.raises(ConfigError, match=rf"16 GPUs .* largest node of partition {name} has 8"):
            check([request(partition=name, gpus=16)], nodes, "gpu")
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={name}"], capture_output=True)
