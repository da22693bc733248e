# Greedy (or sampled) evaluation of every model on every benchmark: results/{model}/eval/{benchmark}.json
# Only evaluation settings are params here, so changing them reruns evaluate + report and nothing upstream.


rule evaluate:
    input:
        unpack(evaluate_inputs),
    output:
        metrics="results/{model}/eval/{benchmark}.json",
        samples="results/{model}/eval/{benchmark}.samples.jsonl",
    log:
        "logs/evaluate/{model}/{benchmark}.log",
    conda:
        evaluation_env
    container:
        evaluation_container
    threads: CFG.evaluation["resources"]["cpus_per_task"]
    resources:
        # After a failed GPU check (grpoflow.gpucheck.retry_plan): the GPUs again on other nodes (--exclude, added
        # to default-resources' slurm_extra), or no GPU and fail at once.
        gpu=evaluate_gpus,
        gpu_check_retry=lambda wc, attempt: evaluate_retry(wc, attempt).env,
        slurm_extra=gpu_slurm_extra(evaluate_retry),
        cpus_per_task=CFG.evaluation["resources"]["cpus_per_task"],
        mem_mb=CFG.evaluation["resources"]["mem_mb"],
        runtime=CFG.evaluation["resources"]["runtime"],
        tpu=evaluation_tpu(),
    params:
        model=lambda wc: model_params(wc.model),
        benchmark=lambda wc: CFG.evaluation["benchmarks"][wc.benchmark],
        benchmark_file=lambda wc: file_fingerprint(benchmark_files(wc.benchmark)),
        benchmark_prompt=lambda wc: benchmark_prompt(wc.benchmark),
        settings=lambda wc: evaluation_settings(),
        # vLLM needs the cluster env (vLLM's CPU build its own with resources.gpus 0), Tunix the tunix env,
        # transformers runs in the local one (grpoflow.deployment).
        python=lambda wc: evaluation_python(),
        job=evaluate_job,
        tpu=evaluation_declared_tpu,
    shell:
        "export GRPOFLOW_GPU_CHECK_RETRY={resources.gpu_check_retry} GRPOFLOW_TUNIX_TPU={params.tpu:q}; {params.python} -m grpoflow.workflow evaluate --log {log} --threads {threads} --kwargs {params.job:q}"


# `snakemake baselines`: evaluate the SFT starting points and the external models on every benchmark, with no
# training at all (e.g. before launching a grid, or to add a reference model to an existing report).
rule baselines:
    input:
        [
            f"results/{m}/eval/{b}.json"
            for m, e in sorted(CFG.models.items())
            if e["kind"] != "grpo"
            for b in CFG.benchmarks()
        ],
    localrule: True
