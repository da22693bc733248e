"""The GRPO trainer and stop signals as SLURM delivers them: at a time limit the job step gets SIGTERM twice within
milliseconds (seen on the local cluster: the trainer was killed by the second one mid-save, exit 143), and with
``--signal=TERM@<lead>`` once more at the lead, before them. Every SIGTERM after the first is the same stop: the
step finishes and a checkpoint is saved; only SIGKILL ends it sooner (tests/faults/test_time_limit.py replays the
whole sequence)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faultkit import EXPERIMENT, fault_config, latest_checkpoint, wait_for
from grpoflow_testing import BIN, PYTHON

from grpoflow.backends.trl.commandline import training_spec
from grpoflow.config import resolve_config

pytestmark = pytest.mark.slow


def trainer(tmp_path: Path, model: str, total_steps: int) -> tuple[subprocess.Popen, Path]:
    """`python -m grpoflow.backends.trl.train --spec ...` as train_grpo runs it, in its own process group."""
    from grpoflow.discovery import discover_to_file

    cfg = resolve_config(fault_config(model, total_steps=total_steps, save_freq=2, runtime=10))
    discover_to_file({"model": model}, str(tmp_path / "sft.json"))
    inputs = {"train": str(Path(model).parent / "train.parquet"), "sft": str(tmp_path / "sft.json")}
    outputs = {"marker": str(tmp_path / "marker.json"), "metrics": str(tmp_path / "metrics.jsonl")}
    spec = training_spec(cfg, EXPERIMENT, inputs, outputs)
    spec["checkpoint_dir"] = str(tmp_path / "results" / EXPERIMENT / "checkpoints")
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "grpoflow.backends.trl.train", "--spec", json.dumps(spec)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        )
    return proc, log


def test_sigterm_delivered_twice_still_saves_a_checkpoint(tmp_path, fault_start_model):
    proc, log = trainer(tmp_path, fault_start_model, total_steps=200)
    try:
        wait_for("the first checkpoint", lambda: latest_checkpoint(tmp_path) >= 2 or proc.poll() is not None, 300)
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stopped = latest_checkpoint(tmp_path)
    assert (
        log.read_text()
        .rstrip()
        .splitlines()[-1]
        .startswith(f"grpoflow: error: training of {EXPERIMENT} stopped at step {stopped} of grpo.total_steps = 200")
    )
    assert 2 <= stopped < 200 and not (tmp_path / "marker.json").exists()


def test_a_later_sigterm_is_the_same_stop(tmp_path):
    """The handler every runner uses (grpoflow.training.common.SigtermStop), in a child process: SIGTERMs at once
    and later (as SLURM's at the lead and at the limit) leave the graceful stop requested and the process running."""
    script = """
import signal, sys, time
from grpoflow.training import common
stop = common.SigtermStop()
signal.raise_signal(signal.SIGTERM)
signal.raise_signal(signal.SIGTERM)
time.sleep(1.5)
signal.raise_signal(signal.SIGTERM)
assert stop.requested, "not requested"
print("still running after three SIGTERMs", flush=True)
"""
    proc = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "still running after three SIGTERMs" in proc.stdout, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert lines[0] == "SIGTERM: saving a checkpoint after this step, then stopping (SIGKILL stops at once)", lines
    assert len(lines) == 2 and re.fullmatch(
        r"SIGTERM again, \d+ s after the first: still finishing the step and its checkpoint", lines[1]
    ), lines


def test_a_sigterm_while_the_model_loads_is_the_same_stop(tmp_path, fault_start_model):
    """SIGTERM before the trainer exists (SLURM's lead, or scancel, while a rank loads its model): the job's entry
    point installed the handler first (grpoflow.training.common.process_sigterm_stop), so it is the stop asked for,
    taken at the first step boundary with a checkpoint. Before, the handler came with the trainer, and the process
    died of the signal (exit -15) with nothing saved."""
    proc, log = trainer(tmp_path, fault_start_model, total_steps=200)
    try:
        wait_for("the runner's start", lambda: "training from the start model" in log.read_text() or proc.poll(), 300)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=300) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = log.read_text().rstrip().splitlines()[-1]
    assert last.startswith(f"grpoflow: error: training of {EXPERIMENT} stopped at step 1 of grpo.total_steps = 200"), (
        last
    )
    assert latest_checkpoint(tmp_path) == 1 and not (tmp_path / "marker.json").exists()
