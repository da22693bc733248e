"""Fixtures shared by every test folder (helpers live in grpoflow_testing.py).

The suite runs on five pytest-xdist workers (`make test`: ``-n 5 --dist loadgroup --no-loadscope-reorder``) so
that tests waiting on SLURM, Ray or a subprocess overlap with tests that compute. A session fixture is then set up
once per worker; the costly ones that only produce files (a pipeline run, a tiny model, verl checkpoints, the local
SLURM) go through ``shared_once``: the first worker to ask builds it under a file lock, the other reads it back.
Tests that share a fixture that is not files (a background Snakemake run) are kept on one worker with
``xdist_group``; the longest (``schedule_first``) are handed out before anything else.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# The xdist workers each start torch jobs with the threads their rule asks for (2), so on 2 cores four or more OpenMP
# threads compete, and OpenMP's default wait policy spins at every barrier for a thread that is not running: the
# demo SFT's steps took 8x as long as alone (1,373 s instead of ~150 s; the tiny model's forward/backward 2.6 s
# instead of 0.3 s per step beside another job, benchmarks/omp_contention.py). PASSIVE makes a waiting thread
# sleep: the same thread counts (so the same float results: SLURM and local runs are still compared byte for
# byte), without the spinning. Every job inherits it (subprocesses, Snakemake jobs, sbatch --export=ALL).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from grpoflow_testing import REPO, load_yaml, make_workdir
from hypothesis import settings

# Property tests draw the same examples on every clone and machine: derandomized (examples from a fixed seed) and
# no example database carried between runs. A test's own @settings may add to this, not undo it.
settings.register_profile("grpoflow", derandomize=True, database=None, print_blob=True)
settings.load_profile("grpoflow")


@pytest.fixture
def workdir(tmp_path) -> Path:
    return make_workdir(tmp_path)


@pytest.fixture(scope="session")
def default_config() -> dict:
    return load_yaml(REPO / "config" / "config.yaml")


def shared_once(tmp_path_factory, worker_id: str, name: str, build):
    """``build(dir)`` (a JSON-serialisable value, e.g. paths under ``dir``) computed once per test run: in a plain
    pytest run as a session fixture would; under pytest-xdist by the first worker that asks, under a file lock in
    the run's shared temporary root, the other workers reading the value it left. A build that fails is retried
    by the next worker that asks (and fails there too)."""
    if worker_id == "master":
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # shared by the workers of this run (pytest-of-<user>/pytest-N)
    done = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if done.exists():
            return json.loads(done.read_text())
        out = root / name
        out.mkdir(exist_ok=True)
        value = build(out)
        done.write_text(json.dumps(value))
        return value


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # pytest-xdist 3.8's --dist loadgroup sends a test to its xdist_group's worker by suffixing the group to
    # Item._nodeid, which pytest 9.2 no longer reads (nodeid is str(Item._id)): without this, every group's tests
    # were spread over both workers and each built the group's costly fixture (the demo learning run twice).
    # Only xdist's workers have the option (xdist.remote.setup_config sets it); a plain pytest run has none.
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
    # The suite's longest fixtures go to workers first, so that the other workers' tests all overlap them: queued
    # behind other groups (xdist's default order is by group size), the demo learning run started ~3 min late and
    # ended the suite alone. `make test` passes --no-loadscope-reorder, so xdist keeps this order.
    items.sort(key=lambda item: item.get_closest_marker("schedule_first") is None)


def pytest_configure(config):
    # One JAX compilation cache for the whole run (JAX reads JAX_COMPILATION_CACHE_DIR itself): the suite's Tunix
    # processes compile the same train, sampler and merge programs again and again, ~15 s per process on 2 cores.
    # Set in the controller before xdist starts its workers, which inherit it, as do their jobs. Every entry (not
    # only those that took >= 1 s to compile): the tests' tiny models compile fast, but there are many.
    if not hasattr(config, "workerinput") and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        import tempfile

        os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="grpoflow-tests-jax-cache-")
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        config.stash[_JAX_CACHE] = os.environ["JAX_COMPILATION_CACHE_DIR"]


def pytest_unconfigure(config):
    if config.stash.get(_JAX_CACHE, None):
        import shutil

        shutil.rmtree(config.stash[_JAX_CACHE], ignore_errors=True)


_JAX_CACHE = pytest.StashKey[str]()


def pytest_sessionstart(session):
    # The controller (the only process without xdist, the coordinator with it) remembers whether a local SLURM was
    # already running, e.g. a developer's; the one the tests start is stopped when every worker has finished.
    if not hasattr(session.config, "workerinput"):
        from grpoflow_testing import local_slurm_running

        session.config.stash[_SLURM_BEFORE] = local_slurm_running()
        if os.environ.get("GRPOFLOW_TEST_CPU_LOG"):
            session.config.stash[_MACHINE_START] = _machine_busy_s()


def pytest_sessionfinish(session):
    start = session.config.stash.get(_MACHINE_START, None)  # set by the controller, with GRPOFLOW_TEST_CPU_LOG
    if start:
        # The whole machine's CPU over the run (benchmarks/suite_cpu.py): the tests' rows count only their own
        # process trees, not the jobs slurmd starts or the daemons Ray detaches from them.
        busy, wall = (now - then for now, then in zip(_machine_busy_s(), start))
        row = {"machine": True, "busy_cpu_s": round(busy, 1), "wall_s": round(wall, 1), "cpus": os.cpu_count()}
        with open(os.environ["GRPOFLOW_TEST_CPU_LOG"], "a") as f:
            f.write(json.dumps(row) + "\n")
    if not hasattr(session.config, "workerinput") and not session.config.stash.get(_SLURM_BEFORE, True):
        from grpoflow_testing import local_slurm_running, stop_local_slurm

        if local_slurm_running() and _this_run_started_the_local_slurm(session.config):
            stop_local_slurm()


def _this_run_started_the_local_slurm(config) -> bool:
    """Whether a worker of this run (or the run itself, without xdist) built the ``local_slurm`` fixture: its
    shared_once result lies in this run's temporary root. A run that never asked for it (a quick ``pytest tests/x.py``
    beside a full run) must not stop the cluster another run started: once, that broke CI's SLURM tests mid-run."""
    root = config._tmp_path_factory.getbasetemp()  # pytest's own factory: the root the workers' temp dirs sit in
    return (root / "local_slurm.json").exists() or any(root.glob("local_slurm[0-9]*"))


_SLURM_BEFORE = pytest.StashKey[bool]()
_MACHINE_START = pytest.StashKey[tuple]()


def _machine_busy_s() -> tuple[float, float] | None:
    """(CPU seconds every core of the machine has spent busy since boot, monotonic seconds) from /proc/stat's first
    line (user, nice, system, idle, iowait, irq, softirq, steal, ...: busy is all but idle, iowait and the steal of
    other guests); None where there is no /proc/stat."""
    import time

    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, _steal = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK"), time.monotonic()


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory, worker_id) -> dict:
    """A real SLURM on this host, shared by every SLURM test of the run: two slurmd nodes (one-node jobs schedule on
    either), partition gpu, 8 stand-in GPUs per node (tests/slurm/start.sh). Skips visibly where the machine cannot
    run one (fails under CI=true). Started once per run (shared_once); stopped at the end of the run if the run
    started it (pytest_sessionfinish: a cluster that was already running, e.g. a developer's, is left running)."""
    from grpoflow_testing import start_local_slurm

    return shared_once(tmp_path_factory, worker_id, "local_slurm", lambda _: start_local_slurm(nodes=2))


@pytest.fixture(scope="session")
def short_local_run(tmp_path_factory, worker_id) -> Path:
    """The shortened embedded default (tests/pipeline/short.yaml) run once with profiles/local; read-only for
    tests (copy it with grpoflow_testing.copy_workdir to change anything)."""
    from grpoflow_testing import LOCAL_PROFILE, SHORT_CONFIG, snakemake

    def build(root: Path) -> str:
        wd = make_workdir(root)
        snakemake([*LOCAL_PROFILE, *SHORT_CONFIG], wd, timeout=1800)
        return str(wd)

    return Path(shared_once(tmp_path_factory, worker_id, "short-local", build))


@pytest.fixture(scope="session")
def demo_sft_start(tmp_path_factory, worker_id) -> Path:
    """The demo's first call (config/config.yaml, config/demo-tunix.yaml, tests/pipeline/learning.yaml) up to its SFT
    start: data, tiny model, the SFT stopped in its accuracy band; its log in first-call.log. Built once per run
    (shared_once), read-only: tests/pipeline/test_demo_learning.py's learning run and broken health runs, on two
    workers, each continue a copy of it."""
    from grpoflow_testing import LOCAL_PROFILE, snakemake, unavailable

    from grpoflow.config import DEMO_SFT_RUN_DIR

    if not (REPO / ".venv-tunix" / "bin" / "python").exists():
        unavailable("no .venv-tunix: run `make setup-tunix` (make test builds it)")
    configs = [REPO / p for p in ("config/config.yaml", "tests/pipeline/learning.yaml", "config/demo-tunix.yaml")]

    def build(root: Path) -> str:
        wd = make_workdir(root)
        # The target before --configfile, whose list would take it as a further file.
        first = snakemake([*LOCAL_PROFILE, DEMO_SFT_RUN_DIR, "--configfile", *map(str, configs)], wd, timeout=2400)
        (wd / "first-call.log").write_text(first.stdout + first.stderr)
        return str(wd)

    return Path(shared_once(tmp_path_factory, worker_id, "demo-sft", build))


@pytest.fixture(scope="session")
def slurm_pipeline_run(local_slurm, tmp_path_factory):
    """The shortened embedded default through profiles/slurm (+ tests/slurm/cluster_shape.yaml: GPU requests),
    with a made-up HF_TOKEN in the environment, started in the background when first requested (the SLURM fault
    tests start it early, so that it runs while they wait on SLURM). ``.result()`` waits for it; ``.token``."""
    import secrets

    from grpoflow_testing import REPO, SHORT_CONFIG, BackgroundSnakemake

    wd = make_workdir(tmp_path_factory.mktemp("short-slurm"))
    token = "hf_" + secrets.token_hex(17)
    run = BackgroundSnakemake(
        ["--configfile", *SHORT_CONFIG[1:], str(REPO / "tests" / "slurm" / "cluster_shape.yaml")],
        wd,
        env={"HF_TOKEN": token},
    )
    run.token = token
    yield run
    run.result()  # never leave it running past the session


# ---- one tiny SFT start and one set of genuine verl checkpoints for every test folder that needs them -------------


def _mergekit():
    """tests/merge/mergekit.py, loaded by path (a conftest.py cannot import another folder's plain modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mergekit", REPO / "tests" / "merge" / "mergekit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, worker_id, default_config) -> str:
    """A tiny Qwen3 SFT start (weights, tokenizer with chat template, generation_config) built once per run from the
    shipped GSM8K sample: the merge tests, the verl wrapper tests and the job-environment tests share it.
    Read-only: copy it to change anything."""
    return shared_once(
        tmp_path_factory, worker_id, "tinybase", lambda root: _mergekit().build_tiny_base(root, default_config)
    )


@pytest.fixture(scope="session")
def verl_full_checkpoints(tmp_path_factory, worker_id, tiny_base) -> dict:
    """{step: checkpoints root} for steps 2, 3 and 4: genuine verl FSDP2 checkpoints of tiny_base (each root holds
    that one step), all written by one torchrun. Read-only: copy a root to change anything."""

    def build(root: Path) -> dict:
        roots = {s: root / f"step{s}" / "checkpoints" for s in (2, 3, 4)}
        return {str(s): str(r) for s, r in _mergekit().write_checkpoints(tiny_base, roots, lora=False).items()}

    return {int(s): Path(r) for s, r in shared_once(tmp_path_factory, worker_id, "verl_full", build).items()}


@pytest.fixture(scope="session")
def verl_lora_checkpoint(tmp_path_factory, worker_id, tiny_base) -> Path:
    """A genuine verl FSDP2 checkpoint of tiny_base with a LoRA adapter, at step 2 (read-only)."""

    def build(root: Path) -> str:
        return str(_mergekit().write_checkpoints(tiny_base, {2: root / "checkpoints"}, lora=True)[2])

    return Path(shared_once(tmp_path_factory, worker_id, "verl_lora", build))


# ---- where the suite's CPU goes (benchmarks/suite_cpu.py) ------------------------------------------------------------
# The suite's wall time on 2 cores is bounded by its CPU seconds, not by any one test's wall time (most SLURM tests
# wait). With GRPOFLOW_TEST_CPU_LOG=<file>, each test's CPU seconds (this worker's and every subprocess it waited
# for, setup and teardown included: a module fixture counts for its first test) are appended to <file>.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get("GRPOFLOW_TEST_CPU_LOG")
    if not log:
        yield
        return
    import resource
    import time

    def cpu() -> float:
        own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime

    cpu0, wall0, start = cpu(), time.monotonic(), time.time()
    yield
    row = {"test": item.nodeid, "cpu_s": round(cpu() - cpu0, 2), "wall_s": round(time.monotonic() - wall0, 2)}
    row |= {"start": round(start, 1), "worker": os.environ.get("PYTEST_XDIST_WORKER", "master")}
    with open(log, "a") as f:
        f.write(json.dumps(row) + "\n")
