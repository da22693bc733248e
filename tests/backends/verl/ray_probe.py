"""Stand-in for the trainer at the very end of the multi-node launch: attach to the Ray cluster the launcher
started (RAY_ADDRESS, like verl's main_ppo), run one task pinned to every Ray node, and report what each node
is (its SLURM node, the exported test variable, its GPUs, the thread variables a task there sees and its torch's
thread count). The launcher itself runs unchanged.

    python ray_probe.py --out probe.json [--exit-code N] [--sleep S] [ignored verl overrides ...]
"""

import argparse
import json
import os
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from grpoflow.threads import THREAD_VARS  # the job's PYTHONPATH has the repo's src


@ray.remote(num_cpus=0)
def where():
    import torch

    return {
        "threads": {k: os.environ.get(k) for k in THREAD_VARS},
        "torch_threads": torch.get_num_threads(),
        "slurm_node": os.environ.get("SLURMD_NODENAME"),
        "test_var": os.environ.get("GRPOFLOW_PROBE_VAR"),
        "auth_mode": os.environ.get("RAY_AUTH_MODE"),
        "has_token": bool(os.environ.get("RAY_AUTH_TOKEN")),
        "host": socket.gethostname(),
        "node_id": ray.get_runtime_context().get_node_id(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0)
    args, _verl_overrides = p.parse_known_args()
    ray.init(logging_level="ERROR")  # attaches to RAY_ADDRESS; fails if there is no cluster
    alive = [n for n in ray.nodes() if n["Alive"]]
    tasks = [
        where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in alive
    ]
    report = {
        "ray_address": os.environ.get("RAY_ADDRESS"),
        "driver_slurm_node": os.environ.get("SLURMD_NODENAME"),
        "nodes": ray.get(tasks, timeout=120),
        "gpus_per_node": {n["NodeID"]: n["Resources"].get("GPU", 0) for n in alive},
        "cluster_gpus": ray.cluster_resources().get("GPU", 0),
        "pid": os.getpid(),
    }
    with open(args.out + ".tmp", "w") as fh:
        json.dump(report, fh, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print("probe:", json.dumps(report), flush=True)
    ray.shutdown()
    if args.sleep:
        time.sleep(args.sleep)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
