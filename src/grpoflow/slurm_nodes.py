"""Can any node of the partition hold each job? Asked of the real SLURM before anything is submitted.

sbatch accepts some impossible requests and leaves them pending forever (or rejects them one by one after
the pipeline's earlier jobs ran): e.g. ``cpus_per_task: 240`` on nodes with 224 CPUs, or 8 GPUs on a partition
of 4-GPU nodes. Before the first submission (Snakemake's ``onstart``, only with the SLURM executor, never in a
dry-run or with the local profile) this reads what the partition's nodes hold with
``sinfo -h -N -a -o '%N|%P|%c|%m|%G|%l'`` (CPUs, memory in MB, GRES; ``-a``: hidden partitions too; ``-M CLUSTER``
for a job sent to another cluster) and refuses, in one line naming the config key, a job no node (or not enough
nodes, for multi-node jobs) can hold, a time limit above the partition's (``%l``), a GPU type it does not have and
a ``resources.gpu_mem_gb`` larger than the cards a job may land on. A job for several partitions (``gpu,gpu-long``)
is refused only when none holds it. grpoflow.preflight runs it with its other start checks.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from grpoflow.errors import ConfigError

SINFO_FORMAT = "%N|%P|%c|%m|%G|%l"

# GPU memory of a card as sold (GB), by model. Where one model name covers several sizes the largest is listed
# (h100: 80 GB SXM/PCIe, 94 GB NVL; a100: 40 or 80; gh200: 96 or 144), so that the check never refuses a size the
# card may have; a size or variant in the type's own name wins (gpu_type_gb). A model not listed is not compared
# with resources.gpu_mem_gb.
GPU_TYPE_GB = {
    "h100": 94,
    "h200": 141,
    "b200": 180,
    "gh200": 144,
    "a100": 80,
    "l40s": 48,
    "l40": 48,
    "a40": 48,
    "a10": 24,
    "l4": 24,
}
# Variants named in a type (NVML's "NVIDIA H100 NVL"), without a size in the name.
GPU_VARIANT_GB = {("h100", "nvl"): 94, ("h100", "sxm"): 80, ("h100", "pcie"): 80, ("h200", "nvl"): 141}


_MODEL_WORD = re.compile(rf"({'|'.join(sorted(GPU_TYPE_GB, key=len, reverse=True))})(nvl|sxm\d*|pcie)?", re.IGNORECASE)


def _words(name: str) -> list[str]:
    return re.split(r"[^a-z0-9]+", (name or "").lower())


def gpu_model(name: str) -> str | None:
    """The GPU model in a GRES type or an NVML name, lower-case ('h100'), or None when none is recognised:
    'h100', 'H100', 'h100nvl', 'NVIDIA H100 80GB HBM3', 'nvidia_h100_80gb_hbm3', 'a100-sxm4-80gb'."""
    return next((m.group(1) for w in _words(name) if (m := _MODEL_WORD.fullmatch(w))), None)


def gpu_type_gb(name: str) -> int | None:
    """GB of memory a card of this GRES type / NVML name has at most (above); None when the model is unknown."""
    model = gpu_model(name)
    if model is None:
        return None
    words = _words(name)
    sized = [int(m.group(1)) for w in words if (m := re.fullmatch(r"(\d+)gb", w))]
    if sized:  # never above the model's largest: 'NVIDIA GH200 480GB' counts the CPU's memory too
        return min(sized[0], GPU_TYPE_GB[model])
    variants = [m.group(2) for w in words if (m := _MODEL_WORD.fullmatch(w)) and m.group(2)]
    variants += [w for w in words if w in ("nvl", "pcie") or w.startswith("sxm")]
    for v in variants:
        if (model, re.sub(r"\d+$", "", v)) in GPU_VARIANT_GB:
            return GPU_VARIANT_GB[(model, re.sub(r"\d+$", "", v))]
    return GPU_TYPE_GB[model]


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
    cluster: str | None = None  # sbatch --clusters/-M (the plugin's `cluster`/`clusters` resource, or slurm_extra)
    constraint: str | None = None  # sbatch -C: narrows the nodes in a way not evaluated here


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
        if line.count("|") < 4:  # blank, or the "CLUSTER: name" header sinfo -M prints even with -h
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


def query_nodes(run=subprocess.run, cluster: str | None = None) -> tuple[list[Node], str | None]:
    """Every node of every partition, hidden ones included (-a: sbatch -p reaches them), of ``cluster`` (-M; None:
    the local one), and the default partition's name (marked '*' by sinfo)."""
    argv = ["sinfo", "-h", "-N", "-a", *(["-M", cluster] if cluster else []), "-o", SINFO_FORMAT]
    out = run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
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
    """Raise ConfigError (one line) for the first request that no node of its partition can hold. A request for
    several partitions (``gpu,gpu-long``: SLURM starts it in whichever can) is refused only when none can hold it."""
    for req in requests:
        parts = [p.strip() for p in (req.partition or default_partition or "").split(",") if p.strip()] or [None]
        errors = []
        for part in parts:
            try:
                _check_partition(req, part, nodes)
                break
            except ConfigError as err:
                errors.append(str(err).removeprefix("config error: "))
        else:
            raise ConfigError(errors[0] if len(errors) == 1 else "; ".join(errors))


def _check_partition(req: Request, part: str | None, nodes: list[Node]) -> None:
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
        known = {t: gpu_type_gb(t) for n in pool for t in n.gpu_types if gpu_type_gb(t)}
        if known and all(n.gpu_types and all(t in known for t in n.gpu_types) for n in pool):
            largest = max(known.values())
            if req.gpu_mem_gb > largest:
                cards = ", ".join(f"{t} ({gb} GB)" for t, gb in sorted(known.items()))
                raise ConfigError(
                    f"{req.job}: {req.keys['gpu_mem_gb']} = {req.gpu_mem_gb:g} but partition {part}'s GPUs are {cards} (sinfo %G): set it to {largest} (the memory check assumes it) or use a partition with larger GPUs"
                )
            # SLURM may start the job on any node of the partition: every node's smallest card must hold it,
            # unless the request narrows the nodes (gpu_model / typed gres above, or a constraint).
            small = sorted(t for t, gb in known.items() if gb < req.gpu_mem_gb)
            if small and not req.constraint:
                fits = sorted({t for t, gb in known.items() if gb >= req.gpu_mem_gb})
                names = [n.name for n in pool if set(n.gpu_types) & set(small)]
                shown = ", ".join(names[:4]) + (f" +{len(names) - 4} more" if len(names) > 4 else "")
                raise ConfigError(
                    f"{req.job}: {req.keys['gpu_mem_gb']} = {req.gpu_mem_gb:g} but partition {part} also has {', '.join(f'{t} ({known[t]} GB)' for t in small)} on {shown} (sinfo %G), where the job may start: ask for {' or '.join(fits)} ({req.keys.get('gpu_type', 'gpu_model')}: {fits[0]}, or a constraint in the profile) or set {req.keys['gpu_mem_gb']} to {min(known[t] for t in small)}"
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
    extra = str(r.get("slurm_extra") or "")
    m = re.search(r"(?:^|[\s'\"])(?:-M\s*|--clusters?[=\s])['\"]?([^\s'\"]+)", extra)
    cluster = str(r.get("cluster") or r.get("clusters") or r.get("slurm_cluster") or "") or (m.group(1) if m else None)
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
        cluster=cluster,
        constraint=str(r.get("constraint") or "") or None,
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
