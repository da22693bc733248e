"""Check a config's experiments against their trainers' own configuration schemas before anything is submitted.

    python -m grpoflow.validate --configfile config/qwen3-32b-gsm8k.yaml [--experiment NAME ...]

Each experiment whose backend has such a check (its Backend object's ``validate``: verl composes the exact
``train_grpo`` overrides against its own Hydra schema and runs its ``validate_config``,
grpoflow.backends.verl.validate) is checked in the interpreter this runs in, which must hold that trainer (the cluster
environment, or the CI/test one). Exit 0 when every experiment passes, 1 with one ``grpoflow: error:`` line
otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

from grpoflow import backends
from grpoflow.config import load_config_files, resolve_config
from grpoflow.errors import ConfigError, GrpoflowError


def validate_config_files(paths: list[str], experiments: list[str] | None = None) -> list[dict]:
    """Each checked experiment's result (its backend's ``validate``); ``experiments``: only these."""
    cfg = resolve_config(load_config_files(paths))
    if experiments:
        unknown = sorted(set(experiments) - set(cfg.experiments))
        if unknown:
            raise ConfigError(
                f"--experiment {unknown[0]!r} is not in {', '.join(paths)} (experiments: {', '.join(cfg.experiments)})"
            )
    names = [n for n in cfg.experiments if not experiments or n in experiments]
    results = [backends.of(cfg.experiment(n)).validate(cfg, n) for n in names]
    return [r for r in results if r is not None]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grpoflow.validate", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--configfile",
        nargs="+",
        default=["config/config.yaml"],
        help="config file(s), merged like snakemake --configfile",
    )
    p.add_argument("--experiment", nargs="*", help="only these experiments (default: every one its backend checks)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        results = validate_config_files(args.configfile, args.experiment)
    except GrpoflowError as err:
        print(f"grpoflow: error: {err}", file=sys.stderr)
        return 1
    if not results:
        print(f"no experiment of {', '.join(args.configfile)} has a backend that checks its trainer's own schema")
    for r in results:
        print(f"OK {r['experiment']}: {r['summary']}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
