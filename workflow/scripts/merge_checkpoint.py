"""Rule merge_checkpoint: the final (or merge_step) training checkpoint → results/{experiment}/model (plain HF)."""

from grpoflow.merge import merge_checkpoint
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    merge_checkpoint,
    backend=snakemake.params.backend,  # noqa: F821
    checkpoint_dir=snakemake.params.checkpoint_dir,  # noqa: F821
    step=snakemake.params.step,  # noqa: F821
    sft_json=snakemake.input.sft,  # noqa: F821
    marker=snakemake.input.marker,  # noqa: F821
    out_dir=snakemake.output.model,  # noqa: F821
)
