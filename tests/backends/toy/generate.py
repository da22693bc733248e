"""The toy's generator for ``evaluation.backend: toy`` (a stand-in: every completion is the empty response), with the
signature of grpoflow.evaluation's generators (``grpoflow.evaluation.hf_backend.generate``)."""

from __future__ import annotations


def generate(source, tokenizer, prompt_ids: list[list[int]], gen, stop_ids: list[int], *, threads=None, **_):
    from grpoflow.generation import Completion

    return [[Completion("", 0, "stop") for _ in range(gen.samples)] for _ in prompt_ids], {"generate_s": 0.0}
