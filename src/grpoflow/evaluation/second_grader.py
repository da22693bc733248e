"""A second grader for the report (``report.second_grader: math-verify``): lighteval's math-verify configuration,
so a reader can put grpoflow's numbers beside published ones and see where the two graders disagree.

The configuration is lighteval's ``pass_at_k_math`` metric (the one its MATH-500, AIME and AMC tasks use):
``math_verify.parse`` with expression and LaTeX extraction targets on both the gold answer and the completion,
``math_verify.verify`` with ``float_rounding=6``; like lighteval, only the text after the last ``</think>`` is
graded. The gold answer (a bare answer string here, a whole solution in lighteval) is given as ``\\boxed{...}``
so that the LaTeX target reads it. This is not grpoflow's answer convention (docs/answer-convention.md; e.g.
math-verify's rounding to 6 digits accepts a rounded decimal of an irrational value, which the convention
rejects); the disagreement count shows how much the difference matters on a benchmark.

Model text goes to sympy here (the expression target's regex admits only digits, a decimal point, whitespace and
``+ - * × / ^ ( ) ÷``, so no names can be evaluated), so grading runs in a separate process with its address
space capped and the whole batch bounded in time: a runaway ``9^9^9^9`` costs that batch its second column,
never the report.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "math-verify (lighteval pass_at_k_math: expression + LaTeX targets, precision 6)"
ITEM_TIMEOUT_S = 5  # math-verify's own per-parse/verify timeout, inside the worker
BATCH_SECONDS_PER_ITEM = 2.0  # the whole batch's deadline: generous per item, plus start-up
MEMORY_LIMIT_BYTES = 2 * 2**30
_THINK_CLOSE = "</think>"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds grpoflow/


def _limit_memory() -> None:
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass
    logging.disable(logging.WARNING)  # math-verify logs every failed parse


def _grade_batch(pairs: list[tuple[str, str]]) -> list[bool | None]:
    """In the worker: lighteval's verdict per (ground truth, completion); None when math-verify failed."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    targets = [ExprExtractionConfig(), LatexExtractionConfig()]
    out: list[bool | None] = []
    for gold, completion in pairs:
        answer = completion.rsplit(_THINK_CLOSE, 1)[-1]
        try:
            g = parse("\\boxed{" + gold + "}", extraction_config=targets, parsing_timeout=ITEM_TIMEOUT_S)
            p = parse(answer, extraction_config=targets, parsing_timeout=ITEM_TIMEOUT_S)
            out.append(bool(verify(g, p, float_rounding=6, timeout_seconds=ITEM_TIMEOUT_S)))
        except Exception:  # math-verify raises many kinds on odd input; a failure is no verdict
            out.append(None)
    return out


def grade(pairs: list[tuple[str, str]]) -> list[bool | None]:
    """lighteval's math-verify verdict for each (ground truth, completion), graded in a capped worker process
    (``python -m grpoflow.evaluation.second_grader``, JSON on stdin/stdout); all None when the batch runs out of
    time or the worker dies."""
    if not pairs:
        return []
    env = {
        **os.environ,
        "PYTHONPATH": _PACKAGE_ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "grpoflow.evaluation.second_grader"],
            input=json.dumps(pairs),
            capture_output=True,
            text=True,
            timeout=60 + BATCH_SECONDS_PER_ITEM * len(pairs),
            env=env,
        )
        verdicts = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        verdicts = None
    if not isinstance(verdicts, list) or len(verdicts) != len(pairs):
        log.warning(
            "second grader: %d completions not graded (the math-verify worker failed or ran out of time)", len(pairs)
        )
        return [None] * len(pairs)
    return verdicts


if __name__ == "__main__":
    _limit_memory()
    json.dump(_grade_batch([tuple(p) for p in json.load(sys.stdin)]), sys.stdout)
