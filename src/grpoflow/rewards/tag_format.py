"""The TPU recipe's tag format (``<reasoning>…</reasoning>…<answer>…</answer>``), read in linear time: the rewards
of recipe 003 (``funcs``) and the verifier's format check (``verifier.format_ok(style="tags")``) share it."""

from __future__ import annotations

from grpoflow.rewards import extract as _extract


def tag(name: str) -> tuple[str, str]:
    """``<name>``, ``</name>``."""
    return f"<{name}>", f"</{name}>"


def _at_line_start(text: str, pos: int) -> bool:
    """Whether ``^\\s*`` (MULTILINE) can end at ``pos``: only whitespace before it back to the text's start or
    to a newline."""
    k = pos
    while k > 0 and text[k - 1].isspace():
        if text[k - 1] == "\n":
            return True
        k -= 1
    return k == 0


def _at_line_end(text: str, pos: int) -> bool:
    """Whether ``\\s*$`` (MULTILINE) can start at ``pos``: only whitespace after it up to the text's end or to a
    newline."""
    k, n = pos, len(text)
    while k < n and text[k].isspace():
        if text[k] == "\n":
            return True
        k += 1
    return k == n


def tag_format_match(text: str, reasoning_tag: str = "reasoning", answer_tag: str = "answer") -> str | None:
    """The TPU recipe's ``match_format`` (``^[\\s]{0,}<reasoning>.+?</reasoning>.*?<answer>(.+?)</answer>[\\s]{0,}$``
    with ``re.MULTILINE | re.DOTALL``, applied with ``search``): the answer block's content when some line starts
    (after whitespace) with a non-empty reasoning block, followed by anything, then a non-empty answer block whose
    line ends after it (whitespace only); else None. MULTILINE lets ``^`` and ``$`` match at every line, so a
    preamble line before ``<reasoning>`` or a line after ``</answer>`` still matches, as in the recipe.

    Decided by string scans in linear time (the regex's three lazy quantifiers backtrack polynomially), choosing
    what ``search`` chooses: the earliest ``<reasoning>`` at a line start (an earlier one allows every later
    choice), the earliest ``</reasoning>`` and ``<answer>`` after it (the lazy ``.+?`` and ``.*?``), and the
    earliest ``</answer>`` at a line end (the lazy ``(.+?)``). Each scan stops at a tag's ``<``, so the whitespace
    scans cover disjoint stretches."""
    (ro, rc), (ao, ac) = tag(reasoning_tag), tag(answer_tag)
    start = text.find(ro)
    while start >= 0 and not _at_line_start(text, start):
        start = text.find(ro, start + 1)
    if start < 0:
        return None
    close = text.find(rc, start + len(ro) + 1)  # .+? : at least one character of reasoning
    if close < 0:
        return None
    open_answer = text.find(ao, close + len(rc))
    if open_answer < 0:
        return None
    end = text.find(ac, open_answer + len(ao) + 1)  # (.+?) : at least one character of answer
    while end >= 0 and not _at_line_end(text, end + len(ac)):
        end = text.find(ac, end + 1)
    if end < 0:
        return None
    return text[open_answer + len(ao) : end]


def tag_format_text(completion: str, reasoning_tag: str) -> str:
    """The text the tag-format rewards read: the response after any ``</think>`` (a thinking model may reason
    first, then answer in the recipe's format; a cut-off reasoning block leaves nothing), or — when the format's
    own reasoning tag is ``think`` — the whole completion."""
    if reasoning_tag == "think":
        return _extract.strip_end_tokens(completion)
    response, _ = _extract.response_part(completion)
    return response or ""
