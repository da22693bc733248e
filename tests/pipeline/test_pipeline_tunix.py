"""The Tunix demo through the same DAG on the local profile (download → Parquet → tiny model → SFT → discovery →
train (Tunix, in .venv-tunix) → merge → evaluate → report), and what the demo shows: GRPO with Tunix beats its
SFT start on the held-out arithmetic, for both seeds."""

from __future__ import annotations

import csv
import json

import pytest
from grpoflow_testing import LOCAL_PROFILE, REPO, make_workdir, snakemake, unavailable

pytestmark = pytest.mark.slow

CONFIGS = [
    "--configfile",
    *(str(REPO / p) for p in ("config/config.yaml", "config/demo-tunix.yaml", "tests/pipeline/tunix_demo.yaml")),
]
TUNIX = ["tiny-arith-tunix-seed1", "tiny-arith-tunix-seed2"]
# Greedy accuracy on the 200 held-out problems must rise by at least this much over the SFT start.
MIN_GAIN = 0.05


@pytest.fixture(scope="module")
def tunix_run(tmp_path_factory):
    if not (REPO / ".venv-tunix" / "bin" / "python").exists():
        unavailable("no .venv-tunix: run `make setup-tunix` (make test builds it)")
    wd = make_workdir(tmp_path_factory.mktemp("tunix-demo"))
    snakemake([*LOCAL_PROFILE, *CONFIGS], wd, timeout=2400)
    return wd


def test_every_tunix_output_exists_and_the_jobs_ran_in_the_tunix_environment(tunix_run):
    wd = tunix_run
    for exp in TUNIX:
        marker = json.loads((wd / f"results/{exp}/training_complete.json").read_text())
        assert marker["backend"] == "tunix" and marker["final_step"] == marker["planned_steps"] == 40
        assert marker["provenance"]["packages"]
        merged = json.loads((wd / f"results/{exp}/model/grpoflow_merge.json").read_text())
        assert merged["backend"] == "tunix" and merged["step"] == 40
        for rule in ("train_grpo", "merge_checkpoint"):
            log = (wd / f"logs/{rule}/{exp}.log").read_text()
            assert f"job interpreter: {REPO / '.venv-tunix' / 'bin' / 'python'}" in log, log[:500]
        assert (wd / f"results/{exp}/eval/arith.json").is_file()
    with open(wd / "results/report/summary.csv") as fh:
        rows = {r["model"]: r for r in csv.DictReader(fh)}
    assert set(TUNIX) <= set(rows)


def test_grpo_with_tunix_beats_its_sft_start_for_both_seeds(tunix_run):
    wd = tunix_run

    def accuracy(model):
        result = json.loads((wd / f"results/{model}/eval/arith.json").read_text())
        assert result["n_problems"] == 200
        return result["metrics"]["accuracy"]

    sft = accuracy("tiny-arith-sft")
    gains = {exp: accuracy(exp) - sft for exp in TUNIX}
    assert all(g >= MIN_GAIN for g in gains.values()), (sft, gains)


def test_second_run_does_nothing(tunix_run):
    again = snakemake(["-n", *CONFIGS], tunix_run)
    assert "Nothing to be done" in again.stdout + again.stderr
