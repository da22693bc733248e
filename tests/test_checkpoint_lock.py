"""One trainer per checkpoint dir (grpoflow.io.exclusive_dir): a rerun started while the cancelled job is still
saving waits for it, and says who holds the dir when it gives up. Both trainers (TRL runner, verl wrapper) take it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grpoflow.errors import GrpoflowError
from grpoflow.io import LOCK_NAME, exclusive_dir

HOLD = """
import sys, time
from grpoflow.io import exclusive_dir
with exclusive_dir(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_trainer_waits_until_the_first_lets_go(tmp_path):
    first = hold(tmp_path / "ckpt", 2.0)
    started = time.monotonic()
    with exclusive_dir(tmp_path / "ckpt", wait_s=60, poll_s=0.1):
        waited = time.monotonic() - started
        assert first.wait(timeout=30) == 0  # it let go as it ended
        assert f"pid {os.getpid()} on " in (tmp_path / "ckpt" / LOCK_NAME).read_text()
    assert 1.0 < waited < 30
    assert (tmp_path / "ckpt" / LOCK_NAME).read_text() == ""  # released: no holder named


def test_gives_up_naming_the_holder_and_the_fix(tmp_path):
    first = hold(tmp_path / "ckpt", 30.0)
    try:
        with pytest.raises(
            GrpoflowError,
            match=rf"ckpt is still in use by another trainer \(pid {first.pid} on .*\) after 1 s: wait until it has ended \(squeue --me\)",
        ):
            with exclusive_dir(tmp_path / "ckpt", wait_s=1, poll_s=0.1):
                pass
    finally:
        first.kill()
        first.wait()
    with exclusive_dir(tmp_path / "ckpt", wait_s=1):  # a killed holder's lock is gone with it
        pass


def test_nested_dirs_and_reentry_in_one_process(tmp_path):
    me = f"pid {os.getpid()} on "
    with exclusive_dir(tmp_path / "a"):
        with exclusive_dir(tmp_path / "b"):
            assert me in (tmp_path / "a" / LOCK_NAME).read_text() and me in (tmp_path / "b" / LOCK_NAME).read_text()
        assert (tmp_path / "b" / LOCK_NAME).read_text() == ""  # the inner one let go, the outer one still holds
        assert me in (tmp_path / "a" / LOCK_NAME).read_text()
    with exclusive_dir(tmp_path / "a", wait_s=0):  # wait_s=0: taken at once, or this raises
        assert me in (tmp_path / "a" / LOCK_NAME).read_text()
    assert (tmp_path / "a" / LOCK_NAME).read_text() == ""
