# Data: fetch each dataset once, then write verl-format Parquet per split.


rule download_data:
    output:
        manifest="resources/data/{dataset}/manifest.json",
    log:
        "logs/download_data/{dataset}.log",
    localrule: True  # compute nodes often have no internet; login nodes do
    conda:
        ENV_LOCAL
    params:
        dataset=lambda wc: CFG.datasets[wc.dataset],
        local_files=lambda wc: file_fingerprint(local_dataset_files(wc.dataset)),
    script:
        "../workflow/scripts/download_data.py"


rule convert_to_parquet:
    input:
        manifest="resources/data/{dataset}/manifest.json",
    output:
        parquet=report(
            "results/data/{dataset}/{split}.parquet",
            caption="../workflow/report/parquet.rst",
            category="Data",
        ),
        summary="results/data/{dataset}/{split}.summary.json",
    log:
        "logs/convert_to_parquet/{dataset}.{split}.log",
    localrule: True  # seconds of CPU; not worth a queue wait
    conda:
        ENV_LOCAL
    params:
        dataset=lambda wc: CFG.datasets[wc.dataset],
    script:
        "../workflow/scripts/convert_to_parquet.py"


# Hub-id start models (sft.model: org/name), fetched once on the login node into the shared HF cache (hf_home) at
# sft.revision; jobs then run with HF_HUB_OFFLINE=1 and load the local snapshot (grpoflow.models).
rule download_model:
    output:
        manifest="resources/models/{hub_model}/manifest.json",
    log:
        "logs/download_model/{hub_model}.log",
    localrule: True  # compute nodes often have no internet; login nodes do
    conda:
        ENV_LOCAL
    params:
        repo_id=lambda wc: HUB_MODELS[wc.hub_model]["repo_id"],
        revision=lambda wc: HUB_MODELS[wc.hub_model]["revision"],
        where=lambda wc: HUB_MODELS[wc.hub_model]["where"],
        hf_home=config.get("hf_home") or _models.DEFAULT_HF_HOME,
    script:
        "../workflow/scripts/download_model.py"
