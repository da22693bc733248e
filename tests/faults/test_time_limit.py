"""A checkpoint save at a SLURM time limit with ``--signal=TERM@<lead>`` (issue 38, item 2).

SLURM sends SIGTERM at the lead, SIGTERM again (twice) at the limit and SIGKILL KillWait later, to every process of
the job step (tests/timelimit.py has the sequence as measured on the local SLURM). A rank that is still saving at
the limit's SIGTERM must finish its save: only SIGKILL may end it. Replayed here on train_grpo's own shell in a
real Snakemake job with the issue's figures: lead 10 s, KillWait 30 s (SLURM's default), a save of 20 s (longer
than the lead, shorter than lead + KillWait).

The ranks are stand-ins (a script, RANK below), not TRL: a real GRPO step and save on the test's tiny model take
well under a second, which never reaches a second SIGTERM. The stand-in holds the same stop handler as the TRL and
Tunix runners (grpoflow.training.common.SigtermStop), unblocks SIGTERM as a TRL rank does first thing under the
launcher, "saves" for SAVE_S seconds and leaves the file a finished save leaves; it ends at a barrier as HF
Trainer's save does and exits 1 (an interrupted run is incomplete). A rerun's ranks read that file back ("resume")
and write the rule's output. Two shapes, as train_grpo's command runs TRL:

- several processes: ``python -m grpoflow.backends.trl.launch`` → torchrun (the installed torch's) → 2 ranks;
- one process (the TRL recipe-004 config, config/qwen2.5-math-1.5b-lora-binary.yaml: one GPU, one process, no
  launcher): the rank is the rule shell's only command.
"""

from __future__ import annotations

import shlex
import sys

import pytest
from faultkit import wait_for
from grpoflow_testing import load_shipped
from timelimit import RANK_RESUMES, replay, start_local_job

from grpoflow.backends.trl.commandline import command, launcher, training_spec
from grpoflow.config import resolve_config

LEAD_S, KILL_WAIT_S, SAVE_S = 10, 30, 20
OUTPUT = "results/trained.json"

RANK = (
    RANK_RESUMES
    + """
save_s = float(sys.argv[3])
(out / f"started-{rank}").write_text(str(os.getpid()))
step = 0
while not stop.requested:  # "training"
    step += 1
    time.sleep(0.05)
started = time.monotonic()
time.sleep(save_s)  # the checkpoint save
saved.write_text(f"step {step}, saved {time.monotonic() - started:.1f} s after the stop")
while len(list(out.glob("saved-*"))) < world:  # HF Trainer's save ends at a barrier
    time.sleep(0.1)
sys.exit(1)
"""
)


def rank_command(tmp_path, processes: int) -> str:
    """train_grpo's command shape for ``processes`` TRL processes (commandline.launcher), on the stand-in rank."""
    (tmp_path / "rank.py").write_text(RANK)
    rank = f"{tmp_path / 'rank.py'} {tmp_path} {OUTPUT} {SAVE_S}"
    prefix = launcher({"trl": {"processes": processes, "shutdown_timeout": 900}})
    return f"{sys.executable} {prefix.removeprefix('python ')}{rank}" if prefix else f"{sys.executable} {rank}"


def test_recipe_004_trains_in_one_process_without_the_launcher():
    """The one-process shape below is recipe 004's: its shipped config resolves to one TRL process, whose command
    is the trainer itself (no launcher, no torchrun), run by the rule's shell."""
    cfg = resolve_config(load_shipped("config/qwen2.5-math-1.5b-lora-binary.yaml"))
    name = "qwen2.5-math-1.5b-lora-binary"
    io = ({"train": "t.parquet", "sft": "sft.json"}, {"marker": "m.json", "metrics": "x.jsonl"})
    assert training_spec(cfg, name, *io)["trl"]["processes"] == 1
    assert shlex.split(command(cfg, name, *io))[:3] == ["python", "-m", "grpoflow.backends.trl.train"]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 1], ids=["launcher-2-ranks", "one-process"])
def test_a_save_longer_than_the_lead_finishes_under_slurms_time_limit_signals(tmp_path, processes):
    wd = tmp_path
    job = start_local_job(wd, rank_command(tmp_path, processes), OUTPUT)
    try:
        wait_for("the ranks", lambda: len(list(tmp_path.glob("started-*"))) == processes or job.poll() is not None, 120)
        assert job.poll() is None, (wd / "snakemake.out").read_text()[-3000:]
        sent = replay(job.pid, lead=LEAD_S, kill_wait=KILL_WAIT_S, ended=lambda: job.poll() is not None)
    finally:
        if job.poll() is None:
            job.kill()
    log = (wd / "logs" / "train_grpo.log").read_text()
    saved = sorted(p.name for p in tmp_path.glob("saved-*"))
    assert saved == [f"saved-{r}" for r in range(processes)], f"{sent}\n{log[-3000:]}"
    assert sent["limit"] and not sent["kill"], sent  # the save outlived the lead, and needed no more than KillWait
    assert SAVE_S <= sent["ended_s"] < LEAD_S + KILL_WAIT_S, sent
    assert job.returncode == 1, "the job fails (an interrupted run), so Snakemake reruns it"
    assert not (wd / OUTPUT).exists()

    # The rerun (the profile's retry) resumes from the save.
    rerun = start_local_job(wd, rank_command(tmp_path, processes), OUTPUT)
    assert rerun.wait(timeout=300) == 0, (wd / "snakemake.out").read_text()[-3000:]
    assert sorted(p.name for p in tmp_path.glob("resumed-*")) == [f"resumed-{r}" for r in range(processes)]
    assert (wd / OUTPUT).exists()
