"""Boxes in a text — rule a of docs/answer-convention.md §2, as mechanics: where every ``\\boxed{…}``/``\\fbox{…}``
starts and ends, which are top level, and a box's content with nested box commands dropped.

One brace-matching pass per text (``match_braces``), so deeply nested or unbalanced braces cost linear time.
Which boxes make the final answer (the last run of adjacent boxes) is ``extract``'s rule; this module only finds
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpoflow.rewards import _linear_re as lre

__all__ = ["Box", "match_braces", "find_boxes", "top_level", "unwrap_boxes"]

_BOX_RE = lre.compile(r"\\(?:boxed|fbox)\s*\{")


def match_braces(text: str, start: int = 0) -> dict[int, int]:
    """Index of every ``{`` from ``start`` on → index of its matching ``}`` (unclosed ones absent). Escaped
    ``\\{ \\}`` are text. The partner of a brace depends only on the text after it, so starting at a command's
    backslash (a box's) gives the same pairs there as scanning the whole text."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


@dataclass(frozen=True)
class Box:
    start: int  # index of the backslash
    end: int  # index just past the closing brace (== -1 when unclosed)
    text: str = field(repr=False, compare=False)  # the text the box was found in

    @property
    def content(self) -> str:
        """Between the braces ("" when unclosed). Sliced on demand: slicing every box of a deeply nested text
        up front would copy the text once per box (quadratic)."""
        if self.end < 0:
            return ""
        return self.text[self.text.index("{", self.start) + 1 : self.end - 1]


def top_level(boxes: list[Box]) -> list[Box]:
    """The closed boxes not inside another box (a box inside a box is part of that answer)."""
    top: list[Box] = []
    for b in boxes:
        if b.end < 0 or (top and b.start < top[-1].end):
            continue
        top.append(b)
    return top


def find_boxes(text: str) -> list[Box]:
    """Every ``\\boxed{...}``/``\\fbox{...}`` in order; unclosed ones have ``end == -1``."""
    if "box" not in text:
        return []
    found = list(_BOX_RE.finditer(text))
    if not found:
        return []
    pairs = match_braces(text, found[0].start())  # the text before the first box holds no box's braces
    boxes = []
    for m in found:
        brace = m.end() - 1
        close = pairs.get(brace)
        if close is None:
            boxes.append(Box(m.start(), -1, text))
        else:
            boxes.append(Box(m.start(), close + 1, text))
    return boxes


def unwrap_boxes(content: str) -> str:
    """``\\boxed{\\boxed{x}}`` means ``x``; box commands inside an answer are dropped, their contents kept.

    One pass (one brace matching, then every box command and its closing brace skipped): removing them one at a
    time re-scanned the content per box, quadratic in a deeply nested answer."""
    if "box" not in content:
        return content.strip()
    pairs = match_braces(content)
    skip: list[tuple[int, int]] = []
    for m in _BOX_RE.finditer(content):
        skip.append((m.start(), m.end()))
        close = pairs.get(m.end() - 1)
        if close is not None:
            skip.append((close, close + 1))
    skip.sort()
    out, pos = [], 0
    for a, b in skip:
        if a >= pos:
            out.append(content[pos:a])
        pos = max(pos, b)
    out.append(content[pos:])
    return "".join(out).strip()
