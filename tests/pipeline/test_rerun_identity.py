"""Nothing a user has finished reruns after an upgrade: what Snakemake's rerun triggers compare (each rule's raw shell
template and script, each job's non-derived params and input files; tests/pipeline/rerun_identity.py) is, for every shipped
config, what tests/pipeline/rerun_identity.json recorded. The DAG is built by Snakemake's API without running a
job (seconds), in a subprocess: Snakemake's API keeps process-wide state (logging, the working directory)."""

from __future__ import annotations

import json
import subprocess
import sys

import rerun_identity as R


def _differences(recorded: dict, now: dict, path: str = "") -> list[str]:
    if isinstance(recorded, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(recorded) | set(now)):
            where = f"{path}/{key}"
            if key not in now:
                out.append(f"{where}: gone (was {json.dumps(recorded[key])[:300]})")
            elif key not in recorded:
                out.append(f"{where}: new ({json.dumps(now[key])[:300]})")
            else:
                out += _differences(recorded[key], now[key], where)
        return out
    if recorded != now:
        return [f"{path}:\n  recorded: {json.dumps(recorded)[:600]}\n  now:      {json.dumps(now)[:600]}"]
    return []


def test_shell_templates_params_and_inputs_are_the_recorded_ones():
    proc = subprocess.run(
        [sys.executable, str(R.REPO / "tests/pipeline/rerun_identity.py")],
        capture_output=True,
        text=True,
        cwd=R.REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = json.loads(R.RECORD.read_text(encoding="utf-8"))
    diff = _differences(recorded, json.loads(proc.stdout))
    assert not diff, (
        "what Snakemake compares to decide reruns changed, so upgrading grpoflow reruns these finished jobs "
        "(a changed shell template or script reruns every job of its rule):\n"
        + "\n".join(diff[:20])
        + (f"\n... and {len(diff) - 20} more" if len(diff) > 20 else "")
        + "\nIf that is unintended, keep the shell lines and params as they were (derive new values in params of "
        'input/output, which no trigger compares). If it is meant: say in docs/reliability.md, "After upgrading '
        f'grpoflow", which jobs rerun and why, then regenerate the record: {R.REGENERATE}'
    )
