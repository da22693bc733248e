"""grpoflow.preflight and grpoflow.slurm_nodes pieces that need no SLURM: sinfo's time-limit and GRES fields, the
checkpoint size, and the environment probe run by a real interpreter (this venv: verl yes, vLLM no)."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

from grpoflow.deployment import CLUSTER, JobEnv
from grpoflow.preflight import PlaneNeeds, check_environments, checkpoint_bytes
from grpoflow.slurm_nodes import gpu_types, parse_sinfo, parse_time_limit


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("infinite", None),
        ("UNLIMITED", None),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-2:30", 1590),
        ("2:00:00", 120),
        ("30:00", 30),  # minutes:seconds
        ("30:01", 31),
        ("90", 90),
    ],
)
def test_sinfo_time_limits(text, minutes):
    assert parse_time_limit(text) == minutes


def test_gres_types_and_an_old_five_field_line():
    assert gpu_types("gpu:h100:8(S:0-1),shard:8") == ("h100",) and gpu_types("gpu:8") == ()
    (n,) = parse_sinfo("a1|gpu*|224|2000000|gpu:H100:8(S:0-1)|2-00:00:00")
    assert (n.gpus, n.gpu_types, n.time_limit_min) == (8, ("h100",), 2880)
    (n,) = parse_sinfo("a1|gpu|224|2000000|gpu:8")
    assert (n.gpus, n.gpu_types, n.time_limit_min) == (8, (), None)


def test_a_32b_checkpoint_is_393_gb_with_fp32_masters():
    exp = {
        "backend": "verl",
        "architecture": "qwen3-32b",
        "verl": {"model_dtype": "fp32"},
        "grpo": {"lora": {"rank": 0}},
    }
    size, how = checkpoint_bytes(exp)
    assert round(size / 1e9) == 393 and "fp32 params + AdamW state" in how
    assert round(checkpoint_bytes({**exp, "verl": {"model_dtype": "bf16"}})[0] / 1e9) == 197


def test_the_probe_runs_the_planes_interpreter_and_names_what_it_lacks():
    needs = PlaneNeeds()
    needs.add([("verl", "verl==0.9.1", "the trainer"), ("vllm", "vllm (verl[vllm])", "rollout")], "train_grpo (e)")
    needs.add([("vllm", "vllm (verl[vllm])", "evaluation.backend: vllm")], "evaluate (m, b)")
    needs.add([("vllm", "vllm (verl[vllm])", "evaluation.backend: vllm")], "evaluate (m, c)")
    raw = {"cluster_env": {"python": sys.executable}}
    failures, _ = check_environments(raw, {CLUSTER: JobEnv("", sys.executable)}, {CLUSTER: needs}, set())
    assert len(failures) == 1 and "\n" not in failures[0]
    assert failures[0].startswith(
        f"cluster_env.python: {sys.executable} lacks vllm (verl[vllm]) (for evaluate (m, b) +1 more: evaluation.backend: vllm; train_grpo (e): rollout); "
    )
    # Under --sdm conda the env is built per job: not probed here.
    failures, notes = check_environments(raw, {CLUSTER: JobEnv("", "python")}, {CLUSTER: needs}, {"conda"})
    assert failures == [] and "not checked at start" in notes[0]


def test_gpu_check_driver_against_cuda_and_compute_mode(tmp_path):
    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    ok = [("0", "580.82.07", "Default"), ("1", "580.82.07", "Default")]
    gpucheck.check("j", cuda="13.0", gpus=ok, api=None)
    with pytest.raises(
        GrpoflowError,
        match=r"^j: the node's NVIDIA driver 570\.133\.20 is older than CUDA 13\.0 .* needs \(580\.65\.6\+\)",
    ):
        gpucheck.check("j", cuda="13.0", gpus=[("0", "570.133.20", "Default")], api=None)
    gpucheck.check("j", cuda="12.8", gpus=[("0", "550.54.15", "Default")], api=None)  # minor-version compatibility
    with pytest.raises(GrpoflowError, match=r"compute mode GPU 1: Exclusive_Process: verl runs two processes per GPU"):
        gpucheck.check("j", cuda=None, gpus=[("0", "580.82.07", "Default"), ("1", "580.82.07", "Exclusive_Process")])
    # A failure is recorded next to the output; a retry without a GPU fails at once naming it.
    out = tmp_path / "training_complete.json"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '0, 580.82.07, Exclusive_Process'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0", gpucheck.NODE_ENV: ""}  # no SLURM
    with mock_env(env), pytest.raises(GrpoflowError, match="compute mode"):
        gpucheck.checked("j", out)
    assert gpucheck.retry_plan(str(out), 2).fail_fast and not gpucheck.retry_plan(str(out), 1).fail_fast
    with (
        mock_env({gpucheck.RETRY_ENV: "1"}),
        pytest.raises(
            GrpoflowError, match=r"^not retried on a GPU node: an earlier attempt's GPU check failed \(j: compute mode"
        ),
    ):
        gpucheck.checked("j", out)
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '0, 580.82.07, Default'\n")
    with mock_env(env):
        gpucheck.checked("j", out)
    assert not gpucheck.record_path(out).exists()


@contextlib.contextmanager
def mock_env(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_vllm_tensor_parallel_size_must_equal_the_evaluation_gpus():
    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.errors import ConfigError

    raw = load_shipped("config/qwen3-8b-gsm8k.yaml")
    raw["evaluation"] = {**raw["evaluation"], "backend": "vllm", "vllm": {"tensor_parallel_size": 2}}
    raw["evaluation"]["resources"] = {**raw["evaluation"].get("resources", {}), "gpus": 1}
    with pytest.raises(
        ConfigError,
        match=r"^config error: evaluation.vllm.tensor_parallel_size = 2 but evaluation.resources.gpus = 1: vLLM runs one rank per GPU; make them equal$",
    ):
        resolve_config(raw)
    raw["evaluation"]["resources"]["gpus"] = 2
    resolve_config(raw)


def test_disk_need_adds_up_per_filesystem_less_what_the_dir_holds(tmp_path):
    from types import SimpleNamespace

    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.preflight import check_disk

    raw = load_shipped("config/qwen3-32b-gsm8k.yaml")
    exp = next(iter(raw["experiments"]))
    raw["experiments"] = {
        "a": {**raw["experiments"][exp], "checkpoint_dir": str(tmp_path / "a")},
        "b": {**raw["experiments"][exp], "checkpoint_dir": str(tmp_path / "b")},
    }
    cfg = resolve_config(raw)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "shard.pt").write_bytes(b"x" * 1000)  # counted against a's need
    one = 393_145_479_168  # (4 + 8) B x Qwen3-32B's params
    fs = lambda free: lambda _p: SimpleNamespace(f_bavail=free, f_frsize=1)  # noqa: E731
    failures, notes = check_disk(cfg, ["a", "b"], statvfs=fs(8 * one - 1000))
    assert failures == [] and "needed" in notes[0]
    failures, _ = check_disk(cfg, ["a", "b"], statvfs=fs(8 * one - 1001))
    assert len(failures) == 2 and all(
        "grpo.max_checkpoints_to_keep + 1 = 4 checkpoints of ~393 GB" in f for f in failures
    )
    assert "(with experiments.b's checkpoints ~1573 GB on the same filesystem: 3145 GB)" in failures[0]


def stand_in_nvidia_smi(bindir, line: str) -> None:
    """Stands in for the driver's nvidia-smi (no GPU here): answers the gpucheck query with ``line``."""
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{line}'\n")
    (bindir / "nvidia-smi").chmod(0o755)


@pytest.mark.slow
def test_a_failed_gpu_check_without_slurm_is_checked_again_once_fixed(tiny_base, tmp_path):
    """Issue 30 item 8: the local executor (no SLURM: nothing sets CUDA_VISIBLE_DEVICES) runs the verl train_grpo
    job twice. The first run's GPU check fails (Exclusive_Process) and leaves its record; the node is fixed; the
    next snakemake call checks again and passes (the record is removed), instead of failing as a "retry"."""
    import yaml
    from grpoflow_testing import make_workdir, snakemake, verl_vllm_overlay

    from grpoflow import gpucheck

    exp = "gpu-local"
    overlay = verl_vllm_overlay(
        tmp_path / "verl.yaml", exp, str(tiny_base), verl={"env": {"GRPOFLOW_SKIP_ENV_CHECK": 1}}
    )
    cfg = yaml.safe_load(overlay.read_text())
    cfg["evaluation"]["backend"] = "transformers"
    overlay.write_text(yaml.safe_dump(cfg))
    wd = make_workdir(tmp_path)
    fake = tmp_path / "fakebin"
    target = f"results/{exp}/training_complete.json"
    args = [target, "--cores", "2", "--configfile", str(overlay)]
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    log = wd / "logs" / "train_grpo" / f"{exp}.log"
    record = gpucheck.record_path(wd / target)

    stand_in_nvidia_smi(fake, "0, 580.82.07, Exclusive_Process")
    proc = snakemake(args, wd, env=env, timeout=300, check=False)
    assert proc.returncode != 0 and record.is_file(), (proc.stdout + proc.stderr)[-3000:]
    assert (
        log.read_text()
        .rstrip()
        .splitlines()[-1]
        .startswith("grpoflow: error: train_grpo (backend verl): compute mode GPU 0: Exclusive_Process")
    ), log.read_text()[-2000:]

    stand_in_nvidia_smi(fake, "0, 580.82.07, Default")  # the node fixed
    snakemake(args, wd, env=env, timeout=300, check=False)
    text = log.read_text()
    assert "not retried on a GPU node" not in text, text[-2000:]
    assert "GPU check for train_grpo (backend verl) passed: driver 580.82.07" in text, text[-2000:]
    assert not record.exists()


def gpu_request(gpu_mem_gb, **kw):
    from grpoflow.slurm_nodes import Request

    keys = {"gpu_mem_gb": "experiments.e.resources.gpu_mem_gb", "gpu_type": "gpu_model", "nodes": "n", "cpus": "c"}
    fields = {"job": "rule train_grpo (e)", "partition": "gpu", "nodes": 1, "cpus": 8, "mem_mb": 1000, "gpus": 8}
    return Request(**{**fields, "keys": keys, "gpu_mem_gb": gpu_mem_gb, **kw})


def test_an_h100_nvl_partition_holds_a_94_gb_config():
    """Issue 30 item 3: H100 NVL cards have 94 GB; a GRES typed plainly h100 may be NVL cards."""
    from grpoflow.slurm_nodes import check

    for gres in ("gpu:h100:8", "gpu:h100nvl:8", "gpu:nvidia_h100_nvl:8"):
        check([gpu_request(94)], parse_sinfo(f"n1|gpu*|128|900000|{gres}|2-00:00:00"), None)
    from grpoflow.slurm_nodes import gpu_type_gb

    assert (gpu_type_gb("NVIDIA H100 NVL"), gpu_type_gb("h100-sxm"), gpu_type_gb("h100")) == (94, 80, 94)


@pytest.mark.parametrize(
    "gres, gb",
    [
        ("gpu:nvidia_h100_80gb_hbm3:8", 80),  # SLURM's NVML autodetect names
        ("gpu:nvidia_a100-sxm4-40gb:8", 40),
        ("gpu:a100-sxm4-80gb:8", 80),
        ("gpu:nvidia_a100_3g.40gb:8", 40),  # a MIG slice: its own memory, not the "3g" compute share
    ],
)
def test_nvml_style_gpu_type_names_are_checked(gres, gb):
    """Issue 30 item 2: a type named the NVML way is read for its model and size, not skipped."""
    from grpoflow.errors import ConfigError
    from grpoflow.slurm_nodes import check

    nodes = parse_sinfo(f"n1|gpu*|224|2000000|{gres}(S:0-1)|2-00:00:00")
    check([gpu_request(gb)], nodes, None)
    with pytest.raises(ConfigError, match=rf"experiments.e.resources.gpu_mem_gb = 141 but .*\({gb} GB\)"):
        check([gpu_request(141)], nodes, None)
    from grpoflow.slurm_nodes import gpu_type_gb

    assert gpu_type_gb("NVIDIA H100 80GB HBM3") == 80 and gpu_type_gb("NVIDIA GH200 480GB") == 144


def stand_in_libcuda(tmp_path, name: str, cuda_version: int, init_rc: int = 0):
    """Stands in for the NVIDIA user-space driver (no GPU here): a libcuda.so.1 whose cuDriverGetVersion says
    ``cuda_version`` (13000 = CUDA 13.0) and whose cuInit returns ``init_rc``; a directory for LD_LIBRARY_PATH."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        from grpoflow_testing import unavailable

        unavailable("no C compiler to build a stand-in libcuda.so.1")
    d = tmp_path / name
    d.mkdir()
    (d / "cuda.c").write_text(
        f"int cuDriverGetVersion(int *v) {{ *v = {cuda_version}; return 0; }}\nint cuInit(unsigned f) {{ return {init_rc}; }}\n"
    )
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "cuda.c")], check=True)
    return d


def test_a_forward_compatible_libcuda_passes_over_an_older_kernel_driver(tmp_path):
    """Issue 30 item 4: a site's cuda-compat (a CUDA 13.0 libcuda on LD_LIBRARY_PATH) over kernel driver 535 runs
    CUDA 13 wheels: the check reads the libcuda the loader resolves, not only nvidia-smi's driver version."""
    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    old_kernel = [("0", "535.104.05", "Default")]
    compat = stand_in_libcuda(tmp_path, "compat", 13000)
    with mock_env({"LD_LIBRARY_PATH": str(compat)}):
        gpucheck.check("j", cuda="13.0", gpus=old_kernel)
    too_old = stand_in_libcuda(tmp_path, "old", 12020)
    with (
        mock_env({"LD_LIBRARY_PATH": str(too_old)}),
        pytest.raises(
            GrpoflowError,
            match=rf"^j: the CUDA driver this job loads \({too_old}/libcuda.so.1\) supports CUDA 12.2, older than CUDA 13.0",
        ),
    ):
        gpucheck.check("j", cuda="13.0", gpus=old_kernel)
    unsupported = stand_in_libcuda(tmp_path, "geforce", 13000, init_rc=804)
    with (
        mock_env({"LD_LIBRARY_PATH": str(unsupported)}),
        pytest.raises(GrpoflowError, match=r"cuInit: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    ):
        gpucheck.check("j", cuda="13.0", gpus=old_kernel)


def test_a_hung_nvidia_smi_fails_the_check_in_bounded_time(tmp_path, monkeypatch):
    """Issue 30 item 5 (the hang): a wedged driver makes nvidia-smi hang; the check gives up after its timeout with
    one line (recorded like any failure), not a traceback after the job's time limit."""
    import time

    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    monkeypatch.setattr(gpucheck, "SMI_TIMEOUT_S", 1, raising=False)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 600\n")  # stands in for nvidia-smi on a wedged driver
    (fake / "nvidia-smi").chmod(0o755)
    out = tmp_path / "training_complete.json"
    started = time.monotonic()
    with (
        mock_env({"PATH": f"{fake}:{os.environ['PATH']}"}),
        pytest.raises(
            GrpoflowError,
            match=r"^nvidia-smi did not answer within 1 s on node \S+: its GPUs or driver hang; have the node drained",
        ),
    ):
        gpucheck.checked("j", out)
    assert time.monotonic() - started < 30 and gpucheck.record_path(out).is_file()


def test_the_gpu_check_has_its_own_off_switch_named_in_its_refusal(tmp_path):
    """Issue 30 item 7: GRPOFLOW_SKIP_GPU_CHECK=1 turns off the GPU node's check alone (not every onstart hook)."""
    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    fake = tmp_path / "bin"
    stand_in_nvidia_smi(fake, "0, 580.82.07, Exclusive_Process")
    out = tmp_path / "training_complete.json"
    path = {"PATH": f"{fake}:{os.environ['PATH']}"}
    with mock_env(path), pytest.raises(GrpoflowError, match=r"\(or GRPOFLOW_SKIP_GPU_CHECK=1 to skip this check\)$"):
        gpucheck.checked("j", out)
    with mock_env({**path, "GRPOFLOW_SKIP_GPU_CHECK": "1"}):
        assert not gpucheck.retry_plan(str(out), 2).fail_fast  # the retry asks for the full request again
        gpucheck.checked("j", out)
    assert not gpucheck.record_path(out).exists()


def test_a_failed_gpu_check_is_retried_on_other_nodes_until_one_failure_is_seen_on_two(tmp_path):
    """Issue 30 (one bad node fails the whole run): the job's check (a stand-in nvidia-smi, SLURMD_NODENAME as slurmd
    sets it) on each attempt, with the retry plan the rule's resources take from its record. A failure on one node
    retries elsewhere; a different failure on a second node is that node's too (both excluded); the first failure
    seen again on a third node is not the node: fail fast, naming both nodes."""
    from grpoflow import gpucheck
    from grpoflow.errors import GrpoflowError

    out = tmp_path / "training_complete.json"
    fake = tmp_path / "bin"
    exclusive, off_the_bus = "0, 580.82.07, Exclusive_Process", None

    def attempt(n: int, node: str, answer: str | None) -> gpucheck.Retry:
        plan = gpucheck.retry_plan(out, n)
        if answer:
            stand_in_nvidia_smi(fake, answer)
        else:  # nvidia-smi fails: a GPU fallen off the bus
            fake.mkdir(exist_ok=True)
            (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'Unable to determine the device handle' >&2\nexit 15\n")
        env = {"PATH": f"{fake}:{os.environ['PATH']}", gpucheck.NODE_ENV: node, gpucheck.RETRY_ENV: str(plan.env)}
        with mock_env(env), pytest.raises(GrpoflowError):
            gpucheck.checked("j", out)
        return plan

    assert attempt(1, "n1", exclusive) == gpucheck.Retry()
    assert attempt(2, "n2", off_the_bus) == gpucheck.Retry(exclude=("n1",))
    assert attempt(3, "n3", exclusive) == gpucheck.Retry(exclude=("n1", "n2"))
    assert gpucheck.retry_plan(out, 4) == gpucheck.Retry(fail_fast=True)
    with mock_env({gpucheck.RETRY_ENV: str(gpucheck.FAIL_FAST)}), pytest.raises(GrpoflowError) as err:
        gpucheck.checked("j", out)
    assert str(err.value).startswith(
        "not retried on a GPU node: the same GPU check failed on nodes n1 and n3 (j: compute mode GPU 0: Exclusive_Process"
    ), err.value
    # A new snakemake call (attempt 1) checks again and replaces the record; a node seen twice (the exclusion did not
    # reach sbatch) or a profile that replaces the rule's slurm_extra fails fast after the first failure.
    assert attempt(1, "n1", exclusive) == gpucheck.Retry() and len(gpucheck.read_record(gpucheck.record_path(out))) == 1
    assert gpucheck.retry_plan(out, 2, exclusion_reaches_sbatch=False) == gpucheck.Retry(fail_fast=True)
    attempt(2, "n1", exclusive)
    assert gpucheck.retry_plan(out, 3).fail_fast


def test_the_exclusion_is_added_to_the_sites_slurm_extra():
    """The rule's slurm_extra replaces default-resources' (Snakemake 9.27.1 workflow.py:1966-2004), and sbatch keeps
    the last --exclude: the site's flags stay, and nodes the site or the SLURM plugin excludes join the one flag."""
    from grpoflow.gpucheck import slurm_extra

    assert slurm_extra(None, ()) is None and slurm_extra("--nice=7", ()) == "--nice=7"
    assert slurm_extra(None, ("n1",)) == "--exclude=n1"
    assert (
        slurm_extra("--nice=7 --mail-type='END,FAIL'", ("n1", "n2"))
        == "--nice=7 --mail-type='END,FAIL' --exclude=n1,n2"
    )
    for site in (
        "--exclude=bad[1-2] --nice=7",
        "--exclude bad[1-2] --nice=7",
        "-x bad[1-2] --nice=7",
        "-xbad[1-2] --nice=7",
    ):
        assert slurm_extra(site, ("n1",), also=["p1"]) == "--nice=7 --exclude='bad[1-2],p1,n1'", site


def test_the_private_names_the_plugins_own_exclusion_is_read_through_exist_in_the_pinned_versions():
    """gpucheck.plugin_excluded_nodes reads the SLURM plugin's live set of failed nodes through two private names
    (Snakemake's ``JobScheduler._executor``, the plugin's ``Executor._failed_nodes``) with getattr, so a rename would
    not fail a job: it would silently drop those nodes from a retry's --exclude. This test breaks first instead."""
    import inspect

    import snakemake.scheduling.job_scheduler as job_scheduler
    import snakemake_executor_plugin_slurm as plugin

    assert "self._executor = executor_plugin.executor(" in inspect.getsource(job_scheduler.JobScheduler.__init__)
    assert "self._failed_nodes = set(" in inspect.getsource(plugin.Executor)


def test_a_profile_that_replaces_the_gpu_rules_slurm_extra_is_warned_at_start(tmp_path):
    """set-resources' slurm_extra for train_grpo replaces the rule's (and with it a retry's --exclude): one warning
    line when the workflow loads (here listing its rules through the SLURM profile)."""
    from grpoflow_testing import REPO, SHORT_CONFIG, make_workdir, snakemake

    wd = make_workdir(tmp_path)
    proc = snakemake(
        ["--list-rules", "--profile", str(REPO / "profiles" / "slurm")]
        + ["--set-resources", "train_grpo:slurm_extra='--nice=7'", "--configfile", *SHORT_CONFIG[1:]],
        wd,
    )
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("grpoflow: warning: set-resources")]
    assert warnings == [
        "grpoflow: warning: set-resources gives rule train_grpo its own slurm_extra, which replaces the rule's: a retry after a failed GPU check cannot exclude the node it failed on and fails at once instead; move those flags to default-resources' slurm_extra, which the rule keeps and adds its --exclude to (docs/cluster.md#checks-on-the-gpu-node)"
    ], proc.stderr[-3000:]


def test_no_example_of_the_shipped_profile_replaces_the_gpu_rules_slurm_extra():
    """Issue 38 item 5: the profile's --signal example sat (commented) under set-resources: train_grpo, where
    uncommented it replaced the rule's slurm_extra and with it the GPU-check retry's --exclude. No line under
    set-resources for train_grpo or evaluate, commented or not, sets slurm_extra (tests/slurm/test_gpu_node_retry.py
    runs the retry with the --signal the way the profile now points to)."""
    import re

    from grpoflow_testing import REPO

    section = (REPO / "profiles" / "slurm" / "config.yaml").read_text().split("\nset-resources:", 1)[1]
    rule, found = None, []
    for line in section.splitlines():
        if m := re.match(r"^  (\w+):", line):
            rule = m.group(1)
        if rule in ("train_grpo", "evaluate") and re.match(r"#?\s*slurm_extra\s*:", line.strip()):
            found.append(f"{rule}: {line.strip()}")
    assert not found, found


def test_a_request_for_several_partitions_passes_when_one_holds_it():
    """Issue 30 item 6: `slurm_partition: gpu,gpu-long` (sbatch -p gpu,gpu-long starts the job in either)."""
    from grpoflow.errors import ConfigError
    from grpoflow.slurm_nodes import check

    nodes = parse_sinfo("a1|gpu*|224|2000000|gpu:h100:8|1-00:00:00\nb1|gpu-long|224|2000000|gpu:h100:8|7-00:00:00")
    req = gpu_request(None, partition="gpu,gpu-long", runtime_min=2880)
    req.keys["runtime"] = "experiments.e.resources.runtime"
    check([req], nodes, "gpu")
    with pytest.raises(ConfigError, match=r"allows at most 1440 min .*; .*partition gpu-long allows at most 10080 min"):
        check([gpu_request(None, partition="gpu,gpu-long", runtime_min=20000, keys=req.keys)], nodes, "gpu")


def test_sinfo_is_asked_for_hidden_partitions_and_the_jobs_cluster(tmp_path):
    """Issue 30 item 6: sinfo -a (hidden partitions take jobs too) and -M CLUSTER for a job sent with --clusters/-M;
    sinfo -M prints a "CLUSTER: name" line first, even with -h."""
    from types import SimpleNamespace

    from grpoflow.slurm_nodes import job_request, query_nodes

    fake = tmp_path / "bin"
    fake.mkdir()
    # Stands in for sinfo on a two-cluster site: cluster c2 (only with -M c2) holds partition gpu2.
    (fake / "sinfo").write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$(dirname "$0")/argv"\n'
        'case " $* " in *" -M c2 "*) echo "CLUSTER: c2"; echo "c2n1|gpu2*|96|512000|gpu:h100:8|infinite";;\n'
        '  *) echo "a1|gpu*|224|2000000|gpu:h100:8|infinite";; esac\n'
    )
    (fake / "sinfo").chmod(0o755)
    with mock_env({"PATH": f"{fake}:{os.environ['PATH']}"}):
        nodes, default = query_nodes(cluster="c2")
    assert [(n.name, n.partition) for n in nodes] == [("c2n1", "gpu2")] and default == "gpu2"
    assert " -a " in f" {(fake / 'argv').read_text()} "
    # What the SLURM plugin sends with --clusters: its cluster/clusters resource, or -M in slurm_extra.
    job = SimpleNamespace(
        resources={"slurm_partition": "gpu2", "slurm_extra": "'-M c2 --signal=TERM@300'", "gpu": 8},
        threads=8,
        wildcards_dict={},
        rule=SimpleNamespace(name="evaluate"),
    )
    assert job_request(job, "profile").cluster == "c2"
    job.resources = {"clusters": "c3", "gpu": 1}
    assert job_request(job, "profile").cluster == "c3"


def test_a_mixed_partition_is_checked_against_its_smallest_card():
    """Issue 30 item 1: a partition of h100 and a100-40gb nodes; an 80 GB config may start on a 40 GB node. Refused
    naming the small nodes and the fix (gpu_model or a constraint); with gpu_model h100 it passes."""
    from grpoflow.errors import ConfigError
    from grpoflow.slurm_nodes import check

    nodes = parse_sinfo(
        "h1|gpu*|224|2000000|gpu:h100:8|infinite\nh2|gpu*|224|2000000|gpu:h100:8|infinite\n"
        "s1|gpu*|224|2000000|gpu:a100-sxm4-40gb:8|infinite"
    )
    with pytest.raises(
        ConfigError,
        match=r"gpu_mem_gb = 80 but partition gpu also has a100-sxm4-40gb \(40 GB\) on s1 \(sinfo %G\), where the job may start: ask for h100 \(gpu_model: h100",
    ):
        check([gpu_request(80)], nodes, None)
    check([gpu_request(80, gpu_type="h100")], nodes, None)
    check([gpu_request(80, constraint="h100")], nodes, None)
    check([gpu_request(40)], nodes, None)
