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
        unpack(training_data),
        sft="results/{experiment}/sft.json",
    output:
        # Written only when training reached grpo.total_steps: a killed or short run never looks complete.
        marker="results/{experiment}/training_complete.json",
        metrics="results/{experiment}/train_metrics.jsonl",
    params:
        command=lambda wc, input, output: training_command(wc.experiment, input, output),
    resources:
        nodes=lambda wc: exp(wc)["resources"]["nodes"],
        gpu=lambda wc: exp(wc)["resources"]["gpus_per_node"] * exp(wc)["resources"]["nodes"],
        cpus_per_task=lambda wc: exp(wc)["resources"]["cpus_per_task"],
        mem_mb=lambda wc: exp(wc)["resources"]["mem_mb"],
        runtime=lambda wc: exp(wc)["resources"]["runtime"],
    threads: lambda wc: exp(wc)["resources"]["cpus_per_task"]
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
