"""A Hub-id start model (sft.model: org/name) fetched once by the download_model localrule from the stand-in Hub
server (tests/hub/fakehub.py), then trained from through profiles/slurm on the local SLURM with the Hub gone: the
jobs run with HF_HUB_OFFLINE=1 and HF_HOME=<hf_home> and load the local snapshot (grpoflow.models)."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import REPO, make_workdir, snakemake_slurm, submitted_jobs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from fakehub import FakeHub  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO_ID = "tiny-org/tiny-qwen3"


def overlay(tmp_path: Path) -> Path:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    arith = base["datasets"]["arith"]
    arith["synthetic"].update(train_size=60, test_size=8)
    arith["validation"]["size"] = 8
    cfg = {
        "datasets": {"arith": arith},
        "experiments": {
            "hubstart": {
                "backend": "trl",
                "data": {"dataset": "arith", "train_split": "train", "val_split": None},
                "sft": {"model": REPO_ID},
                "grpo": {
                    "total_steps": 2,
                    "save_freq": 2,
                    "prompts_per_step": 4,
                    "num_generations": 2,
                    "max_prompt_length": 64,
                    "max_response_length": 8,
                },
                "rewards": {"funcs": ["accuracy"]},
                "trl": {"use_cpu": True},
                "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 30},
            }
        },
        "evaluation": {
            "backend": "transformers",
            "max_new_tokens": 8,
            "benchmarks": {"arith": {"dataset": "arith", "split": "test", "limit": 4}},
            "resources": {"gpus": 0, "cpus_per_task": 2, "mem_mb": 4000, "runtime": 30},
        },
        "report": base["report"],
    }
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.timeout(1200)
def test_download_model_fetches_once_and_training_runs_offline(local_slurm, tiny_base, tmp_path):
    files = {p.name: p.read_bytes() for p in Path(tiny_base).iterdir() if p.is_file()}
    wd = make_workdir(tmp_path)
    config = ["--configfile", str(overlay(tmp_path))]
    manifest_rel = "resources/models/tiny-org--tiny-qwen3/manifest.json"
    with FakeHub("hf_" + secrets.token_hex(17)) as hub:
        commit = hub.add_model(REPO_ID, files)
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        proc = snakemake_slurm([manifest_rel, *config], wd, env=env, timeout=300)
        fetched = [r["path"] for r in hub.requests]
    out = proc.stdout + proc.stderr
    assert submitted_jobs(out) == [], out[-3000:]  # a localrule: the login node fetched it
    assert any(p.endswith("/resolve/" + commit + "/config.json") or "config.json" in p for p in fetched), fetched
    manifest = json.loads((wd / manifest_rel).read_text())
    snapshot = wd / "resources" / "hf" / "hub" / "models--tiny-org--tiny-qwen3" / "snapshots" / commit
    assert manifest["commit"] == commit and manifest["revision"] == "main"
    assert Path(manifest["snapshot"]) == snapshot.resolve()
    assert set(manifest["files"]) == set(files)
    import hashlib

    assert all(m["sha256"] == hashlib.sha256(files[n]).hexdigest() for n, m in manifest["files"].items())

    # The Hub is gone now (its port closed): training and everything before it must not need it.
    proc = snakemake_slurm(
        ["results/hubstart/training_complete.json", *config], wd, env={"HF_ENDPOINT": hub.url}, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert len(submitted_jobs(out)) == 1, out[-3000:]
    assert 'export HF_HUB_OFFLINE=1 HF_HOME="$PWD"/resources/hf' in out
    sft = json.loads((wd / "results" / "hubstart" / "sft.json").read_text())
    assert sft["path"] == str(snapshot.resolve()) and sft["hub_id"] == REPO_ID and sft["hub_commit"] == commit
    marker = json.loads((wd / "results" / "hubstart" / "training_complete.json").read_text())
    assert marker["final_step"] == 2
    # download_model did not run again: its manifest is the pinned commit.
    assert "rule download_model" not in out
