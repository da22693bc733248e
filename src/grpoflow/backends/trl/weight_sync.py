"""``trl.vllm.check_weight_sync``: after every weight sync TRL makes, vLLM's weights against the trainer's (imports
torch; only in the train_grpo job, and in the vLLM server's workers).

The trainer's side is exactly what TRL's sync sends: ``VLLMGeneration._iter_named_params`` (PEFT merged, FSDP and
DeepSpeed gathered, under the names vLLM loads them by). vLLM's side is its model's parameters: fused ones (Qwen3's
``qkv_proj`` = q, k, v stacked; ``gate_up_proj``) are the trainer's parts stacked in ``packed_modules_mapping``
order, cast to vLLM's dtype; the embedding and LM head are padded to a multiple of 64 rows, zero-filled
(vllm/model_executor/layers/vocab_parallel_embedding.py ``weight_loader``). Equal means equal to the bit.

- colocate (``ColocateCheck``): the engine's parameters are in this process: the largest |difference| is the step's
  ``weight_sync_max_diff``.
- server (``ServerCheck``): the server's workers run ``WeightDigests`` (vLLM's ``--worker-extension-cls``) and
  answer vLLM's ``/collective_rpc`` with each parameter's SHA-256; the trainer digests what it sent the same way.
  Equal digests on every worker are a difference of 0; a weight that differs stops the run, naming it.

Any difference stops the run: rollouts would come from another policy than the one trained.
"""

from __future__ import annotations

import hashlib
import logging

from grpoflow.errors import GrpoflowError

log = logging.getLogger(__name__)

METRIC = "weight_sync_max_diff"
RPC_METHOD = "grpoflow_weight_digests"
EXTENSION = "grpoflow.backends.trl.weight_sync.WeightDigests"
_STOP = "set trl.vllm.check_weight_sync: false to train without the check"


class _SyncCheck:
    """Wraps TRL's ``VLLMGeneration.sync_weights``: after each sync, ``compare()``; ``take()`` gives the largest
    difference since the last call (nothing when no sync ran), for the step's metrics row."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.generation = trainer.vllm_generation
        self.max_diff: float | None = None
        sync = self.generation.sync_weights

        def sync_and_compare():
            sync()
            diff = self.compare()
            self.max_diff = diff if self.max_diff is None else max(self.max_diff, diff)

        self.generation.sync_weights = sync_and_compare

    def take(self) -> dict:
        diff, self.max_diff = self.max_diff, None
        return {} if diff is None else {METRIC: diff}

    def compare(self) -> float:
        raise NotImplementedError

    def differ(self, what: str) -> GrpoflowError:
        step = self.trainer.state.global_step + 1
        return GrpoflowError(
            f"vLLM's weights differ from the trainer's after the weight sync for step {step}: {what}: rollouts would come from another policy than the one trained"
        )


class ColocateCheck(_SyncCheck):
    def compare(self) -> float:
        """max |vLLM − trainer| over every weight of this process's engine (several processes: the largest)."""
        from grpoflow.backends.trl.vllm_engine import vllm_model

        worst, where = compare_weights(self.generation._iter_named_params(), vllm_model(self.trainer))
        worst = _largest_over_processes(worst)
        if worst > 0:
            raise self.differ(f"max |difference| {worst:.3g} (in {where or 'another process'})")
        return worst


class ServerCheck(_SyncCheck):
    def compare(self) -> float:
        """Every server worker's digest of every weight equals the digest of what this trainer sent; 0.0, else
        raises. Every process walks TRL's parameters (a gather is collective); the main process asks the server."""
        client = getattr(self.generation, "vllm_client", None)
        if client is None:
            for _ in self.generation._iter_named_params():
                pass
            return 0.0
        response = client.session.post(f"{client.base_url}/collective_rpc", json={"method": RPC_METHOD})
        if response.status_code != 200:
            raise GrpoflowError(
                f"weight-sync check: the vLLM server answered /collective_rpc with {response.status_code} ({response.text[:200]}): it runs without grpoflow's worker extension ({EXTENSION}); {_STOP}"
            )
        workers = response.json()["results"]
        expected = expected_digests(self.generation._iter_named_params(), workers[0])
        for rank, worker in enumerate(workers):
            wrong = sorted(n for n, d in expected.items() if worker["params"][n]["sha256"] != d)
            if wrong:
                raise self.differ(f"{len(wrong)} weight(s) of server worker {rank} differ, first {wrong[0]}")
        return 0.0


def check_for(trainer, mode: str) -> _SyncCheck:
    return ColocateCheck(trainer) if mode == "colocate" else ServerCheck(trainer)


class WeightDigests:
    """vLLM worker extension (``--worker-extension-cls``, mixed into the server's workers): ``/collective_rpc``
    with method ``grpoflow_weight_digests`` returns, per worker, its model's fused layout and each parameter's
    shape, dtype and SHA-256."""

    def grpoflow_weight_digests(self) -> dict:
        model = self.model_runner.model
        return {
            "packed": packed_sources(model),
            "params": {
                name: {"shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch."), "sha256": digest(p)}
                for name, p in model.named_parameters()
            },
        }


def digest(tensor) -> str:
    """SHA-256 of a tensor's bytes (bfloat16 has no NumPy dtype: read as bytes)."""
    import torch

    data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


def expected_digests(named_tensors, worker: dict) -> dict[str, str]:
    """The digest each of the server's parameters should have, from the tensors the trainer sent: in vLLM's layout
    (fused, cast to its dtype, padded with zeros to its shape)."""
    import torch

    params = worker["params"]
    out = {}
    for name, tensor in in_vllm_layout(named_tensors, worker["packed"], params):
        shape, dtype = params[name]["shape"], getattr(torch, params[name]["dtype"])
        full = torch.zeros(shape, dtype=dtype, device=tensor.device)
        full[tuple(slice(0, n) for n in tensor.shape)] = tensor.to(dtype)
        out[name] = digest(full)
    return out


def compare_weights(named_tensors, model) -> tuple[float, str]:
    """(max |difference|, the vLLM parameter where it is) between the trainer's tensors, by the names TRL sends to
    vLLM, and vLLM's ``model``."""
    ours = dict(model.named_parameters())
    worst, where = 0.0, ""
    for name, tensor in in_vllm_layout(named_tensors, packed_sources(model), ours):
        diff = difference(ours[name], tensor)
        if diff > worst:
            worst, where = diff, name
    return worst, where


def in_vllm_layout(named_tensors, packed: dict[str, list[str]], names):
    """(vLLM parameter name, the trainer's tensor for it) for every parameter in ``names``: a fused one once all its
    parts have come, stacked in ``packed`` order. A parameter nothing was sent for is an error."""
    import torch

    pending: dict[str, dict[str, torch.Tensor]] = {}
    seen = set()
    with torch.no_grad():
        for name, tensor in named_tensors:
            target, part = vllm_target(name, packed, names)
            if part is not None:
                parts = packed[_packed_key(target, packed)]
                pieces = pending.setdefault(target, {})
                pieces[part] = tensor.detach().clone()
                if len(pieces) < len(parts):
                    continue
                del pending[target]
                tensor = torch.cat([pieces[p] for p in parts], dim=0)
            seen.add(target)
            yield target, tensor
    missing = sorted((set(names) - seen) | set(pending))
    if missing:
        raise GrpoflowError(
            f"weight-sync check: the trainer sent no weights for vLLM's {', '.join(missing)}: its names no longer map onto vLLM's model (TRL or vLLM changed); {_STOP}"
        )


def packed_sources(model) -> dict[str, list[str]]:
    """vLLM's fused modules and what each fuses, in order (``packed_modules_mapping``, e.g. Qwen3's qkv_proj =
    q_proj, k_proj, v_proj stacked along the output dimension)."""
    return {k: list(v) for k, v in (getattr(model, "packed_modules_mapping", {}) or {}).items()}


def _packed_key(target: str, packed: dict) -> str:
    return next(key for key in packed if f".{key}." in f".{target}")


def vllm_target(name: str, packed: dict[str, list[str]], names) -> tuple[str, str | None]:
    """The vLLM parameter a trainer tensor lands in, and (for a fused one) which part it is."""
    if name in names:
        return name, None
    for fused, parts in packed.items():
        for part in parts:
            if f".{part}." in f".{name}":
                target = f".{name}".replace(f".{part}.", f".{fused}.", 1)[1:]
                if target in names:
                    return target, part
    raise GrpoflowError(f"weight-sync check: the trainer's {name} has no counterpart in vLLM's model; {_STOP}")


def difference(vllm_param, expected) -> float:
    """max |vLLM − expected cast to vLLM's dtype| over the expected tensor's extent (vLLM pads the vocabulary of
    its embedding and LM head to a multiple of 64 rows, vocab_parallel_embedding.py ``pad_vocab_size``)."""
    region = vllm_param[tuple(slice(0, n) for n in expected.shape)]
    if region.shape != expected.shape:
        raise GrpoflowError(
            f"weight-sync check: vLLM's weight of shape {tuple(vllm_param.shape)} cannot hold the trainer's {tuple(expected.shape)}"
        )
    return float((region.float() - expected.to(vllm_param.dtype).float()).abs().max())


def _largest_over_processes(value: float) -> float:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    box = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return float(box.item())
