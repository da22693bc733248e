"""Every third-party package the report's code imports is a declared dependency of grpoflow (pyproject.toml), with
a range the locked version (requirements/local.lock) satisfies (issue 31: numpy and scipy were used, undeclared).
Imports inside functions count: scipy is imported where a test or interval needs it."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
MODULES = (
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src/grpoflow/report").glob("*.py")),
    "src/grpoflow/evaluation/metrics.py",
)


def imported_distributions(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    owners = importlib.metadata.packages_distributions()
    tops -= set(sys.stdlib_module_names) | {"grpoflow", "__future__"}
    return {re.sub(r"[-_.]+", "-", d).lower() for top in tops for d in owners.get(top, [top])}


def test_the_reports_imports_are_declared_with_ranges_the_lock_satisfies():
    declared = {
        re.sub(r"[-_.]+", "-", r.name).lower(): r
        for r in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    }
    locked = {}
    for line in (ROOT / "requirements" / "local.lock").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            pin = Requirement(line.split("#")[0].split(";")[0].split("\\")[0].strip())
            locked[re.sub(r"[-_.]+", "-", pin.name).lower()] = next(iter(pin.specifier)).version
    used = set().union(*(imported_distributions(ROOT / m) for m in MODULES))
    assert {"numpy", "scipy"} <= used
    missing = sorted(used - set(declared))
    assert not missing, f"imported by the report but not in pyproject.toml's dependencies: {missing}"
    for name in sorted(used):
        assert name in locked, f"{name} is not pinned in requirements/local.lock"
        assert declared[name].specifier.contains(locked[name], prereleases=True), (
            f"{name}: the locked {locked[name]} is outside pyproject.toml's {declared[name].specifier}"
        )
