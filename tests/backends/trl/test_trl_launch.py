"""TRL under torchrun (grpoflow.backends.trl.launch), as train_grpo runs it with trl.processes > 1.

- Threads: Snakemake exports OMP_NUM_THREADS = the rule's threads in every shell job; each rank must get the job's
  threads // processes, not the whole count. Shown in a real Snakemake `shell:` job running train_grpo's own command
  (one CPU GRPO step, 2 gloo processes): the marker rank 0 writes records its OMP_NUM_THREADS and torch's threads.
- The grace after SIGTERM: torchrun SIGKILLs its ranks 30 s after it is signalled (hard-coded up to torch 2.11, the
  cluster lock's; the installed torch's default when neither --shutdown-timeout nor TORCH_ELASTIC_SHUTDOWN_TIMEOUT is
  given, as here). Shown with the installed torch's real torchrun, under the launcher exactly as the command writes
  it, and a stand-in rank (below) that takes longer than 30 s to save after SIGTERM.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grpoflow_testing import run_train_grpo_job
from test_trl_grpo import spec_command
from trainkit import BIN

from grpoflow.backends.trl.commandline import launcher
from grpoflow.config import deep_merge

# Stand-in for a TRL rank (grpoflow.backends.trl.train) whose checkpoint takes SAVE_S seconds: it unblocks SIGTERM
# as the real rank does first thing, stops on it as the runner's SigtermStop does, "saves" for SAVE_S seconds and
# writes the file a finished save leaves, then exits 1 (a stopped run is not complete), as the real rank does.
RANK = """
import os, signal, sys, time
from pathlib import Path
from grpoflow.training.common import SigtermStop
from grpoflow.backends.trl.launch import unblock_stop_signal

unblock_stop_signal()
stop = SigtermStop()
out = Path(sys.argv[1])
(out / f"started-{os.environ['RANK']}").write_text(str(os.getpid()))
while not stop.requested:
    time.sleep(0.1)
time.sleep(float(sys.argv[2]))
(out / f"saved-{os.environ['RANK']}").write_text("complete")
# HF Trainer's save ends at a barrier: a real rank exits only once every rank has saved. Without it, the first rank's
# exit (status 1: the run was interrupted) makes torchrun SIGTERM the others while they are still saving.
while len(list(out.glob("saved-*"))) < int(os.environ["WORLD_SIZE"]):
    time.sleep(0.1)
sys.exit(1)
"""


def job_env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def launch_argv(nproc: int, grace: float) -> list[str]:
    """The launcher's words as train_grpo's command writes them (commandline.launcher), run by this interpreter."""
    words = shlex.split(launcher({"trl": {"processes": nproc, "shutdown_timeout": grace}}))
    assert words[:3] == ["python", "-m", "grpoflow.backends.trl.launch"] and words[-1] == "--"
    return [sys.executable, *words[1:]]


def start_ranks(tmp_path: Path, nproc: int, grace: float, save_s: float) -> subprocess.Popen:
    (tmp_path / "rank.py").write_text(RANK)
    cmd = [*launch_argv(nproc, grace), str(tmp_path / "rank.py"), str(tmp_path), str(save_s)]
    env = {k: v for k, v in job_env().items() if k != "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}  # torchrun's own 30 s
    log = open(tmp_path / "launch.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    while len(list(tmp_path.glob("started-*"))) < nproc:
        assert proc.poll() is None, (tmp_path / "launch.log").read_text()[-3000:]
        assert time.time() < deadline, "the ranks did not start"
        time.sleep(0.1)
    return proc


@pytest.mark.slow
def test_a_rank_that_needs_more_than_torchruns_30_s_to_save_finishes_its_checkpoint(tmp_path):
    proc = start_ranks(tmp_path, nproc=2, grace=60, save_s=40)
    sent = time.monotonic()
    # As SLURM does at a time limit: every process of the job step, torchrun included (the ranks, each in its own
    # session, once more through the launcher, which SigtermStop takes as the same request).
    os.killpg(proc.pid, signal.SIGTERM)
    for started in tmp_path.glob("started-*"):
        os.kill(int(started.read_text()), signal.SIGTERM)
    code = proc.wait(timeout=120)
    took = time.monotonic() - sent
    log = (tmp_path / "launch.log").read_text()
    assert sorted(p.name for p in tmp_path.glob("saved-*")) == ["saved-0", "saved-1"], log[-3000:]
    assert 40 <= took < 60, f"{took:.1f} s: the ranks' 40-s save, well past torchrun's 30 s, inside the 60-s grace"
    assert code == 1, "torchrun reports the stopped ranks' status"
    assert "forcefully exiting via Signals.SIGKILL" not in log


def test_a_rank_that_does_not_stop_is_killed_when_the_grace_ends(tmp_path):
    """Only the launcher is signalled (as by a kill of its pid): it forwards SIGTERM to the ranks and SIGKILLs them
    when trl.shutdown_timeout ends."""
    proc = start_ranks(tmp_path, nproc=2, grace=3, save_s=600)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    took = time.monotonic() - sent
    assert code != 0 and not list(tmp_path.glob("saved-*"))
    assert 3 <= took < 15, took
    log = (tmp_path / "launch.log").read_text()
    assert "did not stop within 3 s of SIGTERM (trl.shutdown_timeout): killing them" in log, log[-3000:]
    for started in tmp_path.glob("started-*"):
        pid = int(started.read_text())
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.slow
def test_each_rank_gets_the_jobs_threads_split_over_the_processes_in_a_snakemake_job(
    default_config, tmp_path, arith_parquet, tiny_sft_json
):
    threads = 8
    base = deep_merge(default_config, {"defaults": {"trl": {"processes": 2}}})
    cmd, paths = spec_command(base, tmp_path, arith_parquet, tiny_sft_json, total_steps=1, save_freq=1)
    env = {k: v for k, v in job_env().items() if k != "OMP_NUM_THREADS"}
    shell = cmd.replace("{", "{{").replace("}", "}}") + " > {log} 2>&1"
    log = run_train_grpo_job(tmp_path, shell, paths["marker"], threads, env=env, timeout=600)
    compute = json.loads(Path(paths["marker"]).read_text())["provenance"]["compute"]
    # rank 0's; Snakemake exported 8. torch takes MKL_NUM_THREADS over OMP_NUM_THREADS: both are split.
    assert compute["kernel_env"]["OMP_NUM_THREADS"] == compute["kernel_env"]["MKL_NUM_THREADS"] == "4", compute
    # torch takes OMP_NUM_THREADS up to the machine's CPUs (2 on the CI machine).
    assert compute["torch"]["threads"] == min(4, os.cpu_count())
    assert "2 processes, 4 threads each (the job's 8 // 2)" in log
