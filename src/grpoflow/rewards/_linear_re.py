"""Regular expressions that run in time linear in the text, whatever the text: Google's RE2 (``google-re2``).

Python's ``re`` backtracks: ``(?:\\s*[A-Za-z]+)+$`` on ``"1 " + "word" * 10 + "{"`` takes a minute, because a
run of letters splits into "words" in exponentially many ways (issue 13). RE2 compiles a pattern to an
automaton and never backtracks: one ``search``/``match``/``fullmatch`` costs O(len(text)) for any input, and
it refuses, at compile time, the constructs that would need backtracking (look-arounds, back-references). So
every pattern the verifier applies to model text is compiled here, and a pattern that needs a look-around fails
at import instead of becoming slow on some completion.

``compile(pattern, flags)`` takes Python ``re`` syntax and flags (``re.I``, ``re.M``, ``re.S``) and keeps
Python's meaning of ``\\s``, ``\\d`` and ``\\w`` for str (RE2's are ASCII-only: a no-break space must stay a
space). Differences that remain, and why they do not matter here: ``$`` without ``re.M`` matches only at the
very end (Python's also matches before a final newline; every such pattern here ends in ``\\s*$`` or reads
stripped text); ``\\b`` is an ASCII word boundary.

The objects mimic the subset of ``re.Pattern``/``re.Match`` the verifier uses. The text is encoded to UTF-8 once
per call (and reused while a caller keeps passing the same string, as ``match(text, pos)`` loops do); for ASCII
text byte and character offsets coincide, otherwise offsets are converted incrementally (one pass).
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

import re2
from re2 import _re2

__all__ = ["LinearPattern", "LinearMatch", "compile", "I", "M", "S"]

I, M, S = re.I, re.M, re.S  # noqa: E741 (re's own flag names) so that callers need no stdlib re at all

# Python's \s for str: str.isspace() characters. \d is Unicode Nd; \w is letters, numbers and "_".
_SPACE = r"\t\n\x{0B}\f\r \x{1C}-\x{1F}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
_CLASSES = {"s": _SPACE, "d": r"\p{Nd}", "w": r"\p{L}\p{N}_"}

_ANCHORS = _re2.RE2.Anchor
_UNANCHORED, _START, _BOTH = _ANCHORS.UNANCHORED, _ANCHORS.ANCHOR_START, _ANCHORS.ANCHOR_BOTH
_NULL = (-1, -1)
# The last text encoded by any pattern: the verifier applies several patterns to one text in a row (each pattern
# also keeps its own last text, for match(text, pos) loops that interleave patterns).
_last_encoded: tuple[str | None, bytes] = (None, b"")


def _translate(pattern: str, flags: int) -> str:
    """Python ``re`` syntax → RE2 syntax with Python's Unicode classes and flags as inline flags."""
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in _CLASSES:
                out.append(_CLASSES[e] if in_class else f"[{_CLASSES[e]}]")
            elif e.lower() in _CLASSES and e.isupper():
                if in_class:
                    raise ValueError(f"negated class \\{e} inside [...] is not supported: {pattern!r}")
                out.append(f"[^{_CLASSES[e.lower()]}]")
            elif e == "Z":
                out.append(r"\z")
            else:
                out.append(c + e)
            i += 2
            continue
        if in_class:
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
                if i < n and pattern[i] == "]":  # "[^]...]": a literal ] first
                    out.append("\\]")
                    i += 1
                continue
            out.append("[")
            if i + 1 < n and pattern[i + 1] == "]":
                out.append("\\]")
                i += 1
        else:
            out.append(c)
        i += 1
    inline = "".join(f for flag, f in ((re.I, "i"), (re.M, "m"), (re.S, "s")) if flags & flag)
    body = "".join(out)
    return f"(?{inline}){body}" if inline else body


class LinearMatch:
    """One match: ``group``, ``groups``, ``groupdict``, ``start``, ``end``, ``span``, ``string``, ``re``."""

    __slots__ = ("re", "string", "_spans")

    def __init__(self, regexp: "LinearPattern", string: str, spans: list[tuple[int, int]]):
        self.re, self.string, self._spans = regexp, string, spans

    def _index(self, group: int | str) -> int:
        return group if group.__class__ is int else self.re.groupindex[group] if isinstance(group, str) else group

    def group(self, *groups: int | str):
        if len(groups) > 1:
            return tuple(self.group(g) for g in groups)
        a, b = self._spans[self._index(groups[0] if groups else 0)]
        return None if a < 0 else self.string[a:b]

    __getitem__ = group

    def groups(self, default=None) -> tuple:
        return tuple(default if a < 0 else self.string[a:b] for a, b in self._spans[1:])

    def groupdict(self, default=None) -> dict:
        return {name: (self.group(i) if self._spans[i][0] >= 0 else default) for name, i in self.re.groupindex.items()}

    def start(self, group: int | str = 0) -> int:
        return self._spans[self._index(group)][0]

    def end(self, group: int | str = 0) -> int:
        return self._spans[self._index(group)][1]

    def span(self, group: int | str = 0) -> tuple[int, int]:
        return self._spans[self._index(group)]

    def expand(self, template: str) -> str:
        return _TEMPLATE_REF.sub(lambda m: self.group(int(m.group(1))) or "" if m.group(1) else "\\", template)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<LinearMatch span={self.span()} match={self.group()!r}>"


# Replacement templates: \1 … \99 and \\ (the only escapes the verifier's replacements use).
_TEMPLATE_REF = re.compile(r"\\(?:(\d{1,2})|\\)")


class LinearPattern:
    """A compiled RE2 pattern with ``re.Pattern``'s methods: search, match, fullmatch, finditer, findall, sub,
    split. Every call is linear in ``len(text)``."""

    __slots__ = ("pattern", "flags", "groups", "groupindex", "_regexp", "_last")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, flags
        options = re2.Options()
        options.log_errors = False
        regexp = _re2.RE2(_translate(pattern, flags).encode("utf-8"), options)
        if not regexp.ok():
            # Look-arounds and back-references need backtracking: rewrite the pattern (see this module's doc).
            raise ValueError(f"pattern not supported by RE2 (linear-time matching): {pattern!r}")
        self._regexp = regexp
        self.groups = regexp.NumberOfCapturingGroups()
        self.groupindex = {name.decode("utf-8"): i for name, i in regexp.NamedCapturingGroups()}
        self._last: tuple[str | None, bytes] = (None, b"")

    def _encode(self, text: str) -> bytes:
        global _last_encoded
        last = _last_encoded  # one tuple read: safe against other threads replacing it
        if last[0] is text:
            return last[1]
        last = self._last
        if last[0] is text:
            return last[1]
        encoded = text.encode("utf-8", "surrogatepass")
        self._last = _last_encoded = (text, encoded)
        return encoded

    def _prepare(self, text: str, pos: int, endpos: int | None):
        """(encoded text, ascii?, byte pos, byte endpos), or None for an empty range."""
        if text.__class__ is not str and not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        n = len(text)
        if pos == 0 and endpos is None:  # the common call: the whole text
            encoded = self._encode(text)
            return (encoded, True, 0, n) if len(encoded) == n else (encoded, False, 0, len(encoded))
        pos = max(0, min(pos, n))
        endpos = n if endpos is None else max(0, min(endpos, n))
        if pos > endpos:
            return None
        encoded = self._encode(text)
        if len(encoded) == n:  # ASCII: byte offsets are character offsets
            return encoded, True, pos, endpos
        bpos = _re2.CharLenToBytes(encoded, 0, pos)
        return encoded, False, bpos, bpos + _re2.CharLenToBytes(encoded, bpos, endpos - pos)

    def _first(self, anchor, text: str, pos: int, endpos: int | None) -> LinearMatch | None:
        if pos == 0 and endpos is None and text.__class__ is str:  # the common call, inlined
            last = _last_encoded
            encoded = last[1] if last[0] is text else self._encode(text)
            spans = self._regexp.Match(anchor, encoded, 0, len(encoded))
            if spans[0] == _NULL:
                return None
            if len(encoded) != len(text):
                spans = [
                    s if s == _NULL else (_re2.BytesToCharLen(encoded, 0, s[0]), _re2.BytesToCharLen(encoded, 0, s[1]))
                    for s in spans
                ]
            return LinearMatch(self, text, spans)
        prepared = self._prepare(text, pos, endpos)
        if prepared is None:
            return None
        encoded, ascii_text, bpos, bend = prepared
        spans = self._regexp.Match(anchor, encoded, bpos, bend)
        if spans[0] == _NULL:
            return None
        if not ascii_text:
            spans = [
                span
                if span == _NULL
                else (_re2.BytesToCharLen(encoded, 0, span[0]), _re2.BytesToCharLen(encoded, 0, span[1]))
                for span in spans
            ]
        return LinearMatch(self, text, spans)

    def _iter(self, text: str, pos: int, endpos: int | None) -> Iterator[LinearMatch]:
        prepared = self._prepare(text, pos, endpos)
        if prepared is None:
            return
        encoded, ascii_text, bpos, bend = prepared
        last_byte, last_char = bpos, pos  # offsets only grow: convert incrementally, one pass over the text
        while True:
            spans = self._regexp.Match(_UNANCHORED, encoded, bpos, bend)
            if spans[0] == _NULL:
                return
            if ascii_text:
                chars = spans
            else:
                table = {}
                for off in sorted({o for span in spans for o in span if o >= 0}):
                    if off >= last_byte:
                        last_char += _re2.BytesToCharLen(encoded, last_byte, off)
                        last_byte = off
                        table[off] = last_char
                    else:  # a group that started before the previous match's end (cannot happen for disjoint
                        table[off] = _re2.BytesToCharLen(encoded, 0, off)  # matches; kept correct anyway)
                chars = [span if span == _NULL else (table[span[0]], table[span[1]]) for span in spans]
            yield LinearMatch(self, text, chars)
            if bpos == bend:
                return
            if spans[0][1] == bpos:  # an empty match: step one character to make progress
                bpos += 1 if ascii_text else _re2.CharLenToBytes(encoded, bpos, 1)
            else:
                bpos = spans[0][1]

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> LinearMatch | None:
        return self._first(_UNANCHORED, text, pos, endpos)

    def match(self, text: str, pos: int = 0, endpos: int | None = None) -> LinearMatch | None:
        return self._first(_START, text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0, endpos: int | None = None) -> LinearMatch | None:
        return self._first(_BOTH, text, pos, endpos)

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Iterator[LinearMatch]:
        return self._iter(text, pos, endpos)

    def findall(self, text: str) -> list:
        return [
            m.group() if not self.groups else m.group(1) if self.groups == 1 else m.groups("")
            for m in self.finditer(text)
        ]

    def sub(self, repl: str | Callable[[LinearMatch], str], text: str, count: int = 0) -> str:
        pieces, end = [], 0
        for k, m in enumerate(self.finditer(text)):
            if count and k >= count:
                break
            pieces.append(text[end : m.start()])
            pieces.append(repl(m) if callable(repl) else (m.expand(repl) if "\\" in repl else repl))
            end = m.end()
        if not pieces:
            return text
        pieces.append(text[end:])
        return "".join(pieces)

    def split(self, text: str) -> list[str]:
        pieces, end = [], 0
        for m in self.finditer(text):
            pieces.append(text[end : m.start()])
            pieces.extend(m.groups())
            end = m.end()
        pieces.append(text[end:])
        return pieces

    def __repr__(self) -> str:
        return f"linear_re.compile({self.pattern!r})"


def compile(pattern: str, flags: int = 0) -> LinearPattern:  # noqa: A001 - the re module's name, on purpose
    return LinearPattern(pattern, flags)
