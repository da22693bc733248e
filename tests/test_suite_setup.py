"""The suite's own set-up (tests/conftest.py): what every test run inherits."""

from __future__ import annotations

import os
import subprocess
import sys

from grpoflow_testing import REPO


def test_the_quick_command_runs_without_xdist():
    """README's `pytest -m "not slow and not slurm"` runs in one process; the xdist-group hook must not assume the
    option only xdist's workers have (it did: every plain pytest run stopped with INTERNALERROR)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "tests/test_progress.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert "tests/test_progress.py::" in proc.stdout
