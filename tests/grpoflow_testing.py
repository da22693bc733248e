"""Shared test helpers (import as `from grpoflow_testing import ...`; tests/ is on pytest's pythonpath).

A plain module rather than conftest.py: with a conftest.py in several test folders, `from conftest import`
returns whichever was loaded last."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
SHIPPED_CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "config").glob("*.yaml"))


def load_yaml(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def make_workdir(tmp_path: Path) -> Path:
    """A scratch working directory that sees the repo's config/ and data/ (outputs stay in tmp)."""
    wd = tmp_path / "wd"
    wd.mkdir(exist_ok=True)
    for name in ("config", "data"):
        if not (wd / name).exists():
            (wd / name).symlink_to(REPO / name)
    return wd


def snakemake(args: list[str], workdir: Path, *, env: dict | None = None, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def ensure_debian_tool(binary: str, package: str) -> str:
    """The path of ``binary``; installs Debian's ``package`` when missing and we are root, else skips visibly."""
    found = shutil.which(binary)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{binary} not installed and cannot apt-get install {package} here (not root or no apt)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True, timeout=300)
    proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which(binary)
    if not found:
        pytest.skip(f"apt-get install {package} failed: {proc.stderr.strip()[-300:]}")
    return found
