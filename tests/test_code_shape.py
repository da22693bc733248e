"""Issue 32: the library stays in pieces a reader can hold. No file in src/ over 700 lines; no function over 80
lines (a function that long mixes jobs: split it where the jobs meet), except data tables, each listed below with
its reason. Read from the source with ``ast`` (functions, methods and nested functions, from ``def`` to their last
line), so the test costs milliseconds."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
# "path::qualified name" -> why it is long. Only data tables: a function that mixes jobs is split, never listed.
DATA_TABLES = {
    "grpoflow/backends/verl/overrides.py::_managed_items": (
        "the table of every verl override grpoflow sets (verl key, value, the config key it comes from), in "
        "command order; one row per key, no logic besides the KL rows being conditional"
    ),
}


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def _long_functions() -> dict[str, int]:
    found = {}
    for path in _sources():
        rel = path.relative_to(SRC).as_posix()
        for name, lines in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            if lines > MAX_FUNCTION_LINES:
                found[f"{rel}::{name}"] = lines
    return found


def test_sources_are_found():
    assert len(_sources()) > 50, f"no library sources under {SRC}"


def test_no_source_file_over_700_lines():
    long = {
        path.relative_to(SRC).as_posix(): n
        for path in _sources()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    }
    assert not long, f"files over {MAX_FILE_LINES} lines (split them by what their parts do): {long}"


def test_no_function_over_80_lines_except_data_tables():
    long = {k: n for k, n in _long_functions().items() if k not in DATA_TABLES}
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines: {long}; split each where its jobs meet "
        "(a pure data table may instead be listed in tests/test_code_shape.py DATA_TABLES with its reason)"
    )


def test_every_listed_data_table_is_still_long():
    stale = sorted(set(DATA_TABLES) - set(_long_functions()))
    assert not stale, f"DATA_TABLES lists functions no longer over {MAX_FUNCTION_LINES} lines (or gone): {stale}"
