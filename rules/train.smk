# From the SFT checkpoint to a trained, merged Hugging Face model.


rule discover_sft_checkpoint:
    input:
        sft_inputs,
    output:
        sft="results/{experiment}/sft.json",
    params:
        sft=lambda wc: exp(wc)["sft"],
    log:
        "logs/discover_sft_checkpoint/{experiment}.log",
    localrule: True
    conda:
        ENV_LOCAL
    script:
        "../workflow/scripts/discover_sft_checkpoint.py"


rule train_grpo:
    input:
        unpack(training_inputs),
    output:
        # Written only when training reached grpo.total_steps: a killed or short run never looks complete.
        marker="results/{experiment}/training_complete.json",
        metrics="results/{experiment}/train_metrics.jsonl",
    params:
        # A function of the wildcards only: Snakemake ignores params that take input/output when it decides
        # reruns, and a changed training setting must rerun training.
        command=lambda wc: training_command(wc.experiment),
    resources:
        # One node: --gpus=G, run in the SLURM plugin's job step. Several nodes (the verl Ray launcher): per-node
        # GRES (a job-wide --gpus=N*G breaks the steps), and `mpi` so the job's shell runs in the batch script
        # itself; the plugin's own step would collapse the job to one node. The plugin insists on > 1 task per
        # node for mpi jobs; the launcher starts exactly one Ray process per node with `srun --overlap`.
        # (None = resource unset.)
        nodes=lambda wc: exp(wc)["resources"]["nodes"],
        gpu=lambda wc: exp(wc)["resources"]["gpus_per_node"] if exp(wc)["resources"]["nodes"] == 1 else None,
        gres=lambda wc: None if exp(wc)["resources"]["nodes"] == 1 else f"gpu:{exp(wc)['resources']['gpus_per_node']}",
        mpi=lambda wc: None if exp(wc)["resources"]["nodes"] == 1 else "srun",
        tasks_per_node=lambda wc: None if exp(wc)["resources"]["nodes"] == 1 else 2,
        cpus_per_task=lambda wc: exp(wc)["resources"]["cpus_per_task"] // (1 if exp(wc)["resources"]["nodes"] == 1 else 2),
        mem_mb=lambda wc: exp(wc)["resources"]["mem_mb"],
        runtime=lambda wc: exp(wc)["resources"]["runtime"],
    threads: lambda wc: exp(wc)["resources"]["cpus_per_task"] // (1 if exp(wc)["resources"]["nodes"] == 1 else 2)
    log:
        "logs/train_grpo/{experiment}.log",
    conda:
        experiment_env
    shell:
        "{params.command} > {log} 2>&1"


rule merge_checkpoint:
    input:
        marker="results/{experiment}/training_complete.json",
        sft="results/{experiment}/sft.json",
    output:
        model=directory("results/{experiment}/model"),
    params:
        backend=lambda wc: exp(wc)["backend"],
        checkpoint_dir=lambda wc: CFG.checkpoint_dir(wc.experiment),
        step=lambda wc: exp(wc)["merge_step"],
    log:
        "logs/merge_checkpoint/{experiment}.log",
    conda:
        experiment_env
    script:
        "../workflow/scripts/merge_checkpoint.py"
