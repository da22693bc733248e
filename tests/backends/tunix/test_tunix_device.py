"""A declared tunix.tpu where JAX runs on the CPU (here: this machine's JAX has no TPU, as when libtpu is missing
or the TPU is held by another process) stops the Tunix jobs at their start with one line naming it: the evaluate job
through the DAG, and train_grpo's command as the DAG composes it. The demo's CPU runs declare no TPU and run
(tests/backends/tunix/test_tunix_evaluation.py, test_tunix_train.py)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import yaml
from grpoflow_testing import LOCAL_PROFILE, REPO, make_workdir, snakemake
from tunixkit import require_tunix

pytestmark = pytest.mark.slow

DEMO_TUNIX = ["--configfile", str(REPO / "config" / "config.yaml"), str(REPO / "config" / "demo-tunix.yaml")]
LINE = re.compile(r"grpoflow: error: .*tunix\.tpu = v5e-1 is declared but JAX runs on \d+ cpu device\(s\), not a TPU")


def test_a_declared_tpu_on_cpu_jax_stops_evaluation_and_training_at_once(tmp_path):
    require_tunix()
    wd = make_workdir(tmp_path)
    overlay = wd / "tpu.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "defaults": {"tunix": {"tpu": "v5e-1"}},
                "evaluation": {
                    "backend": "tunix",
                    "resources": {"cpus_per_task": 1},
                    "models": {"tiny-start": {"path": "resources/demo/tiny-qwen3"}},
                },
            }
        )
    )
    config = [*DEMO_TUNIX, str(overlay)]
    snakemake([*LOCAL_PROFILE, "--cores", "2", "resources/demo/tiny-qwen3", "--configfile", *config[1:]], wd)

    started = time.monotonic()
    proc = snakemake(
        [*LOCAL_PROFILE, "--cores", "2", "results/tiny-start/eval/arith.json", "--configfile", *config[1:]],
        wd,
        check=False,
    )
    assert proc.returncode != 0 and time.monotonic() - started < 120
    log = (wd / "logs/evaluate/tiny-start/arith.log").read_text()
    assert LINE.search(log.strip().splitlines()[-1]), log[-2000:]
    assert "evaluate (tiny-start)" in log.strip().splitlines()[-1]
    assert "loaded " not in log  # stopped before the model was loaded
    assert not (wd / "results/tiny-start/eval/arith.json").exists()

    # train_grpo: the command the DAG gives the job (snakemake -n -p), run as the job runs it.
    target = "results/tiny-arith-tunix-seed1/training_complete.json"
    dry = snakemake(["-n", "-p", "--cores", "1", target, "--configfile", *config[1:]], wd).stdout
    (command,) = [line.strip() for line in dry.splitlines() if "GRPOFLOW_TUNIX_TPU=v5e-1" in line]
    assert "grpoflow.backends.tunix.train" in command
    (wd / "logs/train_grpo").mkdir(parents=True)  # Snakemake makes the log's folder before a job
    started = time.monotonic()
    job = subprocess.run(["bash", "-c", command], cwd=wd, capture_output=True, text=True, timeout=300)
    assert job.returncode != 0 and time.monotonic() - started < 60
    log = (wd / "logs/train_grpo/tiny-arith-tunix-seed1.log").read_text()
    assert LINE.search(log.strip().splitlines()[-1]), log[-2000:]
    assert "train_grpo (tiny-arith-tunix-seed1)" in log.strip().splitlines()[-1]
    assert not (wd / "results/tiny-arith-tunix-seed1/checkpoints").exists()  # nothing opened or written


def test_no_declared_tpu_exports_nothing_to_check(tmp_path):
    wd = make_workdir(tmp_path)
    target = "results/tiny-arith-tunix-seed1/training_complete.json"
    dry = snakemake(["-n", "-p", "--cores", "1", target, *DEMO_TUNIX], wd).stdout
    assert "GRPOFLOW_TUNIX_TPU=;" in dry and "GRPOFLOW_TUNIX_TPU=v" not in dry, dry[-3000:]
