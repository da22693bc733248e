"""What each process of a train_grpo job receives from SLURM at a time limit with ``--signal=TERM@<lead>``, and when.

    .venv/bin/python benchmarks/slurm_signals.py [--lead 10] [--runtime 2] [--processes 2|1] [--save-s 900] [--keep DIR]

Runs on the local SLURM of tests/slurm/start.sh (started if needed; KillWait is its slurm.conf's). One Snakemake job
through ``--profile profiles/slurm`` (sbatch → the plugin's jobstep Snakemake → ``srun`` → the jobstep Snakemake in
step 0 → the rule's shell), whose shell is train_grpo's own (read from rules/train.smk) around train_grpo's TRL
command shape: ``python -m grpoflow.backends.trl.launch`` → torchrun → stand-in ranks (``--processes 2``), or the
stand-in rank alone (``--processes 1``: one-process runs such as recipe 004's config). The job's time limit is
``--runtime`` minutes (with 1, a loaded machine may not have started the ranks by the lead's SIGTERM, which then
kills them as it would a real rank still loading its model). A stand-in rank stops on SIGTERM as the TRL runner does (grpoflow.training.common.SigtermStop) and then
"saves" for ``--save-s`` seconds: with the default (900) it is still saving when SLURM's SIGKILL comes, which
measures how long a rank has from its first SIGTERM to SIGKILL. With ``--save-s`` between the two, it shows whether
a save that fits finishes.

Every process of the job is traced with ``strace -e trace=none -e signal=all`` (attached as it appears, from
``scontrol listpids``): the table lists, per process, each signal, its sender and the second it arrived at,
counted from the first SIGTERM any process got, and how the process ended."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

# The stand-in rank: SigtermStop as the TRL runner holds it; once stop is requested, a "save" of SAVE_S seconds,
# then the file a finished save leaves, and exit 1 (a stopped run is incomplete). Writes its pid as it starts.
RANK = """
import os, sys, time
from pathlib import Path
from grpoflow.training.common import SigtermStop
from grpoflow.backends.trl.launch import unblock_stop_signal

unblock_stop_signal()
stop = SigtermStop()
out, save_s = Path(sys.argv[1]), float(sys.argv[2])
rank = os.environ.get("RANK", "0")
(out / f"started-{rank}").write_text(str(os.getpid()))
while not stop.requested:
    time.sleep(0.1)
(out / f"saving-{rank}").write_text(str(time.time()))
time.sleep(save_s)
(out / f"saved-{rank}").write_text(str(time.time()))
while len(list(out.glob("saved-*"))) < int(os.environ.get("WORLD_SIZE", "1")):
    time.sleep(0.1)
sys.exit(1)
"""


def listpids(job: str) -> dict[int, str]:
    out = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines()[1:]:
        words = line.split()
        if len(words) >= 2 and words[0].isdigit():
            found[int(words[0])] = words[2]
    return found


def cmdline(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words if w)[:200]


def role(cmd: str) -> str:
    """What a process of the job is, from its command line (checked in this order: a shell's or srun's command
    line names the commands it runs)."""
    first = cmd.split()[0] if cmd else "?"
    if first.endswith("slurmstepd") or first.startswith("slurmstepd"):
        return "slurmstepd"
    if first.endswith("srun"):
        return "srun"
    if first.endswith(("sh", "bash")):
        if "trap : TERM" in cmd:
            return "rule's shell"
        return "sh (srun line)" if "srun" in cmd else "batch script"
    if "grpoflow.backends.trl.launch" in cmd:
        return "launcher"
    if "torch.distributed.run" in cmd:
        return "torchrun"
    if "rank.py" in cmd:
        return "rank"
    if "snakemake" in cmd:
        return "jobstep snakemake"
    return first


def parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2 :].split()[1])


SIGNAL = re.compile(r"^(\d+\.\d+) --- (SIG\w+) \{.*?si_code=(\w+)(?:, si_pid=(\d+))?")
ENDED = re.compile(r"^(\d+\.\d+) \+\+\+ (.*) \+\+\+")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lead", type=int, default=10, help="seconds of --signal=TERM@<lead>")
    ap.add_argument("--processes", type=int, default=2, choices=(1, 2))
    ap.add_argument("--runtime", type=int, default=2, help="the job's time limit, minutes")
    ap.add_argument("--save-s", type=float, default=900)
    ap.add_argument("--keep", help="working directory to use and keep (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    from grpoflow_testing import snakemake_slurm_command, start_local_slurm, submitted_jobs
    from timelimit import train_grpo_snakefile

    strace = shutil.which("strace")
    if not strace:
        sys.exit("strace is needed: apt-get install strace")
    start_local_slurm()
    killwait = re.search(
        r"KillWait\s*=\s*(\d+)", subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    )
    wd = Path(args.keep or tempfile.mkdtemp(prefix="slurm-signals-"))
    wd.mkdir(parents=True, exist_ok=True)
    (wd / "rank.py").write_text(RANK)
    rank = f"{wd / 'rank.py'} {wd} {args.save_s:g}"
    if args.processes == 1:
        command = f"{sys.executable} {rank}"
    else:
        launch = "-m grpoflow.backends.trl.launch --nproc-per-node 2 --shutdown-timeout 900 --"
        command = f"{sys.executable} {launch} {rank}"
    snakefile = wd / "Snakefile"
    snakefile.write_text(
        train_grpo_snakefile(command, "done", runtime=args.runtime, slurm_extra=f"'--signal=TERM@{args.lead}'")
    )
    cmd = snakemake_slurm_command(["--retries", "0"], wd, 60 * args.runtime + 600, snakefile)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    out = open(wd / "snakemake.out", "w")
    proc = subprocess.Popen(cmd, cwd=wd, env=env, stdout=out, stderr=subprocess.STDOUT)
    job = None
    traced: dict[int, tuple[str, str, subprocess.Popen]] = {}
    names: dict[int, str] = {}  # the job's other processes seen (slurmstepd): senders of signals
    start = time.time()
    while proc.poll() is None:
        if job is None:
            jobs = submitted_jobs((wd / "snakemake.out").read_text())
            job = jobs[0] if jobs else None
        for pid, (step, c, tr) in list(traced.items()):  # a fresh fork shows its parent's command line until exec
            now = cmdline(pid)
            if now not in ("?", "") and now != c:
                traced[pid] = (step, now, tr)
        if job is not None:
            for pid, step in listpids(job).items():
                if pid not in traced:
                    c = cmdline(pid)
                    up = parent(pid)
                    if up and up not in traced and up not in names:
                        names[up] = cmdline(up)
                    tr = subprocess.Popen(
                        [
                            strace,
                            "-ttt",
                            "-e",
                            "trace=none",
                            "-e",
                            "signal=all",
                            "-o",
                            str(wd / f"strace.{pid}"),
                            "-p",
                            str(pid),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    traced[pid] = (step, c, tr)
        time.sleep(0.1)
    for _, _, tr in traced.values():
        try:
            tr.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tr.terminate()
    state = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    print(f"job {job}: {' '.join(w for w in state.split() if w.startswith(('JobState=', 'RunTime=', 'TimeLimit=')))}")
    print(
        f"KillWait = {killwait.group(1) if killwait else '?'} s; --signal=TERM@{args.lead}; {args.processes} process(es); save {args.save_s:g} s"
    )
    events = []
    for pid, (step, c, _) in traced.items():
        path = wd / f"strace.{pid}"
        for line in path.read_text().splitlines() if path.exists() else []:
            if (m := SIGNAL.match(line)) and m.group(2) != "SIGCHLD":
                sender = m.group(4)
                known = {**names, **{p: v[1] for p, v in traced.items()}}
                who = role(known[int(sender)]) if sender and int(sender) in known else (sender or "kernel")
                events.append((float(m.group(1)), pid, step, role(c), m.group(2), f"{m.group(3)} from {who}"))
            elif m := ENDED.match(line):
                events.append((float(m.group(1)), pid, step, role(c), m.group(2), ""))
    terms = [t for t, *_, sig, _ in events if sig == "SIGTERM"]
    t0 = min(terms) if terms else start
    for t, pid, step, r, what, detail in sorted(events):
        print(f"{t - t0:8.2f} s  step {step:>6}  {r:<18} {pid:>7}  {what:<22} {detail}")
    for name in sorted(p.name for p in wd.glob("sav*-*")):
        print(f"{name}: {float((wd / name).read_text()) - t0:.2f} s")
    if not args.keep:
        shutil.rmtree(wd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
