"""The training wrapper `train_grpo` runs for verl experiments::

    python -m grpoflow.backends.verl.train --marker M --metrics X --config-hash H -- python -m verl.trainer.main_ppo ...

1. Pre-flight (seconds, before any GPU work): the SFT model path resolved, its context fits prompt +
   response, the training Parquet has at least one batch of rows, the checkpoint dir is usable.
2. The checkpoint dir's checkpoints must have been trained from this run's settings, start model and data
   (``grpoflow.checkpoint_record``): otherwise it stops naming the change (``--resume-across-changes`` continues
   a run that is not finished yet). Then it removes checkpoints beyond ``trainer.max_actor_ckpt_to_keep`` that
   earlier attempts left (verl rotates only its own saves), again after each save verl completes and after it
   exits, so an attempt holds at most keep + 1 (the save in progress).
3. Runs verl: directly on one node (verl starts a local Ray), through the Ray launcher
   (``grpoflow/backends/verl/ray_slurm.sh``) on ``trainer.nnodes`` > 1. SIGTERM/SIGINT/SIGUSR1/SIGUSR2 (time limit,
   preemption, ``--signal``) stop verl and Ray; verl 0.9.1 has no handler for them and saves nothing on the way
   out, so the steps since its last ``trainer.save_freq`` checkpoint are lost. The job then fails naming that
   checkpoint, and a rerun (or SLURM's requeue) resumes from it (``trainer.resume_mode=auto``).
4. Reads ``latest_checkpointed_iteration.txt``: only when the final step equals
   ``trainer.total_training_steps`` does it write ``train_metrics.jsonl`` and the completion marker. A run
   that exits 0 short of that (verl's zero-step "resume" at an epoch boundary) is an error.

Everything it needs is read from verl's own overrides after ``--`` (steps, checkpoint dir, nodes, GPUs, data,
model), so the wrapper and verl can never disagree.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

from grpoflow import checkpoint_record as ckrec
from grpoflow import envcheck, gpucheck
from grpoflow.backends.verl import ckpt as ck
from grpoflow.backends.verl import environment
from grpoflow.backends.verl import metrics as vm
from grpoflow.backends.verl.memory import at_job_start as memory_estimate
from grpoflow.errors import DataError, GrpoflowError
from grpoflow.health import HealthMonitor
from grpoflow.io import exclusive_dir
from grpoflow.progress import StepProgress
from grpoflow.provenance import provenance
from grpoflow.schema import saved_steps
from grpoflow.threads import cpu_affinity, process_threads, snakemake_threads
from grpoflow.training.common import split_wrapped_command, write_marker, write_metrics

log = logging.getLogger("grpoflow.backends.verl.train")

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
# Set (to 1, via verl.env) only to run verl's CPU-reachable start (Hydra, validate_config, Ray) in an environment
# without the GPU stack, as the CI test of the multi-node launcher does.
SKIP_ENV_CHECK = "GRPOFLOW_SKIP_ENV_CHECK"
STOP_GRACE_S = 90  # verl/vLLM/Ray need a moment to release GPUs; then everything left is killed
REQUIRED = (
    "trainer.total_training_steps",
    "trainer.default_local_dir",
    "trainer.n_gpus_per_node",
    "trainer.experiment_name",
    "data.train_files",
    "data.train_batch_size",
    "actor_rollout_ref.model.path",
)


def parse_overrides(argv: list[str]) -> dict[str, str]:
    """``key=value`` words of a verl command line (Hydra +/++ prefixes dropped, quotes around values removed)."""
    out = {}
    for word in argv:
        if "=" not in word or word.startswith("-"):
            continue
        key, value = word.split("=", 1)
        key = key.lstrip("+")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def is_main_ppo(argv: list[str]) -> bool:
    return "verl.trainer.main_ppo" in argv[:4]


def launcher_path() -> Path:
    return Path(str(resources.files("grpoflow.backends.verl").joinpath("ray_slurm.sh")))


# ---- pre-flight -------------------------------------------------------------------------------------------------


def preflight(ov: dict[str, str]) -> None:
    missing = [k for k in REQUIRED if k not in ov]
    if missing:
        raise GrpoflowError(
            f"the verl command lacks {', '.join(missing)}: run it through `snakemake` (rule train_grpo), which composes them from the config"
        )
    model = ov["actor_rollout_ref.model.path"]
    if not model:
        raise GrpoflowError(
            "the SFT model path is empty: `python -m grpoflow.discovery path <sft.json>` failed (its error is above); rerun discover_sft_checkpoint"
        )
    prompt, response = int(ov.get("data.max_prompt_length", 512)), int(ov.get("data.max_response_length", 512))
    cfg_file = Path(model) / "config.json"
    if Path(model).is_dir():
        if not cfg_file.is_file():
            raise DataError(
                f"SFT model dir {model} has no config.json: point sft.model/sft.run_dir at a Hugging Face model"
            )
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        ctx = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
        if ctx and prompt + response > ctx:
            raise GrpoflowError(
                f"grpo.max_prompt_length + max_response_length = {prompt} + {response} exceeds the model's context ({ctx} tokens, {cfg_file}): shorten them"
            )
    elif model.startswith(("/", ".")):
        raise DataError(f"SFT model path {model} does not exist on this node: is it on storage the compute nodes see?")
    train = ov["data.train_files"]
    if not Path(train).is_file():
        raise DataError(f"training data {train} not found on this node: is the project dir on shared storage?")
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(train).metadata.num_rows
    batch = int(ov["data.train_batch_size"])
    if rows < batch:
        raise DataError(
            f"{train} has {rows} rows, fewer than one step's grpo.prompts_per_step = {batch}: verl would stop before step 1; lower prompts_per_step or use more data"
        )
    val = ov.get("data.val_files")
    if val and not Path(val).is_file():
        raise DataError(f"validation data {val} not found on this node")
    try:
        Path(ov["trainer.default_local_dir"]).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise GrpoflowError(
            f"cannot create checkpoint_dir {ov['trainer.default_local_dir']}: {err.strerror}; set checkpoint_dir to writable shared storage"
        )


# ---- running verl -----------------------------------------------------------------------------------------------


def job_cpus_per_node() -> int:
    """The CPUs this job holds on each node: squeue's %C (the job's CPUs) / %D (its nodes) inside SLURM (the
    plugin strips SLURM_CPUS_* from the job step), else this process's CPU affinity."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        try:
            out = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%C %D"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.split()
            return max(1, int(out[0]) // max(1, int(out[1])))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass
    return cpu_affinity()


def worker_threads(gpus_per_node: int, environ=os.environ, cpus: int | None = None) -> dict[str, str]:
    """The six thread variables (grpoflow.threads) for every process verl starts on a node: its FSDP workers, its
    rollout servers and the vLLM processes they start, all = the job's CPUs per node / its GPUs per node, at least 1.
    They inherit them from the process that starts Ray (verl's driver on one node, each node's `ray start` under the
    launcher), and neither Ray (ray/_private/utils.py set_omp_num_threads_if_unset: 1 in an actor that asks for no
    CPU, as verl's FSDP workers do) nor vLLM (set_multiprocessing_worker_envs) changes a count that is set. So torch's
    CPU ops in each worker (the AdamW step with verl.offload_policy, gradient accumulation into offloaded grads) get
    the node's CPUs split over its GPUs, instead of the job's whole count in each GPU's worker (Snakemake's export,
    in which torch takes MKL_NUM_THREADS over OMP_NUM_THREADS).

    An inherited OMP_NUM_THREADS is kept only when it is not Snakemake's job-wide export (the six variables equal):
    set by verl.env or by hand for the workers; the other five then follow it. (A verl.env value equal to the job's
    threads cannot be told from Snakemake's, and is replaced.) The job's CPUs: squeue's inside SLURM
    (job_cpus_per_node), else the threads Snakemake gave the job, else this process's CPU affinity. Decided in the
    job, not in the command, so a changed cpus_per_task does not rerun training."""
    job = snakemake_threads(environ)
    given = environ.get("OMP_NUM_THREADS", "")
    if job is None and given.isdigit() and int(given) > 0:
        return process_threads(1, int(given))
    if cpus is None:
        cpus = job if job is not None and not environ.get("SLURM_JOB_ID") else job_cpus_per_node()
    return process_threads(gpus_per_node, cpus)


class Interrupted(Exception):
    def __init__(self, signame: str):
        self.signame = signame


def run_trainer(argv: list[str], nodes: int, gpus_per_node: int, env: dict[str, str]) -> int:
    """Run verl (through the launcher on several nodes); returns its exit status. Raises Interrupted when a
    signal stopped it."""
    if nodes > 1:
        if not os.environ.get("SLURM_JOB_ID"):
            raise GrpoflowError(
                f"trainer.nnodes = {nodes} needs a SLURM allocation of {nodes} nodes: submit with `snakemake --profile profiles/slurm`"
            )
        cmd = ["bash", str(launcher_path()), "--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node), "--", *argv]
        # Every node starts Ray with this very interpreter (its env on shared storage), not whatever `python` is.
        env = {"GRPOFLOW_PYTHON": sys.executable, **env}
    else:
        cmd = list(argv)
    log.info("running: %s", " ".join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    # Own process group: a stop signal reaches verl, its Ray driver and their children, not Snakemake.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    received: list[str] = []

    def on_signal(signum, _frame):
        name = signal.Signals(signum).name
        if not received:
            log.warning("received %s: stopping verl (it resumes from its last checkpoint when rerun)", name)
        received.append(name)
        # The launcher tears Ray down itself on TERM; a single-node verl gets it with all its children.
        try:
            if nodes > 1:
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, on_signal) for s in FORWARDED_SIGNALS}
    try:
        while True:
            try:
                rc = proc.wait(timeout=STOP_GRACE_S if received else None)
                break
            except subprocess.TimeoutExpired:
                log.warning("verl did not stop within %d s: killing it", STOP_GRACE_S)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if received:
        raise Interrupted(received[0])
    return rc


@contextlib.contextmanager
def step_progress(logfile: Path, planned: int, resumed_from: int | None = None):
    """A progress line per step (grpoflow.progress) in the job log while verl runs, read from verl's file logger,
    and the training-health checks' lines (grpoflow.health; they log only: verl runs in its own process tree, which
    this follower does not stop, so ``health.stop_on`` applies to TRL and Tunix). After a resume the checks continue
    from the earlier attempts' steps up to ``resumed_from``, as the report's replay of train_metrics.jsonl does."""
    progress = StepProgress(planned)
    earlier = vm.collect(vm.attempt_files(logfile.parent.parent), resumed_from) if resumed_from else []
    health = HealthMonitor.resumed(planned, earlier, stop_on=())
    stop = threading.Event()

    def on_row(row: dict) -> None:
        log.info("%s", progress.line(row["step"], row))
        health.observe(row)

    follower = threading.Thread(
        target=vm.follow,
        args=(logfile, on_row, stop),
        name="verl-progress",
        daemon=True,
    )
    follower.start()
    try:
        yield
    finally:
        stop.set()
        follower.join(timeout=10)


# ---- the whole job ----------------------------------------------------------------------------------------------


def _display(path: str) -> str:
    """Project-relative when inside the working dir (markers stay valid when the project moves)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def identity(ov: dict[str, str]) -> dict:
    """What verl's checkpoints are trained from (grpoflow.checkpoint_record): the overrides that change training,
    the start model's content, the training data's content."""
    return {
        "settings": ck.training_settings(ov),
        "start_model": ckrec.model_fingerprint(ov["actor_rollout_ref.model.path"]),
        "data": ckrec.data_fingerprint(ov["data.train_files"]),
    }


def _keep(ov: dict[str, str]) -> int | None:
    text = ov.get("trainer.max_actor_ckpt_to_keep", "null")
    return int(text) if text.isdigit() and int(text) > 0 else None


def rotate(ckpt: str, ov: dict[str, str], planned: int, while_running: bool = False) -> None:
    """At most max_checkpoints_to_keep checkpoints, earlier attempts' included (verl rotates only its own saves).
    Never removed: the newest complete one, and the steps a finished run keeps (config.saved_steps), which is
    where the config check (_check_merge_step) makes merge_step lie. ``while_running``: verl's save in progress
    (above the latest step) is left alone."""
    keep = _keep(ov)
    save_freq = int(ov.get("trainer.save_freq", planned))
    protect = set(saved_steps(planned, save_freq, keep)) if save_freq > 0 else set()
    try:
        removed = ck.rotate(ckpt, keep, protect, while_running=while_running)
    except OSError as err:  # never hide the attempt's own outcome behind a cleanup failure
        log.warning("could not remove old checkpoints in %s: %s", ckpt, err)
        return
    if removed:
        log.info(
            "removed checkpoints of steps %s from %s (grpo.max_checkpoints_to_keep = %s)",
            ", ".join(map(str, removed)),
            ckpt,
            keep,
        )


# How often the wrapper looks for a new save while verl runs: one stat of a small file; saves are minutes apart.
ROTATE_POLL_S = 2.0


@contextlib.contextmanager
def rotating(ckpt: str, ov: dict[str, str], planned: int):
    """Rotate after each save verl completes (``latest_checkpointed_iteration.txt`` changes), while it runs.

    verl 0.9.1's rotation list (``BaseCheckpointManager.previous_saved_paths``) starts empty in each process, so a
    resumed attempt never removes what earlier attempts saved: with only the rotations before and after verl, an
    attempt would hold the ``keep`` checkpoints it found plus up to ``keep`` of its own (2 x keep). Rotating after
    each save caps it at keep + 1 (the save being written next to the kept ones), which grpoflow.preflight's disk
    check counts. A save completing faster than ROTATE_POLL_S after the previous one can go unrotated until the
    next poll."""
    stop = threading.Event()

    def follow() -> None:
        seen = _latest_or_none(ckpt)
        while not stop.wait(ROTATE_POLL_S):
            now = _latest_or_none(ckpt)
            if now is not None and now != seen:
                try:
                    rotate(ckpt, ov, planned, while_running=True)
                except DataError:  # the step file caught mid-write inside rotate: the next poll tries again
                    continue
                seen = now

    rotator = threading.Thread(target=follow, name="verl-checkpoint-rotation", daemon=True)
    rotator.start()
    try:
        yield
    finally:
        stop.set()
        rotator.join(timeout=60)


def _latest_or_none(ckpt: str) -> int | None:
    try:
        return ck.latest_step(ckpt)
    except (DataError, OSError):  # caught mid-write (verl truncates, then writes the step): the next poll reads it
        return None


def train(
    trainer_argv: list[str],
    marker: str,
    metrics_out: str,
    config_hash: str | None = None,
    resume_across_changes: bool = False,
) -> dict:
    if not trainer_argv:
        raise GrpoflowError("no verl command after `--`")
    ov = parse_overrides(trainer_argv)
    _check_before_launch(trainer_argv, ov, marker)
    planned = int(ov["trainer.total_training_steps"])
    ckpt = ov["trainer.default_local_dir"]
    nodes = int(ov.get("trainer.nnodes", "1"))
    gpus_per_node = int(ov["trainer.n_gpus_per_node"])
    experiment = ov["trainer.experiment_name"]

    # One trainer per checkpoint dir: a rerun waits for a cancelled job that is still saving (grpoflow.io.exclusive_dir).
    with exclusive_dir(ckpt):
        before = ck.latest_step(ckpt)
        if before is not None and before > planned:
            raise GrpoflowError(
                f"{ckpt} already holds step {before}, beyond grpo.total_steps = {planned}: it belongs to a longer run; raise total_steps, or set checkpoint_dir to a fresh dir"
            )
        finished = before == planned and ck.is_complete(ckpt, planned)
        # The checkpoints must be this run's: never resume, or relabel as finished, ones trained from other settings.
        rec = ckrec.check(
            ckpt,
            identity(ov),
            latest=before,
            finished=finished,
            allow_change=resume_across_changes,
            where=f"experiments.{experiment}",
        )
        rotate(ckpt, ov, planned)  # what an earlier attempt left (it may have been killed before rotating)
        if finished:
            log.info("%s already holds the final step %d: not relaunching verl", ckpt, planned)
        else:
            _run_attempt(trainer_argv, ov, before, nodes, gpus_per_node)
        record = _write_outputs(
            trainer_argv, ov, (nodes, gpus_per_node), marker, metrics_out, config_hash, rec.get("history", [])
        )
        log.info("training complete: %s", marker)
        return record


def _check_before_launch(trainer_argv: list[str], ov: dict[str, str], marker: str) -> None:
    """The environment (for main_ppo), the GPUs, the command's settings and the GPU-memory estimate, checked
    before verl starts."""
    envcheck.log_interpreter()
    if is_main_ppo(trainer_argv):  # what main_ppo imports, checked in the interpreter that will run it
        if os.environ.get(SKIP_ENV_CHECK) == "1":
            log.warning(
                "%s=1: environment check skipped; verl fails at its own import if a package is missing", SKIP_ENV_CHECK
            )
        else:
            envcheck.require(environment.JOB, environment.training_needs(ov))
        gpucheck.checked("train_grpo (backend verl)", marker)
    preflight(ov)
    log.info("%s", memory_estimate(ov))  # the config-load GPU-memory estimate, redone with the model's config.json


def _run_attempt(
    trainer_argv: list[str], ov: dict[str, str], before: int | None, nodes: int, gpus_per_node: int
) -> None:
    """One verl attempt from checkpoint step ``before`` to the planned step, its metrics logged to a file of its
    own; raises when it is stopped, fails, or ends short of the planned step."""
    planned = int(ov["trainer.total_training_steps"])
    ckpt = ov["trainer.default_local_dir"]
    log.info(
        "checkpoint dir %s: %s",
        ckpt,
        f"resuming from step {before}" if before else "no checkpoint yet, training from step 0",
    )
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    logfile = Path(
        ckpt, vm.METRICS_SUBDIR, f"attempt-{stamp}-{os.environ.get('SLURM_JOB_ID', os.getpid())}.jsonl"
    ).absolute()
    logfile.parent.mkdir(parents=True, exist_ok=True)
    threads = worker_threads(gpus_per_node)
    log.info(
        "%s threads each for verl's %d GPU workers per node and their rollout (%s)",
        threads["OMP_NUM_THREADS"],
        gpus_per_node,
        "OMP_NUM_THREADS as set for them"
        if snakemake_threads() is None and os.environ.get("OMP_NUM_THREADS")
        else "the job's CPUs per node / its GPUs per node",
    )
    env = {**os.environ, **threads, "VERL_FILE_LOGGER_PATH": str(logfile)}
    started = time.monotonic()
    try:
        with step_progress(logfile, planned, before), rotating(ckpt, ov, planned):
            rc = run_trainer(trainer_argv, nodes, gpus_per_node, env)
    except Interrupted as stop:
        last = ck.latest_step(ckpt)
        raise GrpoflowError(
            f"training stopped by {stop.signame} at {_progress(last, planned)}: rerun to resume from it (SLURM requeue does so automatically)"
        )
    finally:
        rotate(ckpt, ov, planned)
    after = ck.latest_step(ckpt)
    if rc != 0:
        raise GrpoflowError(
            f"verl exited with status {rc} (its error is above in this log); {_progress(after, planned)}: fix the cause and rerun to resume"
        )
    if after != planned:
        ran = "0 steps" if after == before else f"up to step {after}"
        raise GrpoflowError(
            f"verl exited 0 but ran {ran} of the planned {planned} (checkpoint dir {ckpt}): not complete; check `Total training steps` above (data smaller than expected? a resume at an epoch boundary?)"
        )
    log.info("verl reached step %d/%d in %.0f s", after, planned, time.monotonic() - started)


def _write_outputs(
    trainer_argv: list[str],
    ov: dict[str, str],
    layout: tuple[int, int],
    marker: str,
    metrics_out: str,
    config_hash: str | None,
    settings_history: list,
) -> dict:
    """The per-step metrics of every attempt (``metrics_out``) and the completion marker; returns the marker.
    ``layout``: (nodes, GPUs per node)."""
    planned = int(ov["trainer.total_training_steps"])
    ckpt = ov["trainer.default_local_dir"]
    rows = vm.collect(vm.attempt_files(ckpt), planned)
    if not rows:
        log.warning(
            "no per-step metrics found under %s/%s (was trainer.logger stripped of 'file'?)",
            ckpt,
            vm.METRICS_SUBDIR,
        )
    write_metrics(metrics_out, rows)
    prov = provenance(None)
    prov["config_hash"] = config_hash
    return write_marker(
        marker,
        experiment=ov["trainer.experiment_name"],
        backend="verl",
        planned_steps=planned,
        final_step=planned,
        checkpoint_dir=_display(ckpt),
        final_checkpoint=_display(str(Path(ckpt) / f"global_step_{planned}")),
        nodes=layout[0],
        gpus_per_node=layout[1],
        trainer_command=trainer_argv,
        metrics_summary=vm.summary(rows),
        settings_history=settings_history,
        provenance=prov,
    )


def _progress(step: int | None, planned: int) -> str:
    return f"last checkpoint step {step} of {planned}" if step else f"no checkpoint yet (0 of {planned} steps saved)"


def main(argv: list[str] | None = None) -> int:
    from grpoflow.joblog import guarded, setup_logging

    parts = split_wrapped_command(
        list(sys.argv[1:] if argv is None else argv),
        "usage: python -m grpoflow.backends.verl.train --marker M --metrics X [--config-hash H] -- python -m verl.trainer.main_ppo ...",
    )
    if parts is None:
        return 2
    own, trainer = parts
    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.backends.verl.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--marker", required=True, help="completion marker to write (results/E/training_complete.json)")
    parser.add_argument("--metrics", required=True, help="per-step metrics to write (results/E/train_metrics.jsonl)")
    parser.add_argument(
        "--config-hash", default=None, help="hash of the experiment's training settings (recorded in the marker)"
    )
    parser.add_argument(
        "--resume-across-changes",
        action="store_true",
        help="continue from checkpoints trained with other settings (resume_across_changes: true)",
    )
    args = parser.parse_args(own)
    setup_logging()
    guarded(
        train,
        trainer,
        args.marker,
        args.metrics,
        args.config_hash,
        args.resume_across_changes,
        what="train_grpo (verl)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
