"""Can any node of the partition hold each job? Asked of the real SLURM before anything is submitted.

sbatch accepts some impossible requests and leaves them pending forever (or rejects them one by one after
the pipeline's earlier jobs ran): e.g. ``cpus_per_task: 240`` on nodes with 224 CPUs, or 8 GPUs on a partition
of 4-GPU nodes. Before the first submission (Snakemake's ``onstart``, only with the SLURM executor, never in a
dry-run or with the local profile) this reads what the partition's nodes hold with
``sinfo -h -N -p PART -o '%N|%P|%c|%m|%G'`` (CPUs, memory in MB, GRES) and refuses, in one line naming the config
key, a job no node (or not enough nodes, for multi-node jobs) can hold.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from grpoflow.errors import ConfigError

SINFO_FORMAT = "%N|%P|%c|%m|%G"


@dataclass(frozen=True)
class Node:
    name: str
    partition: str
    cpus: int
    mem_mb: int
    gpus: int


@dataclass(frozen=True)
class Request:
    """What one job asks of each of its nodes, and where each number comes from (config keys)."""

    job: str  # e.g. "train_grpo (experiment qwen3-32b)"
    partition: str | None  # None: the cluster's default partition
    nodes: int
    cpus: int  # per node (cpus_per_task × tasks per node)
    mem_mb: int  # per node (--mem)
    gpus: int  # per node
    keys: dict  # "nodes"/"cpus"/"mem_mb"/"gpus" -> config key that sets it


def gpu_count(gres: str) -> int:
    """GPUs in a sinfo %G field: 'gpu:h100:8(S:0-1)', 'gpu:8', 'gpu:a100:4,shard:8', '(null)'."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        parts = re.sub(r"\(.*\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def parse_sinfo(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, part, cpus, mem, gres = line.split("|", 4)
        nodes.append(
            Node(name, part.rstrip("*"), int(cpus.rstrip("+")), int(re.sub(r"\D.*", "", mem) or 0), gpu_count(gres))
        )
    return nodes


def query_nodes(run=subprocess.run) -> tuple[list[Node], str | None]:
    """Every node of every partition, and the default partition's name (marked '*' by sinfo)."""
    out = run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], capture_output=True, text=True, timeout=60, check=True).stdout
    default = next(
        (
            ln.split("|")[1].rstrip("*")
            for ln in out.splitlines()
            if ln.count("|") >= 4 and ln.split("|")[1].endswith("*")
        ),
        None,
    )
    return parse_sinfo(out), default


def check(requests: list[Request], nodes: list[Node], default_partition: str | None) -> None:
    """Raise ConfigError (one line) for the first request that no node of its partition can hold."""
    for req in requests:
        part = req.partition or default_partition
        pool = [n for n in nodes if n.partition == part]
        if not pool:
            known = sorted({n.partition for n in nodes})
            raise ConfigError(
                f"{req.job}: SLURM partition {part!r} does not exist here (sinfo lists {', '.join(known) or 'none'}): set slurm_partition in the profile (profiles/slurm/config.yaml)"
            )
        for field, unit in (("cpus", "CPUs"), ("mem_mb", "MB of memory"), ("gpus", "GPUs")):
            want = getattr(req, field)
            most = max(getattr(n, field) for n in pool)
            if want > most:
                raise ConfigError(
                    f"{req.job} asks for {want} {unit} per node but the largest node of partition {part} has {most} (sinfo): lower {req.keys[field]}"
                )
        fit = [n for n in pool if n.cpus >= req.cpus and n.mem_mb >= req.mem_mb and n.gpus >= req.gpus]
        if len(fit) < req.nodes:
            raise ConfigError(
                f"{req.job} asks for {req.nodes} nodes of {req.cpus} CPUs, {req.mem_mb} MB, {req.gpus} GPUs but partition {part} has {len(fit)} such node(s) (sinfo): lower {req.keys['nodes']} or the per-node request"
            )


def job_request(job, profile_key: str) -> Request:
    """A Snakemake job's request (from its evaluated resources). ``profile_key`` names where a rule without
    config resources gets them (the profile's set-resources/default-resources)."""
    r = job.resources
    nodes = int(r.get("nodes", 1) or 1)
    per_node_tasks = int(r.get("tasks_per_node", 1) or 1) if r.get("mpi") else 1
    cpus = int(r.get("cpus_per_task", job.threads) or 1) * per_node_tasks
    gpus = int(r.get("gpu", 0) or 0)
    if r.get("gres"):
        gpus = gpu_count(str(r["gres"]))
    wc = ", ".join(f"{v}" for v in job.wildcards_dict.values())
    name = f"rule {job.rule.name}" + (f" ({wc})" if wc else "")
    if job.rule.name == "train_grpo":
        base = f"experiments.{job.wildcards_dict['experiment']}.resources"
        keys = {
            "nodes": f"{base}.nodes",
            "cpus": f"{base}.cpus_per_task",
            "mem_mb": f"{base}.mem_mb",
            "gpus": f"{base}.gpus_per_node",
        }
    elif job.rule.name == "evaluate":
        keys = {
            "nodes": "evaluation.resources",
            "cpus": "evaluation.resources.cpus_per_task",
            "mem_mb": "evaluation.resources.mem_mb",
            "gpus": "evaluation.resources.gpus",
        }
    else:
        keys = {
            k: f"{profile_key} {job.rule.name}: {v}"
            for k, v in (("nodes", "nodes"), ("cpus", "cpus_per_task"), ("mem_mb", "mem_mb"), ("gpus", "gpu"))
        }
    return Request(name, r.get("slurm_partition") or None, nodes, cpus, int(r.get("mem_mb", 0) or 0), gpus, keys)


def check_workflow(workflow, log=print) -> None:
    """Snakemake's onstart hook: with the SLURM executor, check every job about to be submitted."""
    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or plugin.name != "slurm" or not workflow.is_main_process or workflow.dryrun:
        return
    if not shutil.which("sinfo"):
        log("grpoflow: node-shape check skipped: sinfo not found on this host (requests go to sbatch unchecked)")
        return
    try:
        nodes, default = query_nodes()
    except (subprocess.SubprocessError, OSError, ValueError) as err:
        log(f"grpoflow: node-shape check skipped: sinfo failed ({err})")
        return
    requests = [
        job_request(j, "the profile's set-resources/default-resources for")
        for j in workflow.dag.needrun_jobs()
        if not j.is_local
    ]
    check(requests, nodes, default)
    log(f"grpoflow: node-shape check passed: {len(requests)} job(s) fit the partition's nodes (sinfo)")
