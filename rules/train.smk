# From the SFT checkpoint to a trained, merged Hugging Face model.


rule discover_sft_checkpoint:
    input:
        unpack(sft_inputs),
    output:
        sft="results/{experiment}/sft.json",
    log:
        "logs/discover_sft_checkpoint/{experiment}.log",
    localrule: True
    conda:
        ENV_LOCAL
    params:
        sft=lambda wc: exp(wc)["sft"],
    script:
        "../workflow/scripts/discover_sft_checkpoint.py"


rule train_grpo:
    input:
        unpack(training_inputs),
    output:
        # Written only when training reached grpo.total_steps: a killed or short run never looks complete.
        marker="results/{experiment}/training_complete.json",
        metrics="results/{experiment}/train_metrics.jsonl",
    log:
        "logs/train_grpo/{experiment}.log",
    conda:
        experiment_env
    container:
        experiment_container
    threads: lambda wc: train_resources(wc)["cpus_per_task"]
    resources:
        # From the experiment's `resources:` (see grpoflow.backends.slurm_resources for the multi-node shape).
        nodes=lambda wc, attempt: train_resources(wc, attempt)["nodes"],
        gpu=lambda wc, attempt: train_resources(wc, attempt)["gpu"],
        gres=lambda wc, attempt: train_resources(wc, attempt)["gres"],
        mpi=lambda wc, attempt: train_resources(wc, attempt)["mpi"],
        tasks_per_node=lambda wc, attempt: train_resources(wc, attempt)["tasks_per_node"],
        cpus_per_task=lambda wc, attempt: train_resources(wc, attempt)["cpus_per_task"],
        mem_mb=lambda wc, attempt: train_resources(wc, attempt)["mem_mb"],
        # resources.runtime for the first attempt, resources.retry_runtime for the profile's retries.
        runtime=train_runtime,
        tpu=experiment_tpu,
        # After a failed GPU check (grpoflow.gpucheck.retry_plan): the job's RETRY_ENV (2: a retry on other nodes,
        # 1: fail at once) and the --exclude of the nodes it failed on, added to default-resources' slurm_extra,
        # as is resources.term_before_limit_s's --signal.
        gpu_check_retry=lambda wc, attempt: train_retry(wc, attempt).env,
        slurm_extra=gpu_slurm_extra(train_retry, train_stop_signal),
    params:
        # A function of the wildcards only: Snakemake ignores params that take input/output when it decides
        # reruns, and a changed training setting must rerun training.
        command=lambda wc: training_command(wc.experiment),
        # tunix.tpu, which the job checks JAX runs on (of input/output: declaring it reruns nothing).
        tpu=train_declared_tpu,
    shell:
        # SLURM signals every process of the job (scancel, time limit, --signal). TRL then finishes its step, saves a
        # checkpoint and exits 1; verl 0.9.1 has no handler and saves nothing (the steps since its last save_freq
        # checkpoint are lost): the wrapper stops verl and Ray and exits 1. Either way the shell must wait rather than
        # die at once, or the job step ends with it and takes the trainer down mid-save or mid-teardown (on clusters
        # that track jobs by cgroup).
        "trap : TERM INT USR1 USR2; export GRPOFLOW_GPU_CHECK_RETRY={resources.gpu_check_retry} GRPOFLOW_TUNIX_TPU={params.tpu:q}; {params.command} > {log} 2>&1"


# merge_checkpoint's CPUs and threads. A profile changes both together: set-threads and set-resources' cpus_per_task.
MERGE_CPUS = 16


rule merge_checkpoint:
    input:
        marker="results/{experiment}/training_complete.json",
        sft="results/{experiment}/sft.json",
    output:
        model=directory("results/{experiment}/model"),
    log:
        "logs/merge_checkpoint/{experiment}.log",
    conda:
        experiment_env
    container:
        experiment_container
    # The merge computes on the host CPU (verl's merger, PEFT's merge, the load check): its torch runs Snakemake's
    # thread variables = its threads, so it asks SLURM for as many CPUs (at most --cores on one machine).
    threads: MERGE_CPUS
    resources:
        cpus_per_task=MERGE_CPUS,
    params:
        backend=lambda wc: exp(wc)["backend"],
        checkpoint_dir=lambda wc: CFG.checkpoint_dir(wc.experiment),
        step=lambda wc: exp(wc)["merge_step"],
        # The interpreter of the experiment's plane (grpoflow.deployment): verl's merger needs the cluster env.
        python=experiment_python,
        job=merge_job,
    shell:
        "{params.python} -m grpoflow.workflow merge_checkpoint --log {log} --kwargs {params.job:q}"
