"""A stand-in for the cluster environment's interpreter (``cluster_env.python``) in tests/pipeline/test_local_gpu_jobs:
the real train_grpo / merge_checkpoint / evaluate shell commands call it as ``<this> -m <module> ...``, and instead
of TRL, the merge or vLLM it writes the rule's outputs and records each job's start and end in $GPU_JOBS_LOG (one
JSON line per event, appended atomically: O_APPEND, one write).

A GPU job (train_grpo, evaluate) holds its GPU until a second GPU job starts, or for $GPU_JOB_HOLD_S seconds: two
jobs that Snakemake starts together overlap in the record whatever the machine's speed, and jobs that take turns
never do."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

LOG = Path(os.environ["GPU_JOBS_LOG"])
HOLD_S = float(os.environ.get("GPU_JOB_HOLD_S", "10"))


def record(event: str, job: str) -> None:
    line = json.dumps({"event": event, "job": job, "t": time.time(), "pid": os.getpid()}) + "\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def others_running(job: str) -> bool:
    started, ended = set(), set()
    for line in LOG.read_text().splitlines():
        e = json.loads(line)
        (started if e["event"] == "start" else ended).add(e["job"])
    return bool(started - ended - {job})


def hold(job: str) -> None:
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline and not others_running(job):
        time.sleep(0.05)


def write(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


def main(argv: list[str]) -> None:
    assert argv[0] == "-m", argv
    module, args = argv[1], argv[2:]
    if module == "grpoflow.backends.trl.train":
        spec = json.loads(args[args.index("--spec") + 1])
        job = f"train_grpo {spec['experiment']}"
        record("start", job)
        hold(job)
        write(spec["metrics"], json.dumps({"step": 1, "reward": 0.0}) + "\n")
        write(spec["marker"], json.dumps({"experiment": spec["experiment"], "backend": "trl", "final_step": 1}))
    elif module == "grpoflow.workflow" and args[0] == "evaluate":
        kwargs = json.loads(args[args.index("--kwargs") + 1])
        job = f"evaluate {kwargs['model_name']} {kwargs['benchmark_name']}"
        record("start", job)
        hold(job)
        write(kwargs["samples_path"], "")
        write(kwargs["metrics_path"], json.dumps({"model": kwargs["model_name"]}))
    elif module == "grpoflow.workflow" and args[0] == "merge_checkpoint":  # on the CPU: recorded, not held
        kwargs = json.loads(args[args.index("--kwargs") + 1])
        record("start", "merge_checkpoint")
        write(os.path.join(kwargs["out_dir"], "config.json"), "{}")
        job = "merge_checkpoint"
    else:
        raise SystemExit(f"stand-in cluster python: unexpected command {argv}")
    record("end", job)


if __name__ == "__main__":
    main(sys.argv[1:])
