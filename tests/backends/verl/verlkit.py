"""Helpers for the verl backend tests: the shipped verl configs, sbatch/scontrol helpers for the local SLURM,
and the merge tests' checkpoint builders. A plain module (conftest.py names clash across test folders)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def _backends(raw: dict) -> set[str]:
    default = (raw.get("defaults") or {}).get("backend", "verl")
    return {(e or {}).get("backend", default) for e in (raw.get("experiments") or {}).values()}


VERL_CONFIGS = sorted(
    str(p.relative_to(REPO))
    for p in (REPO / "config").glob("*.yaml")
    if "verl" in _backends(yaml.safe_load(p.read_text()) or {})
)


def load(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text())


def submit(script: str, args: list[str], workdir: Path) -> str:
    path = workdir / "job.sh"
    path.write_text(script)
    out = subprocess.run(
        ["sbatch", "--parsable", "-D", str(workdir), "-o", str(workdir / "slurm.out"), *args, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def job_state(job: str) -> dict:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_job(job: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(job)
        if state["JobState"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            return state
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], check=False)
            raise AssertionError(f"job {job} still {state['JobState']} after {timeout} s")
        time.sleep(1)


def leftover_ray(job: str) -> list[str]:
    """Processes of this job's Ray cluster still alive (their command lines name the job's session dirs)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if f"ray-{job}-" in ln and "ps -eo" not in ln]
