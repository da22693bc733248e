"""The verifier's own (in-process) work on the largest completions it reads, for every hostile family.

    .venv/bin/python benchmarks/verifier_worst_case.py [--chars 1000000]

For each fragment family of ``grpoflow.rewards.adversarial.HOSTILE`` a text of ``--chars`` characters (default:
the verifier's cap, ``MAX_COMPLETION_CHARS``) is placed in a box, after an answer phrase, in an ``<answer>``
tag, and as a whole completion, and ``verify`` is timed with an instant stand-in for the math-verify pool (so
only extraction, exact numbers and guards are measured). Prints the slowest form per family, slowest first.
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> int:
    from grpoflow.rewards import adversarial, reset_caches, verifier
    from grpoflow.rewards._sandbox import Outcome

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chars", type=int, default=verifier.MAX_COMPLETION_CHARS - 100)
    args = ap.parse_args(argv)

    class InstantPool:
        size = 1

        def compare(self, gold, pred):
            return Outcome(False, "ok")

        check_gold = compare

    verifier.default_pool = lambda: InstantPool()
    rows = []
    for name, make in adversarial.HOSTILE.items():
        text = make(max(1, args.chars // len(make(1))))[: args.chars]
        worst = (0.0, "")
        for form in ("\\boxed{@}", "The answer is @.", "<answer>@</answer>", "@"):
            reset_caches()
            start = time.perf_counter()
            verifier.verify(form.replace("@", text), "\\frac{1}{2}")
            worst = max(worst, (time.perf_counter() - start, form))
        rows.append((worst[0], name, worst[1]))
    for seconds, name, form in sorted(rows, reverse=True):
        print(f"{seconds:7.3f}s  {name:26s} {form!r}")
    print(f"slowest: {max(rows)[0]:.3f}s for {args.chars:,} characters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
