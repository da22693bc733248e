"""Atomic file and directory writes, and the one-trainer-per-checkpoint-dir lock.

Every output of the workflow is written to a temporary sibling and renamed into place, so a job killed
half-way never leaves a file that a rerun would take as complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from grpoflow.errors import GrpoflowError

log = logging.getLogger(__name__)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tmp_sibling(path: Path, suffix: str = "") -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    # mkstemp creates 0600; results on a shared cluster must be readable by the group, as with open().
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; on success rename it onto ``path``.

    Use for writers that want a filename (pyarrow, torch.save, matplotlib)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path, path.suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory next to ``path``; on success it replaces ``path`` whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700, like mkstemp above
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


LOCK_NAME = ".grpoflow-trainer.lock"


@contextlib.contextmanager
def exclusive_dir(path: str | os.PathLike, *, wait_s: float = 300, poll_s: float = 1.0) -> Iterator[None]:
    """Hold ``path``'s trainer lock while the block runs: one trainer per checkpoint dir.

    After Ctrl-C or ``scancel``, Snakemake exits at once while the cancelled job is still saving its checkpoint
    (SLURM state COMPLETING, up to its KillWait). A rerun started meanwhile would see that checkpoint half
    written, remove it as cut off, and race the old trainer in the same dir. So a trainer waits here (up to
    ``wait_s``) for the previous one to let go. flock works across nodes on NFS (as POSIX locks); where the file
    system has no locks (some Lustre mounts) this warns and goes on without one.
    """
    Path(path).mkdir(parents=True, exist_ok=True)
    lock = Path(path) / LOCK_NAME
    with open(lock, "a+") as fh:
        deadline, said = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "unknown"
                if time.monotonic() >= deadline:
                    raise GrpoflowError(
                        f"{path} is still in use by another trainer ({holder}) after {wait_s:.0f} s: wait until it has ended (squeue --me), then rerun; "
                        f"if none runs any more, remove {lock}"
                    )
                if not said:
                    log.warning("waiting for the trainer that still holds %s (%s) to finish saving", path, holder)
                    said = True
                time.sleep(poll_s)
            except OSError as err:  # ENOLCK / EOPNOTSUPP: no locks on this file system
                log.warning(
                    "cannot lock %s (%s): not guarding against a second trainer in the same dir", lock, err.strerror
                )
                yield
                return
        fh.seek(0)
        fh.truncate()
        fh.write(
            f"pid {os.getpid()} on {socket.gethostname()}, SLURM job {os.environ.get('SLURM_JOB_ID', '-')}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
        )
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()  # no holder any more (a killed one leaves its line, and no lock)
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)
