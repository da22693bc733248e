"""An ``evaluation.models`` entry given as a Hub id (org/name) is fetched by the download_model localrule from the
stand-in Hub server (tests/hub/fakehub.py stands in for huggingface.co), with the start models' manifest, commit pin
and hf_home, and then evaluated through the DAG with the Hub gone: the evaluate job runs with HF_HUB_OFFLINE=1 and
loads the pinned local snapshot (grpoflow.models)."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest
import yaml
from fakehub import FakeHub
from grpoflow_testing import LOCAL_PROFILE, REPO, make_workdir, snakemake

pytestmark = pytest.mark.slow

REPO_ID = "tiny-org/tiny-eval"


def overlay(tmp_path: Path) -> Path:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    arith = base["datasets"]["arith"]
    arith["synthetic"].update(train_size=8, test_size=4)
    arith["validation"]["size"] = 2
    cfg = {
        "datasets": {"arith": arith},
        "experiments": {},
        "evaluation": {
            "backend": "transformers",
            "max_new_tokens": 4,
            "benchmarks": {"arith": {"dataset": "arith", "split": "test", "limit": 2}},
            "models": {"hubeval": {"path": REPO_ID}},
            "resources": {"gpus": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10},
        },
        "report": base["report"],
    }
    path = tmp_path / "hub-eval.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_hub_id_evaluation_model_is_fetched_once_and_evaluated_offline(tiny_base, tmp_path):
    files = {p.name: p.read_bytes() for p in Path(tiny_base).iterdir() if p.is_file()}
    wd = make_workdir(tmp_path)
    config = ["--configfile", str(overlay(tmp_path))]
    manifest_rel = "resources/models/tiny-org--tiny-eval/manifest.json"
    target = "results/hubeval/eval/arith.json"
    # The evaluation's DAG asks for the download: with the Hub up, it fetches into hf_home and writes the manifest.
    dry = snakemake([*LOCAL_PROFILE, "-n", target, *config], wd).stdout
    assert "rule download_model" in dry and manifest_rel in dry, dry[-3000:]
    with FakeHub("hf_" + secrets.token_hex(17)) as hub:
        commit = hub.add_model(REPO_ID, files)
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        snakemake([*LOCAL_PROFILE, "--cores", "1", manifest_rel, *config], wd, env=env, timeout=300)
    manifest = json.loads((wd / manifest_rel).read_text())
    snapshot = wd / "resources" / "hf" / "hub" / "models--tiny-org--tiny-eval" / "snapshots" / commit
    assert manifest["commit"] == commit and Path(manifest["snapshot"]) == snapshot.resolve()
    assert all(m["sha256"] == hashlib.sha256(files[n]).hexdigest() for n, m in manifest["files"].items())

    # The Hub is gone now (its port closed): the evaluation loads the pinned snapshot offline.
    proc = snakemake(
        [*LOCAL_PROFILE, "--cores", "1", "-p", target, *config], wd, env={"HF_ENDPOINT": hub.url}, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert "rule download_model" not in out  # fetched once: the manifest pins the commit
    assert "HF_HUB_OFFLINE=1" in out, out[-3000:]
    result = json.loads((wd / target).read_text())
    assert result["model_source"]["path"] == str(snapshot.resolve()) and result["n_problems"] == 2
