"""Issue 30 (disk), item 1: a resumed verl attempt holds at most grpo.max_checkpoints_to_keep + 1 checkpoints, the
count grpoflow.preflight's disk check sizes for.

verl 0.9.1 rotates only what its own process saved (``BaseCheckpointManager.previous_saved_paths`` starts empty),
so a resumed attempt used to keep the ``keep`` checkpoints it found and add up to ``keep`` of its own before its
own rotation removed any: 2 x keep on disk. The training wrapper now rotates after each save verl completes.

Two attempts of the real wrapper (``python -m grpoflow.backends.verl.train``) over one checkpoint dir, the second
resuming where the first was killed; verl itself is a stand-in (tests/backends/verl/verl_saves_standin.py) that
saves genuine verl FSDP2 checkpoint files with verl's own rotation code, one process per attempt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from verlkit import REPO

pytestmark = [pytest.mark.verl, pytest.mark.slow]

STANDIN = Path(__file__).with_name("verl_saves_standin.py")


def test_a_resumed_attempt_holds_at_most_keep_plus_one_checkpoints(tmp_path, tiny_model, genuine_checkpoint):
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": f"{i}+1?"}] for i in range(16)]}), train)
    ckpt, record = tmp_path / "checkpoints", tmp_path / "on_disk.json"
    keep, planned = 2, 8
    overrides = [
        f"trainer.total_training_steps={planned}",
        f"trainer.default_local_dir={ckpt}",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.experiment_name=e1",
        "trainer.save_freq=2",
        f"trainer.max_actor_ckpt_to_keep={keep}",
        f"data.train_files={train}",
        "data.train_batch_size=8",
        "data.max_prompt_length=16",
        "data.max_response_length=32",
        f"actor_rollout_ref.model.path={tiny_model}",
    ]
    genuine = genuine_checkpoint(2) / "global_step_2"

    def attempt(stop_after: int, code: int) -> subprocess.CompletedProcess:
        standin = [sys.executable, str(STANDIN), str(genuine), str(record), str(stop_after), str(code)]
        cmd = [
            sys.executable,
            "-m",
            "grpoflow.backends.verl.train",
            "--marker",
            str(tmp_path / "out" / "training_complete.json"),
            "--metrics",
            str(tmp_path / "out" / "train_metrics.jsonl"),
            "--",
            *standin,
            *overrides,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    # Attempt 1 saves steps 2 and 4 and is killed (its time limit); attempt 2 resumes from 4 and saves 6 and 8.
    first = attempt(stop_after=4, code=1)
    assert first.returncode == 1 and "last checkpoint step 4 of 8" in first.stderr, first.stderr[-3000:]
    second = attempt(stop_after=planned, code=0)
    assert second.returncode == 0, second.stderr[-3000:]

    saves = json.loads(record.read_text())
    assert [s["step"] for s in saves] == [2, 4, 6, 8]
    # What was on disk right after each save was written (before verl's own rotation ran).
    assert [s["on_disk"] for s in saves] == [[2], [2, 4], [2, 4, 6], [4, 6, 8]], saves
    assert max(len(s["on_disk"]) for s in saves) == keep + 1
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == ["global_step_6", "global_step_8"]
    assert (
        "removed checkpoints of steps 2 from" in second.stderr
        and "removed checkpoints of steps 4 from" in second.stderr
    )
