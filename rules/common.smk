# Configuration (validated before any job runs), wildcard constraints and input functions.

import json
import os
import re
import sys

from grpoflow.config import DEMO_MODEL_DIR, DEMO_SFT_RUN_DIR, RESULTS, resolve_config
from grpoflow.errors import ConfigError

try:
    CFG = resolve_config(config)
except ConfigError as err:
    # One line naming the key, the bad value and what is allowed; no traceback.
    sys.exit(f"grpoflow: {err}")


from grpoflow import models as _models

try:
    HUB_MODELS = _models.hub_start_models(CFG)
except ConfigError as err:
    sys.exit(f"grpoflow: {err}")


def _one_of(names):
    names = sorted(names)
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


wildcard_constraints:
    dataset=_one_of(CFG.datasets),
    split="train|val|test",
    experiment=_one_of(CFG.experiments),
    model=_one_of(CFG.models),
    benchmark=_one_of(CFG.evaluation["benchmarks"]),
    hub_model=_one_of(HUB_MODELS),


ENV_LOCAL = "../envs/local.yaml"
ENV_CLUSTER = "../envs/cluster.yaml"
ENV_TUNIX = "../envs/tunix.yaml"
ENV_VLLM_CPU = "../envs/vllm-cpu.yaml"

# ---- which environment runs each job (grpoflow.deployment: --sdm conda / apptainer, cluster_env, or Snakemake's) ----
from grpoflow import deployment as _deploy
from grpoflow import gpucheck as _gpucheck

# `make setup-tunix` and `make setup-vllm-cpu` build the Tunix and vLLM-CPU environments next to the Snakefile: those
# planes' default interpreters.
_MADE_VENVS = _deploy.made_venv_pythons(workflow.basedir)
JOB_ENVS = _deploy.job_envs(
    config,
    _deploy.deployment_methods(workflow),
    tunix_venv_python=_MADE_VENVS.get(_deploy.TUNIX),
    vllm_cpu_venv_python=_MADE_VENVS.get(_deploy.VLLM_CPU),
)
_CONDA_ENVS = {
    _deploy.CLUSTER: ENV_CLUSTER,
    _deploy.LOCAL: ENV_LOCAL,
    _deploy.TUNIX: ENV_TUNIX,
    _deploy.VLLM_CPU: ENV_VLLM_CPU,
}
try:
    _deploy.check_multinode(CFG, config, _deploy.deployment_methods(workflow))
except ConfigError as err:
    sys.exit(f"grpoflow: {err}")


def exp(wildcards):
    return CFG.experiment(wildcards.experiment)


def experiment_plane(wildcards):
    return _deploy.experiment_plane(exp(wildcards))


def evaluation_plane():
    return _deploy.evaluation_plane(CFG.evaluation)


def experiment_env(wildcards):
    return _CONDA_ENVS[experiment_plane(wildcards)]


def evaluation_env(wildcards):
    return _CONDA_ENVS[evaluation_plane()]


def experiment_python(wildcards):
    return JOB_ENVS[experiment_plane(wildcards)].run()


def evaluation_python():
    return JOB_ENVS[evaluation_plane()].run()


def experiment_container(wildcards):
    # Only cluster- and tunix-plane jobs run in an image (--sdm apptainer); the local plane stays in Snakemake's env.
    return _deploy.container(config, experiment_plane(wildcards))


def evaluation_container(wildcards):
    return _deploy.container(config, evaluation_plane())


# One process at a time can hold a TPU: Tunix training and Tunix evaluation (the jobs that open the accelerator; a
# Tunix merge exports on the host CPU) each take the whole `tpu` resource, so Snakemake never runs two at once. Its
# limit is 1 unless --resources tpu=N says otherwise.
if "tpu" not in workflow.global_resources:
    workflow.register_resource("tpu", 1)

from grpoflow import backends as _backends
from grpoflow import planes as _planes
from grpoflow.evaluation.backends import evaluation_row as _evaluation_row

# GPU jobs on this machine take turns likewise (grpoflow.local_gpus): when Snakemake runs the jobs itself, `gpu` is a
# global resource, the GPUs visible here, unless --resources gpu=N says otherwise. Not under a cluster executor,
# where the global value would cut every job's sbatch GPU request to the login node's count; SLURM places GPU jobs.
from grpoflow import local_gpus as _local_gpus


def asks_for_gpus():
    """Whether a train_grpo or evaluate job of this config asks for a GPU (then the dry-run says how many run at once)."""
    train = any((_backends.slurm_resources(e["resources"])["gpu"] or 0) > 0 for e in CFG.experiments.values())
    return train or bool(CFG.models and (CFG.evaluation["resources"]["gpus"] or 0) > 0)


_GPU_LIMIT = _local_gpus.register(workflow)
if _GPU_LIMIT and asks_for_gpus():
    print(f"grpoflow: {_GPU_LIMIT}", file=sys.stderr)


def experiment_tpu(wildcards):
    e = exp(wildcards)
    return 1 if _backends.of(e).accelerator(e) == _planes.TPU else 0


def evaluation_tpu():
    return 1 if _evaluation_row(CFG.evaluation).accelerator == _planes.TPU else 0


# The device a job was declared for (its backend's answer: a Tunix experiment's tunix.tpu), exported as
# GRPOFLOW_TUNIX_TPU: the job stops at its start when JAX runs on something else. Params of input/output: declaring
# one reruns nothing.
def train_declared_tpu(wildcards, input, output):
    return _backends.declared_device(exp(wildcards))


def evaluation_declared_tpu(wildcards, input, output):
    return _backends.evaluation_device(CFG.evaluation, CFG.experiments)


# ---- data ---------------------------------------------------------------------------------------------------


def parquet(dataset, split):
    return CFG.parquet(dataset, split)


def training_paths(experiment):
    """What train_grpo reads and writes (the rule's input and output, also handed to the command)."""
    data = CFG.experiment(experiment)["data"]
    inputs = {"train": parquet(data["dataset"], data["train_split"]), "sft": f"{RESULTS}/{experiment}/sft.json"}
    if data.get("val_split"):
        inputs["val"] = parquet(data["dataset"], data["val_split"])
    outputs = {
        "marker": f"{RESULTS}/{experiment}/training_complete.json",
        "metrics": f"{RESULTS}/{experiment}/train_metrics.jsonl",
    }
    return inputs, outputs


def training_inputs(wildcards):
    return training_paths(wildcards.experiment)[0]


def _gpu_retry(rule, output, attempt):
    """How attempt ``attempt`` of a GPU job writing ``output`` asks again after its GPU check failed
    (grpoflow.gpucheck.retry_plan): on other nodes, or failing at once."""
    return _gpucheck.retry_plan(output, attempt, not _gpucheck.site_overrides_slurm_extra(workflow, rule))


def train_retry(wildcards, attempt):
    return _gpu_retry("train_grpo", training_paths(wildcards.experiment)[1]["marker"], attempt)


def evaluate_retry(wildcards, attempt):
    return _gpu_retry("evaluate", f"{RESULTS}/{wildcards.model}/eval/{wildcards.benchmark}.json", attempt)


def train_resources(wildcards, attempt=1):
    """The experiment's request (also for a retry on other nodes after a failed GPU check); a retry that must not
    queue for GPUs again (grpoflow.gpucheck.retry_plan) asks for one CPU and no GPU, and fails at once naming the
    check."""
    if train_retry(wildcards, attempt).fail_fast:
        return _gpucheck.RETRY_REQUEST
    return _slurm_resources(exp(wildcards)["resources"])


def train_stop_signal(wildcards, attempt):
    """--signal=TERM@<resources.term_before_limit_s> (none for a retry that fails at once on one CPU)."""
    if train_retry(wildcards, attempt).fail_fast:
        return None
    return _stop_signal(exp(wildcards)["resources"])


def train_runtime(wildcards, attempt):
    """resources.runtime for the first attempt, resources.retry_runtime for the profile's retries (5 min for a retry
    after a failed GPU check)."""
    req = train_resources(wildcards, attempt)
    if req is _gpucheck.RETRY_REQUEST:
        return req["runtime"]
    return _attempt_runtime(exp(wildcards)["resources"], attempt)


def evaluate_gpus(wildcards, attempt):
    if evaluate_retry(wildcards, attempt).fail_fast:
        return None
    return CFG.evaluation["resources"]["gpus"]


def gpu_slurm_extra(retry, own=None):
    """The slurm_extra resource of a GPU job whose retry plan is ``retry(wildcards, attempt)``: the profile's
    default-resources slurm_extra, the job's ``own(wildcards, attempt)`` flags, plus --exclude naming the nodes its
    GPU check failed on (grpoflow.gpucheck)."""

    def slurm_extra(wildcards, input, attempt, threads, rulename, async_run):
        aux = dict(input=input, attempt=attempt, threads=threads, rulename=rulename, async_run=async_run)
        site = _gpucheck.site_slurm_extra(workflow, wildcards, **aux)
        site = " ".join(filter(None, [site, own(wildcards, attempt) if own else None])) or None
        nodes = retry(wildcards, attempt).exclude
        return _gpucheck.slurm_extra(site, nodes, _gpucheck.plugin_excluded_nodes(workflow) if nodes else [])

    return slurm_extra


def warn_gpu_retries_without_exclusion():
    """set-resources' slurm_extra for train_grpo or evaluate replaces their own, and with it the --exclude of a
    retry: said at start (the retry then fails at once, as without SLURM)."""
    if workflow.is_main_process:
        for name in ("train_grpo", "evaluate"):
            if _gpucheck.site_overrides_slurm_extra(workflow, name):
                print(f"grpoflow: {_gpucheck.override_warning(name)}", file=sys.stderr)


warn_gpu_retries_without_exclusion()


# ---- SFT start ------------------------------------------------------------------------------------------------


def demo_sft_inputs(wildcards):
    """The demo SFT's start model and data; its validation split when the start point is chosen by accuracy."""
    sft = CFG.demo["sft"]
    inputs = {"model": DEMO_MODEL_DIR, "train": parquet(sft["dataset"], sft["split"])}
    if sft.get("target_accuracy"):
        inputs["val"] = parquet(sft["dataset"], sft["target_accuracy"]["split"])
    return inputs


def sft_inputs(wildcards):
    """The demo's SFT run when an experiment starts from it; a Hub-id start model's download_model manifest;
    nothing for user-provided SFT runs and model dirs."""
    if CFG.uses_demo_sft(wildcards.experiment):
        return {"demo": DEMO_SFT_RUN_DIR}
    model = (exp(wildcards).get("sft") or {}).get("model")
    if _models.is_hub_id(model):
        return {"hub_manifest": _models.manifest_path(model)}
    return {}


# ---- evaluation -----------------------------------------------------------------------------------------------


def model_inputs(wildcards):
    """What `evaluate` needs for a model name: the merged GRPO model, the SFT discovery record, or the
    download_model manifest of an evaluation model given as a Hub id."""
    m = CFG.models[wildcards.model]
    if m["kind"] == "grpo":
        return {"model": f"{RESULTS}/{m['experiment']}/model"}
    if m["kind"] == "sft":
        return {"sft": f"{RESULTS}/{m['experiment']}/sft.json"}
    manifest = _models.evaluation_model_manifest(m)  # a Hub id: download_model's snapshot
    return {"hub_manifest": manifest} if manifest else {}


def file_fingerprint(paths):
    """(size, mtime) of user-provided files: a param, so editing such a file reruns what reads it, while a
    missing file still reaches the job and fails there with one line naming the config key."""
    out = {}
    for p in paths:
        st = os.stat(p) if os.path.isfile(p) else None
        out[p] = [st.st_size, st.st_mtime_ns] if st else "missing"
    return out


def local_dataset_files(dataset):
    ds = CFG.datasets[dataset]
    return sorted(ds["local"].values()) if ds["source"] == "local" else []


def benchmark_files(benchmark):
    bench = CFG.evaluation["benchmarks"][benchmark]
    return [bench["path"]] if "path" in bench else []


def model_params(model):
    """What identifies a model for `evaluate` (not which experiment happens to list a shared SFT start first)."""
    entry = dict(CFG.models[model])
    if entry["kind"] == "sft":
        entry.pop("experiment")
    return entry


def benchmark_inputs(wildcards):
    bench = CFG.evaluation["benchmarks"][wildcards.benchmark]
    if "dataset" in bench:
        return {"data": parquet(bench["dataset"], bench["split"])}
    return {}


def evaluate_inputs(wildcards):
    return {**model_inputs(wildcards), **benchmark_inputs(wildcards)}


# ---- targets --------------------------------------------------------------------------------------------------


def report_targets():
    return [f"{RESULTS}/report/summary.md"] if CFG.models else []


def upload_targets():
    # Always in the DAG: with upload.enabled false the job records that nothing was sent (instantly, locally);
    # switching upload on later reruns only upload_to_hub (its params changed).
    return [f"{RESULTS}/{e}/upload.json" for e in CFG.experiments]


def all_targets():
    targets = report_targets() + upload_targets()
    if not targets:  # a config with datasets only: prepare the data
        targets = [parquet(d, s) for d in CFG.datasets for s in CFG.dataset_splits(d)]
    return targets


# ---- params computed by the library (kept here so rules stay one-liners) ---------------------------------------

from grpoflow.backends import attempt_runtime as _attempt_runtime
from grpoflow.backends import slurm_resources as _slurm_resources
from grpoflow.backends import stop_signal as _stop_signal
from grpoflow.backends import training_command as _training_command
from grpoflow.hub import card_sources as _card_sources
from grpoflow.report import experiment_rewards as _experiment_rewards
from grpoflow.report import experiment_summary as _experiment_summary
from grpoflow.report import samples_path
from grpoflow.report import seed_groups as _seed_groups


def print_training_summaries():
    """Each experiment's line from its backend's `summary` (grpoflow.backends: verl's GPU-memory estimate and what a
    time limit costs, a TRL-on-GPU experiment's launch and estimate, a tunix experiment's HBM estimate for its
    tunix.tpu; none for TRL on the CPU or tunix without a TPU), one line each on stderr when the config loads: so
    `snakemake -n -p` shows them above the jobs (and `--dag` output on stdout stays a graph). Not a param or
    message: editing the estimate's constants must not retrain, and the usual listing of train_grpo jobs stays.
    Only the main process prints: the jobs' own Snakemake does not."""
    if not workflow.is_main_process:
        return
    for name, e in CFG.experiments.items():
        line = _backends.of(e).summary(name, e)
        if line:
            print(f"grpoflow: {line}", file=sys.stderr)


def preflight():
    """onstart (before the first submission; not in dry-runs): the checks of grpoflow.preflight (each plane's
    interpreter holds what its jobs import; with the SLURM executor the partition's node shapes, time limits and
    GPU types; free space for the checkpoints). Every failure is one line naming the config key; then the run stops."""
    from grpoflow.preflight import run

    failures = run(
        workflow,
        CFG,
        config,
        JOB_ENVS,
        _deploy.deployment_methods(workflow),
        _MADE_VENVS,
        log=lambda line: print(line, file=sys.stderr),
    )
    if failures:
        sys.exit("\n".join(f"grpoflow: {line}" for line in failures))


def training_command(experiment):
    plane = _deploy.experiment_plane(CFG.experiment(experiment))
    return JOB_ENVS[plane].command(_training_command(CFG, experiment, *training_paths(experiment)))


def merge_job(wildcards, input, output):
    """merge_checkpoint's arguments (JSON) for `python -m grpoflow.workflow merge_checkpoint`."""
    e = exp(wildcards)
    return json.dumps(
        {
            "backend": e["backend"],
            "checkpoint_dir": CFG.checkpoint_dir(wildcards.experiment),
            "step": e["merge_step"],
            "sft_json": input.sft,
            "marker": input.marker,
            "out_dir": output.model,
        }
    )


def evaluate_job(wildcards, input, output):
    """evaluate's arguments (JSON) for `python -m grpoflow.workflow evaluate`. Not the job's threads: they are
    passed as --threads (a param that differs between a dry-run and the job would make `snakemake -n` after a
    finished SLURM run report "Params have changed" for every evaluate)."""
    return json.dumps(
        {
            "model_name": wildcards.model,
            "model": model_params(wildcards.model),
            "benchmark_name": wildcards.benchmark,
            "benchmark": CFG.evaluation["benchmarks"][wildcards.benchmark],
            "prompt": benchmark_prompt(wildcards.benchmark),
            # The benchmark's plan as config load resolved it (grpoflow.evaluation.settings.BenchmarkRun): the job
            # decodes it and resolves nothing. (The rule's `settings` param, which reruns the job when they change,
            # stays as it was.)
            "run": CFG.benchmark_runs[wildcards.benchmark].as_json(),
            "inputs": dict(input.items()),
            # The plane the job runs in: it picks the job's checks (vLLM's CPU build: no GPU check). In this param of
            # input/output, which no rerun trigger compares, rather than on the shell line: a changed shell line
            # reruns every finished evaluation (Snakemake's code trigger); the interpreter (params.python) already
            # reruns a switch of plane.
            "plane": evaluation_plane(),
            "metrics_path": output.metrics,
            "samples_path": output.samples,
        }
    )


def benchmark_prompt(benchmark):
    return CFG.benchmark_prompt(benchmark)


def evaluation_settings():
    return CFG.evaluation_settings()


def report_experiment_summary(experiment):
    return _experiment_summary(CFG.experiment(experiment))


def report_experiment_rewards(experiment):
    return _experiment_rewards(CFG.experiment(experiment))


def report_seed_groups():
    return _seed_groups(CFG.experiments)


def upload_card_sources(experiment):
    return _card_sources(CFG, experiment)
