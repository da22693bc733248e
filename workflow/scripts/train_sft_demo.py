"""Rule train_sft_demo: a TRL SFT run written as an SFT run dir (global_step_N/huggingface/), stopped when its
validation accuracy enters demo.sft.target_accuracy.band (or at demo.sft.max_steps)."""

from grpoflow.demo.sft import run_sft
from grpoflow.workflow import run_job

run_job(
    snakemake,  # noqa: F821 (injected by the script directive)
    run_sft,
    spec=snakemake.params.spec,  # noqa: F821
    model_dir=snakemake.input.model,  # noqa: F821
    train_parquet=snakemake.input.train,  # noqa: F821
    run_dir=snakemake.output.run_dir,  # noqa: F821
    val_parquet=snakemake.input.get("val"),  # noqa: F821
)
