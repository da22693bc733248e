"""Rule upload_to_hub: publish the merged model + a model card (or record that upload is off / a dry run)."""

from grpoflow.hub import upload_experiment
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    upload_experiment,
    experiment=snakemake.wildcards.experiment,  # noqa: F821
    upload=snakemake.params.upload,  # noqa: F821
    experiment_config=snakemake.params.experiment,  # noqa: F821
    model_dir=snakemake.input.model,  # noqa: F821
    marker_path=snakemake.input.marker,  # noqa: F821
    evaluations=list(snakemake.input.evaluations),  # noqa: F821
    record_path=snakemake.output.record,  # noqa: F821
    card=snakemake.params.card,  # noqa: F821
)
