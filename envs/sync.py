"""Regenerate the conda env files from the pip lock files, so both install paths get the same pins.

    python envs/sync.py          # rewrite envs/local.yaml from requirements/local.lock
    python envs/sync.py --check  # exit 1 if they disagree (tests/test_envs.py runs this check)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRS = {  # env file -> (lock file, header)
    "envs/local.yaml": ("requirements/local.lock", "grpoflow-local", "the local plane (CPU torch, TRL) and verl's CPU-usable parts"),
}


def pins(lock: Path) -> list[str]:
    return [ln.strip() for ln in lock.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "-"))]


def render(env_name: str, what: str, lock_rel: str, lines: list[str]) -> str:
    body = "\n".join(f"      - {p}" for p in lines)
    return (
        f"# Conda environment for {what}.\n"
        f"# Generated from {lock_rel} by envs/sync.py: edit the lock, then run `python envs/sync.py`.\n"
        f"# Used by `snakemake --sdm conda`; the README's pip set-up installs the same pins without conda.\n"
        f"name: {env_name}\n"
        "channels:\n  - conda-forge\n  - nodefaults\n"
        "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n"
        "      - --extra-index-url https://download.pytorch.org/whl/cpu\n"
        f"{body}\n"
    )


def main(check: bool) -> int:
    bad = 0
    for env_rel, (lock_rel, name, what) in PAIRS.items():
        text = render(name, what, lock_rel, pins(ROOT / lock_rel))
        env = ROOT / env_rel
        if check:
            if not env.exists() or env.read_text() != text:
                print(f"{env_rel} disagrees with {lock_rel}: run `python envs/sync.py`")
                bad = 1
        else:
            env.write_text(text)
    return bad


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
