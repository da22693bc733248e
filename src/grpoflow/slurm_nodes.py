"""Can any node of the partition hold each job? Asked of the real SLURM before anything is submitted.

sbatch accepts some impossible requests and leaves them pending forever (or rejects them one by one after
the pipeline's earlier jobs ran): e.g. ``cpus_per_task: 240`` on nodes with 224 CPUs, or 8 GPUs on a partition
of 4-GPU nodes. Before the first submission (Snakemake's ``onstart``, only with the SLURM executor, never in a
dry-run or with the local profile) this reads what the partition's nodes hold with
``sinfo -h -N -p PART -o '%N|%P|%c|%m|%G'`` (CPUs, memory in MB, GRES) and refuses, in one line naming the config
key, a job no node (or not enough nodes, for multi-node jobs) can hold, a time limit above the partition's
(``%l``) and a GPU type it does not have. grpoflow.preflight runs it with its other start checks.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from grpoflow.errors import ConfigError

SINFO_FORMAT = "%N|%P|%c|%m|%G|%l"

# GPU memory of a card as sold (GB), by the GRES type sites commonly name it; a type not listed (or ambiguous:
# a100 comes with 40 or 80 GB) is not compared with resources.gpu_mem_gb.
GPU_TYPE_GB = {"h100": 80, "h200": 141, "b200": 180, "gh200": 96, "l40s": 48, "l40": 48, "a40": 48, "a10": 24, "l4": 24}


@dataclass(frozen=True)
class Node:
    name: str
    partition: str
    cpus: int
    mem_mb: int
    gpus: int
    gpu_types: tuple[str, ...] = ()  # lower-case GRES types ('h100'); empty: untyped
    time_limit_min: int | None = None  # the partition's MaxTime (sinfo %l); None: unlimited/unknown


@dataclass(frozen=True)
class Request:
    """What one job asks of each of its nodes, and where each number comes from (config keys)."""

    job: str  # e.g. "train_grpo (experiment qwen3-32b)"
    partition: str | None  # None: the cluster's default partition
    nodes: int
    cpus: int  # per node (cpus_per_task × tasks per node)
    mem_mb: int  # per node (--mem)
    gpus: int  # per node
    keys: dict  # "nodes"/"cpus"/"mem_mb"/"gpus"/"runtime"/"gpu_type"/"gpu_mem_gb" -> config key that sets it
    runtime_min: int | None = None  # the longest time limit any attempt asks for
    gpu_type: str | None = None  # a GRES type it asks for (gpu_model, gres gpu:TYPE:N)
    gpu_mem_gb: float | None = None  # the GPU size its config assumes (resources.gpu_mem_gb)


def gpu_count(gres: str) -> int:
    """GPUs in a sinfo %G field: 'gpu:h100:8(S:0-1)', 'gpu:8', 'gpu:a100:4,shard:8', '(null)'."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        parts = re.sub(r"\(.*\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def gpu_types(gres: str) -> tuple[str, ...]:
    """GRES types in a sinfo %G field: 'gpu:h100:8(S:0-1)' -> ('h100',); 'gpu:8' -> ()."""
    out = []
    for item in re.split(r",(?![^()]*\))", gres or ""):
        parts = re.sub(r"\(.*\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) == 3:
            out.append(parts[1].lower())
    return tuple(sorted(set(out)))


def parse_time_limit(text: str) -> int | None:
    """Minutes in a SLURM time limit as sinfo %l prints it ('infinite', '1-00:00:00', '2:00:00', '30:00' is
    minutes:seconds, '90' minutes); None when unlimited or unknown."""
    text = (text or "").strip().lower()
    if not text or text in ("infinite", "unlimited", "n/a", "none"):
        return None
    days, _, rest = text.rpartition("-")
    try:
        d = int(days) if days else 0
        parts = [int(p) for p in rest.split(":")]
    except ValueError:
        return None
    if days:  # days-hours[:minutes[:seconds]]
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = 0, parts[0], 0
    return d * 1440 + h * 60 + m + (1 if s else 0)


def parse_sinfo(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, part, cpus, mem, rest = line.split("|", 4)
        gres, _, limit = rest.rpartition("|") if rest.count("|") else (rest, "", "")
        nodes.append(
            Node(
                name,
                part.rstrip("*"),
                int(cpus.rstrip("+")),
                int(re.sub(r"\D.*", "", mem) or 0),
                gpu_count(gres),
                gpu_types(gres),
                parse_time_limit(limit),
            )
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
        limits = [n.time_limit_min for n in pool]
        if req.runtime_min and None not in limits and req.runtime_min > max(limits):
            raise ConfigError(
                f"{req.job} asks for {req.runtime_min} min but partition {part} allows at most {max(limits)} min (sinfo %l): lower {req.keys['runtime']} (a longer run resumes across attempts: the profile's retries)"
            )
        if req.gpus and req.gpu_type:
            typed = [n for n in pool if req.gpu_type.lower() in n.gpu_types]
            if not typed:
                have = sorted({t for n in pool for t in n.gpu_types}) or ["untyped"]
                raise ConfigError(
                    f"{req.job} asks for GPU type {req.gpu_type} but partition {part} has {', '.join(have)} (sinfo %G): change {req.keys['gpu_type']}"
                )
            pool = typed
        if req.gpus and req.gpu_mem_gb:
            known = {t: GPU_TYPE_GB[t] for n in pool for t in n.gpu_types if t in GPU_TYPE_GB}
            if known and all(n.gpu_types and all(t in known for t in n.gpu_types) for n in pool):
                largest = max(known.values())
                if req.gpu_mem_gb > largest:
                    cards = ", ".join(f"{t} ({gb} GB)" for t, gb in sorted(known.items()))
                    raise ConfigError(
                        f"{req.job}: {req.keys['gpu_mem_gb']} = {req.gpu_mem_gb:g} but partition {part}'s GPUs are {cards} (sinfo %G): set it to {largest} (the memory check assumes it) or use a partition with larger GPUs"
                    )
        fit = [n for n in pool if n.cpus >= req.cpus and n.mem_mb >= req.mem_mb and n.gpus >= req.gpus]
        if len(fit) < req.nodes:
            raise ConfigError(
                f"{req.job} asks for {req.nodes} nodes of {req.cpus} CPUs, {req.mem_mb} MB, {req.gpus} GPUs but partition {part} has {len(fit)} such node(s) (sinfo): lower {req.keys['nodes']} or the per-node request"
            )


def job_request(job, profile_key: str, exp_resources: dict | None = None) -> Request:
    """A Snakemake job's request (from its evaluated resources). ``profile_key`` names where a rule without
    config resources gets them (the profile's set-resources/default-resources). ``exp_resources``: train_grpo's
    experiment ``resources:`` (its retries may ask for ``retry_runtime``, longer than the first attempt's)."""
    r = job.resources
    nodes = int(r.get("nodes", 1) or 1)
    per_node_tasks = int(r.get("tasks_per_node", 1) or 1) if r.get("mpi") else 1
    cpus = int(r.get("cpus_per_task", job.threads) or 1) * per_node_tasks
    gpus = int(r.get("gpu", 0) or 0)
    gpu_type = str(r.get("gpu_model") or "") or None
    if r.get("gres"):
        gpus = gpu_count(str(r["gres"]))
        gpu_type = (gpu_types(str(r["gres"])) or (gpu_type,))[0]
    runtime = int(r.get("runtime", 0) or 0) or None
    wc = ", ".join(f"{v}" for v in job.wildcards_dict.values())
    name = f"rule {job.rule.name}" + (f" ({wc})" if wc else "")
    gpu_mem_gb = None
    profile = {
        k: f"{profile_key} {job.rule.name}: {v}"
        for k, v in (
            ("nodes", "nodes"),
            ("cpus", "cpus_per_task"),
            ("mem_mb", "mem_mb"),
            ("gpus", "gpu"),
            ("runtime", "runtime"),
            ("gpu_type", "gpu_model"),
        )
    }
    if job.rule.name == "train_grpo":
        base = f"experiments.{job.wildcards_dict['experiment']}.resources"
        keys = {
            **profile,
            "nodes": f"{base}.nodes",
            "cpus": f"{base}.cpus_per_task",
            "mem_mb": f"{base}.mem_mb",
            "gpus": f"{base}.gpus_per_node",
            "runtime": f"{base}.runtime",
            "gpu_mem_gb": f"{base}.gpu_mem_gb",
        }
        if exp_resources:
            retry = exp_resources.get("retry_runtime")
            if retry and retry > (runtime or 0):
                runtime, keys["runtime"] = retry, f"{base}.retry_runtime"
            gpu_mem_gb = exp_resources.get("gpu_mem_gb")
    elif job.rule.name == "evaluate":
        keys = {
            **profile,
            "nodes": "evaluation.resources",
            "cpus": "evaluation.resources.cpus_per_task",
            "mem_mb": "evaluation.resources.mem_mb",
            "gpus": "evaluation.resources.gpus",
            "runtime": "evaluation.resources.runtime",
        }
    else:
        keys = profile
    return Request(
        name,
        r.get("slurm_partition") or None,
        nodes,
        cpus,
        int(r.get("mem_mb", 0) or 0),
        gpus,
        keys,
        runtime_min=runtime,
        gpu_type=gpu_type,
        gpu_mem_gb=gpu_mem_gb,
    )


def check_requests(requests: list[Request], nodes: list[Node], default_partition: str | None) -> list[str]:
    """Every request checked (check()); the failures, one line each."""
    failures = []
    for req in requests:
        try:
            check([req], nodes, default_partition)
        except ConfigError as err:
            failures.append(str(err))
    return failures
