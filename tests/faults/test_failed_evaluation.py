"""A failed evaluation does not invalidate training, and the rerun repeats only what failed.

On a copy of the finished shortened run (profiles/local): an evaluation-only change (one benchmark's `limit`)
reruns that benchmark's three evaluations; one of them is killed mid-job (SIGKILL, as the OOM killer or a lost
node would). Snakemake goes on with the others (keep-going), exits non-zero, and leaves every training output
(marker, metrics, checkpoints, merged models) byte- and mtime-identical; the rerun runs exactly the failed
evaluation and the report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from grpoflow_testing import BIN, LOCAL_PROFILE, REPO, SHORT_CONFIG, SNAKEMAKE, copy_workdir, snakemake

pytestmark = pytest.mark.slow

EXPERIMENTS = ["tiny-arith-seed1", "tiny-arith-seed2"]
VICTIM = "results/tiny-arith-seed1/eval/gsm8k_sample.json"
VICTIM_LOG = "logs/evaluate/tiny-arith-seed1/gsm8k_sample.log"


def training_outputs(wd: Path) -> dict[str, tuple[int, bytes]]:
    """Every file training and merging produced: (mtime, content)."""
    files = []
    for e in EXPERIMENTS:
        files += [wd / f"results/{e}/training_complete.json", wd / f"results/{e}/train_metrics.jsonl"]
        files += [p for d in ("checkpoints", "model") for p in (wd / f"results/{e}/{d}").rglob("*") if p.is_file()]
    return {str(p.relative_to(wd)): (p.stat().st_mtime_ns, p.read_bytes()) for p in files}


def planned(wd: Path, overlay: Path) -> dict[str, int]:
    out = snakemake([*LOCAL_PROFILE, *SHORT_CONFIG, str(overlay), "-n", "--quiet", "rules"], wd).stdout
    table = out.split("Job stats:", 1)[1].split("Reasons:", 1)[0] if "Job stats:" in out else ""
    return {
        ln.split()[0]: int(ln.split()[1])
        for ln in table.splitlines()
        if len(ln.split()) == 2 and ln.split()[1].isdigit() and ln.split()[0] != "total"
    }


def kill_when_running(proc: subprocess.Popen, wd: Path, timeout: float = 300) -> None:
    """SIGKILL the evaluate job that writes VICTIM_LOG as soon as it runs (a child of this Snakemake)."""
    target = str(wd / VICTIM_LOG)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if any(f.path == target for f in child.open_files()):
                    os.kill(child.pid, signal.SIGKILL)
                    return
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.05)
    raise AssertionError(f"the evaluation writing {VICTIM_LOG} never ran")


def test_failed_evaluation_keeps_training_and_rerun_repeats_only_it(short_local_run, tmp_path):
    wd = copy_workdir(short_local_run, tmp_path / "wd")
    overlay = tmp_path / "gsm8k_limit.yaml"
    overlay.write_text("evaluation:\n  benchmarks:\n    gsm8k_sample: {dataset: gsm8k_sample, split: test, limit: 6}\n")
    before = training_outputs(wd)
    assert planned(wd, overlay) == {"evaluate": 3, "report": 1, "all": 1}

    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), *LOCAL_PROFILE, *SHORT_CONFIG, str(overlay)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with open(tmp_path / "run.out", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=wd)
    try:
        kill_when_running(proc, wd)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = (tmp_path / "run.out").read_text()
    assert proc.returncode != 0
    assert "Error in rule evaluate" in out and "wildcards: model=tiny-arith-seed1, benchmark=gsm8k_sample" in out
    # The other two evaluations of the changed benchmark finished (keep-going); the failed one left nothing.
    for model in ("tiny-arith-sft", "tiny-arith-seed2"):
        assert '"n_problems": 6' in (wd / f"results/{model}/eval/gsm8k_sample.json").read_text()
    assert not (wd / VICTIM).exists() and not (wd / VICTIM.replace(".json", ".samples.jsonl")).exists()
    assert training_outputs(wd) == before

    assert planned(wd, overlay) == {"evaluate": 1, "report": 1, "all": 1}
    snakemake([*LOCAL_PROFILE, *SHORT_CONFIG, str(overlay)], wd, timeout=600)
    assert '"n_problems": 6' in (wd / VICTIM).read_text()
    assert training_outputs(wd) == before
    assert "Nothing to be done" in snakemake([*LOCAL_PROFILE, *SHORT_CONFIG, str(overlay), "-n"], wd).stdout
