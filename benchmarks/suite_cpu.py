"""Where the test suite's CPU goes: the CPU seconds of each test (and of each test file), from a run with
GRPOFLOW_TEST_CPU_LOG set (tests/conftest.py records them).

    GRPOFLOW_TEST_CPU_LOG=/tmp/cpu.jsonl make test   # or any pytest run
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl [--top 30]

On 2 cores the suite cannot end sooner than its CPU seconds / 2, whatever the workers: this says what to cut.
CPU seconds hardly depend on the load the run shared the machine with (wall seconds do). A test's row counts its own
process tree only; the last row of a whole run is the machine's (/proc/stat over the run: every process, so the
jobs slurmd starts and Ray's detached daemons too, and whatever else ran on the machine meanwhile).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.log)]
    # The run's own machine row is the longest: a test that runs pytest inside itself writes one for its short run.
    machine = max((r for r in rows if r.get("machine")), key=lambda r: r["wall_s"], default=None)
    rows = [r for r in rows if "test" in r]
    total = sum(r["cpu_s"] for r in rows)
    by_file: dict[str, float] = defaultdict(float)
    for r in rows:
        by_file[r["test"].split("::", 1)[0]] += r["cpu_s"]
    print(f"{len(rows)} tests, {total:.0f} CPU s (at least {total / 2:.0f} s on 2 cores)")
    if machine:
        busy, wall = machine["busy_cpu_s"], machine["wall_s"]
        print(
            f"the machine over the run: {busy:.0f} CPU s busy in {wall:.0f} s ({busy / wall:.2f} of"
            f" {machine['cpus']} cores); outside the tests' process trees: {busy - total:.0f} CPU s"
        )
    print()
    print(f"{'CPU s':>8} {'share':>6}  file")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{cpu:8.1f} {cpu / total:6.1%}  {name}")
    print(f"\n{'CPU s':>8} {'wall s':>8}  test")
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[: args.top]:
        print(f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['test']}")


if __name__ == "__main__":
    main()
