"""What Snakemake compares to decide that a finished job must run again, for every shipped config: each rule's raw
shell template (the ``code`` trigger compares ``rule.shellcmd``), each script rule's script (the same trigger reruns
jobs whose outputs are older than the script, which an upgrade that changes it makes), each job's non-derived params
as Snakemake serializes them (the ``params`` trigger) and its input files (the ``input`` trigger). A change to any of them reruns
the finished jobs of everyone who upgrades grpoflow (snakemake/persistence/__init__.py, ``_code``, ``_params``,
``_input``, snakemake 9.27).

``tests/pipeline/rerun_identity.json`` records them; ``tests/pipeline/test_rerun_identity.py`` compares. Regenerate
it only on purpose, when a change is meant to rerun finished jobs, and then say so in docs/reliability.md ("After
upgrading grpoflow")::

    PYTHONPATH=src:tests .venv/bin/python tests/pipeline/rerun_identity.py --write

The DAG is built with Snakemake's own API (``forceall``: every job of the config, as a first run schedules them), in
a scratch working directory holding a copy of ``data/`` with fixed file times: ``download_data``'s params fingerprint
local data files by size and mtime, which differ between checkouts. The checkout's and the scratch directory's paths
(the Tunix venv beside the Snakefile) are written as ``<repo>`` and ``<workdir>``, the environment Snakemake runs in
(the local plane's interpreter) as ``<venv>``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).resolve().parent / "rerun_identity.json"
REGENERATE = "PYTHONPATH=src:tests .venv/bin/python tests/pipeline/rerun_identity.py --write"
FIXED_MTIME_NS = 1_700_000_000_000_000_000
# Each shipped config as a user runs it (demo-tunix.yaml is an overlay on the demo).
CONFIGS = {
    "config.yaml": ["config/config.yaml"],
    "demo-tunix.yaml": ["config/config.yaml", "config/demo-tunix.yaml"],
    **{
        p.name: [f"config/{p.name}"]
        for p in sorted((REPO / "config").glob("*.yaml"))
        if p.name not in ("config.yaml", "demo-tunix.yaml")
    },
}


def _scratch_workdir(root: Path) -> Path:
    """A working directory with the repository's ``data/`` (fixed times) and ``config/``."""
    workdir = root / "wd"
    shutil.copytree(REPO / "data", workdir / "data")
    shutil.copytree(REPO / "config", workdir / "config")
    for path in (workdir / "data").rglob("*"):
        os.utime(path, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))
    return workdir


def identity(configfiles: list[str], workdir: Path) -> dict:
    """{"shell": {rule: raw shell template}, "jobs": {job: {"params": [...], "input": [...]}}} of one config: the
    DAG built by Snakemake's API as `snakemake -n --forceall` builds it (every job of the config)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        wf_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[workdir / c for c in configfiles]),
            snakefile=REPO / "Snakefile",
            workdir=workdir,
        )
        workflow = wf_api.dag(DAGSettings(forceall=True)).workflow_api._workflow
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        return _identity_of(workflow, list(workflow.dag.jobs))


def _identity_of(workflow, jobs) -> dict:
    persistence = workflow.persistence
    shell = {rule.name: rule.shellcmd for rule in workflow.rules if rule.shellcmd is not None}
    # A script rule's jobs rerun when their outputs are older than the script (dag.py: outputs_older_than_script_or_
    # notebook, under the code trigger), and an upgrade that changes a script gives it a new mtime.
    scripts = {rule.name: _script_digest(rule) for rule in workflow.rules if rule.script is not None}
    record = {}
    for job in jobs:
        wildcards = ",".join(f"{k}={v}" for k, v in sorted(job.wildcards_dict.items()))
        record[f"{job.rule.name}[{wildcards}]"] = {
            "params": persistence._params(job),
            "input": persistence._input(job),
        }
    return {"shell": dict(sorted(shell.items())), "scripts": scripts, "jobs": dict(sorted(record.items()))}


def _script_digest(rule) -> str:
    path = Path(str(rule.snakefile)).parent / str(rule.script)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _anonymous(text: str, workdir: Path) -> str:
    # The interpreter Snakemake runs under names the local plane's (sys.prefix: a venv, wherever it lives).
    text = text.replace(str(workdir), "<workdir>")
    return re.sub(re.escape(sys.prefix) + r"(?=/bin[/:])", "<venv>", text).replace(str(REPO), "<repo>")


def current() -> dict:
    """{"shell": every rule's raw shell template, "scripts": the SHA-256 of every rule's script, "configs": {config:
    {job: its params and input}}} (the Snakemake API's chatter goes nowhere)."""
    out = {"shell": {}, "scripts": {}, "configs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = _scratch_workdir(Path(tmp))
        here = os.getcwd()
        try:
            for name, files in CONFIGS.items():
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    one = identity(files, workdir)
                out["shell"].update(one["shell"])
                out["scripts"].update(one["scripts"])
                out["configs"][name] = one["jobs"]
        finally:
            os.chdir(here)
        return json.loads(_anonymous(json.dumps(out, sort_keys=True), workdir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {RECORD.relative_to(REPO)}")
    args = parser.parse_args(argv)
    text = json.dumps(current(), indent=1, sort_keys=True) + "\n"
    if args.write:
        RECORD.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
