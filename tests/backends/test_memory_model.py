"""The shared memory model (grpoflow.training.memory: sizes → phases → verdict) imports no backend, and each
backend's memory estimate is built on it, not on another backend's: adding a backend takes its own terms only.
Read from the source, as tests/test_import_graph.py reads the import graph (every import, module level or inside a
function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from grpoflow_testing import REPO

BACKENDS = REPO / "src" / "grpoflow" / "backends"
WITH_MEMORY = sorted(p.parent.name for p in BACKENDS.glob("*/memory.py"))


def grpoflow_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpoflow"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("grpoflow")}
    return out


def test_the_shared_model_imports_nothing_from_grpoflow():
    assert grpoflow_imports(BACKENDS.parent / "training" / "memory.py") == set()


@pytest.mark.parametrize("backend", WITH_MEMORY)
def test_a_backends_memory_is_its_own_terms_over_the_shared_model(backend):
    assert len(WITH_MEMORY) >= 3  # verl, trl, tunix
    assert "grpoflow.training.memory" in grpoflow_imports(BACKENDS / backend / "memory.py")
    # No module of the backend (its estimate, its checks, its sizes) takes memory types or numerics from another
    # backend's memory.py.
    others = {f"grpoflow.backends.{b}.memory" for b in WITH_MEMORY if b != backend}
    for path in sorted((BACKENDS / backend).glob("*.py")):
        assert not grpoflow_imports(path) & others, path.relative_to(REPO)
