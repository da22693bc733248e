"""What only a GPU node can tell, checked first in a GPU job (seconds, before Ray, verl or vLLM start).

- **Driver vs the environment's CUDA.** The cluster lock's torch 2.11 / vLLM 0.24 wheels are CUDA 13 builds
  (nvidia-cuda-runtime 13.0.*): CUDA 13.x needs an R580 driver or newer (580.65.06 shipped with 13.0); a CUDA 12.x
  build needs 525.60.13 or newer (CUDA minor-version compatibility). An older driver fails at the first CUDA call
  deep inside vLLM's or torch's start with "The NVIDIA driver on your system is too old".
- **Forward compatibility.** What counts is the CUDA driver API the job's processes load: libcuda, through the
  loader (``LD_LIBRARY_PATH``), which a site's ``cuda-compat`` package replaces with a newer one than the kernel
  driver's (data-centre GPUs). Its ``cuDriverGetVersion`` (read in a child interpreter with ctypes, with ``cuInit``
  for its compatibility errors 803/804) decides; nvidia-smi's kernel driver version only when no libcuda loads.
- **Compute mode.** verl colocates the FSDP worker and vLLM on every GPU (two processes per GPU): GPUs in
  "Exclusive_Process" (or "Prohibited") compute mode refuse the second one.

Both are read with ``nvidia-smi --query-gpu=index,driver_version,compute_mode --format=csv,noheader``; the CUDA
version of the environment from its installed ``nvidia-cuda-runtime`` distribution or torch's ``version.py`` (no
import). A node without ``nvidia-smi`` (CI's stand-in GPUs) is logged and not checked.

A failed check is recorded next to the job's output (``results/E/training_complete.json.gpucheck``): the profile's ``retries`` would otherwise
queue the same 8-GPU job again to fail the same way. While the record exists the retries ask SLURM for one CPU,
no GPU and a minute (``retry_request``), and the job fails at once naming the first failure; a new ``snakemake``
call (attempt 1) asks for the full request and checks again (a pass removes the record). The job learns that it is
such a retry from the rule (``GRPOFLOW_GPU_CHECK_RETRY=1``, set from the ``gpu_check_retry`` resource the same
decision gives), never from its environment: only SLURM sets ``CUDA_VISIBLE_DEVICES``, so "no GPU visible" would
make every later run without SLURM a retry.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from grpoflow.errors import GrpoflowError

log = logging.getLogger("grpoflow.gpucheck")

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA toolkit release notes, table 3: "minimum required
# driver version for CUDA minor version compatibility"; 13.0 GA ships 580.65.06).
MIN_DRIVER = {13: (580, 65, 6), 12: (525, 60, 13)}
BAD_MODES = ("exclusive_process", "prohibited")
RECORD_SUFFIX = ".gpucheck"
SMI_TIMEOUT_S = 60  # nvidia-smi answers in about a second on a healthy node
# Set to 1 by train_grpo's and evaluate's shell when Snakemake retries a job whose GPU check failed (RETRY_REQUEST).
RETRY_ENV = "GRPOFLOW_GPU_CHECK_RETRY"
# The check's off switch (set to 1 in the environment snakemake runs in; jobs inherit it), named in its refusals.
SKIP_ENV = "GRPOFLOW_SKIP_GPU_CHECK"


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


# Run in a child interpreter: the loader's search path (LD_LIBRARY_PATH) is read at process start, and the job's
# own process should not hold libcuda before torch/vLLM load it. Prints "VERSION CUINIT_RC PATH" or nothing.
LIBCUDA_PROBE = (
    "import ctypes\n"
    "try:\n"
    "    lib = ctypes.CDLL('libcuda.so.1')\n"
    "except OSError:\n"
    "    raise SystemExit(0)\n"
    "v = ctypes.c_int(0)\n"
    "if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:\n"
    "    raise SystemExit(0)\n"
    "rc = lib.cuInit(0)\n"
    "path = next((ln.split()[-1] for ln in open('/proc/self/maps') if 'libcuda.so' in ln), 'libcuda.so.1')\n"
    "print(v.value, rc, path)\n"
)
# cuInit's answers when a forward-compatibility libcuda cannot drive this GPU/kernel driver (CUDA driver API).
COMPAT_ERRORS = {803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}


def driver_api(run=subprocess.run, timeout: float = 60) -> tuple[tuple[int, int], int, str] | None:
    """((major, minor), cuInit's result, path) of the libcuda this node's processes load; None when none loads."""
    try:
        proc = run([sys.executable, "-c", LIBCUDA_PROBE], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GrpoflowError(
            f"loading libcuda.so.1 did not finish within {timeout:g} s on node {socket.gethostname()}: the GPU driver hangs; have the node drained (scontrol update nodename=... state=drain) and rerun"
        ) from None
    parts = proc.stdout.split() if proc.returncode == 0 else []
    if len(parts) < 3:
        return None
    version, rc = int(parts[0]), int(parts[1])
    return (version // 1000, version % 1000 // 10), rc, parts[2]


def _driver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def query(run=subprocess.run, timeout: float | None = None) -> list[tuple[str, str, str]] | None:
    """[(index, driver_version, compute_mode)] of the visible GPUs; None when nvidia-smi is not here."""
    if not shutil.which("nvidia-smi"):
        return None
    timeout = timeout or SMI_TIMEOUT_S
    try:
        proc = run(
            ["nvidia-smi", "--query-gpu=index,driver_version,compute_mode", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        # A GPU that fell off the bus or a wedged driver makes nvidia-smi hang; so would the trainer's first CUDA call.
        raise GrpoflowError(
            f"nvidia-smi did not answer within {timeout:g} s on node {socket.gethostname()}: its GPUs or driver hang; have the node drained (scontrol update nodename=... state=drain) and rerun"
        ) from None
    if proc.returncode != 0:
        raise GrpoflowError(
            f"nvidia-smi failed on this node (exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}): the job got no usable GPU; check the partition (slurm_partition) and the node"
        )
    return [tuple(p.strip() for p in line.split(",")) for line in proc.stdout.strip().splitlines() if line.strip()]


def check(
    job: str,
    cuda: str | None = None,
    gpus: list[tuple[str, str, str]] | None = None,
    api: tuple[tuple[int, int], int, str] | None | bool = True,
) -> None:
    """Raise a one-line GrpoflowError when the CUDA driver this node's processes load is too old for the
    environment's CUDA or a GPU is in a compute mode that admits one process. ``api``: driver_api()'s answer
    (True: ask it)."""
    cuda = cuda if cuda is not None else environment_cuda()
    if gpus is None:
        gpus = query()
    if gpus is None:
        log.info("GPU check for %s skipped: no nvidia-smi on this node", job)
        return
    if not gpus:
        raise GrpoflowError(f"{job}: nvidia-smi lists no GPU on this node: check the job's GPU request")
    driver = gpus[0][1]
    if api is True:
        api = driver_api() if cuda else None
    if cuda and api:
        (major, minor), init_rc, path = api
        if init_rc in COMPAT_ERRORS:
            raise GrpoflowError(
                f"{job}: the CUDA driver library this job loads ({path}, CUDA {major}.{minor}) cannot drive kernel driver {driver} on this GPU (cuInit: {COMPAT_ERRORS[init_rc]}): forward compatibility needs a data-centre GPU and a matching cuda-compat; take {path} off LD_LIBRARY_PATH or run on nodes with a driver for CUDA {cuda} (docs/cluster.md#checks-on-the-gpu-node)"
            )
        if major < int(cuda.split(".")[0]):
            raise GrpoflowError(
                f"{job}: the CUDA driver this job loads ({path}) supports CUDA {major}.{minor}, older than CUDA {cuda} (this environment's torch/vLLM wheels): run on nodes with a newer driver (slurm_partition / constraint in the profile), put the site's cuda-compat for CUDA {cuda} on LD_LIBRARY_PATH, or install a CUDA {major} build of the cluster environment (docs/cluster.md#set-up-once-per-cluster)"
            )
        log.info("GPU check for %s: %s supports CUDA %d.%d (kernel driver %s)", job, path, major, minor, driver)
    elif cuda:
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
    A retry of a job whose check failed (RETRY_ENV, set by the rule) fails at once naming the record; any other run
    checks again."""
    record = record_path(output) if output else None
    if os.environ.get(SKIP_ENV) == "1":
        log.warning("GPU check for %s skipped: %s=1", job, SKIP_ENV)
        if record and record.exists():
            record.unlink()
        return
    if record and record.is_file() and os.environ.get(RETRY_ENV) == "1":
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
        raise GrpoflowError(f"{err} (or {SKIP_ENV}=1 to skip this check)") from None
    if record and record.exists():
        record.unlink()


def retry_request(output: str, attempt: int) -> bool:
    """For a resource callable: is this a retry of a job whose GPU check failed (then ask for almost nothing)?"""
    return attempt > 1 and record_path(output).is_file() and os.environ.get(SKIP_ENV) != "1"


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
    "gpu_check_retry": 1,  # the job's RETRY_ENV (train_grpo's and evaluate's shell)
}
