"""A small pool of math-verify worker processes with deadlines that hold in any thread.

math-verify bounds its own work with ``signal.alarm``, which only works in a process's main thread (verl calls
reward functions from a thread pool, where it raises) and never interrupts sympy inside C big-integer
arithmetic. So LaTeX comparisons run in worker processes (``_mv_worker``): a soft deadline inside the worker
ends ordinary slow cases, and a hard deadline here kills the worker when even that does not land. Any number of
threads may call ``MathVerifyPool.compare`` at once; each takes an idle worker (starting one, up to ``size``).

One request (a comparison, or a ground truth checked alone) costs at most ``queue_timeout`` waiting for an idle
worker plus ``hard_timeout`` in it, however many threads are queued behind hostile inputs: a request that finds
no idle worker in time is a timeout ("no idle math-verify worker"), counted like any other. A killed worker is
replaced by a background thread, so no caller pays a worker's start-up after a kill (only the first calls of a
process, when the pool starts lazily: ``start()`` avoids that too).

Environment: ``GRPOFLOW_VERIFY_WORKERS`` (processes per pool, default min(4, CPUs)), ``GRPOFLOW_VERIFY_TIMEOUT``
(soft deadline in seconds per request, default 2; the hard one, where the worker is killed, is 1 s later),
``GRPOFLOW_VERIFY_MEMORY_MB`` (address-space cap per worker, default 2048). The 2 s default is 10x the slowest
comparison of the convention's hand-labelled cases measured in a fresh worker (0.2 s; docs/rewards.md).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grpoflow.errors import GrpoflowError

__all__ = ["MathVerifyPool", "Outcome", "default_pool"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds grpoflow/


@dataclass(frozen=True)
class Outcome:
    equal: bool
    status: str  # ok | timeout | error
    detail: str = ""


class _Deadline(Exception):
    pass


class _Died(Exception):
    pass


class _Worker:
    def __init__(self, startup_timeout: float):
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "grpoflow.rewards._mv_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            close_fds=True,
        )
        self._buf = b""
        self.calls = 0
        try:
            ready = self._read(time.monotonic() + startup_timeout)
        except (_Deadline, _Died) as exc:
            self.kill()
            raise OSError(f"math-verify worker did not start ({type(exc).__name__.strip('_').lower()})") from None
        if not ready.get("ready"):
            self.kill()
            raise OSError(f"math-verify worker sent {ready!r} instead of ready")

    def _read(self, deadline: float) -> dict:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline()
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise _Deadline()
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _Died()
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def request(self, payload: dict, hard_timeout: float) -> dict:
        assert self.proc.stdin is not None
        self.calls += 1
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode())
        except (BrokenPipeError, OSError):
            raise _Died() from None
        return self._read(time.monotonic() + hard_timeout)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class MathVerifyPool:
    """Thread-safe pool of math-verify worker processes. ``compare(gold, pred)`` never raises for a bad input."""

    def __init__(
        self,
        size: int | None = None,
        soft_timeout: float | None = None,
        hard_timeout: float | None = None,
        queue_timeout: float = 30.0,
        check_timeout: float | None = None,
        startup_timeout: float = 120.0,
        recycle_after: int = 20_000,
    ):
        env_size = os.environ.get("GRPOFLOW_VERIFY_WORKERS")
        self.size = max(1, size or (int(env_size) if env_size else min(4, os.cpu_count() or 1)))
        self.soft_timeout = (
            soft_timeout if soft_timeout is not None else float(os.environ.get("GRPOFLOW_VERIFY_TIMEOUT", "2"))
        )
        # The soft deadline is a SIGALRM inside Python code (lands within milliseconds); the hard one only has to
        # catch sympy inside C big-integer arithmetic, so 1 s of grace is enough.
        self.hard_timeout = hard_timeout if hard_timeout is not None else self.soft_timeout + 1.0
        # Long enough for a replacement worker to start on a loaded node (2 workers took 6-12 s on the shared
        # 2-CPU VM), short enough that no reward thread waits without end.
        self.queue_timeout = queue_timeout
        # A ground truth checked alone (once per distinct value, after a failed comparison) gets 3x the soft
        # deadline: declaring it unevaluable decides every later comparison against it, so a merely slow moment
        # of a loaded node must not be mistaken for a ground truth that cannot be evaluated.
        self.check_timeout = check_timeout if check_timeout is not None else 3 * self.soft_timeout
        self.startup_timeout = startup_timeout
        self.recycle_after = recycle_after  # bounds the memory sympy's caches grow to in a long run
        self._cv = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0  # workers alive or starting
        self._pid = os.getpid()
        self._start_failures = 0
        self._closed = False

    def _check_fork(self) -> None:
        # After a fork the inherited pipes belong to the parent's workers: forget them, start our own.
        if os.getpid() != self._pid:
            with self._cv:
                self._idle, self._count, self._pid = [], 0, os.getpid()

    def _acquire(self) -> _Worker | None:
        """An idle worker (starting one when the pool is not full), or None when none frees up in time."""
        deadline = time.monotonic() + self.queue_timeout
        with self._cv:
            while True:
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    self._count += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cv.wait(remaining)
        try:
            worker = _Worker(self.startup_timeout)
        except OSError as exc:
            with self._cv:
                self._count -= 1
                self._start_failures += 1
                failures = self._start_failures
                self._cv.notify()
            if failures >= 3:
                raise GrpoflowError(
                    f"cannot start the math-verify worker process ({exc}); check that `{sys.executable} -m "
                    "grpoflow.rewards._mv_worker` runs on this node (grpoflow and math-verify installed)"
                ) from None
            raise
        with self._cv:
            self._start_failures = 0
        return worker

    def _release(self, worker: _Worker | None) -> None:
        with self._cv:
            if worker is None:
                self._count -= 1
            else:
                self._idle.append(worker)
            self._cv.notify()

    def _retire(self, worker: _Worker) -> None:
        """Kill ``worker`` and start its replacement in the background (the caller returns at once)."""
        worker.kill()
        self._release(None)
        threading.Thread(target=self._replace, name="grpoflow-verify-restart", daemon=True).start()

    def _replace(self) -> None:
        with self._cv:
            if self._closed or self._count >= self.size or os.getpid() != self._pid:
                return
            self._count += 1
        try:
            worker = _Worker(self.startup_timeout)
        except OSError:
            self._release(None)  # the next caller starts one itself (and reports a persistent failure)
            return
        self._release(worker)

    def compare(self, gold: str, pred: str) -> Outcome:
        """Is ``pred`` equal to ``gold`` (math-verify)? ``Outcome.status`` ok | timeout | error."""
        return self._call({"gold": gold, "pred": pred})

    def check_gold(self, gold: str) -> Outcome:
        """Can math-verify read ``gold`` within the deadline? status ok, or timeout | error with the reason."""
        return self._call({"check": gold}, self.check_timeout)

    def _call(self, request: dict, soft_timeout: float | None = None) -> Outcome:
        soft = self.soft_timeout if soft_timeout is None else soft_timeout
        hard = soft + (self.hard_timeout - self.soft_timeout)
        self._check_fork()
        for attempt in range(3):
            try:
                worker = self._acquire()
            except OSError as exc:  # a transient start failure: try again (the third raises GrpoflowError)
                if attempt == 2:
                    return Outcome(False, "error", str(exc))
                continue
            if worker is None:
                return Outcome(False, "timeout", f"no idle math-verify worker within {self.queue_timeout:g}s")
            try:
                reply = worker.request({**request, "soft": soft}, hard)
            except _Deadline:
                self._retire(worker)
                return Outcome(False, "timeout", f"killed after {hard:g}s")
            except _Died:
                self._retire(worker)
                return Outcome(False, "error", "math-verify worker died (killed by the memory cap or a crash)")
            except BaseException:
                worker.kill()
                self._release(None)
                raise
            if worker.calls >= self.recycle_after:
                self._retire(worker)
            else:
                self._release(worker)
            if "equal" in reply or reply.get("ok"):
                return Outcome(bool(reply.get("equal")), "ok")
            if reply.get("timeout"):
                return Outcome(False, "timeout", f"exceeded {soft:g}s")
            return Outcome(False, "error", str(reply.get("error", reply)))
        return Outcome(False, "error", "no math-verify worker")

    def start(self) -> None:
        """Start every worker now (concurrently) instead of on first use: a run pays the start-up up front."""
        self._check_fork()
        with self._cv:
            missing = self.size - self._count
            self._count += missing
        if missing <= 0:
            return
        results: list = [None] * missing

        def spawn(i: int) -> None:
            try:
                results[i] = _Worker(self.startup_timeout)
            except OSError as exc:
                results[i] = exc

        threads = [threading.Thread(target=spawn, args=(i,)) for i in range(missing)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            self._release(r if isinstance(r, _Worker) else None)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for w in idle:
            w.kill()


_default: MathVerifyPool | None = None
_default_lock = threading.Lock()


def default_pool() -> MathVerifyPool:
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifyPool()
            atexit.register(_default.close)
        return _default
