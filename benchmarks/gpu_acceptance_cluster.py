"""The GPU acceptance kit's cluster parts (issue 39): verl, TRL colocate and TRL server mode, on one GPU node.

They need the cluster environment (requirements/cluster.lock: vLLM 0.24.0, verl 0.9.1, Ray 2.60.0, TRL 1.16.0 over
torch 2.11.0): on a GPU node where it is installed, run the kit with its interpreter,

    make gpu-acceptance GPU_PYTHON=<cluster_env>/bin/python GPU_ARGS="--parts cluster"

The machine this project is lent (one H200, an image with torch 2.11.0+cu130 and no vLLM, verl or Ray, nothing
fetched there, 64 MiB of carried wheels per call) cannot run them: vLLM's wheel alone is 266 MiB and Ray's 76 MiB
(LENT_MACHINE below; ``--plan`` prints it). There each part says so and is skipped; nothing is pretended.

- ``verl``: two GRPO steps of a Qwen3-0.6B-width model (random weights, nothing downloaded) through the shipped
  ``train_grpo`` rule's own command (``grpoflow.backends.training_command`` through ``grpoflow.deployment``, as the
  rule composes it: our reward module, the wrapper ``grpoflow.backends.verl.train``, Snakemake's thread variables),
  its checkpoint merged by the ``merge_checkpoint`` rule's command and evaluated by the ``evaluate`` job with the vLLM
  backend; the GPU's peak (nvidia-smi) and the actor's allocator peak (verl's own ``perf/max_memory_*``) against
  ``grpoflow.backends.verl.memory``'s estimate. Two steps, not one: the estimate's peak is the rollout of step 2,
  the first with AdamW's state on the GPU.
- ``colocate``: TRL GRPO through the train job's entry point with ``trl.vllm.mode: colocate``: after every weight
  sync, every tensor of the in-process vLLM model is compared with the trainer's (vLLM's packed q/k/v and gate/up
  rebuilt from the trainer's), and the memory against ``grpoflow.backends.trl.memory``'s colocate estimate.
- ``server``: TRL's vLLM server (``trl.scripts.vllm_serve``'s command) on the node beside the trainer: generation
  through TRL's ``VLLMClient``, the server's log-probs of fixed sequences against the trainer model's, then TRL's
  NCCL weight sync (``init_communicator``, ``update_named_params``) and the log-probs again. The sync needs a
  second GPU: NCCL refuses two ranks on one device ("Duplicate GPU detected", NVIDIA/nccl#418), so on one GPU the
  part stops after generation and says so. Then, when this checkout accepts ``trl.vllm.mode: server`` and the node
  has two GPUs, the train_grpo command in server mode under the same probe as ``colocate``.

Every part's CPU side runs without a GPU (``--dry``): the exact commands, the estimates, and for verl the check of
the command against verl's own schema (``grpoflow.backends.verl.validate``) where verl imports.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CLUSTER_PART_KEYS = ("verl", "colocate", "server")
# What each part imports beyond the kit's own needs (the cluster environment holds them all).
PACKAGES = {"verl": ("verl", "ray", "vllm"), "colocate": ("vllm",), "server": ("vllm",)}
# Sizes of the cluster lock's wheels for the lent machine (cp312, manylinux x86_64), read from PyPI's simple index
# (JSON, PEP 691/700) on 2026-11-29: the packages the parts need that the GPU image lacks, the largest first.
# vLLM's hard requirements beyond these (its METADATA: flashinfer-cubin, tilelang, nvidia-cutlass-dsl[cu13], ...)
# and some 180 smaller pure-Python packages of the lock are not on the image either.
LENT_MACHINE_WHEELS_MIB = [
    ("flashinfer-cubin", "0.6.12", 426.8, "vLLM requires it"),
    ("vllm", "0.24.0", 266.3, "verl's rollout, TRL's colocate and server"),
    ("ray", "2.60.0", 75.6, "verl's single controller"),
    ("nvidia-cutlass-dsl-libs-cu13", "4.5.2", 75.1, "vLLM requires nvidia-cutlass-dsl[cu13]"),
    ("nvidia-cutlass-dsl-libs-base", "4.5.2", 71.1, "the same"),
    ("tilelang", "0.1.9", 43.3, "vLLM requires it"),
    ("xgrammar", "0.2.3", 42.8, "vLLM requires it"),
    ("flashinfer-python", "0.6.12", 13.3, "vLLM requires it"),
    ("verl", "0.9.1", 1.6, "verl"),
]
CARRY_LIMIT_MIB = 64
VLLM_VOCAB = 512  # the vLLM parts' model: the demo tokenizer's size, so no sampled id lies outside it
VLLM_MODEL = "qwen3-0.6b-v512"
VLLM_SFT = "sft-v512.json"
# The weight-sync parts train at a rate whose first AdamW step moves bf16 weights (half bf16's spacing at |w| 0.02
# is 6e-5), so a sync that sent nothing would show; and with rewards that differ inside a group (a random model
# answers nothing right: `binary` gives -0.5 without a number and -1 with a wrong one; `soft_overlong` penalises the
# long ones), so the advantages are not all zero.
SYNC_RUN = {"learning_rate": 1.0e-3, "kl_coef": 0.0, "steps": 2}
SYNC_REWARDS = {"funcs": ["binary", "soft_overlong"], "params": {"soft_overlong": {"cache": 64}}}
# verl: 4 prompts x 8 completions of up to 128 tokens per step, one mini-batch, micro-batches of 16.
VERL_RUN = {"steps": 2, "gpu_memory_utilization": 0.4, "micro_batch": 16}
# A rehearsal on a machine without a GPU (GPU_ACCEPTANCE_REHEARSAL=1, with `--part KEY`): the part runs although a
# package is missing or nvidia-smi is absent (the card then taken as 80 GB), to see where it stops. Never a result.
REHEARSAL = os.environ.get("GPU_ACCEPTANCE_REHEARSAL") == "1"
SERVER_PORT = 8011
SERVER_START_S = 240  # the server's start (model load, KV-cache profiling) before the client gives up


def missing(key: str) -> list[str]:
    """The packages part ``key`` needs that this interpreter cannot import (none in a rehearsal)."""
    if REHEARSAL:
        return []
    return [name for name in PACKAGES.get(key, ()) if importlib.util.find_spec(name) is None]


def carry_total_mib(names: tuple[str, ...] = ("vllm", "ray", "verl")) -> float:
    return sum(mib for name, _, mib, _ in LENT_MACHINE_WHEELS_MIB if name in names)


def skip_line(key: str, absent: list[str]) -> str:
    """Why the part cannot run in this interpreter, and where it can."""
    need = carry_total_mib(("vllm", "ray", "verl") if key == "verl" else ("vllm",))
    return (
        f"needs {', '.join(absent)} (the cluster environment, requirements/cluster.lock), which this interpreter "
        f"({sys.executable}) lacks; carried as wheels they alone are {need:.0f} MiB, over the device tool's "
        f'{CARRY_LIMIT_MIB} MiB: run `make gpu-acceptance GPU_PYTHON=<cluster_env>/bin/python GPU_ARGS="--parts '
        f'{key}"` on a GPU node with the cluster environment'
    )


def plan_lines(lock: dict[str, str]) -> list[str]:
    """The --plan section of the cluster parts: where they run, and why not on the lent machine."""
    out = ["cluster parts (verl, colocate, server): need the cluster environment, not carried to the lent machine:"]
    for name, version, mib, why in LENT_MACHINE_WHEELS_MIB:
        pinned = lock.get(name, "?")
        out.append(f"  {name + '==' + version:<36} {mib:7.1f} MiB  {why} (cluster.lock: {pinned})")
    core = carry_total_mib()
    out.append(
        f"  vllm + ray + verl alone: {core:.1f} MiB, {core / CARRY_LIMIT_MIB:.1f}x the {CARRY_LIMIT_MIB} MiB a call "
        f"carries (vllm's wheel alone {carry_total_mib(('vllm',)) / CARRY_LIMIT_MIB:.1f}x); with vLLM's required "
        f"kernels {carry_total_mib(tuple(n for n, *_ in LENT_MACHINE_WHEELS_MIB)):.0f} MiB"
    )
    out.append(
        "  they run on a GPU node with the cluster environment: make gpu-acceptance "
        'GPU_PYTHON=<cluster_env>/bin/python GPU_ARGS="--parts cluster"'
    )
    out.append(
        "  server: its NCCL weight sync needs 2 GPUs (NCCL refuses two ranks on one device); on one GPU it checks "
        "generation through the client only"
    )
    return out


# ---- configs and commands (CPU: --dry, and what the GPU run compares against) ------------------------------------


def vllm_architecture() -> dict:
    """Qwen3-0.6B's widths with the demo tokenizer's vocabulary (the model prep saves as VLLM_MODEL)."""
    from grpoflow.training.memory import PRESETS

    a = PRESETS["qwen3-0.6b"]
    arch = {f.name: getattr(a, f.name) for f in dataclasses.fields(a) if f.name != "name"}
    return {**arch, "vocab_size": VLLM_VOCAB}


def cluster_config(kit, work: Path, defaults: dict, gpu_gb: float):
    """The kit's demo config (kit.resolved_config's data) with ``defaults`` merged over its experiment defaults, on
    one GPU of ``gpu_gb`` GB, evaluated with the vLLM backend."""
    import yaml

    from grpoflow.config import deep_merge, resolve_config

    raw = yaml.safe_load((kit.REPO / "config" / "config.yaml").read_text())
    base = {
        "datasets": {"arith": {"synthetic": {"train_size": 300, "test_size": 40}, "validation": {"size": 20}}},
        "defaults": {
            "architecture": vllm_architecture(),
            "resources": {"gpus_per_node": 1, "gpu_mem_gb": gpu_gb, "mem_mb": 100000, "cpus_per_task": cpus()},
            "grpo": {
                "prompts_per_step": kit.RUN["prompts_per_step"],
                "num_generations": kit.RUN["num_generations"],
                "max_response_length": kit.RUN["max_response_length"],
                "temperature": 1.0,
            },
        },
        "evaluation": {
            "backend": "vllm",
            "vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 512},
            "resources": {"gpus": 1},
        },
    }
    merged = deep_merge(deep_merge(copy.deepcopy(raw), base), {"defaults": defaults})
    merged["experiments"] = {kit.EXP: {"checkpoint_dir": str(work / "ckpt")}}
    return resolve_config(merged)


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def verl_config(kit, work: Path, gpu_gb: float):
    steps = VERL_RUN["steps"]
    micro = VERL_RUN["micro_batch"]
    defaults = {
        "backend": "verl",
        "grpo": {"learning_rate": kit.RUN["learning_rate"], "kl_coef": kit.RUN["kl_coef"], "total_steps": steps},
        "verl": {
            "ppo_mini_batch_size": kit.RUN["prompts_per_step"],
            "ppo_micro_batch_size_per_gpu": micro,
            "log_prob_micro_batch_size_per_gpu": micro,
            "rollout": {
                "tensor_model_parallel_size": 1,
                "gpu_memory_utilization": VERL_RUN["gpu_memory_utilization"],
                "enforce_eager": True,  # no CUDA-graph capture: minutes of start-up a two-step run does not need
            },
            "reward_workers": 2,
            "logger": ["console", "file"],
        },
    }
    defaults["grpo"]["save_freq"] = steps
    return cluster_config(kit, work / "verl", defaults, gpu_gb)


def verl_paths(work: Path) -> tuple[dict, dict]:
    ins = {"train": str(work / "data" / "train.parquet"), "val": str(work / "data" / "val.parquet")}
    ins["sft"] = str(work / VLLM_SFT)
    outs = {
        "marker": str(work / "verl" / "training_complete.json"),
        "metrics": str(work / "verl" / "train_metrics.jsonl"),
    }
    return ins, outs


def rule_command(cfg, experiment: str, inputs: dict, outputs: dict) -> str:
    """train_grpo's ``params.command`` as rules/common.smk's ``training_command`` composes it: the backend's
    command, run through the experiment's plane's environment (grpoflow.deployment), whose interpreter is this one
    (the kit runs under the cluster environment's python, as cluster_env.python names it)."""
    from grpoflow.backends import training_command

    return in_plane(cfg, experiment, training_command(cfg, experiment, inputs, outputs))


def in_plane(cfg, experiment: str, command: str) -> str:
    """``command`` with its plane's exports and interpreter (grpoflow.deployment), the interpreter being this one."""
    from grpoflow import deployment

    envs = deployment.job_envs({"cluster_env": {"python": sys.executable}}, set(), local_python=sys.executable)
    return envs[deployment.experiment_plane(cfg.experiment(experiment))].command(command)


# train_grpo's shell (rules/train.smk) before its command: it waits on signals rather than dying with the job step,
# and the GPU check's first attempt.
RULE_SHELL = "trap : TERM INT USR1 USR2; export GRPOFLOW_GPU_CHECK_RETRY=0; "


def thread_env(threads: int) -> dict[str, str]:
    """What Snakemake exports for a job of ``threads`` threads (the six variables equal), as for train_grpo."""
    from grpoflow.threads import THREAD_VARS

    return {k: str(threads) for k in THREAD_VARS}


def merge_command(cfg, experiment: str, work: Path) -> list[str]:
    """merge_checkpoint's command (rules/train.smk; its kwargs as rules/common.smk's merge_job writes them)."""
    exp = cfg.experiment(experiment)
    kwargs = {
        "backend": exp["backend"],
        "checkpoint_dir": cfg.checkpoint_dir(experiment),
        "step": exp["merge_step"],
        "sft_json": str(work / VLLM_SFT),
        "marker": str(work / "verl" / "training_complete.json"),
        "out_dir": str(work / "verl" / "model"),
    }
    log = str(work / "verl" / "merge.log")
    return [sys.executable, "-m", "grpoflow.workflow", "merge_checkpoint", "--log", log, "--kwargs", json.dumps(kwargs)]


def evaluate_command(cfg, work: Path, model_dir: Path, out: Path) -> list[str]:
    """evaluate's command (rules/evaluate.smk) for ``model_dir`` on the arith test split, with cfg's settings."""

    kwargs = {
        "model_name": "verl-merged",
        "model": {"kind": "external", "path": str(model_dir)},
        "benchmark_name": "arith",
        "benchmark": cfg.evaluation["benchmarks"]["arith"],
        "prompt": cfg.benchmark_prompt("arith"),
        "run": cfg.benchmark_runs["arith"].as_json(),
        "inputs": {"data": str(work / "data" / "test.parquet")},
        "metrics_path": str(out / "arith.json"),
        "samples_path": str(out / "arith.samples.jsonl"),
    }
    return [sys.executable, "-m", "grpoflow.workflow", "evaluate", "--kwargs", json.dumps(kwargs), "--threads", "4"]


def verl_estimate(cfg, experiment: str):
    from grpoflow.backends.verl.memory import estimate

    return estimate(experiment, cfg.experiment(experiment))


def sync_config(kit, work: Path, key: str, mode: str, gpu_gb: float):
    """A TRL experiment with vLLM in ``mode`` (the colocate and server parts): one training process on one GPU;
    in server mode a node of two, the server on one (``trl.vllm.server_gpus``). Where this checkout has grpoflow's
    own sync check (``trl.vllm.check_weight_sync``, which records ``weight_sync_max_diff`` in the metrics rows), it
    is switched on too; the part's verdict is its own comparison either way."""
    from grpoflow.errors import ConfigError

    vllm = {"mode": mode, "gpu_memory_utilization": 0.3}
    trl = {"use_cpu": False, "vllm": vllm, "completions_per_device_batch": kit.RUN["completions_per_device_batch"]}
    defaults = {
        "backend": "trl",
        "rewards": SYNC_REWARDS,
        "trl": trl,
        "grpo": {
            "learning_rate": SYNC_RUN["learning_rate"],
            "kl_coef": SYNC_RUN["kl_coef"],
            "total_steps": SYNC_RUN["steps"],
            "save_freq": SYNC_RUN["steps"],
        },
    }
    if mode == "server":
        vllm["server_gpus"] = 1
        defaults["resources"] = {"gpus_per_node": 2}
    else:
        trl["processes"] = 1
        checked = copy.deepcopy(defaults)
        checked["trl"]["vllm"]["check_weight_sync"] = True
        try:
            return cluster_config(kit, work / key, checked, gpu_gb)
        except ConfigError as err:  # a checkout without grpoflow's own check
            if "check_weight_sync" not in str(err):
                raise
    return cluster_config(kit, work / key, defaults, gpu_gb)


def trl_estimate(cfg, experiment: str) -> dict:
    from grpoflow.backends.trl.commandline import memory_estimate

    b = memory_estimate(experiment, cfg.experiment(experiment))
    return {
        "arch": b.arch,
        "peak_phase": b.peak.name,
        "phases": {p.name: {**p.terms, "total": p.total} for p in b.phases},
    }


def server_command(model: Path, port: int, utilization: float) -> list[str]:
    """TRL 1.16's `trl vllm-serve` command line (trl/scripts/vllm_serve.py build_command: vLLM's own server with
    the NCCL weight-transfer engine), for ``model`` on ``port``."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    args = ScriptArguments(
        model=str(model),
        port=port,
        host="127.0.0.1",
        gpu_memory_utilization=utilization,
        max_model_len=512,
        enforce_eager=True,
    )
    return build_command(args)


def dry(key: str, kit, work: Path) -> dict:
    """What a cluster part would run and compare, without a GPU (verl's schema check where verl imports)."""
    absent = missing(key)
    note = f"; in this interpreter it would be skipped: needs {', '.join(absent)}" if absent else ""
    if key == "verl":
        cfg = verl_config(kit, work, 80)
        ins, outs = verl_paths(work)
        command = rule_command(cfg, kit.EXP, ins, outs)
        b = verl_estimate(cfg, kit.EXP)
        valid = validated(cfg, kit.EXP)
        return {
            "status": "dry",
            "line": f"estimate peak {b.peak.total:.2f} GiB at {b.peak.name} on 80 GB; {valid}{note}",
            "command": command,
            "threads": thread_env(cpus()),
            "merge": shlex.join(merge_command(cfg, kit.EXP, work)),
            "evaluate": shlex.join(evaluate_command(cfg, work, work / "verl" / "model", work / "verl" / "eval")),
            "estimate": {p.name: {**p.terms, "total": p.total} for p in b.phases},
        }
    if key == "colocate":
        cfg = sync_config(kit, work, key, "colocate", 80)
        cmd, _ = kit.train_command(cfg, work, key, probe=True, sft=VLLM_SFT)
        est = trl_estimate(cfg, kit.EXP)
        peak = est["phases"][est["peak_phase"]]
        return {
            "status": "dry",
            "line": f"estimate peak {peak['total']:.2f} GiB at {est['peak_phase']} on 80 GB; after each sync every "
            f"vLLM tensor compared with the trainer's{note}",
            "command": shlex.join(cmd),
            "estimate": est,
        }
    if key == "server":
        line = "TRL's server beside the trainer: generation through VLLMClient, log-probs vs the trainer's; NCCL sync on 2 GPUs"
        out = {"status": "dry", "line": line + note}
        if importlib.util.find_spec("trl") is not None:
            out["server_command"] = shlex.join(server_command(work / VLLM_MODEL, SERVER_PORT, 0.3))
        mode = server_mode_supported(kit, work, 80)
        out["train_leg"] = mode if isinstance(mode, str) else server_leg_shell(kit, mode, work)
        return out
    raise KeyError(key)


def validated(cfg, experiment: str) -> str:
    """The verl command checked against verl 0.9.1's own schema (grpoflow.backends.verl.validate), if verl imports."""
    if importlib.util.find_spec("verl") is None:
        return "verl not importable here: its schema check not run"
    from grpoflow.backends.verl.validate import validate_experiment
    from grpoflow.errors import GrpoflowError

    try:
        r = validate_experiment(cfg, experiment)
    except GrpoflowError as err:
        return f"REJECTED by verl's schema: {err}"
    return f"{r['overrides']} overrides compose against verl's schema and pass its validate_config"


def server_mode_supported(kit, work: Path, gpu_gb: float):
    """The server-mode TRL config when this checkout accepts ``trl.vllm.mode: server``; else why not (a str)."""
    from grpoflow.errors import GrpoflowError

    try:
        return sync_config(kit, work, "server", "server", gpu_gb)
    except GrpoflowError as err:
        return f"train leg not run: this checkout refuses trl.vllm.mode: server ({str(err)[:160]})"


# ---- the parts on the GPU ---------------------------------------------------------------------------------------


def gpu_memory_gb() -> float:
    """The first GPU's memory as sold (GB), as grpoflow.backends.verl.memory.at_job_start reads it."""
    from grpoflow.training.memory import first_gpu_memory_gb

    gb = first_gpu_memory_gb(timeout_s=30)
    if gb is None:
        if REHEARSAL:
            return 80.0
        raise SystemExit("gpu_acceptance_cluster: nvidia-smi named no GPU memory on this machine")
    return gb


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def part_verl(kit, work: Path) -> dict:
    """Two verl GRPO steps through train_grpo's command, then merge_checkpoint's and evaluate's commands."""
    absent = missing("verl")
    if absent:
        return {"status": "skipped", "line": skip_line("verl", absent)}
    gpu_gb = gpu_memory_gb()
    cfg = verl_config(kit, work, gpu_gb)
    ins, outs = verl_paths(work)
    command = rule_command(cfg, kit.EXP, ins, outs)
    b = verl_estimate(cfg, kit.EXP)
    (work / "verl").mkdir(parents=True, exist_ok=True)
    log = work / "verl" / "train.log"
    shell = RULE_SHELL + command
    t0 = time.time()
    with kit.GpuSampler() as smi:
        try:
            code = run_shell(kit, shell, thread_env(cpus()), log, work, timeout=kit.time_left(90))
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "line": f"verl still running at the part's limit: {kit.last_line(log)}"}
    train_s = time.time() - t0
    if code:
        return {"status": "fail", "line": f"train_grpo (verl) exited {code}: {kit.last_line(log)}"}
    text = log.read_text(errors="replace")
    memory = verl_memory_lines(kit, cfg, b, smi.peak_mib)
    merged = run_merge_and_evaluate(kit, cfg, work)
    threads = next(
        (ln.split(": ", 1)[-1] for ln in text.splitlines() if "threads each for verl's" in ln), "no thread line"
    )
    rows = [json.loads(x) for x in Path(outs["metrics"]).read_text().splitlines() if x.strip()]
    ran = merged["ok"] and len(rows) == VERL_RUN["steps"]
    return {
        "status": "pass" if ran and memory["ok"] else ("estimate off" if ran else "fail"),
        "line": f"{len(rows)} steps in {train_s:.0f} s ({threads}); {memory['line']}; {merged['line']}",
        "rows": rows,
        "memory": memory,
        "gpu_gb": gpu_gb,
    }


def run_shell(kit, shell: str, env: dict, log: Path, cwd: Path, timeout: float) -> int:
    """``bash -c shell`` in its own process group, output to ``log``. At the timeout it gets SIGTERM, as SLURM's time
    limit would send, then every process it started is killed: verl's wrapper runs verl in a session of its own
    (grpoflow.backends.verl.train.run_trainer), which the group's kill would not reach, and Ray's processes outlive
    their parents. They are found by a variable every one of them inherits (JOB_MARK)."""
    mark = f"{os.getpid()}-{time.time_ns()}"
    with open(log, "w") as f:
        proc = subprocess.Popen(["bash", "-c", shell], env=kit.job_env({**env, JOB_MARK: mark}), stdout=f, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)  # fmt: skip
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        stop_marked(mark, grace=20)
        kit.kill_group(proc)
        raise


JOB_MARK = "GPU_ACCEPTANCE_JOB"


def stop_marked(mark: str, grace: float) -> None:
    """SIGKILL every process whose environment carries JOB_MARK=mark, after ``grace`` seconds for them to end."""
    import psutil

    def marked() -> list:
        out = []
        for p in psutil.process_iter():
            try:
                if p.environ().get(JOB_MARK) == mark and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return out

    psutil.wait_procs(marked(), timeout=grace)
    for p in marked():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def verl_memory_lines(kit, cfg, b, smi_peak_mib: int) -> dict:
    """The GPU's peak against the estimate's peak phase; the actor's allocator peaks (verl's own metrics) against
    its trainer phases less what lives outside the trainer's allocator."""
    from grpoflow.backends.verl import metrics as vm

    raw = {}
    for path in vm.attempt_files(cfg.checkpoint_dir(kit.EXP)):
        for line in Path(path).read_text().splitlines():
            if line.strip():
                for k, v in json.loads(line).get("data", {}).items():
                    if k.endswith(("max_memory_allocated_gb", "max_memory_reserved_gb")):
                        raw[k] = max(raw.get(k, 0.0), float(v))
    trainer = [p for p in b.phases if "vLLM asleep" in p.terms]
    outside = ("CUDA/NCCL", "vLLM asleep", "fragmentation")
    allocated_est = max(p.total - sum(p.terms.get(k, 0.0) for k in outside) for p in trainer)
    reserved_est = max(p.total - p.terms.get("CUDA/NCCL", 0.0) - p.terms.get("vLLM asleep", 0.0) for p in trainer)
    comparisons = [kit.ratio_line("nvidia-smi peak", smi_peak_mib * kit.MIB / kit.GIB, b.peak.total)]
    for suffix, est in (("max_memory_allocated_gb", allocated_est), ("max_memory_reserved_gb", reserved_est)):
        got = [v for k, v in raw.items() if k.endswith(suffix)]
        if got:
            comparisons.append(kit.ratio_line(f"actor {suffix.split('_gb')[0]}", max(got), est))
    ok = all(c[1] for c in comparisons) and len(comparisons) == 3
    return {
        "ok": ok,
        "line": "; ".join(c[0] for c in comparisons)
        + ("" if len(comparisons) == 3 else "; verl logged no perf/max_memory_*"),
        "verl_memory": raw,
    }


def run_merge_and_evaluate(kit, cfg, work: Path) -> dict:
    """merge_checkpoint's command on the final step, then evaluate (vLLM backend) on the merged model."""
    log = work / "verl" / "merge.out"
    try:
        code = kit.run_logged(merge_command(cfg, kit.EXP, work), {}, log, timeout=kit.time_left(60))
    except subprocess.TimeoutExpired:
        return {"ok": False, "line": "merge still running at the part's limit"}
    model = work / "verl" / "model"
    if code or not (model / "config.json").is_file():
        return {"ok": False, "line": f"merge exited {code}: {kit.last_line(log)}"}
    out = work / "verl" / "eval"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log"
    try:
        code = kit.run_logged(evaluate_command(cfg, work, model, out), {}, log, timeout=kit.time_left())
    except subprocess.TimeoutExpired:
        return {"ok": False, "line": "evaluate still running at the part's limit"}
    if code:
        return {"ok": False, "line": f"evaluate exited {code}: {kit.last_line(log)}"}
    metrics = json.loads((out / "arith.json").read_text())
    n = sum(1 for x in (out / "arith.samples.jsonl").read_text().splitlines() if x.strip())
    gen = metrics.get("generation", {})
    return {
        "ok": n > 0,
        "line": f"merged ({sum(f.stat().st_size for f in model.glob('*.safetensors')) / kit.GIB:.2f} GiB) and "
        f"evaluated on {n} problems by {gen.get('backend', '?')} ({gen.get('device', '?')})",
    }


def part_colocate(kit, work: Path) -> dict:
    """TRL GRPO, vLLM colocated in the training process: the sync probe's records and the memory vs the estimate."""
    absent = missing("colocate")
    if absent:
        return {"status": "skipped", "line": skip_line("colocate", absent)}
    cfg = sync_config(kit, work, "colocate", "colocate", gpu_memory_gb())
    result = run_probed_training(kit, cfg, work, "colocate")
    if "probe" not in result:
        return result
    sync = sync_verdict(result["probe"].get("syncs", []))
    est = trl_estimate(cfg, kit.EXP)
    peak = est["phases"][est["peak_phase"]]
    smi_line, smi_ok = kit.ratio_line("nvidia-smi peak", result["smi_peak_mib"] * kit.MIB / kit.GIB, peak["total"])
    ok = sync["ok"] and result["code"] == 0
    rows = [json.loads(x) for x in (work / "colocate" / "train_metrics.jsonl").read_text().splitlines() if x.strip()]
    own = [r["weight_sync_max_diff"] for r in rows if "weight_sync_max_diff" in r]
    own_line = f"; grpoflow's own check: weight_sync_max_diff {max(own):.2e} over {len(own)} rows" if own else ""
    return {
        "status": "pass" if ok and smi_ok else ("estimate off" if ok else "fail"),
        "line": f"{sync['line']}{own_line}; {smi_line}; job {result['wall']:.0f} s",
        "syncs": result["probe"].get("syncs", []),
        "estimate": est,
    }


def run_probed_training(kit, cfg, work: Path, key: str) -> dict:
    """The train job's command under the kit's probe (kit.probe_train, which records every weight sync)."""
    cmd, env = kit.train_command(cfg, work, key, probe=True, sft=VLLM_SFT)
    (work / key).mkdir(parents=True, exist_ok=True)
    probe_file = work / key / "probe.json"
    log = work / key / "train.log"
    t0 = time.time()
    with kit.GpuSampler() as smi:
        try:
            code = kit.run_logged(cmd, {"GPU_ACCEPTANCE_PROBE": str(probe_file)}, log, timeout=kit.time_left())
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "line": f"training still running at the part's limit: {kit.last_line(log)}"}
    if code:
        return {"status": "fail", "line": f"training exited {code}: {kit.last_line(log)}"}
    probe = json.loads(probe_file.read_text()) if probe_file.is_file() else {}
    return {"code": code, "probe": probe, "smi_peak_mib": smi.peak_mib, "wall": time.time() - t0}


def sync_verdict(syncs: list[dict]) -> dict:
    """Every sync after the first (the weights have moved by then) must leave vLLM equal to the trainer."""
    if not syncs:
        return {"ok": False, "line": "no weight sync recorded"}
    after = [s for s in syncs if s.get("trainer_step", 0) >= 1]
    if not after:
        return {"ok": False, "line": f"{len(syncs)} sync(s), none after an optimizer step"}
    last = after[-1]
    if "error" in last:
        return {"ok": False, "line": f"sync at step {last['trainer_step']}: {last['error']}"}
    if "compared" in last:  # colocate: tensors compared directly
        ok = last["compared"] > 0 and last["unequal"] == 0 and not last["unmatched"] and last["changed_fraction"] > 0
        return {
            "ok": ok,
            "line": f"sync at step {last['trainer_step']}: {last['compared']} vLLM tensors, {last['unequal']} unequal "
            f"to the trainer's (max |diff| {last['max_abs_diff']:.2e}), {len(last['unmatched'])} unmatched; "
            f"{last['changed_fraction']:.1%} of {last['watched']} changed since the previous sync",
        }
    ok = last["after_vs_trainer"] <= last["tolerance"] and last["before_vs_after"] > last["after_vs_trainer"]
    return {
        "ok": ok,
        "line": f"sync at step {last['trainer_step']}: server log-probs vs the trainer's, mean |diff| "
        f"{last['after_vs_trainer']:.4f} (tolerance {last['tolerance']}); the sync moved them by "
        f"{last['before_vs_after']:.4f}",
    }


# ---- the server part --------------------------------------------------------------------------------------------


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def part_server(kit, work: Path) -> dict:
    """TRL's vLLM server beside the trainer: generation, log-probs, the NCCL sync (two GPUs), the train leg."""
    absent = missing("server")
    if absent:
        return {"status": "skipped", "line": skip_line("server", absent)}
    gpus = gpu_count()
    port = free_port(SERVER_PORT)
    (work / "server").mkdir(parents=True, exist_ok=True)
    log = work / "server" / "vllm-serve.log"
    # One GPU: the server takes 30 % of it and the trainer shares the rest; two: the server on the second.
    env = kit.job_env({"CUDA_VISIBLE_DEVICES": "1" if gpus > 1 else "0", "VLLM_SERVER_DEV_MODE": "1"})
    with open(log, "w") as f:
        server = subprocess.Popen(server_command(work / VLLM_MODEL, port, 0.3), env=env, stdout=f, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)  # fmt: skip
    try:
        client = client_checks(kit, work, f"http://127.0.0.1:{port}", sync=gpus > 1, server=server, log=log)
    finally:
        stop_server(kit, server)
    if gpus < 2 or not client["ok"]:
        status = "fail" if not client["ok"] else "incomplete"
        why = (
            ""
            if gpus > 1
            else f"; weight sync not tried: {gpus} GPU(s), it needs 2 (NCCL refuses two ranks on one device)"
        )
        return {"status": status, "line": client["line"] + why, "client": client}
    train = server_train_leg(kit, work)
    return {
        "status": "pass" if train["ok"] else "fail",
        "line": f"{client['line']}; train leg: {train['line']}",
        "client": client,
    }


def stop_server(kit, server: subprocess.Popen) -> None:
    if server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            kit.kill_group(server)


def client_checks(kit, work: Path, url: str, sync: bool, server, log: Path) -> dict:
    """The trainer's side, through TRL's VLLMClient: generate, score fixed sequences, then (``sync``) push weights
    moved by an AdamW step over NCCL and score again."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    deadline = time.time() + min(SERVER_START_S, kit.time_left(30))
    while True:  # VLLMClient's own wait gives no reason when the server died
        if server.poll() is not None:
            return {"ok": False, "line": f"the vLLM server exited {server.returncode}: {kit.last_line(log)}"}
        try:
            client = VLLMClient(base_url=url, connection_timeout=2)
            break
        except OSError:  # requests' ConnectionError, which VLLMClient raises after its wait
            if time.time() > deadline:
                return {
                    "ok": False,
                    "line": f"the vLLM server did not answer within {SERVER_START_S} s: {kit.last_line(log)}",
                }
    model_dir = work / VLLM_MODEL
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {i} + {i + 3}?"}], tokenize=False, add_generation_prompt=True) for i in range(4)]  # fmt: skip
    t0 = time.time()
    out = client.generate(prompts, n=4, max_tokens=32, temperature=1.0)
    gen_s = time.time() - t0
    completions = out["completion_ids"]
    if len(completions) != 16 or not all(completions):
        return {
            "ok": False,
            "line": f"generation through the client returned {len(completions)} completions, some empty",
        }
    device = "cuda:0" if torch.cuda.is_available() else "cpu"  # the CPU only in a rehearsal of this code
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    sequences = [p + c for p, c in zip([x for x in out["prompt_ids"] for _ in range(4)], completions)]
    starts = [len(p) for p in out["prompt_ids"] for _ in range(4)]
    served = sequence_logprobs(client, sequences, starts)
    trained = trainer_logprobs(model, sequences, starts, device)
    agree = mean_abs_diff(served, trained)
    line = (
        f"generation through VLLMClient: 16 completions in {gen_s:.1f} s; server log-probs vs the trainer model's "
        f"mean |diff| {agree:.4f}"
    )
    result = {"ok": agree <= LOGPROB_TOLERANCE, "line": line, "agreement": agree}
    if not sync or not result["ok"]:
        return result
    step_model(model, sequences, device)
    moved = trainer_logprobs(model, sequences, starts, device)
    try:
        client.init_communicator(device=device)
        metadata = [(n, str(p.dtype).removeprefix("torch."), list(p.shape)) for n, p in model.named_parameters()]
        with client.weight_update():  # as TRL's VLLMGeneration.sync_weights streams them (vllm_generation.py:481-512)
            client.update_named_params(metadata, ((n, p.data) for n, p in model.named_parameters()))
        client.reset_prefix_cache()
        after = sequence_logprobs(client, sequences, starts)
    except Exception as exc:  # the finding is the failure itself: the line says where it stopped
        return {**result, "ok": False, "line": f"{line}; the NCCL sync failed: {type(exc).__name__}: {str(exc)[:200]}"}
    result.update(
        ok=mean_abs_diff(after, moved) <= LOGPROB_TOLERANCE and mean_abs_diff(after, served) > LOGPROB_TOLERANCE,
        line=f"{line}; NCCL sync of an AdamW-stepped model: server vs trainer {mean_abs_diff(after, moved):.4f}, "
        f"moved by {mean_abs_diff(after, served):.4f}",
    )
    client.close_communicator()
    return result


# bf16 serving against fp32 scoring of the same weights: per-token log-probs differ by a few 1e-3 nats; an AdamW step
# at lr 1e-3 moves them by far more. Not yet measured on a GPU (the first run sets it).
LOGPROB_TOLERANCE = 0.05


def sequence_logprobs(client, sequences: list[list[int]], starts: list[int]) -> list[list[float]]:
    out = client.get_sequence_logprobs(sequences, starts, top_logprobs=1)
    return [[tok[0] for tok in seq] for seq in out["actual_logprobs"]]


def trainer_logprobs(model, sequences: list[list[int]], starts: list[int], device: str) -> list[list[float]]:
    import torch

    out = []
    with torch.no_grad():
        for seq, start in zip(sequences, starts):
            ids = torch.tensor([seq], device=device)
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            out.append([logp[i - 1, seq[i]].item() for i in range(start, len(seq))])
    return out


def mean_abs_diff(a: list[list[float]], b: list[list[float]]) -> float:
    pairs = [(x, y) for s, t in zip(a, b) for x, y in zip(s, t)]
    return sum(abs(x - y) for x, y in pairs) / max(len(pairs), 1)


def step_model(model, sequences: list[list[int]], device: str) -> None:
    """One AdamW step at SYNC_RUN's rate on a language-model loss: weights the server does not have yet."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=SYNC_RUN["learning_rate"], weight_decay=0.0)
    shortest = min(len(s) for s in sequences)
    ids = torch.tensor([s[:shortest] for s in sequences], device=device)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()


def server_leg_shell(kit, cfg, work: Path) -> str:
    """train_grpo's command for the server-mode experiment, as the rule composes it (the backend's command through
    grpoflow.deployment), with the training module run under the kit's probe instead: whatever grpoflow's server
    mode puts around the trainer (starting the server, checking it) runs as it is."""
    from grpoflow.backends.trl.commandline import command

    module = "python -m grpoflow.backends.trl.train"
    outs = {"marker": str(work / "server" / "training_complete.json"), "metrics": str(work / "server" / "train_metrics.jsonl")}  # fmt: skip
    ins = {"train": str(work / "data" / "train.parquet"), "val": str(work / "data" / "val.parquet")}
    text = command(cfg, kit.EXP, {**ins, "sft": str(work / VLLM_SFT)}, outs)
    if module not in text:
        raise ValueError(f"the server-mode command does not run `{module}`: {text[:200]}")
    probed = text.replace(module, f"{shlex.quote(sys.executable)} {shlex.quote(str(kit.THIS))} --probe-train", 1)
    return RULE_SHELL + in_plane(cfg, kit.EXP, probed)


def server_train_leg(kit, work: Path) -> dict:
    """train_grpo's command with trl.vllm.mode: server under the sync probe, when this checkout accepts it: the
    server is then the one grpoflow's server mode starts, as its config says (the kit's own is stopped by then)."""
    cfg = server_mode_supported(kit, work, gpu_memory_gb())
    if isinstance(cfg, str):
        return {"ok": False, "line": cfg}
    try:
        shell = server_leg_shell(kit, cfg, work)
    except ValueError as err:
        return {"ok": False, "line": f"train leg not run: {err}"}
    (work / "server").mkdir(parents=True, exist_ok=True)
    probe_file, log = work / "server" / "probe.json", work / "server" / "train.log"
    try:
        code = run_shell(kit, shell, {"GPU_ACCEPTANCE_PROBE": str(probe_file)}, log, work, timeout=kit.time_left())
    except subprocess.TimeoutExpired:
        return {"ok": False, "line": f"train leg still running at the part's limit: {kit.last_line(log)}"}
    if code:
        return {"ok": False, "line": f"train leg exited {code}: {kit.last_line(log)}"}
    probe = json.loads(probe_file.read_text()) if probe_file.is_file() else {}
    return sync_verdict(probe.get("syncs", []))


# ---- the probe's weight-sync records (inside the training process, kit.probe_train) ------------------------------

# vLLM's Qwen3 packs these (vllm/model_executor/models/qwen3.py, packed_modules_mapping).
PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def install_sync_probe(record: dict) -> None:
    """Wrap TRL 1.16's VLLMGeneration.sync_weights (trl/generation/vllm_generation.py:481): after each sync, compare
    what vLLM now holds with the trainer's weights and append the comparison to ``record["syncs"]``."""
    from trl.generation import vllm_generation

    original = vllm_generation.VLLMGeneration.sync_weights
    syncs = record.setdefault("syncs", [])
    watched: dict = {}

    def sync_weights(self):
        before = server_snapshot(self) if self.mode == "server" else None
        original(self)
        trainer = getattr(self, "gpu_acceptance_trainer", None)  # set by kit.probe_train
        step = trainer.state.global_step if trainer is not None else len(syncs)
        try:
            entry = compare_colocated(self, watched) if self.mode == "colocate" else compare_served(self, before)
        except Exception as exc:  # the probe must report, not break the run it measures
            entry = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        syncs.append({"trainer_step": step, **entry})

    vllm_generation.VLLMGeneration.sync_weights = sync_weights


def vllm_model(vgen):
    """The in-process vLLM model TRL loads synced weights into (vllm_generation.py:507, colocate mode)."""
    return vgen.llm.llm_engine.model_executor.driver_worker.model_runner.model


def expected_tensor(name: str, trainer: dict):
    import torch

    for packed, parts in PACKED.items():
        if f".{packed}." in name:
            pieces = [trainer.get(name.replace(packed, p)) for p in parts]
            return None if any(p is None for p in pieces) else torch.cat(pieces, 0)
    return trainer.get(name)


def compare_colocated(vgen, watched: dict) -> dict:
    """Every vLLM parameter against the trainer's tensor(s) it was loaded from, cast to vLLM's dtype."""
    trainer = {name: t.detach() for name, t in vgen._iter_named_params()}
    compared = unequal = 0
    unmatched, max_diff = [], 0.0
    for name, param in vllm_model(vgen).named_parameters():
        want = expected_tensor(name, trainer)
        if want is None or tuple(want.shape) != tuple(param.shape):
            unmatched.append(name)
            continue
        diff = (want.to(param.device, param.dtype).float() - param.detach().float()).abs().max().item()
        compared += 1
        unequal += diff > 0
        max_diff = max(max_diff, diff)
    first = next(n for n, _ in vllm_model(vgen).named_parameters() if "down_proj" in n)
    now = dict(vllm_model(vgen).named_parameters())[first].detach().float().cpu()
    changed = (now != watched["tensor"]).float().mean().item() if "tensor" in watched else 0.0
    watched["tensor"] = now
    return {
        "compared": compared,
        "unequal": unequal,
        "max_abs_diff": max_diff,
        "unmatched": unmatched[:10],
        "watched": first,
        "changed_fraction": changed,
    }


def unwrapped(model):
    return getattr(model, "module", model)  # DDP's wrapper, if accelerate put one around it


def probe_sequences(vgen) -> tuple[list[list[int]], list[int]]:
    import random

    rng = random.Random(0)
    vocab = unwrapped(vgen.model).config.vocab_size
    seqs = [[rng.randrange(vocab) for _ in range(48)] for _ in range(4)]
    return seqs, [16] * len(seqs)


def server_snapshot(vgen):
    if not vgen.accelerator.is_main_process:
        return None
    seqs, starts = probe_sequences(vgen)
    return sequence_logprobs(vgen.vllm_client, seqs, starts)


def compare_served(vgen, before) -> dict:
    """The server's log-probs of fixed sequences after the sync against the trainer model's (no direct access to
    the server's tensors)."""
    import torch

    if before is None:
        return {}
    seqs, starts = probe_sequences(vgen)
    after = sequence_logprobs(vgen.vllm_client, seqs, starts)
    model = unwrapped(vgen.model)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.autocast(device.type, enabled=False):
        trained = trainer_logprobs(model, seqs, starts, str(device))
    model.train(was_training)
    return {
        "after_vs_trainer": mean_abs_diff(after, trained),
        "before_vs_after": mean_abs_diff(before, after),
        "tolerance": LOGPROB_TOLERANCE,
    }


RUNNERS = {"verl": part_verl, "colocate": part_colocate, "server": part_server}
