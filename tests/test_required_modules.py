"""A test whose library is missing skips on a developer's machine and fails under CI=true (grpoflow_testing.require,
at a module's top level as the adapter tests use it): pytest.importorskip skips under CI=true too, so a CI run without
TRL or verl would pass without the evidence it claims. Shown by running pytest on a test module that requires a
module that does not exist, with and without CI=true; and no test uses importorskip."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from grpoflow_testing import REPO

MODULE = """
from grpoflow_testing import require

require("grpoflow_no_such_module")


def test_needs_it():
    pass
"""


def run(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_needs_a_module.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    # Its own rootdir (no pyproject here): the suite's addopts and conftest stay out of it.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "test_needs_a_module.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_module_skips_here_and_fails_under_ci(tmp_path):
    here = run(tmp_path, None)
    # 5: pytest's "no tests ran" (the module was skipped whole)
    assert here.returncode in (0, 5) and "1 skipped" in here.stdout, here.stdout[-2000:]
    assert "grpoflow_no_such_module cannot be imported" in here.stdout
    ci = run(tmp_path, "true")
    assert ci.returncode not in (0, 5) and "1 error" in ci.stdout, ci.stdout[-2000:]
    assert "CI=true: this test must run here, not skip" in ci.stdout, ci.stdout[-2000:]


def test_no_test_uses_importorskip():
    pattern = re.compile(r"\bimportorskip\s*\(")
    users = [
        str(p.relative_to(REPO))
        for p in (REPO / "tests").rglob("*.py")
        if p.name != "test_required_modules.py" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not users, f"use grpoflow_testing.require (fails under CI=true), not pytest.importorskip: {users}"
