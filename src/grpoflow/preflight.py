"""Checks on the login node before anything is submitted (Snakemake's ``onstart``; never in a dry-run).

What they replace: a wrong or unset ``cluster_env`` found inside an 8-GPU job after its queue wait, three times
(the profile's ``retries``); a job longer than its partition's time limit that pends forever; a GPU type the
partition does not have; a checkpoint dir whose filesystem fills up at the third 393 GB checkpoint. Each takes
seconds here and needs no GPU:

- **environment** (every executor): each non-local plane that a job about to run uses (cluster: verl, vLLM,
  TransferQueue, flash-attn; tunix: Tunix, JAX) has its interpreter started once, exactly as the jobs start it
  (``cluster_env.python`` / ``activate``, grpoflow.deployment), and ``importlib.util.find_spec``s every module
  those jobs import (grpoflow.envcheck). Skipped under ``--sdm conda`` / ``apptainer`` (the environment is built
  or pulled per job) and for an experiment with ``verl.env.GRPOFLOW_SKIP_ENV_CHECK: 1``.
- **partition** (SLURM executor): the node shapes (grpoflow.slurm_nodes), each job's time limit against the
  partition's (``sinfo %l``; for train_grpo the larger of ``resources.runtime`` and ``resources.retry_runtime``),
  and the GPU type it asks for (``gpu_model``, a typed ``gres``, or ``resources.gpu_mem_gb`` above the
  partition's cards, or above its smallest card when the nodes are not narrowed), hidden partitions included, each
  of several (``gpu,gpu-long``), on the job's cluster (``-M``). Off with ``GRPOFLOW_SKIP_PARTITION_CHECK=1``.
- **disk** (every executor): free space on each checkpoint dir's filesystem against
  ``grpo.max_checkpoints_to_keep + 1`` checkpoints of the computed size (a resumed attempt holds one more before
  it rotates), less what the dir already holds; experiments on one filesystem add up.

Every failure is one line naming the config key; all are reported, then the run stops. What only a GPU node can
tell (the driver's CUDA version against the lock's, the GPUs' compute mode) is checked by the job itself, first
(grpoflow.gpucheck).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from grpoflow import envcheck
from grpoflow.deployment import CLUSTER, ENV_KEYS, LOCAL, TUNIX, JobEnv

# Each start check's own off switch (an environment variable set to 1), named in its refusals.
SKIP_PARTITION_CHECK = "GRPOFLOW_SKIP_PARTITION_CHECK"
ENV_TIMEOUT_S = 120  # starting an interpreter on a network filesystem can take a while; find_spec is milliseconds

# Modules are found, never imported (no CUDA initialisation), by the job's own interpreter; it prints what is
# missing as JSON. No grpoflow import: the cluster environment need not have it installed (PYTHONPATH has src/).
PROBE = (
    "import importlib.util as u, json, sys\n"
    "def found(m):\n"
    "    try:\n"
    "        return u.find_spec(m) is not None\n"
    "    except (ImportError, ValueError):\n"
    "        return False\n"
    "print(json.dumps({'python': sys.executable, 'missing': [m for m in sys.argv[1:] if not found(m)]}))\n"
)


@dataclass
class PlaneNeeds:
    """What the jobs about to run need from one plane's environment: module -> (package, {why: [job, ...]})."""

    modules: dict[str, tuple[str, dict[str, list[str]]]] = field(default_factory=dict)

    def add(self, needs: list[tuple[str, str, str]], job: str) -> None:
        for module, pkg, why in needs:
            self.modules.setdefault(module, (pkg, {}))[1].setdefault(why, []).append(job)

    def reasons(self, module: str) -> str:
        """'train_grpo (e): why; evaluate (m, b) +3 more: why'"""
        # Sorted: Snakemake's job order is not stable between runs, the message should be.
        groups = sorted((sorted(jobs), why) for why, jobs in self.modules[module][1].items())
        return "; ".join(
            f"{jobs[0]}{f' +{len(jobs) - 1} more' if len(jobs) > 1 else ''}: {why}" for jobs, why in groups
        )


def verl_overrides(exp: dict) -> dict[str, str]:
    """The few overrides of a verl experiment that decide what main_ppo imports (envcheck.train_verl_needs)."""
    ov = {"actor_rollout_ref.rollout.name": exp["verl"]["rollout"]["name"]}
    for text in exp["verl"].get("extra_overrides") or []:
        key, _, value = text.lstrip("+").partition("=")
        ov[key] = value.strip().strip("'\"")
    return ov


def job_needs(cfg, rule: str, wildcards: dict) -> tuple[str, str, list[tuple[str, str, str]]] | None:
    """(plane, job name, needs) of one job, or None for a local-plane job or one whose check is switched off."""
    if rule in ("train_grpo", "merge_checkpoint"):
        name = wildcards["experiment"]
        exp = cfg.experiment(name)
        backend = exp["backend"]
        job = f"{rule} ({name})"
        if backend == "verl":
            if rule == "merge_checkpoint":
                return CLUSTER, job, envcheck.NEEDS["merge-verl"]
            if str(exp["verl"]["env"].get("GRPOFLOW_SKIP_ENV_CHECK", "")).lower() in ("1", "true"):
                return None
            return CLUSTER, job, envcheck.train_verl_needs(verl_overrides(exp))
        if backend == "tunix":
            return TUNIX, job, envcheck.NEEDS["train-tunix" if rule == "train_grpo" else "merge-tunix"]
        if backend == "trl" and not exp["trl"]["use_cpu"]:  # a cluster-plane job (grpoflow.deployment)
            lora = bool((exp["grpo"].get("lora") or {}).get("rank"))
            if rule == "merge_checkpoint":
                return (
                    CLUSTER,
                    job,
                    [(*envcheck.TORCH, "the merge")] + ([(*envcheck.PEFT, "grpo.lora")] if lora else []),
                )
            # torch's CUDA build is read at the job's start (envcheck.require_trl_gpu), in seconds.
            return (
                CLUSTER,
                job,
                [(*envcheck.TORCH, "trl.use_cpu false")] + envcheck.trl_gpu_needs(exp["trl"]["vllm"]["mode"], lora),
            )
        return None
    if rule == "evaluate":
        backend = cfg.evaluation["backend"]
        kind = {"vllm": (CLUSTER, "eval-vllm"), "tunix": (TUNIX, "eval-tunix")}.get(backend)
        if kind:
            return kind[0], f"evaluate ({wildcards['model']}, {wildcards['benchmark']})", envcheck.NEEDS[kind[1]]
    return None


def env_key(raw_config: dict, plane: str, env: JobEnv, tunix_venv: bool) -> str:
    """The setting that picked a plane's interpreter, for the message."""
    key = ENV_KEYS[plane]
    spec = raw_config.get(key) or {}
    if spec.get("python"):
        return f"{key}.python"
    if spec.get("activate"):
        return f"{key}.activate"
    if plane == TUNIX and tunix_venv:
        return f"{key} (unset: .venv-tunix from `make setup-tunix`)"
    return f"{key} (unset: Snakemake's own interpreter)"


def check_environments(
    raw_config: dict,
    envs: dict[str, JobEnv],
    needs: dict[str, PlaneNeeds],
    methods: set[str],
    tunix_venv: bool = False,
    run=subprocess.run,
) -> tuple[list[str], list[str]]:
    """(failures, notes): start each plane's interpreter once and find every module its jobs need."""
    failures, notes = [], []
    for plane, pn in sorted(needs.items()):
        if plane == LOCAL or not pn.modules:
            continue
        key = ENV_KEYS[plane]
        if "conda" in methods or ("apptainer" in methods and (raw_config.get(key) or {}).get("container")):
            notes.append(f"{plane} environment not checked at start: --sdm builds or pulls it per job")
            continue
        env = envs[plane]
        setting = env_key(raw_config, plane, env, tunix_venv)
        modules = sorted(pn.modules)
        cmd = f"{env.run()} -c {shlex.quote(PROBE)} {' '.join(map(shlex.quote, modules))}"
        # What the user set, without the exports every job runs first (grpoflow.deployment.exports).
        shown = env.run().split(" && ", 1)[1] if env.run().startswith("export ") else env.run()
        try:
            proc = run(["bash", "-c", cmd], capture_output=True, text=True, timeout=ENV_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            failures.append(
                f"{setting}: `{shown}` did not answer within {ENV_TIMEOUT_S} s on this host: check the interpreter (docs/cluster.md#deployment)"
            )
            continue
        report = _last_json(proc.stdout)
        if proc.returncode != 0 or report is None:
            why = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
            failures.append(
                f"{setting}: `{shown}` does not run on this host (exit {proc.returncode}: {why}): set it to the {plane} environment's interpreter, at a path the login and compute nodes share (docs/cluster.md#deployment)"
            )
            continue
        missing = report["missing"]
        if missing:
            what = ", ".join(f"{pn.modules[m][0]} (for {pn.reasons(m)})" for m in missing)
            how = envcheck.HOW_TO_PICK_TUNIX if plane == TUNIX else envcheck.HOW_TO_PICK
            failures.append(f"{setting}: {report['python']} lacks {what}; {how}")
        else:
            notes.append(f"{plane} environment {report['python']} has {', '.join(modules)}")
    return failures, notes


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "missing" in value:
            return value
    return None


# ---- disk ---------------------------------------------------------------------------------------------------------

GB = 1e9


def checkpoint_bytes(exp: dict) -> tuple[int, str] | None:
    """(bytes, how) of one verl checkpoint of ``exp``: verl saves model and optimizer state per rank
    (``checkpoint.save_contents`` [model, optimizer, extra]): every parameter in the master dtype
    (``verl.model_dtype``) plus AdamW's two moments of each trainable one, in the same dtype. None when the
    architecture is unknown."""
    from grpoflow.backends.verl.memory import DTYPE_BYTES, architecture

    arch, source = architecture(exp)
    if arch is None:
        return None
    master = DTYPE_BYTES[exp["verl"]["model_dtype"]]
    rank = exp["grpo"]["lora"]["rank"]
    trainable = arch.lora_params(rank) if rank else arch.params
    size = arch.params * master + (trainable * master if rank else 0) + 2 * trainable * master
    how = f"{arch.name} ({source}), {exp['verl']['model_dtype']} params + AdamW state"
    return size, how


def existing_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


@dataclass
class DiskNeed:
    """What one experiment's checkpoints will take on their filesystem."""

    experiment: str
    checkpoint_dir: str
    need: int  # bytes still to be written: count x one, less what the dir holds
    one: int  # bytes per checkpoint
    count: int  # checkpoints on disk at once
    how: str  # how `one` was computed
    where: str  # the dir's nearest existing ancestor (statvfs)


def check_disk(cfg, experiments: list[str], statvfs=os.statvfs) -> tuple[list[str], list[str]]:
    """(failures, notes): the checkpoint dirs' filesystems against the checkpoints the runs will keep."""
    from grpoflow.schema import saved_steps

    by_fs: dict[int, list[DiskNeed]] = {}
    notes = []
    for name in experiments:
        exp = cfg.experiment(name)
        if exp["backend"] != "verl":
            continue
        size = checkpoint_bytes(exp)
        if size is None:
            notes.append(
                f"disk check skipped for experiments.{name}: architecture unknown (set experiments.{name}.architecture)"
            )
            continue
        ckpt = cfg.checkpoint_dir(name)
        grpo = exp["grpo"]
        keep = grpo["max_checkpoints_to_keep"]
        # A resumed attempt saves one more before it rotates; without rotation every save stays.
        count = keep + 1 if keep else len(saved_steps(grpo["total_steps"], grpo["save_freq"], None))
        have = existing_bytes(ckpt) if os.path.isdir(ckpt) else 0
        where = _existing_ancestor(ckpt)
        need = DiskNeed(name, ckpt, max(0, count * size[0] - have), size[0], count, size[1], where)
        by_fs.setdefault(os.stat(where).st_dev, []).append(need)
    failures = []
    for entries in by_fs.values():
        st = statvfs(entries[0].where)
        free = st.f_bavail * st.f_frsize
        total_need = sum(e.need for e in entries)
        if total_need <= free:
            dirs = ", ".join(e.checkpoint_dir for e in entries)
            notes.append(f"disk: {_gb(free)} free where {dirs} live(s), {_gb(total_need)} needed")
            continue
        for e in entries:
            share = (
                f" (with the other experiments on this filesystem: {_gb(total_need)})" if total_need > e.need else ""
            )
            keep = cfg.experiment(e.experiment)["grpo"]["max_checkpoints_to_keep"]
            counted = f"grpo.max_checkpoints_to_keep + 1 = {e.count}" if keep else f"all {e.count} saves"
            failures.append(
                f"experiments.{e.experiment}.checkpoint_dir {e.checkpoint_dir}: {_gb(free)} free on its filesystem, but {counted} checkpoints of ~{_gb(e.one)} ({e.how}) need {_gb(e.need)} more{share}: point checkpoint_dir at a larger filesystem, free space, or lower experiments.{e.experiment}.grpo.max_checkpoints_to_keep"
            )
    return failures, notes


def _gb(n: float) -> str:
    return f"{n / GB:.0f} GB" if n >= 10 * GB else f"{n / GB:.2f} GB"


# ---- the onstart hook -----------------------------------------------------------------------------------------------


def partition_failures(workflow, cfg, jobs, log) -> list[str]:
    """The SLURM checks (node shapes, time limits, GPU types) of the jobs that will be submitted, against the
    nodes of each cluster they go to (sbatch --clusters / -M: sinfo -M)."""
    from grpoflow import slurm_nodes

    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or plugin.name != "slurm":
        return []
    if os.environ.get(SKIP_PARTITION_CHECK) == "1":
        log(f"grpoflow: partition check skipped: {SKIP_PARTITION_CHECK}=1")
        return []
    if not shutil.which("sinfo"):
        log("grpoflow: partition check skipped: sinfo not found on this host (requests go to sbatch unchecked)")
        return []
    by_cluster: dict[str | None, list] = {}
    for j in jobs:
        if j.is_local:
            continue
        res = cfg.experiment(j.wildcards_dict["experiment"])["resources"] if j.rule.name == "train_grpo" else None
        req = slurm_nodes.job_request(j, "the profile's set-resources/default-resources for", res)
        by_cluster.setdefault(req.cluster, []).append(req)
    failures, unchecked = [], 0
    for cluster, requests in sorted(by_cluster.items(), key=lambda kv: kv[0] or ""):
        try:
            nodes, default = slurm_nodes.query_nodes(cluster=cluster)
        except (subprocess.SubprocessError, OSError, ValueError) as err:
            log(
                f"grpoflow: partition check skipped{f' for cluster {cluster}' if cluster else ''}: sinfo failed ({err})"
            )
            unchecked += len(requests)
            continue
        failures += [
            f"{line} (or {SKIP_PARTITION_CHECK}=1 to skip this check)"
            for line in slurm_nodes.check_requests(requests, nodes, default)
        ]
    count = sum(len(r) for r in by_cluster.values()) - unchecked
    if not failures and count:
        log(
            f"grpoflow: node-shape check passed: {count} job(s) fit the partition's nodes, time limits and GPU types (sinfo)"
        )
    return failures


def run(
    workflow, cfg, raw_config: dict, envs: dict[str, JobEnv], methods: set[str], tunix_venv: bool, log
) -> list[str]:
    """Snakemake's onstart: every check above for the jobs about to run; returns the failures (one line each)
    after logging what passed. Nothing in a dry-run or in a job's own Snakemake."""
    if not workflow.is_main_process or workflow.dryrun:
        return []
    jobs = list(workflow.dag.needrun_jobs())
    failures = partition_failures(workflow, cfg, jobs, log)

    train = sorted({j.wildcards_dict["experiment"] for j in jobs if j.rule.name == "train_grpo"})
    disk_fail, disk_notes = check_disk(cfg, train)
    failures += disk_fail

    needs: dict[str, PlaneNeeds] = {}
    for j in jobs:
        found = job_needs(cfg, j.rule.name, dict(j.wildcards_dict))
        if found:
            plane, job, what = found
            needs.setdefault(plane, PlaneNeeds()).add(what, job)
    env_fail, env_notes = check_environments(raw_config, envs, needs, methods, tunix_venv)
    failures += env_fail
    for note in disk_notes + env_notes:
        log(f"grpoflow: preflight: {note}")
    return failures
