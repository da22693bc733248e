"""TRL vs Tunix on the same config, side by side in one run: wall time per GRPO step on this machine's CPU.

    .venv/bin/python benchmarks/backends.py                  # --steps 20 --repeats 2 (needs .venv-tunix: make setup-tunix)

Both backends train the embedded demo's experiment (config/config.yaml: the tiny Qwen3 after its SFT, 16 prompts
× 8 completions of up to 32 tokens per step, lr 5e-5, token-mean loss) for ``--steps`` steps from the same SFT
start, each through Snakemake's real train_grpo job (its own environment: .venv for TRL, .venv-tunix for Tunix),
one after the other, alternating, ``--repeats`` times; each repeat starts from scratch (fresh checkpoint dir).

Per run it reads the job's train_metrics.jsonl (``time_s`` per step, as each backend measures it) and the job's wall
time, and prints per backend: the median seconds per step over steps 3.. (JAX compiles in steps 1–2), the job's
wall time, and the start-up cost (wall time − the steps' sum: interpreter, imports, model load, compilation);
then Tunix ÷ TRL for each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("trl", "tunix")


def overlay(steps: int) -> dict:
    common = {"grpo": {"seed": 1, "total_steps": steps, "save_freq": steps}}
    return {
        "experiments": {
            "bench-trl": {**common, "backend": "trl"},
            "bench-tunix": {**common, "backend": "tunix", "tunix": {"loss_agg_mode": "token-mean"}},
        }
    }


def snakemake(workdir: Path, configs: list[str], targets: list[str], extra: list[str] = ()) -> float:
    cmd = [
        str(Path(sys.executable).parent / "snakemake"),
        "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "all", "--quiet=rules",
        *targets, "--configfile", *configs, *extra,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir (removed at the end)")
    args = ap.parse_args(argv)
    if not (REPO / ".venv-tunix" / "bin" / "python").exists():
        sys.exit("benchmarks/backends.py: .venv-tunix missing: run `make setup-tunix` first")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="grpoflow-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("config", "data"):
        if not (workdir / name).exists():
            (workdir / name).symlink_to(REPO / name)
    (workdir / "bench.yaml").write_text(yaml.safe_dump(overlay(args.steps)))
    configs = [str(REPO / "config" / "config.yaml"), str(workdir / "bench.yaml")]

    print(f"SFT start (shared, not timed) in {workdir} ...", flush=True)
    snakemake(
        workdir, configs, [f"results/bench-{b}/sft.json" for b in BACKENDS] + ["results/data/arith/train.parquet"]
    )

    runs: dict[str, list[dict]] = {b: [] for b in BACKENDS}
    for repeat in range(args.repeats):
        order = BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]
        for backend in order:
            exp = workdir / "results" / f"bench-{backend}"
            for stale in (exp / "checkpoints", exp / "training_complete.json", exp / "train_metrics.jsonl"):
                shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
            target = f"results/bench-{backend}/training_complete.json"
            wall = snakemake(workdir, configs, [target], ["--forcerun", "train_grpo"])
            rows = [json.loads(line) for line in (exp / "train_metrics.jsonl").read_text().splitlines()]
            steps = [r["time_s"] for r in rows if isinstance(r.get("time_s"), (int, float))]
            steady = [r["time_s"] for r in rows if r["step"] >= 3 and isinstance(r.get("time_s"), (int, float))]
            run = {"wall": wall, "per_step": statistics.median(steady), "startup": wall - sum(steps)}
            runs[backend].append(run)
            print(
                f"  repeat {repeat + 1} {backend:6s} wall {wall:6.1f} s | median {run['per_step']:.2f} s/step "
                f"(steps 3..{args.steps}) | start-up {run['startup']:.1f} s",
                flush=True,
            )

    best = {b: {k: min(r[k] for r in runs[b]) for k in ("wall", "per_step", "startup")} for b in BACKENDS}
    print(
        f"\n{args.steps} steps x 16 prompts x 8 completions (<= 32 tokens), tiny Qwen3, CPU ({os.cpu_count()} cores); "
        f"best of {args.repeats}:"
    )
    print("| backend | s/step (median, steps 3..) | job wall s | start-up s |")
    print("|---|---|---|---|")
    for b in BACKENDS:
        print(f"| {b} | {best[b]['per_step']:.2f} | {best[b]['wall']:.1f} | {best[b]['startup']:.1f} |")
    ratio = {k: best["tunix"][k] / best["trl"][k] for k in ("per_step", "wall", "startup")}
    print(
        f"| tunix / trl | {ratio['per_step']:.2f}x | {ratio['wall']:.2f}x | {ratio['startup']:.2f}x |",
    )
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
