"""Both install paths get the same pins: each conda env file carries exactly its pip lock file's pins."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from grpoflow_testing import REPO


def test_env_files_equal_their_locks():
    proc = subprocess.run([sys.executable, str(REPO / "envs" / "sync.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("env,lock", [("local", "local"), ("cluster", "cluster"), ("vllm-cpu", "vllm-cpu")])
def test_env_file_is_valid_conda_yaml_with_python_311(env, lock):
    data = yaml.safe_load((REPO / "envs" / f"{env}.yaml").read_text())
    assert "python=3.11" in data["dependencies"]
    pip = next(d["pip"] for d in data["dependencies"] if isinstance(d, dict))
    pins = [p for p in pip if "==" in p]
    assert len(pins) == len({p.split("==")[0].lower() for p in pins}), "one version per package"


def test_local_lock_holds_both_planes_cpu_parts():
    pins = dict(
        ln.split("==", 1)
        for ln in (REPO / "requirements/local.lock").read_text().splitlines()
        if "==" in ln and not ln.startswith("#")
    )
    assert pins["torch"] == "2.13.0" and pins["verl"] == "0.9.1" and pins["trl"] == "1.16.0"
    assert pins["antlr4-python3-runtime"].startswith("4.9."), "hydra-core 1.3 (verl's config system) pins antlr 4.9"
