"""The math-verify worker process: ``python -m grpoflow.rewards._mv_worker``.

Reads one JSON request per line on stdin (``{"gold": ..., "pred": ..., "soft": seconds}``, or
``{"check": gold, "soft": seconds}`` to parse a ground truth alone), writes one JSON reply per line on stdout
(``{"equal": bool}``, ``{"ok": true}``, ``{"timeout": true}`` or ``{"error": "..."}``). It runs in its own process so that the
parent can bound it from any thread: the parent kills it at a hard deadline (sympy can spend minutes inside C
big-integer arithmetic, where no signal lands). Inside, this process's main thread runs math-verify with its
own signal timeouts switched off and one SIGALRM of our own as a soft deadline, so ordinary slow cases end
without losing the warm process. Address space is capped so that a runaway ``9^{9^{9^9}}`` fails fast.

Nothing here evaluates model text: math-verify's LaTeX extraction feeds an ANTLR parser (latex2sympy2); the
plain-expression extractor (which calls sympy's ``parse_expr``, an ``eval``) is never enabled.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
from functools import lru_cache

MEMORY_LIMIT_BYTES = int(os.environ.get("GRPOFLOW_VERIFY_MEMORY_MB", "2048")) * 2**20


class _SoftTimeout(BaseException):
    """Not an Exception: math-verify and sympy swallow ``Exception`` (a timeout would read as 'not equal')."""


def _on_alarm(signum, frame):  # pragma: no cover - exercised through the subprocess
    raise _SoftTimeout()


def _setup() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or a limit we may not raise: the hard kill still bounds us
        pass
    signal.signal(signal.SIGALRM, _on_alarm)
    logging.disable(logging.WARNING)  # math-verify logs every failed parse; the parent reports what matters
    sys.setrecursionlimit(10_000)


def _exact(expr):
    """Decimals as the exact rationals they denote (0.866 → 433/500), so that a rounded decimal never equals an
    irrational or non-terminating value (math-verify would accept 0.866025 for √3/2; the convention does not)."""
    from sympy import Basic, Float, MatrixBase, Rational

    if not isinstance(expr, (Basic, MatrixBase)):
        return expr
    floats = expr.atoms(Float)
    if not floats:
        return expr
    return expr.xreplace({f: Rational(str(f)) for f in floats})


_APPROX_RE = re.compile(r"\\approx.*$|≈.*$", re.S)
# TeX's brace-less arguments: \frac\pi3, \frac13, \dfrac94, \sqrt3. latex2sympy misreads some of them
# (\frac\pi3 came back as garbage), so give every argument its braces before parsing.
_SHORT_ARG = r"(\\[A-Za-z]+|[0-9A-Za-z])"
_FRAC_SHORT_RE = re.compile(r"\\([dt]?frac)\s*" + _SHORT_ARG + r"\s*" + _SHORT_ARG)
_FRAC_HALF_RE = re.compile(r"\\([dt]?frac)\s*(\{[^{}]*\})\s*" + _SHORT_ARG)
_FRAC_HALF2_RE = re.compile(r"\\([dt]?frac)\s*" + _SHORT_ARG + r"\s*(\{)")
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*" + _SHORT_ARG)


def _braces(latex: str) -> str:
    latex = _FRAC_SHORT_RE.sub(r"\\\1{\2}{\3}", latex)
    latex = _FRAC_HALF_RE.sub(r"\\\1\2{\3}", latex)
    latex = _FRAC_HALF2_RE.sub(r"\\\1{\2}\3", latex)
    return _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", latex)


# The verifier joins inequalities in one unknown that an answer joins by "or" with \lor (shapes.or_union):
# math-verify would read "x \le -1 \text{ or } x \ge 1" as the set {x <= -1, x >= 1} of two relations, which no
# interval union equals. Each part is parsed alone and the union of their solution sets is the value.
_UNION = "\\lor"


def _parse_union(latex: str) -> list:
    from sympy import Union
    from sympy.core.relational import Relational

    sets = []
    for part in latex.split(_UNION):
        parsed = _parse(part.strip())
        if not parsed or not isinstance(parsed[0], Relational):
            return []
        try:
            sets.append(parsed[0].as_set())
        except (NotImplementedError, ValueError, TypeError, AttributeError):  # several unknowns: no set of reals
            return []
    return [Union(*sets)]


@lru_cache(maxsize=4096)
def _parse(latex: str):
    from math_verify import LatexExtractionConfig, parse

    if _UNION in latex:
        return _parse_union(latex)
    cfg = LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=True)
    parsed = parse(
        "\\boxed{" + _braces(latex) + "}", extraction_config=[cfg], parsing_timeout=None, fallback_mode="first_match"
    )
    return [_exact(p) for p in parsed]


def _numerically_different(g, p) -> bool:
    """Two constant expressions whose values differ in their first 20 significant digits are not equal: the
    comparison is relative and in sympy's arbitrary-exponent floats, so tiny or huge values (1/2006! against
    1/2004!, 2^{-99} against 2^{-98}) are told apart — as floats they would both be 0 (or inf) and math-verify's
    rounding would call them equal. It also skips sympy's simplify, which dominates the cost of wrong answers.
    Anything else (symbols, sets, relations, matrices) is left to verify."""
    from sympy import Expr, Float, UnevaluatedExpr

    if not (isinstance(g, Expr) and isinstance(p, Expr)) or g.free_symbols or p.free_symbols:
        return False
    if g.has(UnevaluatedExpr) or p.has(UnevaluatedExpr):  # percentages: math-verify's own rules apply
        return False
    try:
        a, b = g.evalf(30), p.evalf(30)
        if not (a.is_number and b.is_number):
            return False
        if a.is_finite is False or b.is_finite is False:
            # Infinity (or a value beyond evaluation) on one side only: different. Without this, sympy's verify
            # would try to compute a huge value exactly and run into the deadline every time.
            return (a.is_finite is False) != (b.is_finite is False)
        diff, scale = abs(a - b).evalf(30), max(abs(a), abs(b)).evalf(30)
        return bool(diff > scale * Float("1e-20"))
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return False


def _same_relation(g, p) -> bool | None:
    """Two equations are equal when they state the same relation: lhs - rhs of one is a nonzero constant times
    that of the other (``x + y = 5`` is not ``2x = 5``; ``2 = x`` is ``x = 2``; ``2x + 4y - 3 = 0`` is
    ``y = -x/2 + 3/4``). None when either side is not an equation between unknowns (math-verify decides)."""
    from sympy import Eq, cancel, simplify

    if not (isinstance(g, Eq) and isinstance(p, Eq)):
        return None
    try:
        dg, dp = g.lhs - g.rhs, p.lhs - p.rhs
        if not (dg.free_symbols and dp.free_symbols):
            return None
        if (dg - dp).expand() == 0:
            return True
        # cancel() settles polynomials (a line, a plane, a conic) exactly and fast; simplify only for the rest.
        ratio = cancel(dg / dp)
        if ratio.free_symbols and not (dg.is_polynomial() and dp.is_polynomial()):
            ratio = simplify(ratio)
        return bool(not ratio.free_symbols and ratio.is_number and ratio.is_finite and ratio != 0)
    except (TypeError, ValueError, AttributeError, ArithmeticError):
        return None  # a side that is a set ("x = \\pm 1") or another non-expression: math-verify decides


def check_gold(gold: str) -> None:
    """Raise when math-verify cannot read ``gold`` (then no answer can ever equal it); evaluate it numerically when
    it is a constant, so that a ground truth too expensive to evaluate (``9^{9^{9^9}}``) runs into the deadline
    here, once, instead of in every comparison against it."""
    from sympy import Expr

    parsed = _parse(gold)
    if not parsed:
        raise ValueError(f"math-verify cannot read the ground truth {gold[:80]!r}")
    first = parsed[0]
    if isinstance(first, Expr) and not first.free_symbols:
        complex(first.evalf(30))


def equal(gold: str, pred: str) -> bool:
    from math_verify import verify

    pred = _APPROX_RE.sub("", pred).strip()  # "\frac16 \approx 0.167" states the exact value first
    g, p = _parse(gold), _parse(pred)
    if not g:  # every answer would be 'wrong': say so (counted as an error), never a quiet 0 for this prompt
        raise ValueError(f"math-verify cannot read the ground truth {gold[:80]!r}")
    if not p:
        return False
    same = _same_relation(g[0], p[0])
    if same is not None:
        return same
    if _numerically_different(g[0], p[0]):
        return False
    return bool(verify(g, p, timeout_seconds=None, allow_set_relation_comp=True))


# Parsed once at start-up: the ANTLR parser behind latex2sympy builds its prediction caches lazily, so the
# first fraction, interval or matrix a worker sees costs 10-100x a later one. Generic shapes, no answer keys.
WARMUP = [
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{2}", "\\frac{2}{\\sqrt{2}}"),
    ("2\\pi", "\\frac{4\\pi}{2}"),
    ("(-\\infty, 1]", "x \\le 1"),
    ("(-\\infty, -1] \\cup [1, \\infty)", "x \\le -1 \\lor x \\ge 1"),
    ("[0, 1) \\cup (2, 3]", "(2, 3] \\cup [0, 1)"),
    ("(1, -2)", "x = 1, y = -2"),
    ("-1, 4", "4, -1"),
    ("x^2 - 1", "(x-1)(x+1)"),
    ("3 + 4i", "4i + 3"),
    ("y = 2x - 1", "y = -1 + 2x"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("e^{3}", "e^3"),
    ("\\text{(A)}", "A"),
    ("45^\\circ", "45"),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
    ("\\log_2 8", "3"),
    ("\\infty", "\\infty"),
]


def warm_up() -> None:
    for gold, pred in WARMUP:
        try:
            equal(gold, pred)
        except Exception:  # noqa: BLE001 - warm-up only
            pass


def main() -> None:
    _setup()
    import math_verify  # noqa: F401  (import before the first request: the parent's start-up wait covers it)
    import math_verify.grader
    import math_verify.parser

    # We supply the timeout (SIGALRM here, kill in the parent): silence math-verify's "no timeout" warning.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    warm_up()
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            reply = _handle(line)
        except _SoftTimeout:  # the alarm fired between the work and its cancellation
            reply = {"timeout": True}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def _handle(line: str) -> dict:
    try:
        req = json.loads(line)
        soft = float(req.get("soft", 0) or 0)
        check = str(req["check"]) if "check" in req else None
        gold, pred = (None, None) if check is not None else (str(req["gold"]), str(req["pred"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return {"error": "bad request"}
    try:
        if soft > 0:
            signal.setitimer(signal.ITIMER_REAL, soft)
        if check is not None:
            check_gold(check)
            return {"ok": True}
        return {"equal": equal(gold, pred)}
    except _SoftTimeout:
        return {"timeout": True}
    except MemoryError:
        return {"error": "MemoryError (expression too large)"}
    except RecursionError:
        return {"error": "RecursionError (expression nested too deeply)"}
    except Exception as exc:  # noqa: BLE001 - any failure is 'not equal' with its reason, never a crash
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


if __name__ == "__main__":
    main()
