"""Wait until a Ray cluster has the expected nodes and GPUs (used by the multi-node launcher).

    python -m grpoflow.backends.verl.ray_cluster wait --address HOST:PORT --nodes N --gpus TOTAL [--timeout S] [--pids P...]

Exits 0 once Ray reports at least N alive nodes holding TOTAL GPUs together, 1 with a one-line reason when
the timeout passes first (GPUs not visible on a node) or, at once, when one of the watched processes (the
launcher's `srun ... ray start --block` steps) has exited: a node that failed to start never joins.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def exited(pids: list[int]) -> list[int]:
    """Which of ``pids`` are gone or zombies (exited, not yet reaped by the launcher)."""
    gone = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            state = "X"
        if state in ("Z", "X"):
            gone.append(pid)
    return gone if os.path.isdir("/proc") else []


def snapshot() -> tuple[int, float, list[str]]:
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in alive)
    desc = [
        f"{n.get('NodeManagerHostname', '?')}({n.get('NodeManagerAddress', '?')}): {n.get('Resources', {}).get('GPU', 0):g} GPU"
        for n in alive
    ]
    return len(alive), gpus, desc


def wait(address: str, nodes: int, gpus: int, timeout: float, pids: list[int] = (), poll: float = 2.0) -> int:
    import ray

    def dead() -> bool:
        gone = exited(list(pids))
        if gone:
            print(
                f"grpoflow: error: a Ray node's start command exited (pid {', '.join(map(str, gone))}) before the cluster had {nodes} node(s): see its output above",
                file=sys.stderr,
            )
        return bool(gone)

    deadline = time.monotonic() + timeout
    while True:  # the head's GCS may not accept connections yet
        if dead():
            return 1
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            break
        except Exception as err:  # noqa: BLE001 (Ray raises ConnectionError, RuntimeError, ...)
            if time.monotonic() > deadline:
                print(
                    f"grpoflow: error: cannot connect to the Ray head at {address} within {timeout:.0f} s: {err}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(poll)
    try:
        while True:
            n, g, desc = snapshot()
            if n < nodes and dead():
                return 1
            if n >= nodes and g >= gpus:
                print(f"Ray cluster ready: {n} node(s), {g:g} GPU(s): " + "; ".join(desc), flush=True)
                return 0
            if time.monotonic() > deadline:
                print(
                    f"grpoflow: error: Ray reports {n}/{nodes} node(s) and {g:g}/{gpus} GPU(s) after {timeout:.0f} s ({'; '.join(desc) or 'no nodes'}): a worker failed to start (see its `ray start` output above) or its GPUs are not visible",
                    file=sys.stderr,
                )
                return 1
            time.sleep(poll)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grpoflow.backends.verl.ray_cluster")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait", help="wait for N nodes and TOTAL GPUs")
    w.add_argument("--address", required=True)
    w.add_argument("--nodes", type=int, required=True)
    w.add_argument("--gpus", type=int, required=True, help="GPUs expected in the whole cluster")
    w.add_argument("--timeout", type=float, default=600)
    w.add_argument("--pids", type=int, nargs="*", default=[], help="processes that must stay alive meanwhile")
    args = p.parse_args(argv)
    return wait(args.address, args.nodes, args.gpus, args.timeout, args.pids)


if __name__ == "__main__":
    sys.exit(main())
