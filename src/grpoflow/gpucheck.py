"""What only a GPU node can tell, checked first in a GPU job (seconds, before Ray, verl or vLLM start).

- **Driver vs the environment's CUDA.** The cluster lock's torch 2.11 / vLLM 0.24 wheels are CUDA 13 builds
  (nvidia-cuda-runtime 13.0.*): CUDA 13.x needs an R580 driver or newer (580.65.06 shipped with 13.0); a CUDA 12.x
  build needs 525.60.13 or newer (CUDA minor-version compatibility). An older driver fails at the first CUDA call
  deep inside vLLM's or torch's start with "The NVIDIA driver on your system is too old".
- **Compute mode.** verl colocates the FSDP worker and vLLM on every GPU (two processes per GPU): GPUs in
  "Exclusive_Process" (or "Prohibited") compute mode refuse the second one.

Both are read with ``nvidia-smi --query-gpu=index,driver_version,compute_mode --format=csv,noheader``; the CUDA
version of the environment from its installed ``nvidia-cuda-runtime`` distribution or torch's ``version.py`` (no
import). A node without ``nvidia-smi`` (CI's stand-in GPUs) is logged and not checked.

A failed check is recorded next to the job's output (``results/E/training_complete.json.gpucheck``): the profile's ``retries`` would otherwise
queue the same 8-GPU job again to fail the same way. While the record exists the retries ask SLURM for one CPU,
no GPU and a minute (``retry_request``), and the job fails at once naming the first failure; a new ``snakemake``
call (attempt 1) asks for the full request and checks again (a pass removes the record).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from grpoflow.errors import GrpoflowError

log = logging.getLogger("grpoflow.gpucheck")

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA toolkit release notes, table 3: "minimum required
# driver version for CUDA minor version compatibility"; 13.0 GA ships 580.65.06).
MIN_DRIVER = {13: (580, 65, 6), 12: (525, 60, 13)}
BAD_MODES = ("exclusive_process", "prohibited")
RECORD_SUFFIX = ".gpucheck"


def environment_cuda() -> str | None:
    """The CUDA version (major.minor) this environment's GPU wheels were built for, or None (a CPU build)."""
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"):
        try:
            v = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        m = re.match(r"(\d+)\.(\d+)", v)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        version_py = Path(spec.origin).parent / "version.py"
        if version_py.is_file():
            m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+\.\d+)", version_py.read_text(), re.M)
            if m:
                return m.group(1)
    return None


def _driver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def query(run=subprocess.run) -> list[tuple[str, str, str]] | None:
    """[(index, driver_version, compute_mode)] of the visible GPUs; None when nvidia-smi is not here."""
    if not shutil.which("nvidia-smi"):
        return None
    proc = run(
        ["nvidia-smi", "--query-gpu=index,driver_version,compute_mode", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise GrpoflowError(
            f"nvidia-smi failed on this node (exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}): the job got no usable GPU; check the partition (slurm_partition) and the node"
        )
    return [tuple(p.strip() for p in line.split(",")) for line in proc.stdout.strip().splitlines() if line.strip()]


def check(job: str, cuda: str | None = None, gpus: list[tuple[str, str, str]] | None = None) -> None:
    """Raise a one-line GrpoflowError when this node's driver is too old for the environment's CUDA or a GPU is
    in a compute mode that admits one process."""
    cuda = cuda if cuda is not None else environment_cuda()
    if gpus is None:
        gpus = query()
    if gpus is None:
        log.info("GPU check for %s skipped: no nvidia-smi on this node", job)
        return
    if not gpus:
        raise GrpoflowError(f"{job}: nvidia-smi lists no GPU on this node: check the job's GPU request")
    driver = gpus[0][1]
    if cuda:
        need = MIN_DRIVER.get(int(cuda.split(".")[0]))
        if need and _driver(driver) < need:
            raise GrpoflowError(
                f"{job}: the node's NVIDIA driver {driver} is older than CUDA {cuda} (this environment's torch/vLLM wheels) needs ({'.'.join(map(str, need))}+): run on nodes with a newer driver (slurm_partition / constraint in the profile) or install a CUDA {12 if int(cuda.split('.')[0]) > 12 else cuda} build of the cluster environment (docs/cluster.md#set-up-once-per-cluster)"
            )
    bad = [(i, mode) for i, _, mode in gpus if mode.lower().replace(" ", "_") in BAD_MODES]
    if bad:
        shown = ", ".join(f"GPU {i}: {mode}" for i, mode in bad[:4]) + (" …" if len(bad) > 4 else "")
        raise GrpoflowError(
            f"{job}: compute mode {shown}: verl runs two processes per GPU (the FSDP worker and vLLM), which this mode refuses; ask for Default compute mode (often a --gres or constraint flag of the site: slurm_extra in the profile)"
        )
    log.info("GPU check for %s passed: driver %s, CUDA %s, %d GPU(s) in Default mode", job, driver, cuda, len(gpus))


def record_path(output: str | os.PathLike) -> Path:
    return Path(f"{output}{RECORD_SUFFIX}")


def checked(job: str, output: str | os.PathLike | None) -> None:
    """check(), with a failure recorded next to the job's ``output`` (read by retry_request) and a pass clearing it.
    A job that finds an earlier attempt's record and no GPU is such a retry: it fails at once naming the record."""
    record = record_path(output) if output else None
    if record and record.is_file() and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        raise GrpoflowError(
            f"not retried on a GPU node: an earlier attempt's GPU check failed ({record.read_text(encoding='utf-8').strip()}); fix that and rerun snakemake (the record {record} is replaced by the next check)"
        )
    try:
        check(job)
    except GrpoflowError as err:
        if record:
            tmp = record.with_suffix(record.suffix + ".tmp")
            tmp.write_text(str(err) + "\n", encoding="utf-8")
            tmp.replace(record)
        raise
    if record and record.exists():
        record.unlink()


def retry_request(output: str, attempt: int) -> bool:
    """For a resource callable: is this a retry of a job whose GPU check failed (then ask for almost nothing)?"""
    return attempt > 1 and record_path(output).is_file()


# What such a retry asks SLURM for: it only has to start and read the record.
RETRY_REQUEST = {
    "nodes": 1,
    "gpu": None,
    "gres": None,
    "mpi": None,
    "tasks_per_node": None,
    "cpus_per_task": 1,
    "mem_mb": 1000,
    "runtime": 5,
}
