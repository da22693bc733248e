"""``python -m grpoflow.backends.trl.launch --nproc-per-node N --shutdown-timeout S -- -m grpoflow.backends.trl.train
--spec JSON``: torchrun (``torch.distributed.run --standalone``) for a TRL job of several processes, with two things
torchrun does not do in a Snakemake or SLURM job.

Threads per rank. Snakemake exports ``OMP_NUM_THREADS`` (and MKL_/OPENBLAS_/GOTO_/VECLIB_/NUMEXPR_ thread variables)
= the rule's threads in every shell job (snakemake/shell.py), and torchrun sets ``OMP_NUM_THREADS=1`` only where it
is unset, so every rank would run the job's whole thread count on the job's CPUs. Each rank gets all six = the job's
threads // N (at least 1; grpoflow.threads) instead; without the variable, this process's CPUs // N.

The grace after SIGTERM. torchrun answers SIGTERM by forwarding it to its ranks and SIGKILLing them after its
shutdown timeout, which torch up to 2.11 (the cluster lock's) hard-codes to 30 s (``PContext.close(timeout=30)``;
``--shutdown-timeout`` / ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` arrived after 2.11, pytorch PR 172596). A rank
stopping at a step boundary needs the step plus a checkpoint. So torchrun runs with SIGTERM blocked (a blocked
signal stays pending, whoever sends it, SLURM included, and whatever torch version): it never starts its 30-s
countdown. The ranks unblock it first thing (``unblock_stop_signal``, grpoflow.backends.trl.train) and stop at
their step boundary on their own SIGTERM (SLURM signals every process of the step), or on the one this launcher
forwards when only it is signalled; a later SIGTERM (SLURM sends two more at the time limit) is the same stop, to
the ranks (grpoflow.training.common.SigtermStop) and to this launcher, so a save in progress goes on. This launcher
waits ``S`` seconds (``trl.shutdown_timeout``) for torchrun to exit, then SIGKILLs the ranks and torchrun. SLURM's
own SIGKILL (KillWait after the time limit) still ends everything: ``resources.term_before_limit_s`` (sbatch
``--signal=TERM@<lead>``) decides how much of the grace a time limit leaves (docs/reliability.md).
torchrun's other duties (rendezvous, a failed rank stopping the others, exit status) are unchanged.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time

from grpoflow.threads import cpu_affinity, process_threads
from grpoflow.training.common import split_wrapped_command

log = logging.getLogger("grpoflow.backends.trl.launch")

STOP = signal.SIGTERM


def job_threads(environ=os.environ) -> int:
    """The job's threads: Snakemake's OMP_NUM_THREADS, else this process's CPUs."""
    text = environ.get("OMP_NUM_THREADS", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    return cpu_affinity()


def rank_threads(nproc: int, environ=os.environ) -> dict[str, str]:
    """The six thread variables each of ``nproc`` ranks gets: the job's threads // nproc, at least 1."""
    return process_threads(nproc, job_threads(environ))


def unblock_stop_signal() -> None:
    """Undo, in a rank, the SIGTERM block it inherits from torchrun under this launcher (a no-op elsewhere)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {STOP})


def _block_stop_signal() -> None:  # runs in the child between fork and exec: torchrun starts with SIGTERM blocked
    signal.pthread_sigmask(signal.SIG_BLOCK, {STOP})


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (torchrun's ranks), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces or parentheses, so split after its last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


def _signal_ranks(torchrun: int, sig: signal.Signals, skip: set[int] | frozenset = frozenset()) -> set[int]:
    """``sig`` to each rank's process group but those in ``skip`` (torchrun starts each rank in its own session and
    signals its group, as here); returns the ranks signalled."""
    told = set()
    for pid in children(torchrun):
        if pid in skip:
            continue
        try:
            os.killpg(pid, sig)
            told.add(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return told


def run(nproc: int, grace: float, target: list[str], environ=os.environ) -> int:
    threads = rank_threads(nproc, environ)
    log.info(
        "%d processes, %s threads each (the job's %d // %d)",
        nproc,
        threads["OMP_NUM_THREADS"],
        job_threads(environ),
        nproc,
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *target]
    stopped_at: list[float] = []
    started: list[subprocess.Popen] = []
    told: set[int] = set()  # the ranks SIGTERM was forwarded to

    def on_stop(signum, _frame):
        if stopped_at:  # the ranks were told; a later SIGTERM (SLURM's at the limit) is the same stop
            return
        log.warning(
            "%s: the ranks stop at their next step boundary with a checkpoint; SIGKILL in %g s (trl.shutdown_timeout)",
            signal.Signals(signum).name,
            grace,
        )
        stopped_at.append(time.monotonic())
        if started:
            told.update(_signal_ranks(started[0].pid, STOP))

    previous = signal.signal(STOP, on_stop)
    # torchrun handles SIGINT itself (a terminal's Ctrl-C reaches the whole process group): wait for it.
    previous_int = signal.signal(signal.SIGINT, lambda *_: None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        proc = subprocess.Popen(cmd, env={**environ, **threads}, preexec_fn=_block_stop_signal)
        started.append(proc)
        while True:  # polled: a wait without a timeout would resume after the signal handler and never time out
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if stopped_at:  # ranks that started after the signal are told too
                    told.update(_signal_ranks(proc.pid, STOP, skip=told))
                if stopped_at and time.monotonic() - stopped_at[0] > grace:
                    log.warning(
                        "the ranks did not stop within %g s of SIGTERM (trl.shutdown_timeout): killing them", grace
                    )
                    _signal_ranks(proc.pid, signal.SIGKILL)
                    proc.kill()
                    return proc.wait()
    finally:
        signal.signal(STOP, previous)
        signal.signal(signal.SIGINT, previous_int)


def main(argv: list[str] | None = None) -> int:
    parts = split_wrapped_command(
        list(sys.argv[1:] if argv is None else argv),
        "usage: python -m grpoflow.backends.trl.launch --nproc-per-node N --shutdown-timeout S -- <torchrun target>",
    )
    if parts is None:
        return 2
    own, target = parts
    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.backends.trl.launch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nproc-per-node", type=int, required=True, help="training processes (trl.processes)")
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        required=True,
        help="seconds the ranks get after SIGTERM before SIGKILL (trl.shutdown_timeout)",
    )
    args = parser.parse_args(own)
    from grpoflow.joblog import setup_logging

    setup_logging()
    return run(args.nproc_per_node, args.shutdown_timeout, target)


if __name__ == "__main__":
    sys.exit(main())
