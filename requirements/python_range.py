"""The Python range requirements/local.lock supports: every locked package's Requires-Python, intersected.

Run with the environment the lock is installed in (it reads the installed distributions' metadata, no network):
    .venv/bin/python requirements/python_range.py      # prints e.g. >=3.11,<3.13
After relocking, write that into the lock's "# requires-python:" header line (find-python and CI read it);
tests/test_lock_python.py fails until the two agree.
"""

import importlib.metadata
import pathlib
import sys

from packaging.specifiers import SpecifierSet

LOCK = pathlib.Path(__file__).with_name("local.lock")
# Minor versions considered; wide enough that the range found is never cut by this list.
CANDIDATES = [(3, m) for m in range(6, 20)]


def locked_names(lock=LOCK):
    return [
        line.split("==")[0].strip()
        for line in lock.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    ]


def bounds(lock=LOCK):
    """{package: Requires-Python} for every locked package that declares one (all must be installed)."""
    found = {}
    for name in locked_names(lock):
        spec = importlib.metadata.distribution(name).metadata.get("Requires-Python")
        if spec:
            found[name] = spec
    return found


def supported_range(lock=LOCK):
    """'>=3.A,<3.B' for the contiguous minor versions every locked package accepts (x.y.0 and a late x.y.z)."""
    specs = [SpecifierSet(s) for s in bounds(lock).values()]
    ok = [v for v in CANDIDATES if all(f"{v[0]}.{v[1]}.{z}" in s for s in specs for z in (0, 20))]
    if not ok:
        raise SystemExit("no Python version satisfies every locked package's Requires-Python")
    if [m for _, m in ok] != list(range(ok[0][1], ok[-1][1] + 1)):
        raise SystemExit(f"supported minors are not contiguous: {ok}")
    return f">={ok[0][0]}.{ok[0][1]},<{ok[-1][0]}.{ok[-1][1] + 1}"


def header_range(lock=LOCK):
    for line in lock.read_text().splitlines():
        if line.startswith("# requires-python:"):
            return line.split(":", 1)[1].split()[0]
    return None


if __name__ == "__main__":
    print(supported_range())
    sys.exit(0 if supported_range() == header_range() else 1)
