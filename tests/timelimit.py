"""SLURM's time-limit sequence replayed on a train_grpo job's processes, and train_grpo's own shell as a one-rule
Snakemake job (for tests/faults/test_time_limit.py and tests/slurm/test_time_limit_signal.py).

What SLURM sends, measured on the local SLURM (SLURM 22.05; `benchmarks/slurm_signals.py`, strace on every process
of a train_grpo job submitted through profiles/slurm with ``--signal=TERM@10``; docs/reliability.md, "What a rank
gets at a time limit"), and read in SLURM's source (slurm-22-05-8-1):

1. the warning: slurmctld's time-limit pass (every 30 s, ``PERIODIC_TIMEOUT``) sends it once ``lead + 30 s`` or
   less are left (``send_job_warn_signal``, src/slurmctld/job_mgr.c): SIGCONT then SIGTERM to every process of the
   job step (not the batch step: no ``B:``). slurmstepd signals its whole container (``proctrack_g_signal``), so the
   jobstep Snakemake, the rule's shell, the launcher, torchrun and every rank each get them directly.
2. the limit, at the first pass after it: SIGTERM to the job step (slurmd ``_rpc_timelimit``), then SIGCONT and
   SIGTERM to every step, the batch step too (``_rpc_terminate_job``): the rank gets SIGTERM twice within
   milliseconds.
3. SIGKILL KillWait seconds later (``_pause_for_job_completion``) to whatever is left.

``replay`` sends that sequence to a process tree the way slurmstepd does: to each process of it, read afresh at
each stage (processes started since are signalled too)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from grpoflow_testing import BIN, REPO, SNAKEMAKE

# The head of both tests' stand-in ranks (a script given the output folder and the job's output as its first two
# arguments): SIGTERM taken as SigtermStop takes it, and the rerun (or SLURM's retry) that finds this rank's save
# resumes from it and finishes. What follows it in each test is the run that gets the signals.
RANK_RESUMES = """
import json, os, signal, socket, sys, threading, time
from pathlib import Path
from grpoflow.training.common import SigtermStop
from grpoflow.backends.trl.launch import unblock_stop_signal

unblock_stop_signal()
stop = SigtermStop()
out, output = Path(sys.argv[1]), Path(sys.argv[2])
rank, world = os.environ.get("RANK", "0"), int(os.environ.get("WORLD_SIZE", "1"))
saved = out / f"saved-{rank}"
if saved.exists():  # the rerun: resume from the save, finish
    (out / f"resumed-{rank}").write_text(saved.read_text())
    if rank == "0":
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps({"resumed_from": saved.read_text()}))
    sys.exit(0)
"""

# Snakemake's prefix of every bash `shell:` job (snakemake/shell.py).
SNAKEMAKE_SHELL_PREFIX = "set -euo pipefail; "


def train_grpo_shell() -> str:
    """train_grpo's ``shell:`` string as rules/train.smk writes it (``{params.command}``, ``{log}``, ...)."""
    text = (REPO / "rules" / "train.smk").read_text()
    body = text.split("rule train_grpo:", 1)[1].split("\nrule ", 1)[0].split("\n    shell:", 1)[1]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return ast.literal_eval(lines[0])


def train_grpo_snakefile(command: str, output: str, *, runtime: int = 10, slurm_extra: str | None = None) -> str:
    """A Snakefile whose one rule, train_grpo, runs ``command`` in train_grpo's own shell (the same trap, exports
    and redirection to its log). ``runtime`` (minutes) and ``slurm_extra`` are its SLURM resources."""
    extra = f", slurm_extra={json.dumps(slurm_extra)}" if slurm_extra else ""
    return (
        "rule train_grpo:\n"
        f"    output: {json.dumps(output)}\n"
        "    log: 'logs/train_grpo.log'\n"
        "    threads: 2\n"
        f"    resources: runtime={runtime}, cpus_per_task=2, mem_mb=2000, gpu_check_retry=2{extra}\n"
        f"    params: command={json.dumps(command)}, tpu=''\n"
        f"    shell: {json.dumps(train_grpo_shell())}\n"
    )


def job_env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def start_local_job(workdir: Path, command: str, output: str) -> subprocess.Popen:
    """``snakemake --cores 2`` on train_grpo_snakefile(command), in its own session (as a job step's processes are
    SLURM's to signal, not the test's); its output in ``workdir/snakemake.out``."""
    (workdir / "Snakefile").write_text(train_grpo_snakefile(command, output))
    out = open(workdir / "snakemake.out", "w")
    return subprocess.Popen(
        [SNAKEMAKE, "--cores", "2", "--snakefile", "Snakefile"],
        cwd=workdir,
        env=job_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it (from /proc), as SLURM's linuxproc tracking sees a job step."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rfind(")") + 2 :].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sorted(p for p in tree if p in parents)


def _send(root: int, signals: list[signal.Signals]) -> None:
    for sig in signals:
        for pid in process_tree(root):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def replay(
    root: int,
    *,
    lead: float,
    kill_wait: float,
    ended: Callable[[], bool],
    after_warning: Callable[[], None] | None = None,
) -> dict:
    """SLURM's time-limit sequence to ``root``'s process tree: SIGCONT + SIGTERM now (the ``--signal=TERM@lead``
    warning), SIGTERM, SIGCONT, SIGTERM ``lead`` s later (the limit), SIGKILL ``kill_wait`` s after that, each stage
    only while ``ended()`` is false. Returns the seconds from the warning at which the job ended (``ended_s``) and
    whether the limit's SIGTERMs and the SIGKILL were sent."""
    start = time.monotonic()
    _send(root, [signal.SIGCONT, signal.SIGTERM])
    if after_warning is not None:
        after_warning()
    sent = {"limit": False, "kill": False}
    for stage, at, signals in (
        ("limit", lead, [signal.SIGTERM, signal.SIGCONT, signal.SIGTERM]),
        ("kill", lead + kill_wait, [signal.SIGKILL]),
    ):
        while not ended() and time.monotonic() - start < at:
            time.sleep(0.05)
        if ended():
            break
        _send(root, signals)
        sent[stage] = True
    while not ended():
        time.sleep(0.05)
    return {**sent, "ended_s": time.monotonic() - start}
