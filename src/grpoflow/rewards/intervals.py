"""Intervals, unions of intervals, inequalities in one unknown, tuples, sets and matrices whose entries are plain
numbers (or ±∞), read from their text and compared exactly, without sympy (issue 41).

``read("[1, 3) \\cup (4, 5]")`` → a union of intervals, merged and sorted; ``read("-1 \\le x < 2")`` → the interval
``[-1, 2)``; ``read("(3, -2)")`` → the bracket pair with its entries; ``read("\\{1, 2\\}")`` → a set;
``read("\\begin{pmatrix}1\\\\2\\end{pmatrix}")`` → a matrix. Entries are read by ``numbers.parse_number`` (exact
rationals): anything else (``\\sqrt2``, a letter) makes the text no structure (None), and math-verify decides.
``equal(a, b)`` is True, False or None (undecided): see there.
"""

from __future__ import annotations

import functools
import math

from grpoflow.rewards import _linear_re as lre
from grpoflow.rewards.numbers import parse_number
from grpoflow.rewards.shapes import or_parts, split_list

__all__ = ["read", "equal", "entry"]

MAX_CHARS = 400
_INFINITY = {"\\infty": math.inf, "+\\infty": math.inf, "-\\infty": -math.inf, "infty": math.inf}
_SIZING_RE = lre.compile(r"\\(?:left|right)")
_MATRIX_RE = lre.compile(r"\\begin\s*\{[pb]matrix\}(.*)\\end\s*\{[pb]matrix\}", lre.S)
_RELATION_RE = lre.compile(r"<=|>=|<|>|\\leq?(?:slant)?\b|\\geq?(?:slant)?\b")
_NAME_RE = lre.compile(r"[A-Za-z](?:_(?:\{\w+\}|\w))?")


def entry(text: str):
    """A plain number (exact) or ±∞, else None."""
    t = text.strip()
    if t in _INFINITY:
        return _INFINITY[t]
    n = parse_number(t)
    return n.value if n is not None and not n.percent else None


def _entries(inner: str) -> tuple | None:
    items = split_list(inner) or [inner]
    out = tuple(entry(x) for x in items)
    return None if any(x is None for x in out) else out


def _brackets(t: str):
    """``(a, b)``, ``[a, b)``, ``(a, b, c)``: ("brackets", open, close, entries), or None."""
    if len(t) < 3 or t[0] not in "([" or t[-1] not in ")]":
        return None
    depth = 0
    for i, ch in enumerate(t):
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if depth == 0 and i < len(t) - 1:
            return None  # "(1, 2) \cup (3, 4)": not one bracket
    entries = _entries(t[1:-1])
    return ("brackets", t[0], t[-1], entries) if entries and len(entries) >= 2 else None


def _piece(structure) -> tuple | None:
    """A bracket pair of two entries as an interval piece (lo, lo_closed, hi, hi_closed), or None."""
    if structure is None or structure[0] != "brackets" or len(structure[3]) != 2:
        return None
    (lo, hi), lo_closed, hi_closed = structure[3], structure[1] == "[", structure[2] == "]"
    if lo > hi or (lo == hi and not (lo_closed and hi_closed)) or (math.isinf(lo) and lo_closed):
        return None  # an empty or ill-formed interval: not for this reader to judge
    if math.isinf(hi) and hi_closed:
        return None
    return (lo, lo_closed, hi, hi_closed)


def _union(pieces: list) -> tuple:
    """Pieces sorted and merged where they overlap or touch: one canonical form per set of reals."""
    merged: list[list] = []
    for lo, lo_c, hi, hi_c in sorted(pieces, key=lambda p: (p[0], not p[1])):
        if merged and (lo < merged[-1][2] or (lo == merged[-1][2] and (lo_c or merged[-1][3]))):
            last = merged[-1]
            if hi > last[2] or (hi == last[2] and hi_c):
                last[2], last[3] = hi, hi_c
        else:
            merged.append([lo, lo_c, hi, hi_c])
    return ("union", tuple(tuple(p) for p in merged))


def _inequality(part: str) -> tuple | None:
    """``x < 2``, ``2 > x``, ``-1 \\le x < 2`` (one unknown, numeric bounds): the interval piece, or None."""
    bits, pos = [], 0
    for m in _RELATION_RE.finditer(part):
        bits += [part[pos : m.start()].strip(), m.group(0)]
        pos = m.end()
    bits.append(part[pos:].strip())
    if len(bits) not in (3, 5):
        return None
    names = [i for i in range(0, len(bits), 2) if _NAME_RE.fullmatch(bits[i])]
    if len(names) != 1 or (len(bits) == 5 and names != [2]):
        return None
    if len(bits) == 5 and bits[1].startswith(("<", "\\le")) != bits[3].startswith(("<", "\\le")):
        return None  # "a < x > b": no interval
    lo, lo_c, hi, hi_c = -math.inf, False, math.inf, False
    for k in range(1, len(bits), 2):
        left, op, right = bits[k - 1], bits[k], bits[k + 1]
        less, closed = op.startswith(("<", "\\le")), op not in ("<", ">")
        bound_text, name_on_left = (right, True) if k - 1 == names[0] else (left, False)
        bound = entry(bound_text)
        if bound is None or math.isinf(bound):
            return None
        upper = less == name_on_left  # x < b or b > x: an upper bound
        if upper:
            hi, hi_c = bound, closed
        else:
            lo, lo_c = bound, closed
    return _piece(("brackets", "[" if lo_c else "(", "]" if hi_c else ")", (lo, hi)))


@functools.lru_cache(maxsize=65536)
def read(text: str):
    """The numeric structure ``text`` writes (see the module's doc), or None."""
    t = text.strip().strip("$").strip()
    if not t or len(t) > MAX_CHARS:
        return None
    if "\\" in t:
        t = _SIZING_RE.sub("", t).strip()
    if t.startswith("\\begin"):
        m = _MATRIX_RE.fullmatch(t)
        if m is None:
            return None
        rows = [r for r in m.group(1).split("\\\\") if r.strip()]
        cells = [tuple(entry(c) for c in r.split("&")) for r in rows]
        if not cells or any(c is None or math.isinf(c) for row in cells for c in row):
            return None
        return ("matrix", tuple(cells))
    if t.startswith("\\{") and t.endswith("\\}"):
        entries = _entries(t[2:-2])
        return ("set", frozenset(entries)) if entries else None
    if "\\cup" in t:
        pieces = [_piece(_brackets(p.strip())) for p in t.split("\\cup")]
        return _union(pieces) if all(pieces) else None  # type: ignore[arg-type]
    if _RELATION_RE.search(t):
        parts = or_parts(t) or [t]
        pieces = [_inequality(p) for p in parts]
        return _union(pieces) if all(pieces) else None  # type: ignore[arg-type]
    return _brackets(t)


def _as_union(structure) -> tuple | None:
    if structure[0] == "union":
        return structure
    piece = _piece(structure)
    return _union([piece]) if piece is not None else None


def equal(a, b) -> bool | None:
    """Two structures compared exactly: True, False, or None when the kinds differ in a way the entries cannot
    settle (a set against a tuple; a triple in parentheses against one in brackets)."""
    if a[0] == "brackets" and b[0] == "brackets":
        if len(a[3]) != len(b[3]) or a[3] != b[3]:
            return False
        if a[1:3] == b[1:3]:
            return True
        return False if len(a[3]) == 2 else None  # two entries: an interval, whose ends matter
    if "union" in (a[0], b[0]) and {a[0], b[0]} <= {"union", "brackets"}:
        ua, ub = _as_union(a), _as_union(b)
        return None if ua is None or ub is None else ua == ub
    if a[0] == b[0] and a[0] in ("set", "matrix"):
        return a[1] == b[1]
    return None
