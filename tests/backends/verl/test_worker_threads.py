"""CPU threads of verl's Ray workers: verl's FSDP workers ask Ray for GPUs only, and Ray then sets OMP_NUM_THREADS=1
in them unless the variable is already in their environment (ray/_private/utils.py set_omp_num_threads_if_unset).
The verl wrapper sets it (and the other five thread variables) = the job's CPUs per node / its GPUs before verl starts
Ray; this checks, with a real local Ray, that an actor that asks for no CPU inherits it (and gets 1 without it), and
that torch in the actor then uses that many threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpoflow.backends.verl.train import worker_threads
from grpoflow.threads import THREAD_VARS

pytestmark = [pytest.mark.slow]

PROBE = """
import json, os, ray
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")

@ray.remote(num_cpus=0)
class Worker:  # like verl's workers: no CPU asked for
    def threads(self):
        import torch
        return {"omp": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()}

print(json.dumps(ray.get(Worker.remote().threads.remote())))
ray.shutdown()
"""


def probe(env: dict) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    full.update(env, RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_threads_from_the_jobs_cpus_and_verl_env_wins():
    assert worker_threads(8, environ={}, cpus=160) == {k: "20" for k in THREAD_VARS}
    assert worker_threads(8, environ={}, cpus=4) == {k: "1" for k in THREAD_VARS}
    # verl.env's value stays, and the other five follow it
    assert worker_threads(8, environ={"OMP_NUM_THREADS": "8"}, cpus=160) == {k: "8" for k in THREAD_VARS}


def test_a_ray_actor_without_cpus_inherits_omp_num_threads_from_the_driver():
    assert probe({}) == {"omp": "1", "torch": 1}  # Ray's default for such actors
    assert probe({"OMP_NUM_THREADS": "2"}) == {"omp": "2", "torch": 2}
