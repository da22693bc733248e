"""A seeded synthetic arithmetic set written in GSM8K's own format, for the embedded demo.

Rows look like GSM8K rows (`question`, `answer` ending in `#### N`), so they take exactly the same conversion
path as real GSM8K. Train and test problems are disjoint: the held-out accuracy measures generalisation.
"""

from __future__ import annotations

import itertools
import random

from grpoflow.errors import ConfigError


def _problem(a: int, op: str, b: int) -> dict:
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    return {"question": f"What is {a} {op} {b}?", "answer": f"{a} {op} {b} = {result}\n#### {result}"}


def generate_arithmetic(spec: dict, where: str = "synthetic") -> dict[str, list[dict]]:
    """``spec`` is a dataset's `synthetic` section (config key ``where``); returns {"train": rows, "test": rows}."""
    lo, hi, ops = spec["min_operand"], spec["max_operand"], spec["operations"]
    if hi < lo:
        raise ConfigError(f"config error: {where}.max_operand ({hi}) is below min_operand ({lo})")
    # Distinct problems up to operand order: "3 + 5" and "5 + 3" never land on both sides of the split.
    problems = sorted(
        {(min(a, b), op, max(a, b)) for a, b in itertools.product(range(lo, hi + 1), repeat=2) for op in ops}
    )
    need = spec["train_size"] + spec["test_size"]
    if need > len(problems):
        raise ConfigError(
            f"config error: {where}: train_size + test_size = {need} exceeds the {len(problems)} distinct problems with operands {lo}..{hi} and operations {ops}: lower the sizes or widen the operand range"
        )
    rng = random.Random(spec["seed"])
    rng.shuffle(problems)
    test = problems[: spec["test_size"]]
    train = problems[spec["test_size"] : need]

    def render(items):
        rows = []
        for small, op, large in items:
            if op == "-":  # larger minus smaller: non-negative results keep the task learnable for a tiny model
                a, b = large, small
            else:  # both operand orders appear in the data
                a, b = (small, large) if rng.random() < 0.5 else (large, small)
            rows.append(_problem(a, op, b))
        return rows

    return {"train": render(train), "test": render(test)}
