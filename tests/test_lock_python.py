"""The Python range set-up accepts (the lock's header line) agrees with the locked packages, and an unsupported
interpreter is refused before anything is created (issue 14)."""

import pathlib
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "requirements"))
import python_range  # noqa: E402


def test_header_range_is_every_locked_packages_requires_python():
    """Relocking with a package that drops a Python (as verl 0.9.1 drops 3.13) must move the header line too."""
    header = python_range.header_range()
    assert header is not None, "requirements/local.lock lost its '# requires-python:' line"
    assert python_range.supported_range() == header
    # The installed interpreter is in it (the lock was resolved on, and CI runs, the resolved-on version).
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in [
        line.split(":", 1)[1].strip()
        for line in python_range.LOCK.read_text().splitlines()
        if line.startswith("# resolved-on:")
    ]


def test_pyproject_declares_the_lock_range():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert declared.replace(" ", "") == python_range.header_range()


def test_verl_bound_is_the_upper_bound():
    bounds = python_range.bounds()
    assert "<3.13" in bounds["verl"]
    assert python_range.header_range().endswith(",<3.13")


@pytest.fixture
def sandbox(tmp_path):
    """A copy of the set-up scripts and lock, and a PATH with only the tools they use and no Python at all."""
    (tmp_path / "requirements").mkdir()
    for name in ("local.lock", "find-python", "setup-venv", "install.py"):
        shutil.copy(ROOT / "requirements" / name, tmp_path / "requirements" / name)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("sh", "sed", "make", "rm", "touch", "cat"):
        (tools / tool).symlink_to(shutil.which(tool))
    fake = tools / "python3.13"
    fake.write_text('#!/bin/sh\necho "3.13.0 $0"\n')  # answers find-python's probe as a Python 3.13 would
    fake.chmod(0o755)
    env = {"PATH": str(tools), "HOME": str(tmp_path)}
    return tmp_path, env


def test_unsupported_python_stops_in_one_line_and_creates_nothing(sandbox):
    root, env = sandbox
    start = time.monotonic()
    done = subprocess.run(["make", "demo", "PYTHON=python3.13"], cwd=root, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("grpoflow:")]
    assert len(errors) == 1, done.stderr
    assert "python3.13 is Python 3.13.0" in errors[0]
    assert ">=3.11,<3.13" in errors[0] and "verl 0.9.1 requires <3.13" in errors[0]
    assert errors[0].endswith("run: make demo PYTHON=python3.11")
    assert not (root / ".venv").exists()
    assert elapsed < 1.0


def test_supported_python_on_the_machine_is_used_instead(sandbox):
    root, env = sandbox
    (pathlib.Path(env["PATH"]) / "python3.11").symlink_to(sys.executable)
    done = subprocess.run(
        ["sh", "requirements/find-python", "python3.13", "demo"], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert pathlib.Path(done.stdout.strip()).resolve() == pathlib.Path(sys.executable).resolve()
    assert "python3.13 is Python 3.13.0" in done.stderr and "using" in done.stderr


def test_half_made_venv_is_removed_before_a_rerun(sandbox):
    """A .venv without the installed-stamp (a set-up that died, e.g. under the old Makefile) is not reused."""
    root, env = sandbox
    (root / ".venv" / "bin").mkdir(parents=True)
    done = subprocess.run(["make", "setup", "PYTHON=python3.13"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "left by a set-up that did not finish" in done.stderr
    assert not (root / ".venv").exists()


def test_failed_install_leaves_no_venv(sandbox):
    """The interpreter is fine but the install fails (here: a lock pin that exists nowhere): .venv/ is removed."""
    root, env = sandbox
    lock = root / "requirements" / "local.lock"
    header = [line for line in lock.read_text().splitlines() if line.startswith("#")]
    lock.write_text("\n".join(header + ["grpoflow-no-such-package==0.0.0"]) + "\n")
    (pathlib.Path(env["PATH"]) / "python3.11").symlink_to(sys.executable)
    env = {**env, "INSTALLER": "pip", "TORCH_INDEX": "", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    done = subprocess.run(
        ["sh", "requirements/setup-venv", ".venv", "python3.11", "setup"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "removed the half-made .venv/" in done.stderr
    assert not (root / ".venv").exists()
