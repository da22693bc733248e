"""Read tabular records from JSONL, JSON or Parquet with errors that say exactly what is wrong and where."""

from __future__ import annotations

import json
import os
from typing import Any

from grpoflow.errors import DataError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}


def file_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise DataError(f"{path}: unsupported file type {ext!r}: use .jsonl, .json or .parquet")
    return FORMATS[ext]


def read_records(path: str, what: str | None = None) -> list[dict[str, Any]]:
    """All rows of ``path`` as dicts. ``what`` names the config key that points here, for the error message."""
    label = f"{what} ({path})" if what else path
    if not os.path.exists(path):
        raise DataError(f"{label}: file not found: check the path" + (f" in {what}" if what else ""))
    if os.path.getsize(path) == 0:
        raise DataError(f"{label}: file is empty")
    fmt = file_format(path)
    if fmt == "parquet":
        rows = _read_parquet(path, label)
    elif fmt == "jsonl":
        rows = _read_jsonl(path, label)
    else:
        rows = _read_json(path, label)
    if not rows:
        raise DataError(f"{label}: file has no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{label}: row {i + 1} is a {type(row).__name__}, not an object with named fields")
    return rows


def _read_parquet(path: str, label: str) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"{label}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None


def _read_jsonl(path: str, label: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                # json's messages may end in "at" ("Invalid control character at"): the position follows once.
                raise DataError(
                    f"{label}: line {lineno} is not valid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})"
                ) from None
    return rows


def _read_json(path: str, label: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # Many ".json" datasets are really JSON Lines; accept them, but report a real JSON error otherwise.
        first = text.lstrip()[:1]
        if first == "{" and text.count("\n") > 1:
            return _read_jsonl(path, label)
        raise DataError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, dict):
        # {"data": [...]} / {"train": [...]}: one list-valued key is the table.
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) == 1:
            return lists[0]
        raise DataError(
            f"{label}: expected a JSON array of objects (or an object holding exactly one array), found an object with keys {sorted(data)[:8]}"
        )
    if not isinstance(data, list):
        raise DataError(f"{label}: expected a JSON array of objects, found {type(data).__name__}")
    return data


def require_columns(rows: list[dict], columns: dict[str, str], label: str) -> None:
    """``columns`` maps column name -> config key that names it; error on the first one missing from row 1."""
    present = set(rows[0])
    for col, key in columns.items():
        if col not in present:
            raise DataError(
                f"{label}: column {col!r} not found (columns: {', '.join(sorted(present))}): set {key} to the right column"
            )
