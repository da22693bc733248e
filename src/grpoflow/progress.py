"""One progress line per training step, the same for every backend, for a person watching ``tail -f logs/...``::

    step 12/100 (12%) | reward 0.531 | accuracy 0.410 | 3.2 s/step | ETA 4m42s

Seconds per step are measured on this attempt's wall clock from the first step it reported (a resumed run's
earlier steps, and the model load before its first step, do not distort the estimate); until a second step is
seen, the trainer's own step time (``time_s``) stands in for it.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping


def duration(seconds: float) -> str:
    """``42s``, ``4m42s``, ``3h07m``, ``2d05h``: short enough for a log line, exact enough for planning."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def batch_line(batch: int, done: int, total: int, spent: float) -> str:
    """The line an evaluation backend logs after each batch of prompts (``batch`` counted from 1)."""
    return f"generated batch {batch}: {done}/{total} prompts, {done / spent:.1f} prompts/s, ETA {duration(spent / done * (total - done))}"


class StepProgress:
    """Formats the line for each step a trainer reports; ``total`` is ``grpo.total_steps``."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.clock = clock
        self.first: tuple[int, float] | None = None  # (step, when) of the first step this attempt reported

    def seconds_per_step(self, step: int, metrics: Mapping) -> float | None:
        now = self.clock()
        if self.first is None:
            self.first = (step, now)
        first_step, first_seen = self.first
        if step > first_step:
            return (now - first_seen) / (step - first_step)
        measured = metrics.get("time_s")
        return float(measured) if isinstance(measured, (int, float)) and measured > 0 else None

    def line(self, step: int, metrics: Mapping) -> str:
        parts = [f"step {step}/{self.total} ({100 * step // max(self.total, 1)}%)"]
        for key in ("reward", "accuracy"):
            value = metrics.get(key)
            if isinstance(value, (int, float)):
                parts.append(f"{key} {value:.3f}")
        per_step = self.seconds_per_step(step, metrics)
        if per_step is not None:
            parts.append(f"{per_step:.1f} s/step")
            parts.append(f"ETA {duration(per_step * max(self.total - step, 0))}")
        return " | ".join(parts)
