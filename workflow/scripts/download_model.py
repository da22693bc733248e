"""Rule download_model: fetch one Hub start model into the shared HF cache; write its manifest last."""

from grpoflow.models import download_model
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    download_model,
    repo_id=snakemake.params.repo_id,  # noqa: F821
    revision=snakemake.params.revision,  # noqa: F821
    hf_home=snakemake.params.hf_home,  # noqa: F821
    manifest=snakemake.output.manifest,  # noqa: F821
    where=snakemake.params.where,  # noqa: F821
)
