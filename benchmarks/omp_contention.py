"""What two torch jobs on the same cores cost each other, by OpenMP wait policy (why tests/conftest.py sets
``OMP_WAIT_POLICY=PASSIVE`` for the suite, whose two xdist workers each run 2-thread torch jobs on 2 cores).

    .venv/bin/python benchmarks/omp_contention.py            # --steps 30 --threads 2
    .venv/bin/python benchmarks/omp_contention.py --reference   # one job alone: this machine's reference step

The reference step (one job, 2 threads, OpenMP's default policy) goes beside every CI time in docs/measurements.md,
so that suite times from machines of different speed can be compared.

The job: the demo's tiny Qwen3 (config/config.yaml ``demo.tiny_model``) training steps, batch 64 × 60 tokens, as the
demo SFT runs them. Timed alone, then as two copies at once (each with ``--threads``), under OpenMP's default wait
policy and under PASSIVE; printed as ms per step and as the ratio to the job alone under the default policy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

JOB = r"""
import json, sys, time, torch
from transformers import Qwen3ForCausalLM
from grpoflow.demo.tiny import model_config
spec = json.loads(sys.argv[1])
torch.manual_seed(spec["seed"])
# The tokenizer's size is the vocab_size target here (the built one has a few ids fewer); ids as the demo's.
model = Qwen3ForCausalLM(model_config(spec, spec["vocab_size"], eos_id=2, pad_id=0))
opt = torch.optim.AdamW(model.parameters(), 1e-3)
x = torch.randint(0, spec["vocab_size"], (64, 60))
def step():
    model(input_ids=x, labels=x).loss.backward(); opt.step(); opt.zero_grad()
for _ in range(3):
    step()
started = time.perf_counter()
for _ in range(int(sys.argv[2])):
    step()
print((time.perf_counter() - started) / int(sys.argv[2]) * 1000)
"""


def tiny_model_spec() -> dict:
    """``demo.tiny_model`` of config/config.yaml with the schema's defaults, as the build_tiny_model rule gets it."""
    import yaml

    from grpoflow.config import resolve_config

    return resolve_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text())).demo["tiny_model"]


def timed(spec: dict, copies: int, steps: int, threads: int, policy: str | None) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_NUM_THREADS"] = str(threads)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    cmd = [sys.executable, "-c", JOB, json.dumps(spec), str(steps)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reference", action="store_true", help="time one job alone and print its ms per step")
    args = ap.parse_args(argv)
    spec = tiny_model_spec()
    if args.reference:
        print(f"reference step: {timed(spec, 1, args.steps, args.threads, None)[0]:.0f} ms ({args.threads} threads)")
        return 0
    print(f"{os.cpu_count()} CPUs; {args.threads} torch threads per job, {args.steps} steps")
    baseline = None
    print("| wait policy | jobs at once | ms per step (each job) | vs one job, default policy |")
    print("|---|---|---|---|")
    for policy in (None, "PASSIVE"):
        for copies in (1, 2):
            ms = timed(spec, copies, args.steps, args.threads, policy)
            baseline = baseline or ms[0]
            shown = ", ".join(f"{m:.0f}" for m in ms)
            ratio = ", ".join(f"{m / baseline:.2f}x" for m in ms)
            print(f"| {policy or 'default (spin)'} | {copies} | {shown} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
