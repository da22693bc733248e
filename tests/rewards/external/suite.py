"""The external agreement suite: loading the cases and scoring a verifier on them, by category.

Used by ``tests/rewards/test_external.py`` and ``benchmarks/rewards.py --external``. A verifier is a function
``(completion, gold) -> bool``; its result on a case is a true/false positive/negative against the case's label
(grpoflow's answer convention). Ambiguous cases are scored and shown apart, never counted in the accuracy."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
FILES = (
    "math_verify.jsonl",
    "lighteval.jsonl",
    "hendrycks_math.jsonl",
    "open_r1.jsonl",
    "areal.jsonl",
    "skyrl.jsonl",
    "nemo_skills.jsonl",
    "qwen25_math.jsonl",
    "rllm.jsonl",
    "grpoflow_issue18.jsonl",
)


def load_cases(directory: Path = HERE) -> list[dict]:
    cases = []
    for name in FILES:
        path = directory / name
        if path.exists():
            cases += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return cases


@dataclass
class Tally:
    n: int = 0
    tp: int = 0
    tn: int = 0
    fp: int = 0
    fn: int = 0
    seconds: float = 0.0
    wrong: list = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return (self.tp + self.tn) / self.n if self.n else float("nan")


def score(cases: list[dict], verifier: Callable[[str, str], bool]) -> tuple[dict[str, Tally], list[bool]]:
    """Per category (and ``ALL``, ``AMBIGUOUS``): the tally of ``verifier`` against the labels; and the verdicts."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    verdicts = []
    for c in cases:
        start = time.perf_counter()
        got = bool(verifier(c["completion"], c["gold"]))
        elapsed = time.perf_counter() - start
        verdicts.append(got)
        keys = ["AMBIGUOUS"] if c["ambiguous"] else [category(c), "ALL"]
        for k in keys:
            t = tallies[k]
            t.n += 1
            t.seconds += elapsed
            if got and c["label"]:
                t.tp += 1
            elif not got and not c["label"]:
                t.tn += 1
            elif got:
                t.fp += 1
                t.wrong.append(c)
            else:
                t.fn += 1
                t.wrong.append(c)
    return dict(tallies), verdicts


def category(case: dict) -> str:
    return case["category"]


def table(results: dict[str, dict[str, Tally]]) -> str:
    """Markdown table: one row per category, accuracy / FP / FN per verifier (``results``: name → tallies)."""
    names = list(results)
    cats = sorted({k for t in results.values() for k in t if k not in ("ALL", "AMBIGUOUS")})
    cats += [k for k in ("ALL", "AMBIGUOUS") if any(k in t for t in results.values())]
    head = "| category | n | " + " | ".join(f"{n} acc | {n} FP | {n} FN" for n in names) + " |"
    lines = [head, "|" + "---|" * (2 + 3 * len(names))]
    for cat in cats:
        n = next(t[cat].n for t in results.values() if cat in t)
        cells = []
        for name in names:
            t = results[name].get(cat, Tally())
            cells.append(f"{t.accuracy:.3f} | {t.fp} | {t.fn}")
        lines.append(f"| {cat} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
