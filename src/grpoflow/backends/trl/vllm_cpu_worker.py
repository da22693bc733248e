"""The vLLM worker extension of the job's server on vLLM's CPU build (grpoflow.backends.trl.vllm_server with no
GPUs: the tests' server). Importing this module turns the CPU build's oneDNN weight packing off in the worker that
imports it (grpoflow.backends.trl.vllm_engine.keep_cpu_linear_weights), before that worker loads its model: vLLM
resolves the extension class in ``WorkerWrapperBase.init_worker`` before it builds the worker
(vllm/v1/worker/worker_base.py:289-331, vllm 0.31.0). The server's linear weights then stay the parameters its
loader fills, as in the colocated engine, and the weight-sync check's digests read them; packed, each would be an
empty parameter. The server's workers run in processes of their own, so setting it in the wrapper would not reach
them."""

from __future__ import annotations

from grpoflow.backends.trl.vllm_engine import keep_cpu_linear_weights
from grpoflow.backends.trl.weight_sync import WeightDigests

keep_cpu_linear_weights()


class CpuWeightDigests(WeightDigests):
    """WeightDigests, in a worker whose linear weights this module's import kept unpacked."""
