"""Faults a GRPO run meets on a SLURM cluster, on a real local SLURM through `--profile profiles/slurm`.

Two scenarios, run side by side (one waits on SLURM's one-minute time-limit granularity while the other runs):

time limit  train_grpo exceeds its time limit (the config's `resources.runtime: 1`). To be sure the job is still
            training when the limit comes whatever the machine's speed, the test pauses the trainer (SIGSTOP)
            after its first checkpoint: SLURM then really times the job out (TIMEOUT; SIGTERM, and SIGKILL after
            KillWait). The trainer saves at the SIGTERM; the profile's `retries` resubmits the job in the same
            Snakemake run, and the new attempt resumes from that checkpoint and finishes inside its own limit
            (`resources.retry_runtime: 5`: a retry must queue, start and load again before it trains, which on a slow
            or busy machine alone can take a minute; the retry's limit is what real runs set it for too).
Ctrl-C      while training runs: a second `snakemake` on the same directory is refused by Snakemake's lock and
            changes nothing; then Ctrl-C (SIGINT) on the first one: the plugin scancels the job, the trainer gets
            SIGTERM, finishes its step, saves a checkpoint and exits 1 with no outputs; rerunning the same command
            resumes from that checkpoint and ends at grpo.total_steps, every step's metrics exactly once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest
import yaml
from faultkit import (
    CHECKPOINTS,
    MARKER,
    METRICS,
    TRAIN_LOG,
    fault_config,
    latest_checkpoint,
    pause,
    process_state,
    read_jsonl,
    trainer_pids,
    wait_for,
)
from grpoflow_testing import (
    REPO,
    cancel_leftover_jobs,
    load_yaml,
    make_workdir,
    popen_snakemake_slurm,
    slurm_job,
    snakemake,
    snakemake_slurm,
    submitted_jobs,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm_pipeline")]

PROFILE_RETRIES = load_yaml(REPO / "profiles" / "slurm" / "config.yaml")["retries"]
TIME_LIMIT_STEPS = 20
RETRY_RUNTIME = 5  # minutes: resources.retry_runtime of the time-limited run
CTRL_C_STEPS = 40


def _workdir(tmp_path_factory, name: str, config: dict):
    wd = make_workdir(tmp_path_factory.mktemp(name))
    (wd / "fault.yaml").write_text(yaml.safe_dump(config))
    return wd


def _log(path):
    return path.read_text(errors="replace") if path.exists() else ""


def _first_job(log_path, timeout=120) -> str:
    return wait_for("the training job's submission", lambda: (submitted_jobs(_log(log_path)) or [None])[0], timeout)


def _start_time_limit_run(tmp_path_factory, model) -> dict:
    wd = _workdir(
        tmp_path_factory,
        "fault-timelimit",
        fault_config(model, total_steps=TIME_LIMIT_STEPS, save_freq=2, runtime=1, retry_runtime=RETRY_RUNTIME),
    )
    log = wd / "snakemake.out"
    proc = popen_snakemake_slurm([MARKER, "--configfile", "fault.yaml"], wd, log, timeout=900)
    job = _first_job(log)
    wait_for("the first checkpoint", lambda: latest_checkpoint(wd) >= 2, 300)
    pause(
        wait_for("the trainer's process", lambda: trainer_pids(job), 120)
    )  # still "training" when the limit comes, however fast this machine is
    return {"wd": wd, "log": log, "proc": proc, "job": job, "paused_at": latest_checkpoint(wd)}


def _ctrl_c_run(tmp_path_factory, model) -> dict:
    wd = _workdir(
        tmp_path_factory, "fault-ctrl-c", fault_config(model, total_steps=CTRL_C_STEPS, save_freq=2, runtime=10)
    )
    args = [MARKER, "--configfile", "fault.yaml"]
    log = wd / "snakemake.out"
    first = popen_snakemake_slurm(args, wd, log, timeout=600)
    try:
        job = _first_job(log)
        wait_for("the first checkpoint", lambda: latest_checkpoint(wd) >= 2, 300)
        pids = wait_for("the trainer's process", lambda: trainer_pids(job), 120)
        # Freeze the job (SLURM suspend) so that training cannot finish while the second invocation runs.
        subprocess.run(["scontrol", "suspend", job], check=True)
        second = snakemake_slurm(args, wd, check=False, timeout=300)
        state_after_second = slurm_job(job)["JobState"]
        subprocess.run(["scontrol", "resume", job], check=True)
        # Pause the trainer again (once SLURM's SIGCONT has reached it), so that it is still mid-run when the
        # Ctrl-C's scancel comes, however fast this machine trains: SLURM's SIGCONT + SIGTERM then wake it to save.
        wait_for("the resumed trainer", lambda: all(process_state(pid) != "T" for pid in pids), 30)
        pause(pids)
        first.send_signal(signal.SIGINT)  # Ctrl-C
        sent = time.monotonic()
        first.wait(timeout=300)
        exited_after = time.monotonic() - sent
        # Snakemake exits right after scancel; the job goes on saving (COMPLETING) until the trainer exits.
        wait_for(
            "the cancelled job to end",
            lambda: slurm_job(job)["JobState"] not in ("RUNNING", "COMPLETING", "SUSPENDED"),
            120,
        )
    finally:
        if first.poll() is None:
            first.kill()
        cancel_leftover_jobs(_log(log))
    after_kill = {
        "rc": first.returncode,
        "exited_after": exited_after,
        "out": _log(log),
        "job": job,
        "job_state": slurm_job(job)["JobState"],
        "trainer_log": _log(wd / TRAIN_LOG),
        "checkpoint": latest_checkpoint(wd),
        "marker": (wd / MARKER).exists(),
        "metrics": (wd / METRICS).exists(),
        "slurm_log": _log(wd / "logs" / "slurm" / "rule_train_grpo" / "fault" / f"{job}.log"),
        "plan": snakemake([MARKER, "-n", "--configfile", "fault.yaml"], wd).stdout,
    }
    rerun = snakemake_slurm(args, wd, timeout=600)
    return {
        "wd": wd,
        "second": second,
        "state_after_second": state_after_second,
        "after_kill": after_kill,
        "rerun": rerun,
    }


@pytest.fixture(scope="module")
def faults(request, local_slurm, tmp_path_factory, fault_start_model):
    # Most of these scenarios is waiting on SLURM: when the SLURM pipeline test is selected too, its run goes on
    # meanwhile, and is waited for here so that no background load spills into other tests.
    pipeline = None
    if any(item.path.name == "test_slurm_pipeline.py" for item in request.session.items):
        pipeline = request.getfixturevalue("slurm_pipeline_run")
    timed = _start_time_limit_run(tmp_path_factory, fault_start_model)
    try:
        ctrl_c = _ctrl_c_run(tmp_path_factory, fault_start_model)
        timed["proc"].wait(timeout=900)
    finally:
        if timed["proc"].poll() is None:
            timed["proc"].send_signal(signal.SIGINT)
            timed["proc"].wait(timeout=120)
        cancel_leftover_jobs(_log(timed["log"]))
        if pipeline is not None:
            pipeline.result()
    timed["out"] = _log(timed["log"])
    return {"time_limit": timed, "ctrl_c": ctrl_c}


def _finished_cleanly(wd, steps: int) -> None:
    import json

    marker = json.loads((wd / MARKER).read_text())
    assert marker["final_step"] == marker["planned_steps"] == steps
    assert [r["step"] for r in read_jsonl(wd / METRICS)] == list(range(1, steps + 1))  # each step once
    assert latest_checkpoint(wd) == steps


def test_time_limit_is_rerun_per_profile_and_resumes(faults):
    t = faults["time_limit"]
    assert PROFILE_RETRIES >= 1
    assert t["proc"].returncode == 0, t["out"][-6000:]
    jobs = submitted_jobs(t["out"])
    # Two attempts: the first times out (paused), the retry, with resources.retry_runtime, resumes and finishes.
    assert len(jobs) == 2 and jobs[0] == t["job"], jobs
    states = [slurm_job(j) for j in jobs]
    assert [s["JobState"] for s in states] == ["TIMEOUT", "COMPLETED"]
    assert [s["TimeLimit"] for s in states] == ["00:01:00", f"00:{RETRY_RUNTIME:02d}:00"]
    assert "SLURM status is: 'TIMEOUT'" in t["out"] and "Trying to restart job" in t["out"]
    # The second attempt resumed from the newest complete checkpoint the first one left (at least the one seen
    # before the pause; a save cut off by the kill is removed first).
    # (the rule's log holds the last attempt; a failed attempt's log is also in Snakemake's output, show-failed-logs)
    log = _log(t["wd"] / TRAIN_LOG)
    resumed = int(log.split(f"resuming from {CHECKPOINTS}/checkpoint-", 1)[1].split()[0])
    assert resumed >= t["paused_at"] >= 2
    # At the limit SLURM sends SIGCONT, then SIGTERM (twice), then SIGKILL after KillWait: the trainer finished its
    # step, saved, and said so in one line (printed by show-failed-logs), and the retry resumed from that save.
    stopped = re.search(
        rf"grpoflow: error: training of fault stopped at step (\d+) of grpo.total_steps = {TIME_LIMIT_STEPS} \(interrupted\)",
        t["out"],
    )
    assert stopped and int(stopped.group(1)) == resumed, t["out"][-6000:]
    _finished_cleanly(t["wd"], TIME_LIMIT_STEPS)


def test_second_invocation_is_refused_and_changes_nothing(faults):
    c = faults["ctrl_c"]
    second = c["second"].stdout + c["second"].stderr
    assert c["second"].returncode != 0
    assert "Directory cannot be locked" in second and "--unlock" in second
    assert "Traceback" not in second and not submitted_jobs(second)
    assert c["state_after_second"] == "SUSPENDED"  # the first run's job was left alone


def test_ctrl_c_cancels_the_job_and_the_trainer_saves_first(faults):
    k = faults["ctrl_c"]["after_kill"]
    assert k["rc"] != 0 and k["exited_after"] < 120
    assert k["job_state"] == "CANCELLED"
    assert "SIGTERM: saving a checkpoint after this step" in k["trainer_log"]
    last = k["trainer_log"].rstrip().splitlines()[-1]
    assert last.startswith(
        f"grpoflow: error: training of fault stopped at step {k['checkpoint']} of grpo.total_steps = {CTRL_C_STEPS} (interrupted)"
    )
    assert 2 <= k["checkpoint"] < CTRL_C_STEPS
    # The job step ended because the trainer exited, not because its shell was killed by the signal first (on a
    # cluster with cgroups, a dead shell ends the step and SIGKILLs the trainer mid-save).
    assert "returned non-zero exit status 1" in k["slurm_log"] and "died with <Signals.SIGTERM" not in k["slurm_log"]
    # Nothing looks complete: no outputs, and Snakemake plans the training again.
    assert not k["marker"] and not k["metrics"]
    assert "rule train_grpo:" in k["plan"] and "Missing output files" in k["plan"]


def test_rerun_after_ctrl_c_resumes_and_ends_at_the_planned_step(faults):
    c = faults["ctrl_c"]
    k = c["after_kill"]
    log = _log(c["wd"] / TRAIN_LOG)
    assert f"resuming from {CHECKPOINTS}/checkpoint-{k['checkpoint']} (step {k['checkpoint']} of {CTRL_C_STEPS})" in log
    assert len(submitted_jobs(c["rerun"].stdout + c["rerun"].stderr)) == 1
    _finished_cleanly(c["wd"], CTRL_C_STEPS)
