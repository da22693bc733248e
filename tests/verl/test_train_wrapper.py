"""The training wrapper (`python -m grpoflow.verl.train`): pre-flight, exit-status and resume handling, the
zero-step "resume" that exits 0, stop signals, the completion marker and train_metrics.jsonl.

verl cannot train without a GPU, so the trainer after `--` is a stand-in process that does no training (it
exits with a status, or sleeps); checkpoints are genuine ones written by verl's own checkpoint manager, and
verl's per-step log is written by verl's own FileLogger."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from verlkit import REPO

from grpoflow.verl import metrics as vm

pytestmark = pytest.mark.verl


@pytest.fixture
def job(tmp_path, tiny_model):
    """Files a train_grpo job sees: a train Parquet, a model dir; returns a runner."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": f"{i}+1?"}] for i in range(16)]}), train)

    def run(trainer: list[str], *, planned: int = 4, ckpt: Path | None = None, batch: int = 8, model: str | None = None,
            extra: tuple[str, ...] = (), wait: bool = True, timeout: int = 120):
        overrides = [
            f"trainer.total_training_steps={planned}", f"trainer.default_local_dir={ckpt or tmp_path / 'checkpoints'}",
            "trainer.n_gpus_per_node=8", "trainer.nnodes=1", "trainer.experiment_name=e1",
            f"data.train_files={train}", f"data.val_files={train}", f"data.train_batch_size={batch}",
            "data.max_prompt_length=16", "data.max_response_length=32",
            f"actor_rollout_ref.model.path={tiny_model if model is None else model}", *extra,
        ]
        cmd = [sys.executable, "-m", "grpoflow.verl.train", "--marker", str(tmp_path / "out" / "training_complete.json"),
               "--metrics", str(tmp_path / "out" / "train_metrics.jsonl"), "--config-hash", "abc123", "--", *trainer, *overrides]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        if not wait:
            return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    run.out = tmp_path / "out"
    return run


def exits(code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.exit({code})"]


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("grpoflow: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def test_verl_failure_is_reported_with_its_status(job):
    proc = job(exits(3))
    assert proc.returncode == 1
    assert "verl exited with status 3" in error_line(proc) and "no checkpoint yet (0 of 4 steps saved)" in error_line(proc)
    assert not job.out.exists() or not any(job.out.iterdir())


def test_each_step_verl_logs_becomes_a_progress_line_in_the_job_log(job):
    # A stand-in for verl that logs two training steps to its file logger, then fails.
    writes = (
        "import json, os; fh = open(os.environ['VERL_FILE_LOGGER_PATH'], 'w')\n"
        "for s in (1, 2): fh.write(json.dumps({'step': s, 'data': {'critic/score/mean': s / 4, 'timing_s/step': 30.0}}) + '\\n')\n"
        "fh.close(); raise SystemExit(3)"
    )
    proc = job([sys.executable, "-c", writes])
    assert "verl exited with status 3" in error_line(proc)
    assert "step 1/4 (25%) | reward 0.250 | 30.0 s/step | ETA 1m30s" in proc.stderr
    assert "step 2/4 (50%) | reward 0.500 |" in proc.stderr


def test_zero_steps_with_exit_0_is_an_error(job):
    proc = job(exits(0))
    assert proc.returncode == 1
    assert "verl exited 0 but ran 0 steps of the planned 4" in error_line(proc)
    assert not (job.out / "training_complete.json").exists()


def test_the_log_shows_the_gpu_memory_estimate_before_verl_starts(job, tiny_model):
    proc = job(exits(0))
    line = next(ln for ln in proc.stderr.splitlines() if "GPU memory per GPU" in ln)
    assert f"{tiny_model}/config.json" in line and "margin +" in line and "host RAM per node" in line
    assert proc.stderr.index("GPU memory per GPU") < proc.stderr.index("running:")


@pytest.mark.slow
def test_resume_that_runs_no_step_is_an_error(job, genuine_checkpoint, tmp_path):
    """The upstream trap: resuming at step 2 of 4, verl runs nothing and exits 0; the wrapper refuses."""
    ckpt = Path(shutil.copytree(genuine_checkpoint(2), tmp_path / "ckpt"))
    proc = job(exits(0), ckpt=ckpt)
    assert proc.returncode == 1
    assert "resuming from step 2" in proc.stderr
    assert "verl exited 0 but ran 0 steps of the planned 4" in error_line(proc)
    assert not (job.out / "training_complete.json").exists()


@pytest.mark.slow
def test_complete_checkpoint_writes_marker_and_metrics_without_relaunching(job, genuine_checkpoint, tmp_path, monkeypatch):
    ckpt = Path(shutil.copytree(genuine_checkpoint(4), tmp_path / "ckpt"))
    # verl's own file logger: a first attempt logged steps 1-3 then died; the resume redid step 3 and did 4.
    from verl.utils.tracking import FileLogger

    def step_data(step: int, score: float) -> dict:
        return {"critic/score/mean": score, "critic/score/max": 1.0, "critic/score/min": 0.0, "response_length/mean": 20.0 + step,
                "response_length/max": 32.0, "response_length/clip_ratio": 0.1, "actor/pg_clipfrac": 0.01, "actor/kl_loss": 0.002 * step,
                "actor/entropy": 1.5, "actor/pg_loss": -0.1, "actor/lr": 1e-6, "actor/grad_norm": 0.5, "timing_s/step": 12.0,
                "training/global_step": step}

    (ckpt / vm.METRICS_SUBDIR).mkdir()
    for name, steps in (("attempt-20260101T000000000000Z-1.jsonl", [(1, 0.1), (2, 0.2), (3, 0.25)]),
                        ("attempt-20260101T010000000000Z-2.jsonl", [(3, 0.3), (4, 0.4)])):
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(ckpt / vm.METRICS_SUBDIR / name))
        logger = FileLogger("p", "e1")
        logger.log({"val-core/grpoflow/acc/mean@1": 0.5}, step=0) if "T00" in name else None
        for step, score in steps:
            logger.log(step_data(step, score), step=step)
        logger.finish()

    proc = job(exits(7), ckpt=ckpt)  # would fail if it ran
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "already holds the final step 4: not relaunching verl" in proc.stderr
    marker = json.loads((job.out / "training_complete.json").read_text())
    assert marker["planned_steps"] == marker["final_step"] == 4 and marker["backend"] == "verl"
    assert marker["final_checkpoint"].endswith("global_step_4") and marker["experiment"] == "e1"
    assert marker["provenance"]["config_hash"] == "abc123" and "verl" in marker["provenance"]["packages"]
    assert marker["metrics_summary"]["reward"] == 0.4
    rows = [json.loads(ln) for ln in (job.out / "train_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["reward"] for r in rows] == [0.1, 0.2, 0.3, 0.4], "the resumed attempt's step 3 wins"
    assert rows[0] == {"step": 1, "reward": 0.1, "reward_max": 1.0, "reward_min": 0.0, "response_length": 21.0, "response_length_max": 32.0,
                       "truncated_fraction": 0.1, "clip_ratio": 0.01, "kl": 0.002, "entropy": 1.5, "loss": -0.1,
                       "learning_rate": 1e-6, "grad_norm": 0.5, "time_s": 12.0}


@pytest.mark.slow
def test_checkpoint_beyond_the_plan_is_refused(job, genuine_checkpoint, tmp_path):
    ckpt = Path(shutil.copytree(genuine_checkpoint(4), tmp_path / "ckpt"))
    proc = job(exits(0), ckpt=ckpt, planned=3)
    assert "already holds step 4, beyond grpo.total_steps = 3" in error_line(proc)


def test_stop_signal_stops_verl_and_names_the_resume(job, tmp_path):
    pidfile = tmp_path / "verl.pid"
    trainer = [sys.executable, "-c", f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
    proc = job(trainer, wait=False)
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.2)
    started = time.monotonic()
    proc.send_signal(signal.SIGUSR1)  # what `--signal=B:USR1@300` would send
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20
    assert proc.returncode == 1
    assert "training stopped by SIGUSR1 at no checkpoint yet (0 of 4 steps saved): rerun to resume" in err
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


@pytest.mark.parametrize("case, message", [
    ("empty model", "the SFT model path is empty: `python -m grpoflow.discovery path <sft.json>` failed"),
    ("context", "grpo.max_prompt_length + max_response_length = 16 + 500 exceeds the model's context (128 tokens"),
    ("rows", "has 16 rows, fewer than one step's grpo.prompts_per_step = 64"),
    ("missing model", "does not exist on this node"),
])
def test_preflight_fails_before_verl_starts(job, tmp_path, case, message):
    marker = tmp_path / "verl-started"
    trainer = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    kwargs = {"empty model": {"model": ""}, "context": {"extra": ("data.max_response_length=500",)},
              "rows": {"batch": 64}, "missing model": {"model": "/no/such/model"}}[case]
    proc = job(trainer, **kwargs)
    assert proc.returncode == 1 and message in error_line(proc)
    assert not marker.exists(), "verl must not start"


def test_metrics_collect_skips_a_torn_last_line(tmp_path):
    f = tmp_path / "attempt-1.jsonl"
    f.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "reward/cosine/mean": 0.25}}) + "\n" + '{"step": 2, "da')
    assert vm.collect([f], 4) == [{"step": 1, "reward": 0.5, "reward/cosine": 0.25}]
