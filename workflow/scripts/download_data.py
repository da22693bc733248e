"""Rule download_data: fetch one dataset's raw files into resources/data/{dataset}/ with a manifest."""

from grpoflow.data.download import download_dataset
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    download_dataset,
    name=snakemake.wildcards.dataset,  # noqa: F821
    spec=snakemake.params.dataset,  # noqa: F821
    manifest_path=snakemake.output.manifest,  # noqa: F821
)
