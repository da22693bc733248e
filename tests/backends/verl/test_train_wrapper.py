"""The training wrapper (`python -m grpoflow.backends.verl.train`): pre-flight, exit-status and resume handling, the
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

from grpoflow import checkpoint_record as ckrec
from grpoflow.backends.verl import ckpt as ck
from grpoflow.backends.verl import metrics as vm
from grpoflow.backends.verl import train as train_mod

pytestmark = pytest.mark.verl


@pytest.fixture
def job(tmp_path, tiny_model):
    """Files a train_grpo job sees: a train Parquet, a model dir; returns a runner."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": f"{i}+1?"}] for i in range(16)]}), train)

    def overrides(
        planned: int = 4,
        ckpt: Path | None = None,
        batch: int = 8,
        model: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> list[str]:
        return [
            f"trainer.total_training_steps={planned}",
            f"trainer.default_local_dir={ckpt or tmp_path / 'checkpoints'}",
            "trainer.n_gpus_per_node=8",
            "trainer.nnodes=1",
            "trainer.experiment_name=e1",
            f"data.train_files={train}",
            f"data.val_files={train}",
            f"data.train_batch_size={batch}",
            "data.max_prompt_length=16",
            "data.max_response_length=32",
            f"actor_rollout_ref.model.path={tiny_model if model is None else model}",
            *extra,
        ]

    def run(
        trainer: list[str],
        *,
        planned: int = 4,
        ckpt: Path | None = None,
        batch: int = 8,
        model: str | None = None,
        extra: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
        wait: bool = True,
        timeout: int = 120,
    ):
        cmd = [
            sys.executable,
            "-m",
            "grpoflow.backends.verl.train",
            "--marker",
            str(tmp_path / "out" / "training_complete.json"),
            "--metrics",
            str(tmp_path / "out" / "train_metrics.jsonl"),
            "--config-hash",
            "abc123",
            *flags,
            "--",
            *trainer,
            *overrides(planned, ckpt, batch, model, extra),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        if not wait:
            return subprocess.Popen(
                cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    def own(ckpt: Path, **kwargs) -> None:
        """Record, as a previous attempt of this run would have, that ``ckpt``'s checkpoints were trained from
        these overrides (what grpoflow_run.json holds)."""
        ov = train_mod.parse_overrides(overrides(ckpt=ckpt, **kwargs))
        latest = ck.latest_step(ckpt)
        ckrec.check(
            ckpt, train_mod.identity(ov), latest=None, finished=False, allow_change=False, where="experiments.e1"
        )
        assert ck.latest_step(ckpt) == latest

    run.out = tmp_path / "out"
    run.own = own
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
    assert "verl exited with status 3" in error_line(proc) and "no checkpoint yet (0 of 4 steps saved)" in error_line(
        proc
    )
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
    job.own(ckpt)
    proc = job(exits(0), ckpt=ckpt)
    assert proc.returncode == 1
    assert "resuming from step 2" in proc.stderr
    assert "verl exited 0 but ran 0 steps of the planned 4" in error_line(proc)
    assert not (job.out / "training_complete.json").exists()


@pytest.mark.slow
def test_complete_checkpoint_writes_marker_and_metrics_without_relaunching(
    job, genuine_checkpoint, tmp_path, monkeypatch
):
    ckpt = Path(shutil.copytree(genuine_checkpoint(4), tmp_path / "ckpt"))
    job.own(ckpt)
    # verl's own file logger: a first attempt logged steps 1-3 then died; the resume redid step 3 and did 4.
    from verl.utils.tracking import FileLogger

    def step_data(step: int, score: float) -> dict:
        return {
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/score/min": 0.0,
            "response_length/mean": 20.0 + step,
            "response_length/max": 32.0,
            "response_length/clip_ratio": 0.1,
            "actor/pg_clipfrac": 0.01,
            "actor/kl_loss": 0.002 * step,
            "actor/entropy": 1.5,
            "actor/pg_loss": -0.1,
            "actor/lr": 1e-6,
            "actor/grad_norm": 0.5,
            "timing_s/step": 12.0,
            "training/global_step": step,
        }

    (ckpt / vm.METRICS_SUBDIR).mkdir()
    for name, steps in (
        ("attempt-20260101T000000000000Z-1.jsonl", [(1, 0.1), (2, 0.2), (3, 0.25)]),
        ("attempt-20260101T010000000000Z-2.jsonl", [(3, 0.3), (4, 0.4)]),
    ):
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
    assert rows[0] == {
        "step": 1,
        "reward": 0.1,
        "reward_max": 1.0,
        "reward_min": 0.0,
        "response_length": 21.0,
        "response_length_max": 32.0,
        "truncated_fraction": 0.1,
        "clip_ratio": 0.01,
        "kl": 0.002,
        "entropy": 1.5,
        "loss": -0.1,
        "learning_rate": 1e-6,
        "grad_norm": 0.5,
        "time_s": 12.0,
    }


@pytest.mark.slow
def test_checkpoint_beyond_the_plan_is_refused(job, genuine_checkpoint, tmp_path):
    ckpt = Path(shutil.copytree(genuine_checkpoint(4), tmp_path / "ckpt"))
    proc = job(exits(0), ckpt=ckpt, planned=3)
    assert "already holds step 4, beyond grpo.total_steps = 3" in error_line(proc)


def test_stop_signal_stops_verl_and_names_the_resume(job, tmp_path):
    pidfile = tmp_path / "verl.pid"
    trainer = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)",
    ]
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


@pytest.mark.parametrize(
    "case, message",
    [
        ("empty model", "the SFT model path is empty: `python -m grpoflow.discovery path <sft.json>` failed"),
        ("context", "grpo.max_prompt_length + max_response_length = 16 + 500 exceeds the model's context (128 tokens"),
        ("rows", "has 16 rows, fewer than one step's grpo.prompts_per_step = 64"),
        ("missing model", "does not exist on this node"),
    ],
)
def test_preflight_fails_before_verl_starts(job, tmp_path, case, message):
    marker = tmp_path / "verl-started"
    trainer = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    kwargs = {
        "empty model": {"model": ""},
        "context": {"extra": ("data.max_response_length=500",)},
        "rows": {"batch": 64},
        "missing model": {"model": "/no/such/model"},
    }[case]
    proc = job(trainer, **kwargs)
    assert proc.returncode == 1 and message in error_line(proc)
    assert not marker.exists(), "verl must not start"


def test_metrics_collect_skips_a_torn_last_line(tmp_path):
    f = tmp_path / "attempt-1.jsonl"
    f.write_text(
        json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "reward/cosine/mean": 0.25}})
        + "\n"
        + '{"step": 2, "da'
    )
    assert vm.collect([f], 4) == [{"step": 1, "reward": 0.5, "reward/cosine": 0.25}]


def test_validation_metrics_of_a_step_land_in_its_row():
    """verl's names for a validation at a training step (ray_trainer._validate: val-core/<source>/acc/mean@n)."""
    data = {
        "critic/score/mean": 0.5,
        "val-core/grpoflow/gsm8k/acc/mean@1": 0.62,
        "val-aux/grpoflow/gsm8k/reward/mean@1": 0.7,
        "val-aux/grpoflow/gsm8k/acc/std@1": 0.1,
    }
    assert vm.to_project(10, data) == {"step": 10, "reward": 0.5, "val_accuracy": 0.62, "val_reward": 0.7}


# ---- checkpoints belong to their settings; rotation across attempts ---------------------------------------------
# Layouts as verl writes them (global_step_N/actor/fsdp_config.json, global_step_N/data.pt, the latest file): what
# the wrapper reads. Genuine shards are not needed to decide whose checkpoints they are.


def fake_checkpoints(ckpt: Path, steps: list[int], latest: int | None = None) -> Path:
    for step in steps:
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
        (ckpt / f"global_step_{step}" / "actor" / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 8}')
        (ckpt / f"global_step_{step}" / "actor" / "model_world_size_8_rank_0.pt").write_bytes(b"x" * 64)
        (ckpt / f"global_step_{step}" / "data.pt").write_bytes(b"d")
    (ckpt / ck.LATEST).write_text(str(latest if latest is not None else max(steps)))
    return ckpt


LR = "actor_rollout_ref.actor.optim.lr"


def test_finished_run_with_other_settings_is_refused_never_relabelled(job, tmp_path):
    ckpt = fake_checkpoints(tmp_path / "ckpt", [2, 4])
    job.own(ckpt, extra=(f"{LR}=1e-06",))
    for flags in ((), ("--resume-across-changes",)):
        proc = job(exits(7), ckpt=ckpt, extra=(f"{LR}=2e-06",), flags=flags)
        assert proc.returncode == 1
        line = error_line(proc)
        assert (
            f'config error: ckpt holds checkpoints (up to step 4) trained with other settings: {LR} "1e-06" -> "2e-06"'
            in line
        )
        assert (
            "that run is finished, so continuing would train nothing and only relabel its weights: set experiments.e1.checkpoint_dir to a fresh dir"
            in line
        )
        assert not (job.out / "training_complete.json").exists()
    # The same settings finish as before (verl not relaunched: it would exit 7).
    proc = job(exits(7), ckpt=ckpt, extra=(f"{LR}=1e-06",))
    assert proc.returncode == 0 and "already holds the final step 4: not relaunching verl" in proc.stderr
    assert json.loads((job.out / "training_complete.json").read_text())["settings_history"] == []


def test_half_finished_run_with_other_settings_is_refused_unless_opted_in(job, tmp_path):
    ckpt = fake_checkpoints(tmp_path / "ckpt", [2])
    job.own(ckpt, extra=(f"{LR}=1e-06",))
    started = tmp_path / "verl-started"
    trainer = [sys.executable, "-c", f"open({str(started)!r}, 'w')"]
    proc = job(trainer, ckpt=ckpt, extra=(f"{LR}=2e-06",))
    assert proc.returncode == 1 and not started.exists(), "verl must not start"
    assert error_line(proc).endswith(
        f'trained with other settings: {LR} "1e-06" -> "2e-06": set experiments.e1.checkpoint_dir to a fresh dir to train '
        "from the start, or set experiments.e1.resume_across_changes: true to continue from step 2 under the new settings"
    )
    # Opted in: verl resumes, and the record keeps which steps were trained from what.
    proc = job(trainer, ckpt=ckpt, extra=(f"{LR}=2e-06",), flags=("--resume-across-changes",))
    assert started.exists() and "continuing from step 2 under the new settings" in proc.stderr
    rec = ckrec.read_record(ckpt)
    assert rec["identity"]["settings"][LR] == "2e-06"
    assert [(h["up_to_step"], h["identity"]["settings"][LR]) for h in rec["history"]] == [(2, "1e-06")]
    # From then on the new settings are the checkpoints' own: no opt-in needed, the old ones are refused.
    started.unlink()
    assert (
        job(trainer, ckpt=ckpt, extra=(f"{LR}=2e-06",)).returncode == 1 and started.exists()
    )  # ran (exit 0, no step: error)
    assert "trained with other settings" in error_line(job(trainer, ckpt=ckpt, extra=(f"{LR}=1e-06",)))


def test_new_data_or_start_model_under_the_same_path_is_refused(job, tmp_path, tiny_model):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ckpt = fake_checkpoints(tmp_path / "ckpt", [2])
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    job.own(ckpt, model=str(model))
    pq.write_table(
        pa.table({"prompt": [[{"role": "user", "content": f"{i}+2?"}] for i in range(16)]}), tmp_path / "train.parquet"
    )
    assert "trained with other settings: the training data's content:" in error_line(
        job(exits(0), ckpt=ckpt, model=str(model))
    )
    job.own(ckpt, model=str(model))  # the new data is now theirs
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "rope_theta": 1.0}))
    assert "trained with other settings: the start model (config.json differ):" in error_line(
        job(exits(0), ckpt=ckpt, model=str(model))
    )
    # Moved elsewhere with the same content, it is the same start model.
    moved = Path(shutil.copytree(model, tmp_path / "moved"))
    job.own(ckpt, model=str(model))
    assert "resuming from step 2" in job(exits(0), ckpt=ckpt, model=str(moved)).stderr


def test_memory_and_schedule_knobs_resume_and_checkpoints_without_a_record_are_refused(job, tmp_path):
    ckpt = fake_checkpoints(tmp_path / "ckpt", [2])
    proc = job(exits(0), ckpt=ckpt)
    assert error_line(proc).endswith(
        "config error: ckpt holds checkpoints (up to step 2) with no record of what they were trained from (saved before grpoflow kept "
        "grpoflow_run.json, or by another tool): set experiments.e1.checkpoint_dir to a fresh dir to train from the start, "
        "or set experiments.e1.resume_across_changes: true to continue from them under the current settings"
    )
    job.own(ckpt)
    knobs = (
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "trainer.save_freq=1",
        "trainer.logger=[console,file]",
    )
    assert (
        "resuming from step 2" in job(exits(0), ckpt=ckpt, extra=knobs, planned=6).stderr
    )  # more steps, constant LR: same run
    # With a cosine schedule the total is stretched over, so it counts.
    job.own(ckpt, extra=("actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",))
    line = error_line(
        job(exits(0), ckpt=ckpt, planned=6, extra=("actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",))
    )
    assert 'trainer.total_training_steps "4" -> "6"' in line


def test_rotation_keeps_max_checkpoints_across_attempts(job, tmp_path):
    """verl rotates only its own saves: attempt 1 left steps 2-6; this attempt (a stand-in that 'saves' step 8) ends
    with the newest two, the leftovers of verl's own rotation (data.pt only) and a cut-off save gone."""
    ckpt = fake_checkpoints(tmp_path / "ckpt", [2, 4, 6])
    (ckpt / "global_step_1").mkdir()
    (ckpt / "global_step_1" / "data.pt").write_bytes(b"d")  # verl removed actor/ but not the step dir
    extra = ("trainer.save_freq=2", "trainer.max_actor_ckpt_to_keep=2")
    job.own(ckpt, planned=8, extra=extra)
    save8 = (
        "import os, pathlib; r = pathlib.Path(os.environ['CKPT']); a = r / 'global_step_8' / 'actor'; a.mkdir(parents=True); "
        "(a / 'fsdp_config.json').write_text('{}'); (r / 'global_step_8' / 'data.pt').write_text('d'); "
        "(r / 'global_step_10' / 'actor').mkdir(parents=True); (r / 'latest_checkpointed_iteration.txt').write_text('8')"
    )
    script = tmp_path / "save8.py"  # a file: the wrapper reads every key=value word of the command as an override
    script.write_text(save8.replace("os.environ['CKPT']", repr(str(ckpt))))
    proc = job([sys.executable, str(script)], ckpt=ckpt, planned=8, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith("global_step_")) == [
        "global_step_6",
        "global_step_8",
    ]
    # Before verl starts (what the last attempt left), and after it exits (its new save made step 4 one too many).
    assert (
        "removed checkpoints of steps 1, 2 from" in proc.stderr
        and "removed checkpoints of steps 4, 10 from" in proc.stderr
    )
    assert not list(ckpt.glob(".deleting-*"))


def test_rotation_never_removes_the_newest_checkpoint_nor_a_protected_step(tmp_path):
    ckpt = fake_checkpoints(tmp_path / "ckpt", [10, 20, 30, 40], latest=40)
    (ckpt / "global_step_40" / "data.pt").unlink()  # latest names it, but it looks incomplete: verl must decide
    assert ck.rotate(ckpt, 1, protect={20}) == [10]
    assert sorted(ck.step_dirs(ckpt)) == [20, 30, 40]
    (ckpt / ".deleting-global_step_5").mkdir()  # a removal cut off by a kill is finished next time
    assert ck.rotate(ckpt, None) == [] and not (ckpt / ".deleting-global_step_5").exists()


def test_settings_do_not_depend_on_where_the_project_lives(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ov = {
        "reward.custom_reward_function.path": f"{tmp_path}/src/reward.py",
        "actor_rollout_ref.actor.optim.lr": "1e-06",
        "trainer.default_local_dir": f"{tmp_path}/ckpt",
        "trainer.total_training_steps": "4",
    }
    assert ck.training_settings(ov) == {
        "actor_rollout_ref.actor.optim.lr": "1e-06",
        "reward.custom_reward_function.path": "src/reward.py",
    }


def test_offload_policy_is_not_a_training_setting():
    """Turning verl.offload_policy on after an out-of-memory failure resumes (the checkpoint holds the same tensors)."""
    ov = {"actor_rollout_ref.actor.optim.lr": "1e-06", "actor_rollout_ref.actor.fsdp_config.offload_policy": "true"}
    assert ck.training_settings(ov) == {"actor_rollout_ref.actor.optim.lr": "1e-06"}
    assert ck.training_settings({**ov, "+actor_rollout_ref.ref.fsdp_config.offload_policy": "true"}) == {
        "actor_rollout_ref.actor.optim.lr": "1e-06"
    }
