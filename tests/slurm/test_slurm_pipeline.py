"""The shortened embedded default through `--profile profiles/slurm` on a real local SLURM (tests/slurm/start.sh).

What is checked:
- every job that is not a local rule went through sbatch, and SLURM (`scontrol show job`; the cluster keeps
  finished jobs for MinJobAge = 3600 s) holds exactly what the config and the profile ask for: partition,
  nodes, GPUs, CPUs per task, memory, time limit; local rules were not submitted;
- the run finishes with squeue-based status polling (this cluster has no accounting daemon: with sacct the
  plugin would poll forever, and `timeout` would end the test);
- a token in the environment (HF_TOKEN, inherited by every job through sbatch --export=ALL) appears in no log,
  no SLURM log, no Snakemake record and no output;
- its outputs equal the local profile's: every file under resources/ and results/ is byte-identical (Parquet,
  weights, optimizer state, samples, report tables and plots) except for wall-clock values, the absolute
  working directory, and the file order of TRL's generated model-card tags. That holds because every job uses
  the same number of torch threads (its `threads` = the config's cpus_per_task = 2) on both executors, and CPU
  kernels with a fixed thread count are deterministic.

Only CI's poll interval differs from the profile (SLURM_CI_ARGS); tests/slurm/cluster_shape.yaml gives one
experiment and the evaluations GPU requests, so that the --gpus path is exercised too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from grpoflow_testing import REPO, SHORT_CONFIG, load_yaml, slurm_job, submitted_jobs

from grpoflow.config import load_config_files, resolve_config

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm_pipeline")]

HERE = Path(__file__).resolve().parent
CLUSTER_SHAPE = HERE / "cluster_shape.yaml"
CONFIG_FILES = [*SHORT_CONFIG[1:], str(CLUSTER_SHAPE)]
PROFILE = load_yaml(REPO / "profiles" / "slurm" / "config.yaml")
# Rules marked `localrule: True` (login node: downloads, discovery, report, upload).
LOCAL_RULES = {"download_data", "convert_to_parquet", "discover_sft_checkpoint", "report", "upload_to_hub", "all"}


@pytest.fixture(scope="module")
def slurm_run(slurm_pipeline_run, local_slurm):
    """The run of the session fixture (tests/conftest.py; the fault tests may have started it already)."""
    run = slurm_pipeline_run.result()
    assert run["returncode"] == 0, run["out"][-8000:]
    print(
        f"shortened pipeline through SLURM: {run['seconds']:.0f} s wall since its start, cluster start {local_slurm['start_s']} s"
    )
    return {
        "wd": slurm_pipeline_run.workdir,
        "out": run["out"],
        "jobs": submitted_jobs(run["out"]),
        "token": slurm_pipeline_run.token,
    }


def planned_jobs(out: str) -> list[tuple[str, str]]:
    """(rule, wildcards as the plugin names them) of every job Snakemake ran, from its job headers."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if head and "jobid:" in block.split("\n\n")[0]:
            wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
            values = "_".join(v.split("=", 1)[1] for v in wc.group(1).split(", ")) if wc else ""
            jobs.append((head.group(1), values))
    return sorted(set(jobs))


def requested(rule: str, wildcards: str) -> dict:
    """What the profile and the config ask SLURM for, for one job (independent of the rules' code)."""
    cfg = resolve_config(load_config_files(CONFIG_FILES))
    res = {"gpu": 0, "nodes": 1, **PROFILE["default-resources"], **PROFILE["set-resources"].get(rule, {})}
    if rule == "train_grpo":
        r = cfg.experiment(wildcards)["resources"]
        res.update(
            nodes=r["nodes"],
            gpu=r["gpus_per_node"],
            cpus_per_task=r["cpus_per_task"],
            mem_mb=r["mem_mb"],
            runtime=r["runtime"],
        )
    elif rule == "evaluate":
        r = cfg.evaluation["resources"]
        res.update(gpu=r["gpus"], cpus_per_task=r["cpus_per_task"], mem_mb=r["mem_mb"], runtime=r["runtime"])
    elif rule == "merge_checkpoint":
        res["cpus_per_task"] = 16  # the rule's own (rules/train.smk MERGE_CPUS), = its threads
    return res


def megabytes(mem: str) -> int:
    """SLURM's memory (4000M, 250G) in MB."""
    return int(float(mem[:-1]) * {"M": 1, "G": 1024, "T": 1024 * 1024}[mem[-1]])


def minutes(limit: str) -> int:
    """SLURM's TimeLimit ([D-]HH:MM:SS) in minutes."""
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


def test_every_cluster_job_went_through_sbatch_with_the_requested_resources(slurm_run):
    ran = planned_jobs(slurm_run["out"])
    remote = {f"rule_{r}" + (f"_wildcards_{w}" if w else ""): (r, w) for r, w in ran if r not in LOCAL_RULES}
    assert {r for r, _ in remote.values()} == {
        "build_tiny_model",
        "train_sft_demo",
        "train_grpo",
        "merge_checkpoint",
        "evaluate",
    }
    seen = {}
    for jobid in slurm_run["jobs"]:
        job = slurm_job(jobid)
        seen[job["Comment"]] = job
    # Exactly the non-local jobs were submitted, once each, and all completed.
    assert sorted(seen) == sorted(remote), f"submitted {sorted(seen)}, expected {sorted(remote)}"
    assert len(slurm_run["jobs"]) == len(remote)
    gpu_jobs = 0
    for comment, (rule, wildcards) in remote.items():
        job, want = seen[comment], requested(rule, wildcards)
        where = f"{comment} (SLURM job {job['JobId']})"
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", where
        assert job["Partition"] == want["slurm_partition"], where
        assert int(job["NumNodes"]) == want["nodes"], where
        assert int(job["CPUs/Task"]) == want["cpus_per_task"], where
        assert megabytes(job["MinMemoryNode"]) == want["mem_mb"], where
        assert minutes(job["TimeLimit"]) == want["runtime"], where
        # --gpus=N is a per-job GRES request; a CPU job asks for none.
        if want["gpu"]:
            gpu_jobs += 1
            assert job.get("TresPerJob") == f"gres:gpu:{want['gpu']}", where
        else:
            assert "gpu" not in job.get("TresPerJob", "") + job.get("TresPerNode", ""), where
    assert gpu_jobs == 1 + 6  # tiny-arith-seed2's training and the six evaluations (cluster_shape.yaml)
    # The batch jobs ran where the run's working directory is, and the plugin kept their logs.
    assert all(Path(j["WorkDir"]).resolve() == slurm_run["wd"].resolve() for j in seen.values())
    assert len(list((slurm_run["wd"] / "logs" / "slurm").rglob("*.log"))) == len(remote)
    assert "Falling back to 'sacct'" not in slurm_run["out"]


# ---- outputs equal to the local profile's ----------------------------------------------------------------------

# Wall-clock values (and the hash of a record that holds an absolute path) differ from run to run.
VOLATILE = {
    "time_s",
    "timing",
    "seconds",
    "step_time",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "setup_hash",
}


def _normalised(obj, key: str = ""):
    if isinstance(obj, dict):
        return {
            k: _normalised(v, k)
            for k, v in obj.items()
            if k not in VOLATILE and not (key == "provenance" and k == "time")
        }
    if isinstance(obj, list):
        return [_normalised(v) for v in obj]
    return obj


def comparable(path: Path, root: Path):
    """A file's content with the run-specific parts removed."""
    raw = path.read_bytes()
    if path.suffix not in (".json", ".jsonl", ".md", ".csv", ".txt"):
        return raw
    text = raw.decode().replace(str(root), "<workdir>")
    if path.suffix == ".json":
        return _normalised(json.loads(text))
    if path.suffix == ".jsonl":
        return [_normalised(json.loads(line)) for line in text.splitlines() if line.strip()]
    if path.name == "README.md" and path.parent.name == "checkpoints":
        return sorted(text.splitlines())  # TRL's model card lists its tags in set order
    return text


def output_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for d in ("resources", "results") for p in (root / d).rglob("*") if p.is_file()
    )


def test_outputs_equal_those_of_the_local_profile(slurm_run, short_local_run):
    slurm_wd, local_wd = slurm_run["wd"], short_local_run
    files = output_files(local_wd)
    assert output_files(slurm_wd) == files
    assert any(f.endswith(".parquet") for f in files) and any(f.endswith("model.safetensors") for f in files)
    different = [f for f in files if comparable(slurm_wd / f, slurm_wd) != comparable(local_wd / f, local_wd)]
    assert not different, f"outputs of the SLURM run differ from the local run's: {different}"
    # The comparison is not vacuous: the normalised records still hold the numbers.
    metrics = comparable(slurm_wd / "results/tiny-arith-seed1/eval/arith.json", slurm_wd)
    assert metrics["generation"]["torch_threads"] == 2 and "accuracy" in metrics["metrics"]
    assert (slurm_wd / "results/tiny-arith-seed2/model/model.safetensors").read_bytes() == (
        local_wd / "results/tiny-arith-seed2/model/model.safetensors"
    ).read_bytes()


def test_token_from_the_environment_is_never_logged_or_written(slurm_run):
    wd, token = slurm_run["wd"], slurm_run["token"].encode()
    assert (wd / "logs" / "slurm").is_dir() and (wd / ".snakemake" / "log").is_dir()
    leaked = [
        str(p.relative_to(wd)) for p in wd.rglob("*") if p.is_file() and not p.is_symlink() and token in p.read_bytes()
    ]
    assert not leaked and token.decode() not in slurm_run["out"], f"HF_TOKEN written to {leaked}"


def test_a_dry_run_after_the_finished_run_has_nothing_to_do(slurm_run):
    """`snakemake -n` with the same profile and configs after the SLURM run: no job reruns (no param, e.g. a job's
    threads, may differ between the dry-run and the jobs)."""
    from grpoflow_testing import snakemake_slurm

    proc = snakemake_slurm(["-n", "--configfile", *CONFIG_FILES], slurm_run["wd"], timeout=300)
    out = proc.stdout + proc.stderr
    assert "Nothing to be done" in out, out[-4000:]
