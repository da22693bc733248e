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

A failed check is recorded next to the job's output (``results/E/training_complete.json.gpucheck``): one JSON line
per failure naming the SLURM node (``SLURMD_NODENAME``), the host, the kind of failure and the message. One bad
node must not fail the run while the partition has good ones, and the profile's ``retries`` must not queue the same
GPU job to fail the same way. So within one ``snakemake`` call a retry (``retry_plan``) asks for the full request
again with ``--exclude=`` naming every node the job's check failed on (the rule's ``slurm_extra``, merged with the
profile's: ``slurm_extra()``); when it is not the node (the same kind of failure on a second node, no node name
without SLURM, a node recorded twice, or a profile whose set-resources replaces the rule's ``slurm_extra``) the
retry asks SLURM for one CPU, no GPU and five minutes (``RETRY_REQUEST``) and fails at once naming the failures. A
new ``snakemake`` call (attempt 1) asks for the full request on any node and checks again (a pass removes the
record). The job learns which attempt it is from the rule (``GRPOFLOW_GPU_CHECK_RETRY``, set from the
``gpu_check_retry`` resource the same plan gives: ``Retry.env``), never from its environment: only SLURM sets
``CUDA_VISIBLE_DEVICES``, so "no GPU visible" would make every later run without SLURM a retry.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grpoflow.errors import GrpoflowError
from grpoflow.io import atomic_write_jsonl

log = logging.getLogger("grpoflow.gpucheck")

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA toolkit release notes, table 3: "minimum required
# driver version for CUDA minor version compatibility"; 13.0 GA ships 580.65.06).
MIN_DRIVER = {13: (580, 65, 6), 12: (525, 60, 13)}
BAD_MODES = ("exclusive_process", "prohibited")
RECORD_SUFFIX = ".gpucheck"
SMI_TIMEOUT_S = 60  # nvidia-smi answers in about a second on a healthy node
# Set by train_grpo's and evaluate's shell from the rule's gpu_check_retry resource (Retry.env: retry_plan).
RETRY_ENV = "GRPOFLOW_GPU_CHECK_RETRY"
# Its values: a first attempt (a failure replaces the record), a retry that fails at once naming the record, a retry
# on other nodes (a failure is added to the record).
FIRST, FAIL_FAST, ELSEWHERE = 0, 1, 2
# The node SLURM ran the job on, as sbatch --exclude names it: slurmd sets it in the batch script and each job step
# (the plugin strips only SLURM_* variables: snakemake_executor_plugin_slurm/utils.py:301-311). Several slurmd on
# one host (tests/slurm) share one hostname, and NodeName may differ from the hostname on real clusters too.
NODE_ENV = "SLURMD_NODENAME"
# The check's off switch (set to 1 in the environment snakemake runs in; jobs inherit it), named in its refusals.
SKIP_ENV = "GRPOFLOW_SKIP_GPU_CHECK"


class GpuCheckError(GrpoflowError):
    """A failed GPU check; ``kind`` (hang, nvidia-smi, no-gpu, cuda-compat, driver, compute-mode) tells a retry
    whether two nodes failed the same way (then it is not the node: retry_plan)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


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
        raise GpuCheckError(
            "hang",
            f"loading libcuda.so.1 did not finish within {timeout:g} s on node {socket.gethostname()}: the GPU driver hangs; have the node drained (scontrol update nodename=... state=drain) and rerun",
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
        raise GpuCheckError(
            "hang",
            f"nvidia-smi did not answer within {timeout:g} s on node {socket.gethostname()}: its GPUs or driver hang; have the node drained (scontrol update nodename=... state=drain) and rerun",
        ) from None
    if proc.returncode != 0:
        raise GpuCheckError(
            "nvidia-smi",
            f"nvidia-smi failed on this node (exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}): the job got no usable GPU; check the partition (slurm_partition) and the node",
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
        raise GpuCheckError("no-gpu", f"{job}: nvidia-smi lists no GPU on this node: check the job's GPU request")
    driver = gpus[0][1]
    if api is True:
        api = driver_api() if cuda else None
    if cuda and api:
        (major, minor), init_rc, path = api
        if init_rc in COMPAT_ERRORS:
            raise GpuCheckError(
                "cuda-compat",
                f"{job}: the CUDA driver library this job loads ({path}, CUDA {major}.{minor}) cannot drive kernel driver {driver} on this GPU (cuInit: {COMPAT_ERRORS[init_rc]}): forward compatibility needs a data-centre GPU and a matching cuda-compat; take {path} off LD_LIBRARY_PATH or run on nodes with a driver for CUDA {cuda} (docs/cluster.md#checks-on-the-gpu-node)",
            )
        if major < int(cuda.split(".")[0]):
            raise GpuCheckError(
                "driver",
                f"{job}: the CUDA driver this job loads ({path}) supports CUDA {major}.{minor}, older than CUDA {cuda} (this environment's torch/vLLM wheels): run on nodes with a newer driver (slurm_partition / constraint in the profile), put the site's cuda-compat for CUDA {cuda} on LD_LIBRARY_PATH, or install a CUDA {major} build of the cluster environment (docs/cluster.md#set-up-once-per-cluster)",
            )
        log.info("GPU check for %s: %s supports CUDA %d.%d (kernel driver %s)", job, path, major, minor, driver)
    elif cuda:
        need = MIN_DRIVER.get(int(cuda.split(".")[0]))
        if need and _driver(driver) < need:
            raise GpuCheckError(
                "driver",
                f"{job}: the node's NVIDIA driver {driver} is older than CUDA {cuda} (this environment's torch/vLLM wheels) needs ({'.'.join(map(str, need))}+): run on nodes with a newer driver (slurm_partition / constraint in the profile) or install a CUDA {12 if int(cuda.split('.')[0]) > 12 else cuda} build of the cluster environment (docs/cluster.md#set-up-once-per-cluster)",
            )
    bad = [(i, mode) for i, _, mode in gpus if mode.lower().replace(" ", "_") in BAD_MODES]
    if bad:
        shown = ", ".join(f"GPU {i}: {mode}" for i, mode in bad[:4]) + (" …" if len(bad) > 4 else "")
        raise GpuCheckError(
            "compute-mode",
            f"{job}: compute mode {shown}: verl runs two processes per GPU (the FSDP worker and vLLM), which this mode refuses; ask for Default compute mode (often a --gres or constraint flag of the site: slurm_extra in the profile)",
        )
    log.info("GPU check for %s passed: driver %s, CUDA %s, %d GPU(s) in Default mode", job, driver, cuda, len(gpus))


def record_path(output: str | os.PathLike) -> Path:
    return Path(f"{output}{RECORD_SUFFIX}")


def read_record(record: Path) -> list[dict]:
    """The failures recorded for a job, oldest first: {"node", "host", "kind", "error"} each (node: SLURM's name of
    the node, None without SLURM). A record of one plain line (written before nodes were recorded) reads as one
    failure on an unknown node."""
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    failures = []
    for line in filter(str.strip, text.splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        failures.append(row if isinstance(row, dict) else {"node": None, "kind": "unknown", "error": line.strip()})
    return failures


def _same_check_on_two_nodes(failures: list[dict]) -> tuple[list[str], str] | None:
    """(nodes, error) when one kind of failure was seen on two or more nodes: then it is not the node."""
    for kind in dict.fromkeys(f.get("kind") for f in failures):
        same = [f for f in failures if f.get("kind") == kind]
        nodes = list(dict.fromkeys(f["node"] for f in same if f.get("node")))
        if len(nodes) > 1:
            return nodes, same[-1].get("error", "")
    return None


def not_retried(record: Path) -> str:
    """The one line a retry that must not queue for GPUs again fails with, naming the recorded failures."""
    failures = read_record(record)
    same = _same_check_on_two_nodes(failures)
    if same:
        nodes, error = same
        what = f"the same GPU check failed on nodes {' and '.join(nodes)} ({error}): not one bad node"
    else:
        shown = "; ".join(
            f"on node {f['node']}: {f.get('error')}" if f.get("node") else str(f.get("error")) for f in failures
        )
        what = f"an earlier attempt's GPU check failed ({shown})"
    return f"not retried on a GPU node: {what}; fix that and rerun snakemake (the record {record} is replaced by the next check)"


def checked(job: str, output: str | os.PathLike | None) -> None:
    """check(), with a failure recorded next to the job's ``output`` (read by retry_plan) and a pass clearing it.
    The rule tells the job which attempt it is (RETRY_ENV, from Retry.env): a FAIL_FAST retry fails at once naming
    the record; an ELSEWHERE retry (on other nodes) adds its failure to the record; a FIRST attempt checks again and
    replaces it."""
    record = record_path(output) if output else None
    if os.environ.get(SKIP_ENV) == "1":
        log.warning("GPU check for %s skipped: %s=1", job, SKIP_ENV)
        if record and record.exists():
            record.unlink()
        return
    retry = os.environ.get(RETRY_ENV, str(FIRST))
    if record and record.is_file() and retry == str(FAIL_FAST):
        raise GrpoflowError(not_retried(record))
    try:
        check(job)
    except GrpoflowError as err:
        if record:
            earlier = read_record(record) if retry == str(ELSEWHERE) else []
            failure = {
                "node": os.environ.get(NODE_ENV) or None,
                "host": socket.gethostname(),
                "kind": getattr(err, "kind", "other"),
                "error": str(err),
            }
            atomic_write_jsonl(record, [*earlier, failure])
        raise GrpoflowError(f"{err} (or {SKIP_ENV}=1 to skip this check)") from None
    if record and record.exists():
        record.unlink()


@dataclass(frozen=True)
class Retry:
    """What an attempt of a GPU job asks SLURM for after its GPU check failed: the full request on other nodes
    (``exclude``), or almost nothing to fail at once (``fail_fast``); neither for a first attempt or a record-less
    retry."""

    fail_fast: bool = False
    exclude: tuple[str, ...] = ()

    @property
    def env(self) -> int:
        """The job's RETRY_ENV (the rule's gpu_check_retry resource)."""
        return FAIL_FAST if self.fail_fast else ELSEWHERE if self.exclude else FIRST


def retry_plan(output: str | os.PathLike, attempt: int, exclusion_reaches_sbatch: bool = True) -> Retry:
    """For the resource callables of a GPU job: how attempt ``attempt`` of the job writing ``output`` asks again.
    Each node its check failed on in this snakemake call is excluded, unless: a failure has no node (no SLURM), the
    same kind of failure was seen on two nodes (not the node: the partition, driver or environment), a node was
    recorded twice (the exclusion did not reach sbatch), or the profile's set-resources replaces the rule's
    slurm_extra (``exclusion_reaches_sbatch`` False): then fail fast."""
    if attempt <= 1 or os.environ.get(SKIP_ENV) == "1":
        return Retry()
    failures = read_record(record_path(output))
    if not failures:
        return Retry()
    nodes = [f.get("node") for f in failures]
    if (
        not all(nodes)
        or not exclusion_reaches_sbatch
        or len(set(nodes)) < len(nodes)
        or _same_check_on_two_nodes(failures)
    ):
        return Retry(fail_fast=True)
    return Retry(exclude=tuple(dict.fromkeys(nodes)))


# What a FAIL_FAST retry asks SLURM for: it only has to start and read the record.
RETRY_REQUEST = {
    "nodes": 1,
    "gpu": None,
    "gres": None,
    "mpi": None,
    "tasks_per_node": None,
    "cpus_per_task": 1,
    "mem_mb": 1000,
    "runtime": 5,
    "gpu_check_retry": FAIL_FAST,  # the job's RETRY_ENV (train_grpo's and evaluate's shell)
}


# ---- how the exclusion reaches sbatch (Snakemake 9.27.1, snakemake-executor-plugin-slurm 2.8.0) ----
# A rule's resource callable is evaluated once per attempt: a failed job's attempt is raised (scheduling/
# job_scheduler.py:565-567) and the setter drops the evaluated resources (jobs.py:486-489), which Job.resources
# evaluates again with the new attempt (jobs.py:492-503, rules.py:1066-1090). The job's own Snakemake gets the same
# --attempt (snakemake_interface_executor_plugins/executors/real.py:102) and set-resources (spawn_jobs.py:97-116),
# so it reads the same plan from the same record. Precedence (workflow.py:1966-2004): default-resources, then the
# rule's resources, then set-resources, each replacing a name wholesale: a rule's slurm_extra would drop the
# profile's default-resources slurm_extra (so site_slurm_extra is merged in), and set-resources' slurm_extra for the
# rule replaces the rule's (then no exclusion can reach sbatch: warned at start, and the retry fails fast). The plugin
# appends slurm_extra verbatim to the sbatch line (submit_string.py:206-207), after its own --exclude of failed nodes
# (submit_string.py:154-157), and runs it through a shell (__init__.py:1175-1177). sbatch keeps the last --exclude
# (seen on the local SLURM: --exclude=n1 --exclude=n2 gave ExcNodeList=n2), so the plugin's nodes are merged in too.
# --exclude is not among the options the plugin refuses in slurm_extra (validation.py:69-105).
EXCLUDE_FLAG = re.compile(r"^(?:--exclude(?:=(.*))?|-x(.*))$")


def site_slurm_extra(workflow, wildcards, **aux) -> str | None:
    """The profile's default-resources slurm_extra for this job, evaluated as Snakemake evaluates it (``aux``: the
    resource callable's input, attempt, threads, rulename, async_run)."""
    from snakemake.common.tbdstring import TBDString
    from snakemake.resources import Resources

    defaults = workflow.resource_settings.default_resources
    if not defaults:
        return None
    value = Resources.from_mapping(defaults).get("slurm_extra").evaluate(wildcards, **aux).value
    return value if isinstance(value, str) and value and not isinstance(value, TBDString) else None


def plugin_excluded_nodes(workflow) -> list[str]:
    """The nodes the SLURM plugin itself excludes (--slurm-exclude-failed-nodes, and nodes of jobs that ended in
    NODE_FAIL, which it tracks only with sacct: __init__.py:473-479, 1511-1528): a later --exclude would drop them."""
    setting = getattr(getattr(workflow, "executor_settings", None), "exclude_failed_nodes", None) or ""
    nodes = [n.strip() for n in setting.split(",") if n.strip()]
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)  # the plugin's live set (private)
    return list(dict.fromkeys([*nodes, *sorted(getattr(executor, "_failed_nodes", None) or ())]))


def slurm_extra(site: str | None, exclude: tuple[str, ...] | list[str], also: list[str] = ()) -> str | None:
    """The job's slurm_extra: the site's flags, with one --exclude naming ``exclude`` (plus ``also`` and any nodes
    the site's flags exclude) when there is something to exclude; the site's flags untouched otherwise."""
    if not exclude:
        return site or None
    words = shlex.split(site or "")
    excluded, kept, i = [], [], 0
    while i < len(words):
        m = EXCLUDE_FLAG.match(words[i])
        if not m:
            kept.append(words[i])
        elif m.group(1) or m.group(2):  # --exclude=NODES / -xNODES
            excluded.append(m.group(1) or m.group(2))
        elif i + 1 < len(words):  # --exclude NODES / -x NODES
            excluded.append(words[i + 1])
            i += 1
        i += 1
    nodes = ",".join(dict.fromkeys([*excluded, *also, *exclude]))
    rest = site if not excluded else shlex.join(kept)  # the site's own quoting kept unless a flag was taken out
    return " ".join(filter(None, [rest, f"--exclude={shlex.quote(nodes)}"]))


def site_overrides_slurm_extra(workflow, rule: str) -> bool:
    """Does the profile's set-resources give ``rule`` its own slurm_extra (which replaces the rule's)?"""
    return "slurm_extra" in (workflow.resource_settings.overwrite_resources.get(rule) or {})


def override_warning(rule: str) -> str:
    return f"warning: set-resources gives rule {rule} its own slurm_extra, which replaces the rule's: a retry after a failed GPU check cannot exclude the node it failed on and fails at once instead; move those flags to default-resources' slurm_extra, which the rule keeps and adds its --exclude to (docs/cluster.md#checks-on-the-gpu-node)"
