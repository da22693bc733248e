"""Evaluation of any model on any benchmark: generation backends (transformers, vLLM) and metrics."""
