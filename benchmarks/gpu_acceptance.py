"""GPU acceptance checks: the project's GPU-side claims measured on one CUDA GPU in one prepared run (issue 33).

Every GPU-side statement of grpoflow (the TRL memory estimate, bf16 autocast with fp32 master weights, the GPU
node's driver check, evaluation on CUDA, step times, torchrun's SIGTERM grace, the Tunix memory model) was written
from arithmetic and from reading source. This script checks them on a machine with one NVIDIA GPU (an H100 80 GB,
driver R580, CUDA 13, torch 2.11.0+cu130 is what this project is lent), inside one process tree, in under 8
minutes, and prints one line per part plus a table; it writes ``gpu-acceptance.json``, ``gpu-acceptance.md`` and
``gpu-acceptance-logs.txt`` (the logs' tails) to the output dir (``--out``, else ``$OUT`` when set, else
``./gpu-acceptance-out``); data, models and checkpoints go to ``--work`` (default: a new temporary dir).

    python benchmarks/gpu_acceptance.py                  # every part (needs CUDA); `make gpu-acceptance`
    python benchmarks/gpu_acceptance.py --parts gpucheck,masters
    python benchmarks/gpu_acceptance.py --plan           # CPU: the parts, the wheels to carry, their size
    python benchmarks/gpu_acceptance.py --dry            # CPU: each part's settings, commands and estimates
    python benchmarks/gpu_acceptance.py --build-wheels .whl   # download/build the wheel folder here (PyPI)

Parts (each in its own subprocess with its own timeout; one failing does not stop the rest):

1. ``gpucheck``: ``grpoflow.gpucheck.check`` (its public entry point) against the real ``nvidia-smi`` and driver.
2. ``trl-full`` / ``trl-lora``: TRL GRPO through the train_grpo job's entry point (``grpoflow.backends.trl.train``
   under the job's launcher ``grpoflow.backends.trl.launch`` (torchrun), one process, ``trl.use_cpu: false``, ``trl.vllm.mode: none``) on a model of
   Qwen3-0.6B's architecture with random weights built from its config, full fine-tune and LoRA r16: peak
   ``torch.cuda.max_memory_allocated``/``reserved`` and the memory at train start and after the first optimizer
   step against ``grpoflow.backends.trl.memory``'s estimate for the same settings, and the step time. The job
   runs under this script's ``--probe-train`` wrapper (which stands in for nothing: it runs the same module with
   ``runpy`` and only adds a Trainer callback that reads the CUDA allocator).
3. ``masters``: fp32 master weights under bf16 autocast stay fp32 and move at lr 1e-6; bf16 weights do not (the
   premise of the bf16 refusals, grpoflow.backends.verl.memory.bf16_update_lost).
4. ``sigterm``: SIGTERM to the job's launcher (``grpoflow.backends.trl.launch`` around the GPU image's torchrun)
   running a full fine-tune: does the job stop at a step boundary with a complete checkpoint, and how long after the
   signal (torchrun's own grace is 30 s on torch 2.11; the launcher keeps torchrun from starting it and gives the
   ranks ``trl.shutdown_timeout``).
5. ``eval``: the demo's tiny model evaluated by the transformers backend (``python -m grpoflow.workflow
   evaluate``) on CUDA and on the CPU: verdicts and completions compared.
6. ``tunix``: if Tunix imports on the machine's JAX (CUDA), XLA's memory for Tunix's GRPO loss + gradient at
   Qwen3-0.6B widths (2 and 4 layers) against ``grpoflow.backends.tunix.memory``'s per-layer model.

7. ``verl``, ``colocate``, ``server`` (the cluster parts, ``--parts cluster``; benchmarks/gpu_acceptance_cluster.py):
   two verl GRPO steps through train_grpo's own command, merged and evaluated, memory against verl's estimate; TRL
   with colocated vLLM, whose weights are compared with the trainer's after every sync; TRL's vLLM server beside
   the trainer (generation through the client; NCCL weight sync with two GPUs). They need the cluster environment
   (vLLM, verl, Ray), which the lent machine lacks and cannot be carried (``--plan`` gives the sizes): there they
   print ``skipped: needs ...``; run them on a GPU node with ``GPU_PYTHON=<cluster_env>/bin/python``.

Without a CUDA device every part prints ``skipped: no CUDA device`` and the script exits 3: nothing is pretended.
What it cannot cover: NCCL across GPUs, several nodes, on the lent machine vLLM, verl and Ray
(docs/gpu-acceptance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
sys.path.insert(0, str(THIS.parent))
import gpu_acceptance_cluster as cluster  # noqa: E402 - beside this script

EXP = "tiny-arith-seed1"
MIB = 2**20
GIB = 2**30
# The device tool carries at most 64 MiB of ignored paths with the working tree.
WHEEL_BUDGET_BYTES = 64 * MIB
# The whole run must end well inside the device tool's 10-minute command limit.
DEFAULT_BUDGET_S = 450
NO_CUDA = "skipped: no CUDA device"
RESULT_JSON = "gpu-acceptance.json"
RESULT_MD = "gpu-acceptance.md"
RESULT_LOGS = "gpu-acceptance-logs.txt"
LOG_TAIL_LINES = 60
# Where the measured figure may stray from the estimate before the estimate must be corrected (issue 33).
TOLERANCE = 0.15


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    timeout_s: int
    needs_prep: bool
    wheels: tuple[str, ...]  # wheel groups it needs (WHEELS' "group")


# In the order they run: the cheap and most telling first, so a budget cut drops the least.
PARTS = [
    Part("gpucheck", "grpoflow.gpucheck against nvidia-smi and the driver", 30, False, ("grpoflow",)),
    Part("masters", "fp32 masters under bf16 autocast, lr 1e-6", 60, False, ("grpoflow", "trl")),
    Part("trl-full", "TRL GRPO full fine-tune: memory vs estimate, step time", 110, True, ("grpoflow", "trl")),
    Part("trl-lora", "TRL GRPO LoRA r16: memory vs estimate, step time", 90, True, ("grpoflow", "trl")),
    Part("sigterm", "SIGTERM to torchrun: checkpoint inside the grace", 110, True, ("grpoflow", "trl")),
    Part("eval", "transformers evaluation, CUDA vs CPU verdicts", 70, True, ("grpoflow",)),
    Part("tunix", "Tunix GRPO update on JAX CUDA vs tunix.memory", 75, False, ("grpoflow", "tunix")),
    # The cluster parts (benchmarks/gpu_acceptance_cluster.py): they need the cluster environment (vLLM, verl,
    # Ray), which cannot be carried to the lent machine; with it, `--parts cluster` runs these three alone.
    Part("verl", "verl GRPO via train_grpo's command, merge, evaluate; memory vs estimate", 270, True, ("cluster",)),
    Part("colocate", "TRL colocate: vLLM's weights equal the trainer's after each sync", 90, True, ("cluster",)),
    Part("server", "TRL server mode: generation via the client; NCCL sync (2 GPUs)", 90, True, ("cluster",)),
]
PART_KEYS = [p.key for p in PARTS]
# Names --parts accepts for a group of parts.
PART_GROUPS = {"cluster": list(cluster.CLUSTER_PART_KEYS)}
PREP_TIMEOUT_S = 90

# What the GPU machine lacks, by group: name, lock file whose pin is used, why. The machine's image
# (/work/.library/device/KINDS.md, read 2026-11-17: Python 3.12, torch 2.11.0+cu130, transformers 5.17, peft,
# accelerate, pyarrow, pandas, xxhash, fsspec, attrs, sympy, matplotlib, JAX 0.11.2 with flax/optax/orbax) has the
# rest; the script's env line prints the versions it finds there.
WHEELS = [
    ("trl", "trl", "local.lock", "TRL's GRPOTrainer"),
    ("trl", "datasets", "local.lock", "TRL's dataset handling"),
    ("trl", "dill", "local.lock", "datasets"),
    ("trl", "multiprocess", "local.lock", "datasets"),
    ("grpoflow", "jsonschema", "local.lock", "grpoflow.config (schema validation)"),
    ("grpoflow", "jsonschema-specifications", "local.lock", "jsonschema"),
    ("grpoflow", "referencing", "local.lock", "jsonschema"),
    ("grpoflow", "rpds-py", "local.lock", "jsonschema (binary, cp312)"),
    ("grpoflow", "math-verify", "local.lock", "grpoflow.rewards"),
    ("grpoflow", "latex2sympy2_extended", "local.lock", "math-verify"),
    ("grpoflow", "antlr4-python3-runtime", "local.lock", "latex2sympy2_extended"),
    ("grpoflow", "google-re2", "local.lock", "grpoflow.rewards._linear_re (binary, cp312)"),
    ("grpoflow", "cachetools", "local.lock", "grpoflow.rewards.verifier"),
    ("tunix", "google-tunix", "tunix.lock", "Tunix"),
    ("tunix", "clu", "tunix.lock", "Tunix (metrics)"),
    ("tunix", "google-metrax", "tunix.lock", "Tunix (metrics)"),
    ("tunix", "googleapis-common-protos", "tunix.lock", "clu"),
    ("tunix", "perfetto", "tunix.lock", "Tunix (profiling import)"),
    ("tunix", "tensorboardx", "tunix.lock", "metrax"),
]
# The wheels must match the machine's interpreter (python3 there is 3.12).
TARGET_PYTHON = "3.12"
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]

# The GRPO runs of parts 2 and 4: Qwen3-0.6B's architecture, 4 prompts × 8 completions of up to 128 tokens per
# step, 16 completions per forward/backward (2 micro-batches), lr 1e-6, beta 0.04 (a reference copy for the full
# fine-tune), HF generate (no vLLM).
RUN = {
    "prompts_per_step": 4,
    "num_generations": 8,
    "max_response_length": 128,
    "completions_per_device_batch": 16,
    "learning_rate": 1.0e-6,
    "kl_coef": 0.04,
    "steps": 3,
}


# ---- the plan: parts, wheels, sizes ---------------------------------------------------------------------------


def locked_versions(lock: Path) -> dict[str, str]:
    """{normalised name: version} of a requirements lock (``name==version`` lines)."""
    out = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if m:
            out[normalise(m.group(1))] = m.group(2)
    return out


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_list(repo: Path = REPO, groups: set[str] | None = None) -> list[dict]:
    """The wheels to carry for ``groups`` (all when None), each pinned to its lock's version."""
    locks = {}
    rows = []
    for group, name, lock, why in WHEELS:
        if groups is not None and group not in groups:
            continue
        if lock not in locks:
            locks[lock] = locked_versions(repo / "requirements" / lock)
        version = locks[lock].get(normalise(name))
        if version is None:
            raise SystemExit(
                f"gpu_acceptance: {name} is not pinned in requirements/{lock}: add it there or drop it from WHEELS"
            )
        rows.append({"group": group, "name": name, "version": version, "lock": lock, "why": why})
    return rows


# Published as a source distribution only (pure Python): built into a wheel here, which then installs anywhere.
SDIST_ONLY = {"antlr4-python3-runtime"}


def download_command(rows: list[dict], dest: str) -> list[str]:
    """pip download of exactly the pinned wheels, for the machine's Python and platform, no dependencies."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version"]
    cmd += [TARGET_PYTHON, "--implementation", "cp"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    pins = [f"{r['name']}=={r['version']}" for r in rows if normalise(r["name"]) not in SDIST_ONLY]
    return cmd + ["-d", dest] + pins


def build_command(dest: str, rows: list[dict] | None = None) -> list[str]:
    """pip wheel of grpoflow (this checkout) and of the pinned source-only packages, no dependencies."""
    pins = [f"{r['name']}=={r['version']}" for r in rows or [] if normalise(r["name"]) in SDIST_ONLY]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dest, str(REPO), *pins]


def wheel_sizes(folder: Path | None, rows: list[dict]) -> dict:
    """Sizes of the wheels present in ``folder``, which planned ones are missing, and the budget verdict."""
    files = sorted(folder.glob("*.whl")) if folder and folder.is_dir() else []
    present = {}
    for f in files:
        present[normalise(f.name.split("-")[0])] = f
    found, missing = [], []
    for r in rows + [{"name": "grpoflow", "version": "(this checkout)"}]:
        f = present.get(normalise(r["name"]))
        (found if f else missing).append({**r, "file": f.name if f else None, "bytes": f.stat().st_size if f else None})
    total = sum(f.stat().st_size for f in files)
    return {
        "folder": str(folder) if folder else None,
        "wheels": found,
        "missing": [m["name"] for m in missing],
        "total_bytes": total,
        "budget_bytes": WHEEL_BUDGET_BYTES,
        "fits": total <= WHEEL_BUDGET_BYTES,
        "complete": not missing,
    }


def budget_line(sizes: dict) -> str:
    if not sizes["folder"] or not sizes["wheels"]:
        return "wheel folder: none measured (run --build-wheels DIR where PyPI answers, then --plan --wheels DIR)"
    verdict = "fits" if sizes["fits"] else "DOES NOT FIT"
    missing = f"; missing: {', '.join(sizes['missing'])}" if sizes["missing"] else ""
    return (
        f"wheel folder {sizes['folder']}: {len(sizes['wheels'])} wheels, {sizes['total_bytes'] / MIB:.2f} MiB of "
        f"{WHEEL_BUDGET_BYTES / MIB:.0f} MiB: {verdict}{missing}"
    )


def selected_parts(spec: str | None) -> list[Part]:
    """The parts named in ``spec`` (comma-separated keys), in run order; all when None."""
    if not spec:
        return list(PARTS)
    wanted = [k for w in spec.split(",") if w.strip() for k in PART_GROUPS.get(w.strip(), [w.strip()])]
    unknown = [k for k in wanted if k not in PART_KEYS]
    if unknown:
        raise SystemExit(
            f"gpu_acceptance: unknown part(s) {', '.join(unknown)}: choose from {', '.join(PART_KEYS)} (or a group: "
            f"{', '.join(PART_GROUPS)})"
        )
    return [p for p in PARTS if p.key in wanted]


def plan(parts: list[Part], wheels_dir: Path | None) -> dict:
    groups = {g for p in parts for g in p.wheels}
    rows = wheel_list(REPO, groups)
    sizes = wheel_sizes(wheels_dir, rows)
    return {
        "parts": [{"key": p.key, "title": p.title, "timeout_s": p.timeout_s} for p in parts],
        "prep_timeout_s": PREP_TIMEOUT_S,
        "budget_s": DEFAULT_BUDGET_S,
        "wheels_to_bring": rows,
        "download": shlex.join(download_command(rows, ".whl")),
        "build": shlex.join(build_command(".whl", rows)),
        "sizes": sizes,
        "device_command": device_command(),
        "cluster": cluster.plan_lines(locked_versions(REPO / "requirements" / "cluster.lock"))
        if any(p.key in cluster.CLUSTER_PART_KEYS for p in parts)
        else [],
    }


def device_command(wheels: str = ".whl") -> str:
    """The one device call: install the carried wheels offline, then run every part with a timeout."""
    return (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        f"{wheels}/*.whl && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 || exit; "
        f"timeout 540 python3 benchmarks/gpu_acceptance.py --out $OUT"
    )


def print_plan(p: dict) -> None:
    print("parts (each its own subprocess; the run stops starting parts after --budget seconds):")
    print(
        f"  prep   build the arith data, the Qwen3-0.6B-architecture model and the demo model ({p['prep_timeout_s']} s)"
    )
    for part in p["parts"]:
        print(f"  {part['key']:<9} {part['title']} (timeout {part['timeout_s']} s)")
    print(
        f"total budget {p['budget_s']} s; timeouts sum to {sum(x['timeout_s'] for x in p['parts']) + p['prep_timeout_s']} s"
    )
    print("wheels to bring (pinned by the locks; everything else is on the GPU image):")
    for r in p["wheels_to_bring"]:
        print(f"  {r['name'] + '==' + r['version']:<36} [{r['group']}] {r['why']} ({r['lock']})")
    print(f"  {'grpoflow (this checkout)':<36} pip wheel --no-deps .")
    print("build the folder (where PyPI answers):")
    print(f"  {p['download']}")
    print(f"  {p['build']}")
    print("  or: python benchmarks/gpu_acceptance.py --build-wheels .whl")
    print(budget_line(p["sizes"]))
    print("device call (carry .whl):")
    print(f"  {p['device_command']}")
    for line in p["cluster"]:
        print(line)


def build_wheels(dest: Path, parts: list[Part]) -> dict:
    """Download the pinned wheels and build grpoflow's into ``dest``; its measured size against the budget."""
    dest.mkdir(parents=True, exist_ok=True)
    rows = wheel_list(REPO, {g for p in parts for g in p.wheels})
    import shutil

    # grpoflow is built from a copy: setuptools writes build/ and *.egg-info beside the sources it builds.
    with tempfile.TemporaryDirectory(prefix="grpoflow-wheel-") as tmp:
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy2(REPO / name, tmp)
        shutil.copytree(REPO / "src", Path(tmp) / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        build = build_command(str(dest.resolve()), rows)
        build[build.index(str(REPO))] = tmp
        for cmd in (download_command(rows, str(dest)), build):
            _run_pip(cmd)
    return wheel_sizes(dest, rows)


def _run_pip(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(
            f"gpu_acceptance: pip {cmd[3]} failed (exit {proc.returncode}): {tail[0]} (it needs the package "
            "registry, PyPI: run it where pip reaches it)"
        )


# ---- the table ------------------------------------------------------------------------------------------------

COLUMNS = ["part", "status", "result"]


def markdown_table(results: list[dict], env: dict) -> str:
    head = [
        "# GPU acceptance run",
        "",
        f"device: {env.get('device', 'unknown')}; {env.get('versions', '')}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    rows = [f"| {r['part']} | {r['status']} | {r['line'].replace('|', '/')} |" for r in results]
    return "\n".join(head + rows) + "\n"


def write_outputs(out: Path, results: list[dict], env: dict) -> tuple[Path, Path]:
    """Both files, each written whole under a temporary name and renamed (a reader never sees half a table)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = out / RESULT_JSON, out / RESULT_MD
    for path, text in zip(
        paths, (json.dumps({"env": env, "results": results}, indent=1), markdown_table(results, env))
    ):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return paths


def log_tails(work: Path) -> str:
    """The last lines of every log of the run (each part's and each job's): a one-shot GPU run's only diagnosis."""
    chunks = []
    for log in sorted(work.glob("*.log")) + sorted(work.glob("*/*.log")) + sorted(work.glob("eval/*/log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        chunks.append(f"==> {log.relative_to(work)} <==\n" + "\n".join(line[:400] for line in lines))
    return "\n\n".join(chunks) + "\n"


def default_out() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else Path("gpu-acceptance-out")


# ---- the CPU-computable side of each part (--dry, and what the GPU run compares against) ----------------------


def resolved_config(work: Path, lora: int, steps: int, checkpoint_dir: Path, save_freq: int | None = None):
    """The demo config moved onto one GPU with Qwen3-0.6B's architecture (as the recipes would write it)."""
    import copy

    import yaml

    from grpoflow.config import deep_merge, resolve_config

    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    override = {
        "datasets": {"arith": {"synthetic": {"train_size": 300, "test_size": 40}, "validation": {"size": 20}}},
        "defaults": {
            "architecture": "qwen3-0.6b",
            "trl": {
                "use_cpu": False,
                "processes": 1,
                "vllm": {"mode": "none"},
                "completions_per_device_batch": RUN["completions_per_device_batch"],
            },
            "resources": {"gpus_per_node": 1, "gpu_mem_gb": 80, "mem_mb": 100000},
            "grpo": {
                "prompts_per_step": RUN["prompts_per_step"],
                "num_generations": RUN["num_generations"],
                "max_response_length": RUN["max_response_length"],
                "learning_rate": RUN["learning_rate"],
                "kl_coef": RUN["kl_coef"],
                "total_steps": steps,
                "save_freq": save_freq or steps,
                "lora": {"rank": lora, "alpha": 2 * lora} if lora else {"rank": 0},
            },
        },
        "experiments": {EXP: {"checkpoint_dir": str(checkpoint_dir)}},
    }
    return resolve_config(deep_merge(copy.deepcopy(raw), override))


def estimate_terms(cfg) -> dict:
    """grpoflow.backends.trl.memory's estimate for the experiment, per phase and term (GiB)."""
    from grpoflow.backends.trl.commandline import memory_estimate

    b = memory_estimate(EXP, cfg.experiment(EXP))
    return {
        "arch": b.arch,
        "peak_phase": b.peak.name,
        "phases": {p.name: {**p.terms, "total": p.total} for p in b.phases},
    }


def train_command(cfg, work: Path, name: str, probe: bool, sft: str = "sft.json") -> tuple[list[str], dict]:
    """The train_grpo job's command (grpoflow.backends.trl.commandline.command) for one process under the job's
    launcher. The command adds the launcher only for several processes; here it is put in front by hand, as
    ``commandline.launcher`` writes it, so the one process runs under the GPU image's torchrun with the launcher's
    thread split and SIGTERM grace."""
    from grpoflow.backends.trl.commandline import command

    outs = {"marker": str(work / name / "training_complete.json"), "metrics": str(work / name / "train_metrics.jsonl")}
    ins = {"train": str(work / "data" / "train.parquet"), "val": str(work / "data" / "val.parquet")}
    ins["sft"] = str(work / sft)
    argv = shlex.split(command(cfg, EXP, ins, outs))
    assert argv[:3] == ["python", "-m", "grpoflow.backends.trl.train"], argv[:3]
    spec = json.loads(argv[argv.index("--spec") + 1])
    grace = spec["trl"]["shutdown_timeout"]
    launch = [sys.executable, "-m", "grpoflow.backends.trl.launch", "--nproc-per-node", "1"]
    launch += ["--shutdown-timeout", str(grace), "--"]
    target = [str(THIS), "--probe-train"] if probe else ["-m", "grpoflow.backends.trl.train"]
    return launch + target + argv[3:], {"grace": str(grace), **outs}


def dry_part(key: str, work: Path) -> dict:
    """What a part would run and compare, computed without a GPU (no torch import for the TRL parts)."""
    if key == "gpucheck":
        from grpoflow import gpucheck

        return {
            "status": "dry",
            "line": f"would run grpoflow.gpucheck.check; this environment's CUDA: {gpucheck.environment_cuda()}",
        }
    if key in ("trl-full", "trl-lora"):
        lora = 16 if key == "trl-lora" else 0
        cfg = resolved_config(work, lora, RUN["steps"], work / key / "ckpt")
        est = estimate_terms(cfg)
        cmd, env = train_command(cfg, work, key, probe=True)
        peak = est["phases"][est["peak_phase"]]
        return {
            "status": "dry",
            "line": f"estimate peak {peak['total']:.2f} GiB at {est['peak_phase']} ({est['arch']})",
            "estimate": est,
            "command": shlex.join(cmd),
        }
    if key == "sigterm":
        cfg = resolved_config(work, 0, 40, work / key / "ckpt", save_freq=1)
        cmd, env = train_command(cfg, work, key, probe=False)
        return {
            "status": "dry",
            "line": f"would SIGTERM the job's launcher after checkpoint-1; grace {env['grace']} s",
            "command": shlex.join(cmd),
        }
    if key == "masters":
        from grpoflow.backends.verl.memory import TYPICAL_WEIGHT, bf16_half_spacing, bf16_update_lost

        return {
            "status": "dry",
            "line": f"predicts: lr 1e-6 < bf16 half spacing {bf16_half_spacing(TYPICAL_WEIGHT):.1e} at |w| {TYPICAL_WEIGHT}: "
            f"bf16 update lost = {bf16_update_lost(1e-6)}",
        }
    if key == "eval":
        cmd = eval_command(work)
        return {"status": "dry", "line": f"would run: {shlex.join(cmd)[:160]}", "command": shlex.join(cmd)}
    if key in cluster.CLUSTER_PART_KEYS:
        return cluster.dry(key, sys.modules[__name__], work)
    if key == "tunix":
        from grpoflow.backends.tunix import memory as tmem
        from grpoflow.backends.verl.memory import PRESETS

        arch = PRESETS["qwen3-0.6b"]
        return {
            "status": "dry",
            "line": f"model per layer at T=512, bf16: {tunix_model_bytes(tmem, arch, 512) / MIB:.1f} MiB (no constant term)",
        }
    raise KeyError(key)


def tunix_model_bytes(tmem, arch, tokens: int) -> float:
    """grpoflow.backends.tunix.memory's per-layer bytes of one sequence of ``tokens`` at bf16 compute."""
    return (
        tmem.per_token_layer_bytes(arch, 2) * tokens
        + tmem.ATTENTION_SCORE_BYTES[2] * arch.num_attention_heads * tokens**2
    )


# ---- prep: data, models (runs on the GPU machine, CPU work) -----------------------------------------------------


def prep(work: Path) -> dict:
    """The arith Parquet (grpoflow's data pipeline), a Qwen3-0.6B-architecture model with random weights saved in
    bf16 as Qwen3-0.6B ships (the demo's tokenizer; token ids past it are never decoded), and the demo's tiny model."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from grpoflow.backends.verl.memory import PRESETS
    from grpoflow.data.convert import convert_split
    from grpoflow.data.download import download_dataset
    from grpoflow.demo.tiny import CHAT_TEMPLATE, EOS, PAD, build_tiny_model, corpus_texts, train_tokenizer
    from grpoflow.discovery import discover_to_file

    cfg = resolved_config(work, 0, RUN["steps"], work / "unused")
    spec = cfg.datasets["arith"]
    data = work / "data"
    manifest = data / "raw" / "manifest.json"
    download_dataset("arith", spec, str(manifest))
    for split in cfg.dataset_splits("arith"):
        convert_split(
            "arith", spec, str(manifest), split, str(data / f"{split}.parquet"), str(data / f"{split}.summary.json")
        )

    build_tiny_model(cfg.demo["tiny_model"], str(data / "train.parquet"), str(work / "demo-model"))

    a = PRESETS["qwen3-0.6b"]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(corpus_texts(str(data / "train.parquet")), 512),
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=4096,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    eos, pad = tok.convert_tokens_to_ids(EOS), tok.convert_tokens_to_ids(PAD)
    config = Qwen3Config(
        vocab_size=a.vocab_size,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.num_layers,
        num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        max_position_embeddings=4096,
        tie_word_embeddings=a.tie_word_embeddings,
        rope_theta=1e6,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(work / "qwen3-0.6b-random")
    tok.save_pretrained(work / "qwen3-0.6b-random")
    discover_to_file({"model": str(work / "qwen3-0.6b-random")}, str(work / "sft.json"))
    # The vLLM parts' model: the same widths with the tokenizer's vocabulary, so that vLLM's detokenizer and the
    # rewards never meet a sampled id the tokenizer lacks (the tokenizer filled up to it with plain tokens).
    if len(tok) > cluster.VLLM_VOCAB:
        raise RuntimeError(f"the demo tokenizer has {len(tok)} tokens, more than {cluster.VLLM_VOCAB}")
    tok.add_tokens([f"<|fill{i}|>" for i in range(cluster.VLLM_VOCAB - len(tok))])
    config.vocab_size = cluster.VLLM_VOCAB
    torch.manual_seed(0)
    small = Qwen3ForCausalLM(config).to(torch.bfloat16)
    small.generation_config = model.generation_config
    small.save_pretrained(work / cluster.VLLM_MODEL)
    tok.save_pretrained(work / cluster.VLLM_MODEL)
    discover_to_file({"model": str(work / cluster.VLLM_MODEL)}, str(work / cluster.VLLM_SFT))
    return {
        "status": "pass",
        "line": f"data, demo model and a {n / 1e9:.3f} B-parameter Qwen3-0.6B-architecture model built (and its "
        f"{cluster.VLLM_VOCAB}-token-vocabulary twin for the vLLM parts)",
    }


# ---- the GPU parts ------------------------------------------------------------------------------------------------


def part_gpucheck(work: Path) -> dict:
    """grpoflow.gpucheck.check, its public entry point, against this node; what nvidia-smi says, read alongside."""
    import logging

    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("grpoflow.gpucheck").addHandler(Keep())
    logging.getLogger("grpoflow.gpucheck").setLevel(logging.INFO)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,driver_version,compute_mode,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    try:
        gpucheck.check("gpu-acceptance")
        verdict, status = "passed", "pass"
    except GrpoflowError as err:
        verdict, status = f"refused: {err}", "fail"
    return {
        "status": status,
        "line": f"nvidia-smi: {smi.stdout.strip()}; grpoflow.gpucheck {verdict}; log: {' / '.join(records) or '(none)'}",
        "nvidia_smi": smi.stdout.strip(),
        "log": records,
    }


MASTERS_DEVICE = "cuda"  # the CPU only in a harness that checks this part's code without a GPU


def part_masters(work: Path) -> dict:
    """An AdamW step at lr 1e-6 on a 2-layer model of Qwen3-0.6B's widths on the GPU: loaded as the runner loads a
    full fine-tune (grpo_config_kwargs' dtype), trained under bf16 autocast as TRL's bf16=True does; and the same
    step on bf16 weights (what the refusal refuses)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from grpoflow.backends.trl.runner import grpo_config_kwargs
    from grpoflow.backends.verl.memory import PRESETS, bf16_update_lost

    cfg = resolved_config(work, 0, 1, work / "masters")
    from grpoflow.backends.trl.commandline import training_spec

    spec = training_spec(cfg, EXP, {"train": "t", "sft": "s"}, {"marker": "m", "metrics": "x"})
    kwargs = grpo_config_kwargs(spec)
    dtype = getattr(torch, kwargs["model_init_kwargs"]["dtype"])
    a = PRESETS["qwen3-0.6b"]
    config = Qwen3Config(vocab_size=a.vocab_size, hidden_size=a.hidden_size, intermediate_size=a.intermediate_size,
                         num_hidden_layers=2, num_attention_heads=a.num_attention_heads,
                         num_key_value_heads=a.num_kv_heads, head_dim=a.head_dim, tie_word_embeddings=True)  # fmt: skip
    ids = torch.randint(0, 1000, (4, 256), device=MASTERS_DEVICE)
    out = {}
    for label, weights in (("fp32 masters", dtype), ("bf16 weights", torch.bfloat16)):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config).to(MASTERS_DEVICE, weights)
        w = model.model.layers[0].mlp.up_proj.weight
        before = w.detach().clone()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
        with torch.autocast(MASTERS_DEVICE, dtype=torch.bfloat16, enabled=kwargs["bf16"]):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        changed = (w.detach() != before).float().mean().item()
        out[label] = {"dtype": str(w.dtype), "changed_fraction": changed, "loss_dtype": str(loss.dtype)}
        del model, opt
        if MASTERS_DEVICE == "cuda":
            torch.cuda.empty_cache()
    fp32, bf16 = out["fp32 masters"], out["bf16 weights"]
    ok = fp32["dtype"] == "torch.float32" and fp32["changed_fraction"] > 0.9 and bf16["changed_fraction"] < 0.5
    return {
        "status": "pass" if ok else "fail",
        "line": f"runner dtype {kwargs['model_init_kwargs']['dtype']}, bf16 autocast {kwargs['bf16']}: fp32 masters stay "
        f"{fp32['dtype']}, {fp32['changed_fraction']:.1%} of up_proj changed at lr 1e-6; bf16 weights: "
        f"{bf16['changed_fraction']:.1%} changed (bf16_update_lost(1e-6) predicts {bf16_update_lost(1e-6)})",
        **out,
    }


class GpuSampler:
    """nvidia-smi's memory.used of the GPU every 0.25 s in a thread: the peak includes the CUDA context and what
    the allocator reserved, which torch's counters leave out."""

    def __init__(self):
        self.peak_mib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True, timeout=5)  # fmt: skip
                self.peak_mib = max(self.peak_mib, int(p.stdout.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


# When this part's process must be done (set by --part from the parent's timeout): the jobs it starts get what is
# left, so they are stopped (with their process group: torchrun's worker too) before the parent has to.
DEADLINE = float("inf")


def time_left(margin: float = 5.0) -> float:
    return max(DEADLINE - time.time() - margin, 1.0)


def job_env(extra: dict) -> dict:
    return {**os.environ, **extra, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def run_logged(cmd: list[str], env_extra: dict, log: Path, timeout: float) -> int:
    """Run a job in its own process group, output to ``log``; on timeout the whole group is killed."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=job_env(env_extra), stdout=f, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)  # fmt: skip
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    return lines[-1][:300] if lines else "(no output)"


def ratio_line(label: str, measured_gib: float, estimate_gib: float) -> tuple[str, bool]:
    r = measured_gib / estimate_gib if estimate_gib else float("nan")
    ok = abs(r - 1) <= TOLERANCE
    return f"{label} {measured_gib:.2f}/{estimate_gib:.2f} GiB ({r:.2f}x{'' if ok else ' OFF'})", ok


def part_trl(work: Path, lora: int, key: str) -> dict:
    """GRPO through the job's entry point on the GPU; the CUDA allocator's figures against the estimate."""
    import statistics

    cfg = resolved_config(work, lora, RUN["steps"], work / key / "ckpt")
    est = estimate_terms(cfg)
    cmd, env = train_command(cfg, work, key, probe=True)
    (work / key).mkdir(parents=True, exist_ok=True)
    probe_file = work / key / "probe.json"
    log = work / key / "train.log"
    t0 = time.time()
    with GpuSampler() as smi:
        try:
            code = run_logged(cmd, {"GPU_ACCEPTANCE_PROBE": str(probe_file)}, log, timeout=time_left())
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "line": f"training still running at the part's limit: {last_line(log)}"}
    wall = time.time() - t0
    if code:
        return {"status": "fail", "line": f"training exited {code}: {last_line(log)}", "estimate": est}
    import shutil

    shutil.rmtree(work / key / "ckpt", ignore_errors=True)  # gigabytes; the sigterm part needs the disk
    probe = json.loads(probe_file.read_text()) if probe_file.is_file() else {}
    missing = [k for k in ("allocated_at_train_begin", "allocated_after_step1", "max_allocated") if k not in probe]
    if missing:
        return {
            "status": "fail",
            "line": f"the probe recorded no {', '.join(missing)}: {last_line(log)}",
            "probe": probe,
        }
    rows = [json.loads(x) for x in Path(env["metrics"]).read_text().splitlines() if x.strip()]
    times = [r["time_s"] for r in rows if r.get("step", 0) >= 2 and "time_s" in r]
    step_s = statistics.median(times) if times else float("nan")
    upd = est["phases"]["update (forward + backward)"]
    peak = est["phases"][est["peak_phase"]]
    fixed = peak.get("CUDA/NCCL", 0.0)
    frag = peak.get("fragmentation", 0.0)
    comparisons = [
        ratio_line("weights", probe["allocated_at_train_begin"] / GIB, upd["weights"] + upd["reference"]),
        ratio_line(
            "AdamW state",
            (probe["allocated_after_step1"] - probe["allocated_at_train_begin"]) / GIB,
            upd["AdamW state"],
        ),
        ratio_line("peak allocated", probe["max_allocated"] / GIB, peak["total"] - fixed - frag),
        ratio_line("peak reserved", probe["max_reserved"] / GIB, peak["total"] - fixed),
        ratio_line("nvidia-smi peak", smi.peak_mib * MIB / GIB, peak["total"]),
    ]
    ok = all(c[1] for c in comparisons)
    return {
        "status": "pass" if ok else "estimate off",
        "line": f"{'; '.join(c[0] for c in comparisons)}; {step_s:.2f} s/step (median of steps 2..{RUN['steps']}), "
        f"job {wall:.0f} s; trainable {probe['trainable_dtypes']}, model in {probe.get('wrapped_in')}",
        "estimate": est,
        "probe": probe,
        "smi_peak_mib": smi.peak_mib,
        "step_time_s": times,
        "wall_s": wall,
    }


def torchrun_reads_shutdown_timeout() -> str:
    """Where the installed torch's elastic launcher reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT (source grep, no import)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    root = Path(spec.origin).parent / "distributed"
    hits = []
    for f in sorted(root.rglob("*.py")):
        text = f.read_text(errors="replace")
        if "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in text:
            hits.append(str(f.relative_to(root.parent.parent)))
    return ", ".join(hits) if hits else "nowhere (torch's default grace of 30 s applies)"


def part_sigterm(work: Path) -> dict:
    """SIGTERM to the job's launcher alone (it forwards it to the rank) once checkpoint-1 is complete."""
    total = 40
    ckpt = work / "sigterm" / "ckpt"
    cfg = resolved_config(work, 0, total, ckpt, save_freq=1)
    cmd, env = train_command(cfg, work, "sigterm", probe=False)
    (work / "sigterm").mkdir(parents=True, exist_ok=True)
    log = work / "sigterm" / "train.log"
    full_env = job_env({})
    deadline = time.time() + time_left()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=full_env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        return _stop_with_sigterm(proc, ckpt, log, deadline)
    finally:
        if proc.poll() is None:
            kill_group(proc)


def _stop_with_sigterm(proc: subprocess.Popen, ckpt: Path, log: Path, deadline: float) -> dict:
    import torch

    from grpoflow.backends.trl.ckpt import latest_complete, step_dirs

    try:
        while time.time() < deadline:
            latest = latest_complete(ckpt)
            if latest and latest[0] >= 1:
                break
            if proc.poll() is not None:
                return {
                    "status": "fail",
                    "line": f"training ended ({proc.returncode}) before checkpoint-1: {last_line(log)}",
                }
            time.sleep(0.2)
        else:
            return {"status": "fail", "line": "no checkpoint-1 within the part's time"}
        sent = time.time()
        proc.send_signal(signal.SIGTERM)  # the launcher only: its forwarding and grace are under test
        code = proc.wait(timeout=max(deadline - time.time(), 1))
        took = time.time() - sent
    except subprocess.TimeoutExpired:
        return {"status": "fail", "line": "the launcher did not exit after SIGTERM within the part's time"}
    stopped = latest_complete(ckpt)
    text = log.read_text(errors="replace")
    step = stopped[0] if stopped else None
    clean = step is not None and max(step_dirs(ckpt)) == step and f"stopped at step {step}" in text
    # torchrun's own grace is 30 s: a clean stop that took longer shows the launcher's grace held.
    grace = (
        "inside torchrun's own 30 s grace"
        if took <= 30.0
        else "past torchrun's own 30 s grace, so the launcher's grace held"
        if clean
        else "past 30 s"
    )
    return {
        "status": "pass" if clean else "fail",
        "line": f"torch {torch.__version__}: exit {code} {took:.1f} s after SIGTERM; complete checkpoint-{step}"
        f"{' (the last dir, stop logged)' if clean else ' NOT a clean stop'}; {grace}; TORCH_ELASTIC_SHUTDOWN_TIMEOUT "
        f"(not used by the launcher) read in: {torchrun_reads_shutdown_timeout()}",
        "seconds_after_sigterm": took,
        "exit_code": code,
        "checkpoint_step": step,
    }


# --eval-model: a trained demo model (e.g. resources/demo/sft-run/global_step_N/huggingface after `make demo`, a few
# MB, carried with the tree) instead of the untrained one prep builds, whose verdicts are all "wrong".
EVAL_MODEL_ENV = "GPU_ACCEPTANCE_EVAL_MODEL"


def eval_command(work: Path, device: str = "cuda") -> list[str]:

    cfg = resolved_config(work, 0, 1, work / "unused")
    kwargs = {
        "model_name": "demo-tiny",
        "model": {"kind": "external", "path": os.environ.get(EVAL_MODEL_ENV) or str(work / "demo-model")},
        "benchmark_name": "arith",
        "benchmark": cfg.evaluation["benchmarks"]["arith"],
        "prompt": cfg.benchmark_prompt("arith"),
        "run": cfg.benchmark_runs["arith"].as_json(),
        "inputs": {"data": str(work / "data" / "test.parquet")},
        "metrics_path": str(work / "eval" / device / "arith.json"),
        "samples_path": str(work / "eval" / device / "arith.samples.jsonl"),
    }
    return [sys.executable, "-m", "grpoflow.workflow", "evaluate", "--kwargs", json.dumps(kwargs)]


def part_eval(work: Path) -> dict:
    """The transformers backend picks CUDA when it sees one (bf16) and the CPU otherwise (fp32): both runs."""
    records, ran = {}, {}
    for device, env in (("cuda", {}), ("cpu", {"CUDA_VISIBLE_DEVICES": ""})):
        (work / "eval" / device).mkdir(parents=True, exist_ok=True)
        log = work / "eval" / device / "log"
        try:
            code = run_logged(eval_command(work, device), env, log, timeout=time_left())
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "line": f"evaluate on {device} still running at the part's limit"}
        if code:
            return {"status": "fail", "line": f"evaluate on {device} exited {code}: {last_line(log)}"}
        path = work / "eval" / device / "arith.samples.jsonl"
        records[device] = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        ran[device] = json.loads((work / "eval" / device / "arith.json").read_text())["generation"]
    gpu, cpu = records["cuda"], records["cpu"]
    same_verdict = sum(a["correct"] == b["correct"] for a, b in zip(gpu, cpu))
    same_text = sum(a["response"] == b["response"] for a, b in zip(gpu, cpu))
    acc = {d: sum(r["correct"] for r in rs) / max(len(rs), 1) for d, rs in records.items()}
    on = {d: f"{g.get('device')}, {g.get('dtype')}" for d, g in ran.items()}
    status = "pass" if same_verdict == len(cpu) == len(gpu) else "differs"
    if ran["cuda"].get("device") != "cuda":
        status = "fail"  # the backend did not pick the GPU: nothing about CUDA was compared
    return {
        "status": status,
        "line": f"{len(cpu)} problems: verdicts equal {same_verdict}/{len(cpu)}, completions equal {same_text}/{len(cpu)}; "
        f"accuracy {acc['cuda']:.3f} ({on['cuda']}) vs {acc['cpu']:.3f} ({on['cpu']})",
        "accuracy": acc,
        "generation": ran,
    }


def part_tunix(work: Path) -> dict:
    """Tunix's GRPO loss + gradient compiled by XLA:GPU at Qwen3-0.6B widths, 2 and 4 layers (vocabulary 1024), at
    512 and 1,280 tokens: XLA's temporary bytes per layer against the model of grpoflow.backends.tunix.memory
    (compiled from abstract shapes, nothing allocated: the reported buffer assignment, not a run's peak)."""
    os.environ.setdefault("JAX_PLATFORMS", "cuda")
    try:
        import jax
        import jax.numpy as jnp

        sys.path.insert(0, str(REPO / "benchmarks"))
        import tunix_memory
        from tunix.models.qwen3 import model as qm
    except Exception as exc:  # what makes Tunix unusable here is the finding
        return {
            "status": "skipped",
            "line": f"Tunix does not import on this JAX: {type(exc).__name__}: {str(exc)[:200]}",
        }
    if jax.devices()[0].platform != "gpu":
        return {"status": "skipped", "line": f"JAX runs on {jax.devices()[0].platform}, not CUDA"}
    from grpoflow.backends.tunix import memory as tmem
    from grpoflow.backends.verl.memory import PRESETS

    a = PRESETS["qwen3-0.6b"]

    def cfg(layers):
        c = qm.ModelConfig(num_layers=layers, vocab_size=1024, embed_dim=a.hidden_size, hidden_dim=a.intermediate_size,
                           num_heads=a.num_attention_heads, head_dim=a.head_dim, num_kv_heads=a.num_kv_heads,
                           rope_theta=1_000_000, norm_eps=1e-6)  # fmt: skip
        c.dtype, c.param_dtype = jnp.bfloat16, jnp.float32
        return c

    # As benchmarks/tunix_memory.py does on the CPU: per layer = constant + hand·T + per_score·heads·T², with the
    # per-token part counted by hand (memory.per_token_layer_bytes); two lengths give the per-score bytes.
    layer = {}
    for prompt, response in ((256, 256), (256, 1024)):
        layer[prompt + response] = (
            tunix_memory.update_temp_bytes(cfg(4), prompt, response)
            - tunix_memory.update_temp_bytes(cfg(2), prompt, response)
        ) / 2
    (t1, l1), (t2, l2) = sorted(layer.items())
    hand, h = tmem.per_token_layer_bytes(a, 2), a.num_attention_heads
    per_score = ((l2 - hand * t2) - (l1 - hand * t1)) / (h * (t2**2 - t1**2))
    constant = l1 - hand * t1 - per_score * h * t1**2
    growth, model_growth = l2 - l1, tunix_model_bytes(tmem, a, t2) - tunix_model_bytes(tmem, a, t1)
    r_score, r_growth = per_score / tmem.ATTENTION_SCORE_BYTES[2], growth / model_growth
    ok = abs(r_score - 1) <= TOLERANCE and abs(r_growth - 1) <= TOLERANCE
    return {
        "status": "pass" if ok else "estimate off",
        "line": f"jax {jax.__version__} on {jax.devices()[0].device_kind}, Qwen3-0.6B widths, bf16: XLA per layer "
        f"{l1 / MIB:.1f} MiB at T={t1}, {l2 / MIB:.1f} at T={t2}; growth {growth / MIB:.1f} vs tunix.memory "
        f"{model_growth / MIB:.1f} MiB ({r_growth:.2f}x); {per_score:.1f} B per attention score vs "
        f"ATTENTION_SCORE_BYTES[2] = {tmem.ATTENTION_SCORE_BYTES[2]} ({r_score:.2f}x); {constant / MIB:.0f} MiB per "
        "layer not growing with T",
        "per_layer_bytes": {str(k): v for k, v in layer.items()},
        "per_score_bytes": per_score,
        "constant_bytes": constant,
    }


RUNNERS = {
    "gpucheck": part_gpucheck,
    "masters": part_masters,
    "trl-full": lambda w: part_trl(w, 0, "trl-full"),
    "trl-lora": lambda w: part_trl(w, 16, "trl-lora"),
    "sigterm": part_sigterm,
    "eval": part_eval,
    "tunix": part_tunix,
    **{key: (lambda run: lambda w: run(sys.modules[__name__], w))(run) for key, run in cluster.RUNNERS.items()},
}


# ---- the probe the TRL parts train under --------------------------------------------------------------------------


def probe_train(argv: list[str]) -> None:
    """Runs ``grpoflow.backends.trl.train`` (runpy, as ``python -m`` would) with a Trainer callback that reads the
    CUDA allocator at train start and after the first optimizer step (weights, then + AdamW state: gradients are
    freed by zero_grad before on_step_end), whether the trained weights are fp32 and moved, and at exit the peaks."""
    import atexit
    import importlib.util
    import runpy

    import torch
    import transformers
    import trl

    record: dict = {}
    cuda = torch.cuda.is_available()  # on the CPU (this wrapper's own check) the allocator figures are 0

    def allocated() -> int:
        if not cuda:
            return 0
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    class Probe(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            record["allocated_at_train_begin"] = allocated()
            # Under torchrun accelerate may wrap even one process in DDP, whose gradient buckets the estimate
            # counts only for several processes.
            record["wrapped_in"] = type(self.trainer.model_wrapped).__name__
            trained = [p for p in model.parameters() if p.requires_grad]
            record["trainable_dtypes"] = sorted({str(p.dtype).removeprefix("torch.") for p in trained})
            record["frozen_dtypes"] = sorted(
                {str(p.dtype).removeprefix("torch.") for p in model.parameters() if not p.requires_grad}
            )
            record["trainable_params"] = sum(p.numel() for p in trained)
            record["params"] = sum(p.numel() for p in model.parameters())
            self.watch = max(trained, key=lambda p: p.numel() if p.dim() == 2 else 0)
            self.before = self.watch.detach().clone()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                record["allocated_after_step1"] = allocated()
                record["watched_dtype_after_step1"] = str(self.watch.dtype).removeprefix("torch.")
                record["watched_changed_fraction"] = (self.watch.detach() != self.before).float().mean().item()
                del self.before

    original = trl.GRPOTrainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        probe = Probe()
        probe.trainer = self
        self.add_callback(probe)
        if getattr(self, "vllm_generation", None) is not None:  # the sync records read the trainer's step
            self.vllm_generation.gpu_acceptance_trainer = self

    trl.GRPOTrainer.__init__ = init
    if importlib.util.find_spec("vllm") is not None:  # vLLM rollouts: every weight sync compared (cluster parts)
        cluster.install_sync_probe(record)

    def write():
        if cuda:
            record["max_allocated"] = torch.cuda.max_memory_allocated()
            record["max_reserved"] = torch.cuda.max_memory_reserved()
        Path(os.environ["GPU_ACCEPTANCE_PROBE"]).write_text(json.dumps(record))

    atexit.register(write)
    sys.argv = ["grpoflow.backends.trl.train", *argv]
    runpy.run_module("grpoflow.backends.trl.train", run_name="__main__", alter_sys=True)


# ---- the driver ---------------------------------------------------------------------------------------------------


def cuda_device() -> str | None:
    """The CUDA device's name, or None (no torch, a CPU build, or no device)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    name = proc.stdout.strip()
    return name or None


def versions() -> str:
    import importlib.metadata as md

    out = []
    for dist in (
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "jax",
        "google-tunix",
        "vllm",
        "verl",
        "ray",
    ):
        try:
            out.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            out.append(f"{dist} -")
    return ", ".join(out)


def run_in_subprocess(key: str, work: Path, timeout: float) -> dict:
    """One part in its own process (``--part KEY``): its result JSON, or why there is none."""
    result = work / f"{key}.result.json"
    log = work / f"{key}.log"
    result.unlink(missing_ok=True)  # a scratch dir reused from an earlier run must not lend its result
    started = time.time()
    cmd = [sys.executable, str(THIS), "--part", key, "--work", str(work), "--part-timeout", str(timeout)]
    try:
        code = run_logged(cmd, {}, log, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "line": f"no result within {timeout:.0f} s; last output: {last_line(log)}"}
    took = time.time() - started
    if result.is_file():
        out = json.loads(result.read_text())
    else:
        out = {"status": "error", "line": f"exit {code}: {last_line(log)}"}
    out["seconds"] = round(took, 1)
    return out


def run_all(parts: list[Part], out: Path, work: Path, budget_s: float, dry: bool) -> tuple[list[dict], dict]:
    results = []
    env = {"versions": versions()}
    if dry:
        env["device"] = "none (--dry: CPU-side logic only)"
        for p in parts:
            r = dry_part(p.key, work)
            results.append({"part": p.key, **r})
            print(f"{p.key}: {r['status']}: {r['line']}", flush=True)
        return results, env
    device = cuda_device()
    env["device"] = device or "no CUDA device"
    if not device:
        for p in parts:
            results.append({"part": p.key, "status": "skipped", "line": NO_CUDA})
            print(f"{p.key}: {NO_CUDA}", flush=True)
        return results, env
    t0 = time.time()
    prep_result = None
    if any(p.needs_prep for p in parts):
        prep_result = run_in_subprocess("prep", work, PREP_TIMEOUT_S)
        print(f"prep: {prep_result['status']}: {prep_result['line']}", flush=True)
    for p in parts:
        left = budget_s - (time.time() - t0)
        if p.needs_prep and prep_result["status"] != "pass":
            r = {"status": "skipped", "line": f"prep failed: {prep_result['line']}"}
        elif left < 15:
            r = {"status": "skipped", "line": f"out of the {budget_s:.0f} s budget"}
        else:
            r = run_in_subprocess(p.key, work, min(p.timeout_s, left))
        results.append({"part": p.key, **r})
        print(f"{p.key}: {r['status']}: {r['line']}", flush=True)
    return results, env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="list the parts and the wheels to carry (CPU, no network)")
    ap.add_argument("--dry", action="store_true", help="run each part's CPU-side logic (settings, estimates)")
    ap.add_argument(
        "--build-wheels", metavar="DIR", help="download the pinned wheels and build grpoflow's (needs PyPI)"
    )
    ap.add_argument("--wheels", metavar="DIR", default=".whl", help="the wheel folder --plan measures (default .whl)")
    ap.add_argument("--parts", help=f"comma-separated subset of: {', '.join(PART_KEYS)}")
    ap.add_argument("--out", type=Path, help="output dir (default $OUT, else ./gpu-acceptance-out)")
    ap.add_argument("--eval-model", type=Path, help="the eval part's model dir (default: the untrained demo model)")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds after which no part starts")
    ap.add_argument("--part", help=argparse.SUPPRESS)  # internal: run one part in this process
    ap.add_argument("--part-timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help="scratch dir for data, models, checkpoints (default: a new temp dir)")
    if argv is None:
        argv = sys.argv[1:]
    if not _importable("grpoflow"):  # a checkout without grpoflow installed: its own source
        sys.path.insert(0, str(REPO / "src"))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    if argv[:1] == ["--probe-train"]:  # internal: under torchrun, the trainer with the allocator probe
        probe_train(argv[1:])
        return 0
    args = ap.parse_args(argv)

    if args.part:
        global DEADLINE
        DEADLINE = time.time() + args.part_timeout
        fn = prep if args.part == "prep" else RUNNERS[args.part]
        result = fn(args.work)
        if cluster.REHEARSAL and args.part != "prep":  # never to be read as a GPU result
            result["status"] = f"rehearsal ({result['status']})"
        (args.work / f"{args.part}.result.json").write_text(json.dumps(result))
        return 0
    if cluster.REHEARSAL:
        raise SystemExit(
            "gpu_acceptance: GPU_ACCEPTANCE_REHEARSAL=1 is for one part on a machine without a GPU (--part KEY)"
        )

    parts = selected_parts(args.parts)
    if args.eval_model:
        os.environ[EVAL_MODEL_ENV] = str(args.eval_model.resolve())
    if args.build_wheels:
        sizes = build_wheels(Path(args.build_wheels), parts)
        print(budget_line(sizes))
        return 0 if sizes["fits"] and sizes["complete"] else 1
    if args.plan:
        p = plan(parts, Path(args.wheels))
        print_plan(p)
        return 0 if p["sizes"]["fits"] else 1

    out = args.out or default_out()
    # Checkpoints of a 0.6 B model are gigabytes: never under the output dir (the device tool sends $OUT back).
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-acceptance-"))
    work.mkdir(parents=True, exist_ok=True)
    results, env = run_all(parts, out, work, args.budget, args.dry)
    json_path, md_path = write_outputs(out, results, env)
    if not args.dry and env["device"] != "no CUDA device":
        (out / RESULT_LOGS).write_text(log_tails(work), encoding="utf-8")
    print(markdown_table(results, env))
    print(f"written: {json_path}, {md_path}")
    if env["device"] == "no CUDA device":
        return 3
    return 0 if all(r["status"] in ("pass", "dry") for r in results) else 1


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
