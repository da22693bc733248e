"""Long fuzz run of the verifier (issue 13): the CI fuzzer's grammar, many more completions.

    .venv/bin/python benchmarks/fuzz_verifier.py [--n 100000] [--seed 0] [--threads 8] [--hostile-rate 0.1]

Completions come from ``grpoflow.rewards.adversarial.random_completion`` (the answer convention's forms, with
``--hostile-rate`` of them carrying hostile fragments or pathological answers), scored from ``--threads``
threads as verl's reward loop does, with the default math-verify pool (``GRPOFLOW_VERIFY_*`` settings). Every
call is timed; a call over ``--deadline`` seconds (default: the pool's stated bound, two requests of queue
wait + hard deadline, plus 2 s of in-process work) or one that never returns is a finding. Prints the number of
completions, the wall time, the slowest call and the verifier's counters; exit status 1 on any finding.
"""

from __future__ import annotations

import argparse
import random
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--hostile-rate", type=float, default=0.1)
    ap.add_argument("--max-size", type=int, default=3000, help="largest repetition count of a hostile fragment")
    ap.add_argument("--chunk", type=int, default=2000, help="completions per threaded batch")
    ap.add_argument("--deadline", type=float, default=None)
    args = ap.parse_args(argv)

    from grpoflow.rewards import adversarial, bad_ground_truths, stats
    from grpoflow.rewards._sandbox import default_pool

    pool = default_pool()
    pool.start()
    deadline = args.deadline or 2 * (pool.queue_timeout + pool.hard_timeout) + 2.0
    rng = random.Random(args.seed)
    start = time.perf_counter()
    done, slowest, slowest_pair, findings, chars = 0, 0.0, None, [], 0
    while done < args.n:
        batch = [
            adversarial.random_completion(rng, args.hostile_rate, args.max_size)
            for _ in range(min(args.chunk, args.n - done))
        ]
        chars += sum(len(c) for c, _ in batch)
        report = adversarial.run_in_scorer_threads(batch, threads=args.threads, deadline_s=deadline)
        done += report.n
        if report.slowest_s > slowest:
            slowest, slowest_pair = report.slowest_s, report.slowest
        findings += report.over_deadline
        if report.unfinished:
            print(f"{report.unfinished} call(s) never returned: stopping", flush=True)
            break
        print(
            f"{done:7d} completions, {time.perf_counter() - start:7.1f}s, slowest call {slowest:.3f}s, "
            f"findings {len(findings)}",
            flush=True,
        )
    elapsed = time.perf_counter() - start
    print(
        f"\n{done} completions ({chars / max(done, 1):,.0f} characters on average, {args.hostile_rate:.0%} hostile), "
        f"{args.threads} threads, {pool.size} math-verify workers (budget {pool.soft_timeout:g}s soft / "
        f"{pool.hard_timeout:g}s hard): {elapsed:.1f}s, {done / elapsed:,.0f} completions/s"
    )
    print(
        f"slowest call {slowest:.3f}s (deadline {deadline:g}s): "
        f"{(slowest_pair[0][:160] + '...', slowest_pair[1]) if slowest_pair else None!r}"
    )
    print(f"verifier counters: {stats()}")
    print(f"unevaluable ground truths: {bad_ground_truths()}")
    for took, completion, truth in findings[:10]:
        print(f"FINDING {took:.2f}s truth {truth!r}: {completion[:300]!r}")
    print(f"findings: {len(findings)}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
