"""Which config values an evaluation depends on (so changing only these reruns evaluate + report)."""

from __future__ import annotations

from grpoflow.config import WorkflowConfig

# Structural keys decide *what* is evaluated (the DAG), not *how*; they are not job params.
_STRUCTURAL = {"benchmarks", "models", "stages", "resources"}


def evaluation_settings(cfg: WorkflowConfig) -> dict:
    return {k: v for k, v in sorted(cfg.evaluation.items()) if k not in _STRUCTURAL}


def benchmark_prompt(cfg: WorkflowConfig, benchmark: str) -> dict | None:
    """The chat prompt a benchmark is asked with: its own `prompt`, else its dataset's (same as training)."""
    bench = cfg.evaluation["benchmarks"][benchmark]
    if bench.get("prompt"):
        return bench["prompt"]
    if "dataset" in bench:
        return cfg.datasets[bench["dataset"]]["prompt"]
    return None
