"""Rule convert_to_parquet: one split of a dataset in verl's RL Parquet format."""

from grpoflow.data.convert import convert_split
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    convert_split,
    name=snakemake.wildcards.dataset,  # noqa: F821
    spec=snakemake.params.dataset,  # noqa: F821
    manifest_path=snakemake.input.manifest,  # noqa: F821
    split=snakemake.wildcards.split,  # noqa: F821
    parquet_path=snakemake.output.parquet,  # noqa: F821
    summary_path=snakemake.output.summary,  # noqa: F821
)
