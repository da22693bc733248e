"""Checks on the login node before anything is submitted (Snakemake's ``onstart``; never in a dry-run).

What they replace: a wrong or unset ``cluster_env`` found inside an 8-GPU job after its queue wait, three times
(the profile's ``retries``); a job longer than its partition's time limit that pends forever; a GPU type the
partition does not have; a checkpoint dir whose filesystem fills up at the third 393 GB checkpoint. Each takes
seconds here and needs no GPU:

- **environment** (every executor): each non-local plane that a job about to run uses (cluster: verl, vLLM,
  TransferQueue, flash-attn; tunix: Tunix, JAX) has its interpreter started once, exactly as the jobs start it
  (``cluster_env.python`` / ``activate``, grpoflow.deployment), and ``importlib.util.find_spec``s every module
  those jobs import (grpoflow.envcheck), as each job's backend says (``environment``, grpoflow.backends; for
  evaluate the row of grpoflow.evaluation.backends). Skipped under ``--sdm conda`` / ``apptainer`` (the
  environment is built or pulled per job) and for an experiment with ``verl.env.GRPOFLOW_SKIP_ENV_CHECK: 1``. Off
  with ``GRPOFLOW_SKIP_ENV_CHECK=1`` (jobs that inherit it, the verl wrapper, skip their own check too).
- **partition** (SLURM executor): the node shapes (grpoflow.slurm_nodes), each job's time limit against the
  partition's (``sinfo %l``; for train_grpo the larger of ``resources.runtime`` and ``resources.retry_runtime``),
  and the GPU type it asks for (``gpu_model``, a typed ``gres``, or ``resources.gpu_mem_gb`` above the
  partition's cards, or above its smallest card when the nodes are not narrowed), hidden partitions included, each
  of several (``gpu,gpu-long``), on the job's cluster (``-M``). Off with ``GRPOFLOW_SKIP_PARTITION_CHECK=1``.
- **disk** (every executor): each filesystem the jobs about to run write to, against what it will hold at once:
  ``grpo.max_checkpoints_to_keep + 1`` checkpoints of each experiment at the size its backend saves (verl, Tunix,
  TRL: params and AdamW state; every backend writes the new one before it removes the oldest), the Hub download of
  a start model into ``hf_home``, the merged model ``results/<experiment>/model``; less what each path already
  holds; everything on one filesystem adds up. The room is the free space or the quota left (``lfs quota``,
  ``mmlsquota``, ``quota``: grpoflow.quota), whichever is smaller; where no quota could be read, the notes say so.
  Each backend sizes its own checkpoint and merged model (``checkpoint_size``, ``merged_size``: grpoflow.backends).
  Off with ``GRPOFLOW_SKIP_DISK_CHECK=1``.

Every failure is one line naming the config key and ending with its check's off switch; all are reported, then the
run stops; a check switched off logs one line saying so. What only a GPU node can
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

from grpoflow import backends, envcheck
from grpoflow.deployment import ENV_KEYS, LOCAL, MADE_VENVS, JobEnv
from grpoflow.evaluation.backends import evaluation_row
from grpoflow.training.memory import HUB_WEIGHT_BYTES

# Each start check's own off switch (an environment variable set to 1), named in its refusals.
SKIP_PARTITION_CHECK = "GRPOFLOW_SKIP_PARTITION_CHECK"
SKIP_ENV_CHECK = envcheck.SKIP_ENV_CHECK
SKIP_DISK_CHECK = "GRPOFLOW_SKIP_DISK_CHECK"
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


def job_needs(cfg, rule: str, wildcards: dict) -> tuple[str, str, list[tuple[str, str, str]]] | None:
    """(plane, job name, needs) of one job, or None for a local-plane job or one whose check is switched off."""
    if rule in ("train_grpo", "merge_checkpoint"):
        name = wildcards["experiment"]
        exp = cfg.experiment(name)
        backend = backends.of(exp)
        needs = backend.environment(exp, rule)
        return (backend.plane(exp), f"{rule} ({name})", needs) if needs else None
    if rule == "evaluate":
        row = evaluation_row(cfg.evaluation)
        if row.check:
            return row.plane, f"evaluate ({wildcards['model']}, {wildcards['benchmark']})", envcheck.needs_of(row.check)
    return None


def env_key(raw_config: dict, plane: str, env: JobEnv, made_venvs: dict[str, str]) -> str:
    """The setting that picked a plane's interpreter, for the message (``made_venvs``: plane -> the interpreter
    ``make`` built next to the Snakefile, grpoflow.deployment.made_venv_pythons)."""
    key = ENV_KEYS[plane]
    spec = raw_config.get(key) or {}
    if spec.get("python"):
        return f"{key}.python"
    if spec.get("activate"):
        return f"{key}.activate"
    if plane in made_venvs:
        return f"{key} (unset: {MADE_VENVS[plane]} from `make setup-{plane}`)"
    return f"{key} (unset: Snakemake's own interpreter)"


def check_environments(
    raw_config: dict,
    envs: dict[str, JobEnv],
    needs: dict[str, PlaneNeeds],
    methods: set[str],
    made_venvs: dict[str, str] | None = None,
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
        setting = env_key(raw_config, plane, env, made_venvs or {})
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
            how = envcheck.HOW_TO_PICK_BY_PLANE.get(plane, envcheck.HOW_TO_PICK)
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
# A run that fits and writes less than this (the demo: ~0.07 GB) gets no note: the line, and "quota not checked" on a
# laptop's ext4, would only be noise on the README's first command.
QUIET_BELOW = 1 * GB


def model_architecture(exp: dict):
    """(Architecture, source) of the start model: ``architecture:``, else the config.json of a local ``sft.model``
    dir, else a Qwen3 size in its names (grpoflow.training.memory.architecture); (None, "") when unknown."""
    import json

    from grpoflow.training.memory import Architecture, architecture

    model = str((exp.get("sft") or {}).get("model") or "")
    if exp.get("architecture") or not os.path.isfile(os.path.join(model, "config.json")):
        return architecture(exp)
    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
            hf = json.load(fh)
        hf = hf.get("text_config", hf)
        heads = hf["num_attention_heads"]
        arch = Architecture(
            name=os.path.basename(model.rstrip("/")),
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_attention_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads", heads),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            intermediate_size=hf["intermediate_size"],
            vocab_size=hf["vocab_size"],
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        )
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return architecture(exp)
    return arch, "sft.model's config.json"


def checkpoint_bytes(exp: dict) -> tuple[int, str] | None:
    """(bytes, how) of one checkpoint of ``exp`` as its backend saves it (its ``checkpoint_size``), from the model's
    architecture (``architecture:`` or the Qwen3 size named in ``sft``); None when that is unknown. Each is the
    parameters it saves plus AdamW's two moments of every trained one, all in the trained weights' dtype (AdamW keeps
    its state in the parameters' dtype: torch's, optax's)."""
    arch, source = model_architecture(exp)
    if arch is None:
        return None
    rank = (exp["grpo"].get("lora") or {}).get("rank") or 0
    size, how = backends.of(exp).checkpoint_size(exp, arch, rank)
    return size, f"{arch.name} ({source}), {how}{f', LoRA rank {rank}' if rank else ''}"


def merged_model_bytes(exp: dict) -> tuple[int, str] | None:
    """(bytes, how) merge_checkpoint writes under ``results/<experiment>/``, as its backend says (``merged_size``)."""
    arch, _ = model_architecture(exp)
    if arch is None:
        return None
    rank = (exp["grpo"].get("lora") or {}).get("rank") or 0
    return backends.of(exp).merged_size(exp, arch, rank)


def download_bytes(cfg, repo_id: str) -> int | None:
    """What download_model fetches for a Hub id: its weights at the Hub's bfloat16, from the architecture of an
    experiment that starts from it, else from the Qwen3 size in its name."""
    from grpoflow.training.memory import architecture

    starts = [e for e in cfg.experiments.values() if (e.get("sft") or {}).get("model") == repo_id]
    arch = next((a for a, _ in map(model_architecture, starts) if a), None)
    arch = arch or architecture({"sft": {"model": repo_id}})[0]
    return None if arch is None else arch.params * HUB_WEIGHT_BYTES


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
    """What one output will take on its filesystem: an experiment's kept checkpoints, a Hub download, a merged model."""

    path: str
    need: int  # bytes still to be written, less what the path already holds
    what: str  # for the messages
    experiment: str | None = None  # checkpoints only, with:
    one: int = 0  # bytes per checkpoint
    count: int = 0  # checkpoints on disk at once
    keep: int | None = None  # grpo.max_checkpoints_to_keep
    have: int = 0  # bytes the checkpoint dir holds

    @property
    def where(self) -> str:
        return _existing_ancestor(self.path)

    @property
    def beside(self) -> str:
        """How another item's message names this one."""
        return f"experiments.{self.experiment}'s checkpoints ~{_gb(self.need)}" if self.experiment else self.what


def sized_experiment(cfg, name: str) -> dict:
    """The experiment as the disk check sizes it: one that starts from the demo's own SFT run (built by this
    workflow, so at the first run there is no config.json to read) takes the demo's ``tiny_model`` as its
    ``architecture`` (demo/tiny.model_config: head_dim = hidden / heads, tied embeddings; the vocabulary at most the
    trained BPE's target plus <think> and </think>), instead of being reported as unknown on every ``make demo``."""
    exp = cfg.experiment(name)
    if exp.get("architecture") or not cfg.demo or not cfg.uses_demo_sft(name):
        return exp
    tiny = cfg.demo["tiny_model"]
    sizes = {
        "hidden_size": tiny["hidden_size"],
        "num_layers": tiny["num_hidden_layers"],
        "num_attention_heads": tiny["num_attention_heads"],
        "num_kv_heads": tiny["num_key_value_heads"],
        "head_dim": tiny["hidden_size"] // tiny["num_attention_heads"],
        "intermediate_size": tiny["intermediate_size"],
        "vocab_size": tiny["vocab_size"] + 2,
        "tie_word_embeddings": True,
    }
    return {**exp, "architecture": sizes}


def _checkpoint_need(cfg, name: str, notes: list[str]) -> DiskNeed | None:
    from grpoflow.schema import saved_steps

    exp = sized_experiment(cfg, name)
    size = checkpoint_bytes(exp)
    if size is None:
        notes.append(
            f"disk check skipped for experiments.{name}: architecture unknown (set experiments.{name}.architecture)"
        )
        return None
    ckpt = cfg.checkpoint_dir(name)
    grpo = exp["grpo"]
    keep = grpo["max_checkpoints_to_keep"]
    # Each backend saves the new checkpoint before it removes the oldest: keep + 1 at once. HF Trainer and Orbax
    # rotate over the dir (earlier attempts' saves included); verl only over its own process's saves, so the verl
    # wrapper rotates after each save (grpoflow.backends.verl.train.rotating). Without rotation every save stays.
    saves = len(saved_steps(grpo["total_steps"], grpo["save_freq"], None))
    count = min(keep + 1, saves) if keep else saves
    have = existing_bytes(ckpt) if os.path.isdir(ckpt) else 0
    counted = f"grpo.max_checkpoints_to_keep + 1 = {count}" if keep and count == keep + 1 else f"all {count} saves"
    what = f"{counted} checkpoints of ~{_gb(size[0])} ({size[1]})"
    return DiskNeed(ckpt, max(0, count * size[0] - have), what, name, size[0], count, keep, have)


def check_disk(
    cfg,
    experiments: list[str],
    statvfs=os.statvfs,
    merges: list[str] = (),
    downloads: list[str] = (),
    quota=None,
) -> tuple[list[str], list[str]]:
    """(failures, notes): every filesystem the run writes big outputs to, against what it will hold at once: the
    kept checkpoints of each experiment in ``experiments`` (train_grpo jobs), the merged models of ``merges``
    (merge_checkpoint jobs), the Hub models of ``downloads`` (download_model jobs: Hub ids) in ``hf_home``; less what
    each path already holds. The room is the free space (``statvfs``) or the quota left (grpoflow.quota), whichever is
    smaller."""
    from grpoflow import quota as quotas
    from grpoflow.models import DEFAULT_HF_HOME

    quota = quota or quotas.room
    notes: list[str] = []
    items = [n for n in (_checkpoint_need(cfg, name, notes) for name in experiments) if n]
    for name in merges:
        size = merged_model_bytes(sized_experiment(cfg, name))
        if size:
            path = f"results/{name}/model"
            have = existing_bytes(path) if os.path.isdir(path) else 0
            items.append(DiskNeed(path, max(0, size[0] - have), f"the merged model {path} ~{_gb(size[0])}"))
    hf_home = cfg.raw.get("hf_home") or DEFAULT_HF_HOME
    for repo_id in downloads:
        size = download_bytes(cfg, repo_id)
        if size is None:
            notes.append(f"disk: the Hub download of {repo_id} into hf_home is not counted (size unknown)")
            continue
        cache = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
        have = existing_bytes(cache) if os.path.isdir(cache) else 0
        what = f"the Hub download of {repo_id} into hf_home {hf_home} ~{_gb(size)}"
        items.append(DiskNeed(hf_home, max(0, size - have), what))

    by_fs: dict[int, list[DiskNeed]] = {}
    for item in items:
        by_fs.setdefault(os.stat(item.where).st_dev, []).append(item)
    failures = []
    for entries in by_fs.values():
        where = entries[0].where
        st = statvfs(where)
        free = st.f_bavail * st.f_frsize
        q = quota(where)
        room = free if q.room is None or q.room >= free else q.room
        has = f"{_gb(free)} free on its filesystem" if room == free else q.text
        total = sum(e.need for e in entries)
        if total <= room:
            if total >= QUIET_BELOW:
                paths = ", ".join(dict.fromkeys(e.path for e in entries))
                notes.append(f"disk: {_gb(total)} needed where {paths} live(s): {_gb(free)} free; {q.text}")
            continue
        checkpoints = [e for e in entries if e.experiment]
        for e in checkpoints or entries[:1]:
            others = [o for o in entries if o is not e and o.need]
            share = f" (with {_and([o.beside for o in others])} on the same filesystem: {_gb(total)})" if others else ""
            if e.experiment:
                failures.append(
                    f"experiments.{e.experiment}.checkpoint_dir {e.path}: {has}, but {e.what} need {_gb(e.need)} more{share}: {_checkpoint_fix(e, room - (total - e.need), hf_home, others)}"
                )
            else:
                key = f"hf_home {hf_home}" if e.path == hf_home else f"{e.path}"
                failures.append(
                    f"{key}: {has}, but {e.what} need(s) {_gb(e.need)} more{share}: free space there{', or set hf_home to a larger filesystem' if e.path == hf_home else ''}"
                )
    return failures, notes


def _checkpoint_fix(e: DiskNeed, room: float, hf_home: str, others: list[DiskNeed]) -> str:
    """How to make ``e``'s checkpoints fit in ``room`` (what the filesystem leaves them): the largest
    max_checkpoints_to_keep that fits, or that none does (a save holds two even at 1)."""
    name = e.experiment
    also = " (or hf_home)" if any(o.path == hf_home for o in others) else ""
    move = f"point experiments.{name}.checkpoint_dir{also} at a larger filesystem"
    fits = [k for k in range(1, (e.keep or e.count) + 1) if (k + 1) * e.one - e.have <= room]
    if not fits:
        return f"{move} or free space; no grpo.max_checkpoints_to_keep fits here (1 keeps 2 during a save: {_gb(2 * e.one)})"
    return f"{move}, free space, or lower experiments.{name}.grpo.max_checkpoints_to_keep to {fits[-1]}"


def _gb(n: float) -> str:
    return f"{n / GB:.0f} GB" if n >= 10 * GB else f"{n / GB:.2f} GB"


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


# ---- the onstart hook -----------------------------------------------------------------------------------------------


def partition_failures(workflow, cfg, jobs, log) -> list[str]:
    """The SLURM checks (node shapes, time limits, GPU types) of the jobs that will be submitted, against the
    nodes of each cluster they go to (sbatch --clusters / -M: sinfo -M)."""
    from grpoflow import slurm_nodes

    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or plugin.name != "slurm":
        return []
    if _skipped(SKIP_PARTITION_CHECK, "partition check", log):
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
    workflow, cfg, raw_config: dict, envs: dict[str, JobEnv], methods: set[str], made_venvs: dict[str, str], log
) -> list[str]:
    """Snakemake's onstart: every check above for the jobs about to run; returns the failures (one line each)
    after logging what passed. Nothing in a dry-run or in a job's own Snakemake."""
    if not workflow.is_main_process or workflow.dryrun:
        return []
    jobs = list(workflow.dag.needrun_jobs())
    failures = partition_failures(workflow, cfg, jobs, log)

    train = sorted({j.wildcards_dict["experiment"] for j in jobs if j.rule.name == "train_grpo"})
    merges = sorted({j.wildcards_dict["experiment"] for j in jobs if j.rule.name == "merge_checkpoint"})
    from grpoflow.models import hub_start_models

    hub = hub_start_models(cfg)
    fetched = {j.wildcards_dict["hub_model"] for j in jobs if j.rule.name == "download_model"}
    downloads = sorted(hub[w]["repo_id"] for w in fetched if w in hub)
    disk_fail, disk_notes = [], []
    if not _skipped(SKIP_DISK_CHECK, "disk check", log):
        disk_fail, disk_notes = check_disk(cfg, train, merges=merges, downloads=downloads)
    failures += [f"{line} (or {SKIP_DISK_CHECK}=1 to skip this check)" for line in disk_fail]

    env_fail, env_notes = [], []
    if not _skipped(SKIP_ENV_CHECK, "environment check", log):
        needs: dict[str, PlaneNeeds] = {}
        for j in jobs:
            found = job_needs(cfg, j.rule.name, dict(j.wildcards_dict))
            if found:
                plane, job, what = found
                needs.setdefault(plane, PlaneNeeds()).add(what, job)
        env_fail, env_notes = check_environments(raw_config, envs, needs, methods, made_venvs)
    failures += [f"{line} (or {SKIP_ENV_CHECK}=1 to skip this check)" for line in env_fail]
    for note in disk_notes + env_notes:
        log(f"grpoflow: preflight: {note}")
    return failures


def _skipped(switch: str, check: str, log) -> bool:
    """Whether the off switch ``switch`` is set (to 1); if so, one log line says the check was skipped."""
    if os.environ.get(switch) != "1":
        return False
    log(f"grpoflow: {check} skipped: {switch}=1")
    return True
