"""Exact reading of plain numbers, the verifier's fast path (no sympy, no eval).

``parse_number("$1,680.00")`` → ``Number(Fraction(1680), percent=False)``. Everything the answer convention
says does not matter for numbers is dropped here: thousands separators (``1,680``, ``1{,}680``, ``1\\,680``),
currency (``$``, ``\\$``), trailing ``.0``/``.00``, leading zeros, unit words and ``\\text{...}`` units,
degrees, the Unicode minus. Fractions and mixed numbers (``\\frac94``, ``-\\frac{7}{2}``, ``1\\frac12``, ``3/4``)
become exact rationals, so ``0.5 == \\frac12`` holds exactly and ``0.1667 != \\frac16``. Anything that is not
plainly a number returns ``None`` and goes to the LaTeX path (math-verify in a sandbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from grpoflow.rewards import _linear_re as lre

__all__ = ["Number", "parse_number", "words_to_number", "numbers_equal", "MINUS_SIGNS"]

MINUS_SIGNS = "\u2212\u2012\u2013\ufe63\uff0d"  # − ‒ – ﹣ －: models and keyboards write these for "-"

# A number written with optional thousands separators: 1,680 | 1680 | 1680.25 | .5
_DEC = r"(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?:[ \x{A0}\x{202F}]\d{3})+|\d+)(?:\.\d+)?|\.\d+"  # 1,680 | 1 000
_DEC_RE = lre.compile(rf"[+-]?(?:{_DEC})")
# One LaTeX fraction argument: {…} without nested braces, or a single character (\frac12, \dfrac94).
_ARG = r"(?:\{\s*([^{}]*?)\s*\}|(\d))"
_FRAC_RE = lre.compile(rf"([+-]?)\\[dtc]?frac\s*{_ARG}\s*{_ARG}")
_MIXED_RE = lre.compile(rf"([+-]?)(\d+)\s*\\[dtc]?frac\s*{_ARG}\s*{_ARG}")
_SLASH_RE = lre.compile(rf"([+-]?)({_DEC})\s*/\s*({_DEC})")

# Wrappers and spacing that never change a number's value.
_SPACING_RE = lre.compile(r"\\[,;:! ]|\\quad|\\qquad|~|\\left|\\right|\\displaystyle")
_DEGREE_RE = lre.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree\b|\\textdegree\b")
_PERCENT_RE = lre.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\}|\s(?:percent|per\s?cent|pct)\b\.?)\s*$", lre.I)
_TEXT_CMD_RE = lre.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname|textrm)\s*\{([^{}]*)\}")
# Unit words after a number: "muffins", "cm", "km/h", "square feet", "per hour", "hrs." (words of >= 2 letters,
# so "5x" or "2i" are never read as a number with a unit).
_UNIT_TAIL_RE = lre.compile(r"(?:\s*(?:[A-Za-z][A-Za-z'’\-]+\.?|/\s*[A-Za-z]+)(?:\^\{?\d\}?|²|³)?)+\s*$")
# A full stop after the number ends a sentence ("72."): the character before it is kept.
_FINAL_STOP_RE = lre.compile(r"([\d}a-z%])\s*\.$")
# 1\,680: a thin space between thousands (only after a digit: checked by the caller, RE2 has no look-behind).
_THIN_SPACE_THOUSANDS_RE = lre.compile(r"\\,(\d{3})")
_DIGIT_RE = lre.compile(r"\d")
_BELOW_RE = lre.compile(r"\bbelow\s+(?:sea\s+level|zero|freezing)\b|\bunder\s+sea\s+level\b", lre.I)
# "dollars" only as the last word (the spaces after it go too; the caller strips them anyway).
_CURRENCY_RE = lre.compile(r"\\\$|\$|€|£|¥|₹|\\euro\b|\\pounds\b|\bUSD\b|\bdollars?\b\s*$", lre.I)


@dataclass(frozen=True)
class Number:
    value: Fraction
    percent: bool = False


def _decimal(text: str) -> Fraction | None:
    try:
        return Fraction(Decimal(text.replace(",", "").replace(" ", "").replace("\xa0", "").replace("\u202f", "")))
    except (InvalidOperation, ValueError, ZeroDivisionError):
        return None


def _arg(braced: str | None, digit: str | None) -> Fraction | None:
    text = digit if digit is not None else (braced or "")
    text = text.strip()
    if not _DEC_RE.fullmatch(text):
        return None
    return _decimal(text)


def _signed(sign: str, value: Fraction | None) -> Fraction | None:
    if value is None:
        return None
    return -value if sign == "-" else value


def _core(text: str) -> Fraction | None:
    """A bare number, fraction or mixed number, or None."""
    if _DEC_RE.fullmatch(text):
        return _decimal(text)
    m = _MIXED_RE.fullmatch(text)
    if m:
        whole, num, den = Fraction(int(m.group(2))), _arg(m.group(3), m.group(4)), _arg(m.group(5), m.group(6))
        if num is None or den is None or den == 0 or num < 0 or den < 0:
            return None
        return _signed(m.group(1), whole + num / den)
    m = _FRAC_RE.fullmatch(text)
    if m:
        num, den = _arg(m.group(2), m.group(3)), _arg(m.group(4), m.group(5))
        if num is None or den is None or den == 0:
            return None
        return _signed(m.group(1), num / den)
    m = _SLASH_RE.fullmatch(text)
    if m:
        num, den = _decimal(m.group(2)), _decimal(m.group(3))
        if num is None or not den:
            return None
        return _signed(m.group(1), num / den)
    return None


def parse_number(text: str, max_len: int = 200) -> Number | None:
    """The exact value of ``text`` if it is plainly one number (with formatting noise), else None."""
    if not text or len(text) > max_len:
        return None
    s = text.strip()
    for ch in MINUS_SIGNS:
        s = s.replace(ch, "-")
    # Math delimiters and markdown emphasis around the whole answer.
    s = s.strip("$ \t\n*_")
    if s.startswith("\\(") and s.endswith("\\)") or s.startswith("\\[") and s.endswith("\\]"):
        s = s[2:-2].strip()
    if _DEC_RE.fullmatch(s):  # the common case, "72" or "1,680.5": nothing below would change it
        value = _decimal(s)
        return Number(value) if value is not None else None
    # A trailing full stop ends a sentence, it is not a decimal point.
    s = _FINAL_STOP_RE.sub(r"\1", s)
    s = s.replace("{,}", ",").replace("\\!", "")
    s = _THIN_SPACE_THOUSANDS_RE.sub(
        lambda m: m.group(1) if m.start() and s[m.start() - 1].isdecimal() else m.group(0), s
    )
    s = _SPACING_RE.sub(" ", s)
    s = _DEGREE_RE.sub("", s)
    negate = False
    if _BELOW_RE.search(s):  # "105 meters below sea level" states the sign in words
        s = _BELOW_RE.sub("", s)
        negate = True
    percent = False
    m = _PERCENT_RE.search(s)
    if m:
        s, percent = s[: m.start()], True
    # \text{...}: kept when it holds a number ("\text{5 dollars}"), dropped when it is only words (a unit).
    s = _TEXT_CMD_RE.sub(lambda mm: f" {mm.group(1)} " if _DIGIT_RE.search(mm.group(1)) else " ", s)
    s = _CURRENCY_RE.sub("", s).strip()
    if not s:
        return None
    value = _core(s)
    if value is None:
        # Unit words after the number ("72 muffins", "5 cm", "3 hours") — only once the head is a number.
        m = _UNIT_TAIL_RE.search(s)
        if m and m.start() > 0:
            head = s[: m.start()].strip()
            value = _core(head)
            tail = s[m.start() :].lower()
            if value is not None and ("percent" in tail or "pct" in tail):
                percent = True
    if value is None:
        return None
    return Number(-value if negate else value, percent)


def numbers_equal(pred: Number, gold: Number) -> bool:
    """Exact equality; a percent sign may be read as the bare number or as a fraction of 100.

    ``25%`` equals ``25`` (the question asks for a percentage) and ``0.25``; ``0.25`` does not equal ``25``."""
    if pred.value == gold.value:
        return True
    if pred.percent and pred.value / 100 == gold.value:
        return True
    if gold.percent and gold.value / 100 == pred.value:
        return True
    return False


# ---------------------------------------------------------------------------------------------------------------
# Numbers in words ("seventy-two", "one hundred and five", "minus three")

_UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_WORD_RE = lre.compile(r"[a-z]+", lre.I)
NUMBER_WORDS = frozenset(_UNITS) | frozenset(_TENS) | frozenset(_SCALES)


def words_to_number(text: str) -> int | None:
    """``"seventy-two"`` → 72, ``"one hundred and five"`` → 105, ``"minus three"`` → -3; None if not a number."""
    words = [w.lower() for w in _WORD_RE.findall(text.replace("-", " "))]
    sign = 1
    if words and words[0] in ("minus", "negative"):
        sign, words = -1, words[1:]
    words = [w for w in words if w != "and"]
    if not words or any(w not in NUMBER_WORDS for w in words):
        return None
    total = current = 0
    seen = False
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALES[w]
            current = 0
        seen = True
    return sign * (total + current) if seen else None
