"""`snakemake` for the SLURM tests, with the SLURM plugin's poll interval capped.

The plugin adds 10 s to its poll interval after every poll in which no job finished (up to 180 s): kind to a
busy slurmctld, but a 70-s job is then noticed at 105 s. The CI cluster is this host's own, so polling it every
few seconds costs nothing; everything else (profile, resources, squeue status, retries) is the real plugin's.
GRPOFLOW_CI_MAX_POLL_S sets the cap (default 3)."""

from __future__ import annotations

import os
import sys

from snakemake.cli import main
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

CAP = float(os.environ.get("GRPOFLOW_CI_MAX_POLL_S", "3"))
_interval = RemoteExecutor.next_seconds_between_status_checks


@_interval.setter
def _capped(self, value):
    _interval.fset(self, None if value is None else min(value, CAP))


RemoteExecutor.next_seconds_between_status_checks = _capped

if __name__ == "__main__":
    sys.argv[0] = "snakemake"
    sys.exit(main())
