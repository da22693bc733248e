"""A save in progress at a real SLURM time limit with ``--signal=TERM@<lead>`` finishes (issue 38, item 2), on the
local SLURM through profiles/slurm: train_grpo's own shell (tests/timelimit.py) in a one-rule Snakefile, a 2-minute
time limit, ``--signal=TERM@10``, KillWait 30 s (tests/slurm/start.sh's slurm.conf; SLURM's default too). The lead's
SIGTERM comes 80 s or more into the job, when the ranks have started (a rank that gets SIGTERM while it starts,
before its stop handler is set, dies of it, as a real one does while it loads its model: seen with a 1-minute
limit on this 2-core machine at load 15, where the job took 35 s to start its ranks).

SLURM sends the lead's SIGTERM from its 30-s time-limit pass, so the time between it and the limit's SIGTERM is the
lead rounded up to that pass (measured: 30 s for a lead of 10). The stand-in ranks (tests/faults/test_time_limit.py
says why they are stand-ins: a real save on the tiny model is over before any second signal) therefore save until
the limit's SIGTERM has come and 10 s more: a save longer than the lead and shorter than lead + KillWait, whatever
the pass's phase. They record when each SIGTERM reached them (``signal.set_wakeup_fd``: every delivery, also those
the stop handler takes as the same stop). The profile's retry resumes from the save. Both of train_grpo's TRL
shapes run side by side: the launcher with 2 ranks, and one process (recipe 004's)."""

from __future__ import annotations

import json
import signal
import sys

import pytest
from grpoflow_testing import cancel_leftover_jobs, popen_snakemake_slurm, slurm_job, submitted_jobs
from timelimit import RANK_RESUMES, train_grpo_snakefile

from grpoflow.backends.trl.commandline import launcher

# One worker runs both (their module fixture starts both scenarios at once; on two workers it ran each twice), handed
# out first: the fixture mostly waits ~2.5 min on SLURM's time limit, which overlaps the suite's computing.
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.xdist_group("time-limit-signal"),
    pytest.mark.schedule_first,
]

LEAD_S, KILL_WAIT_S, AFTER_LIMIT_S, RUNTIME_MIN = 10, 30, 10, 2
OUTPUT = "results/trained.json"

RANK = (
    RANK_RESUMES
    + """
after_limit = float(sys.argv[3])
terms = []  # wall time of each SIGTERM delivered to this process
reader, writer = socket.socketpair()
writer.setblocking(False)
signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

def watch():
    while True:
        terms.extend(time.time() for b in reader.recv(64) if b == signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
(out / f"started-{rank}").write_text(str(os.getpid()))
while not stop.requested:
    time.sleep(0.05)
save_started = time.time()
deadline = time.monotonic() + 300
while not (terms and terms[-1] - terms[0] > 5) and time.monotonic() < deadline:  # until the limit's SIGTERM
    time.sleep(0.05)
time.sleep(after_limit)
record = {"terms": terms, "save_started": save_started, "saved": time.time()}
saved.write_text(json.dumps(record))
while len(list(out.glob("saved-*"))) < world:  # HF Trainer's save ends at a barrier
    time.sleep(0.1)
sys.exit(1)
"""
)


def _start(tmp_path_factory, processes: int) -> dict:
    wd = tmp_path_factory.mktemp(f"time-limit-{processes}")
    (wd / "rank.py").write_text(RANK)
    rank = f"{wd / 'rank.py'} {wd} {OUTPUT} {AFTER_LIMIT_S}"
    prefix = launcher({"trl": {"processes": processes, "shutdown_timeout": 900}})
    command = f"{sys.executable} {prefix.removeprefix('python ')}{rank}"
    (wd / "Snakefile").write_text(
        train_grpo_snakefile(command, OUTPUT, runtime=RUNTIME_MIN, slurm_extra=f"'--signal=TERM@{LEAD_S}'")
    )
    proc = popen_snakemake_slurm([OUTPUT], wd, wd / "snakemake.out", timeout=900, snakefile=wd / "Snakefile")
    return {"wd": wd, "proc": proc, "processes": processes}


@pytest.fixture(scope="module")
def runs(local_slurm, tmp_path_factory):
    started = []
    try:
        for processes in (2, 1):
            started.append(_start(tmp_path_factory, processes))
        for run in started:
            run["proc"].wait(timeout=1000)
    finally:
        for run in started:
            if run["proc"].poll() is None:
                run["proc"].send_signal(signal.SIGINT)
                run["proc"].wait(timeout=120)
            run["out"] = (run["wd"] / "snakemake.out").read_text(errors="replace")
            cancel_leftover_jobs(run["out"])
    return {run["processes"]: run for run in started}


@pytest.mark.parametrize("processes", [2, 1], ids=["launcher-2-ranks", "one-process"])
def test_the_save_spanning_the_limits_sigterm_finishes_and_the_retry_resumes_from_it(runs, processes):
    run = runs[processes]
    wd, out = run["wd"], run["out"]
    assert run["proc"].returncode == 0, out[-6000:]
    jobs = submitted_jobs(out)
    assert [slurm_job(j)["JobState"] for j in jobs] == ["TIMEOUT", "COMPLETED"], out[-6000:]
    for rank in range(processes):
        record = json.loads((wd / f"saved-{rank}").read_text())
        terms = [t - record["terms"][0] for t in record["terms"]]
        limit = next(t for t in terms if t > 5)
        saved = record["saved"] - record["terms"][0]
        print(
            f"{processes} process(es), rank {rank}: SIGTERM at {[round(t, 2) for t in terms]} s; saved at {saved:.1f} s"
        )
        assert LEAD_S <= limit, terms  # the limit's SIGTERM came while the rank saved ...
        assert limit + AFTER_LIMIT_S <= saved < limit + KILL_WAIT_S, (terms, saved)  # ... and the save finished
        assert json.loads((wd / f"resumed-{rank}").read_text()) == record  # the retry resumed from that save
    assert (wd / OUTPUT).exists()
