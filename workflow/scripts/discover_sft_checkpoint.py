"""Rule discover_sft_checkpoint: find the checkpoint GRPO starts from; write results/{experiment}/sft.json."""

from grpoflow.discovery import discover_to_file
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    discover_to_file,
    spec=snakemake.params.sft,  # noqa: F821
    out_path=snakemake.output.sft,  # noqa: F821
    hub_manifest=snakemake.input.get("hub_manifest"),  # noqa: F821
)
