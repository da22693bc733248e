"""The workflow as users drive it: dry-runs with both profiles and every shipped config, lint, the DAG
pictures, one-line config errors through the snakemake CLI, and incremental reruns."""

from __future__ import annotations

import re
import subprocess

import pytest
from grpoflow_testing import REPO, SHIPPED_CONFIGS, config_files, ensure_debian_tool, snakemake

RULES = [
    "download_data",
    "convert_to_parquet",
    "discover_sft_checkpoint",
    "train_grpo",
    "merge_checkpoint",
    "evaluate",
    "upload_to_hub",
    "report",
    "all",
]
PROFILES = {"local": str(REPO / "profiles" / "local"), "slurm": str(REPO / "profiles" / "slurm")}


def job_counts(stdout: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table of a dry-run."""
    table = stdout.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("config", SHIPPED_CONFIGS)
def test_dry_run(workdir, profile, config):
    proc = snakemake(["-n", "--profile", PROFILES[profile], "--configfile", *config_files(config)], workdir)
    counts = job_counts(proc.stdout)
    for rule in (
        "train_grpo",
        "merge_checkpoint",
        "evaluate",
        "report",
        "all",
        "discover_sft_checkpoint",
    ):  # every shipped config trains
        assert counts.get(rule, 0) >= 1, f"{rule} missing from the DAG of {config}: {counts}"


def test_default_dag_has_every_rule(workdir):
    counts = job_counts(snakemake(["-n", "--profile", PROFILES["local"]], workdir).stdout)
    for rule in RULES:
        assert counts.get(rule, 0) >= 1, f"{rule} not in the default DAG: {counts}"
    assert counts["train_grpo"] == 2 and counts["evaluate"] == 6


def test_lint_is_clean(workdir):
    proc = snakemake(["--lint"], workdir, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["--dag", "--rulegraph"])
def test_dag_renders_with_graphviz(workdir, kind):
    dot = ensure_debian_tool("dot", "graphviz")
    graph = snakemake([kind], workdir).stdout
    assert graph.lstrip().startswith("digraph")
    svg = subprocess.run([dot, "-Tsvg"], input=graph, capture_output=True, text=True, check=True).stdout
    assert "<svg" in svg and "train_grpo" in svg


def test_config_error_is_one_line_through_the_cli(workdir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / "config" / "config.yaml").read_text().replace("learning_rate: 5.0e-5", "lerning_rate: 5.0e-5")
    )
    proc = snakemake(["-n", "--configfile", str(bad)], workdir, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "grpoflow: config error: unknown key 'lerning_rate' under defaults.grpo (allowed: "
        + proc.stderr.split("(allowed: ", 1)[1].strip()
    ]
    assert "Traceback" not in proc.stderr


def test_data_steps_then_nothing_to_be_done(workdir):
    targets = ["results/data/arith/train.parquet", "results/data/gsm8k_sample/test.parquet"]
    snakemake(["-c1", *targets], workdir)
    again = snakemake(["-n", *targets], workdir)
    assert "Nothing to be done" in again.stdout + again.stderr
