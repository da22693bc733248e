"""Hugging Face Qwen3 checkpoints ↔ Tunix's Qwen3 (Flax NNX): load a model dir, export trained weights back.

Loading is Tunix's own (``tunix.models.qwen3.params.create_model_from_safe_tensors``) with the model config read
from the checkpoint's ``config.json`` instead of a named preset, so any dense Qwen3 loads (the demo's tiny model
as well as Qwen3-0.6B…32B).

Tunix 0.1.7's Qwen3 attention calls ``apply_rope(x, positions, head_dim=...)`` without the config's
``rope_theta`` (tunix/models/qwen3/model.py, ``Attention.__call__``), so every model runs with the default
θ = 1,000,000. That is right for Qwen3-0.6B…32B (θ = 1e6) and wrong for any other θ (Qwen3-4B-2507's 5e6, the
demo model's 1e4): the logits differ from transformers' from the second position on. ``load`` binds the
checkpoint's θ into that module's ``apply_rope`` for the process; ``tests/backends/tunix`` compares Tunix's
logits with transformers' on the same checkpoint.

Exporting inverts Tunix's key mapping (``_get_key_and_transform_mapping``: HF key → NNX path, transpose, reshape)
for each tensor of the start checkpoint, so the exported dir has exactly the start's tensor names, shapes and
dtype, and loads with ``AutoModelForCausalLM`` like the TRL and verl backends' merged models.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
from pathlib import Path

from grpoflow.errors import DataError

log = logging.getLogger(__name__)

# Files of an HF model dir that are not weights: copied from the start checkpoint into the exported model.
_MODEL_FILES = ("config.json", "generation_config.json")
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)


def _numpy_dtypes() -> dict:
    import ml_dtypes
    import numpy as np

    return {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}


def hf_config(model_dir: str | Path) -> dict:
    path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(
            f"{path}: cannot read the start model's config ({exc}): the tunix backend needs an HF model dir"
        )
    if cfg.get("model_type") != "qwen3":
        raise DataError(
            f"{path}: model_type {cfg.get('model_type')!r}: the tunix backend loads dense Qwen3 checkpoints "
            "(model_type qwen3); use backend trl or verl for other architectures"
        )
    return cfg


def rope_theta(cfg: dict) -> float:
    """transformers ≥ 5 keeps θ under ``rope_parameters``; older configs at the top level."""
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    if theta is None:
        raise DataError(
            "the start model's config.json has no rope_theta (neither rope_parameters.rope_theta nor rope_theta)"
        )
    return float(theta)


# tunix.remat -> Tunix's RematConfig member (tunix/models/qwen3/model.py): NONE, BLOCK (attention and MLP blocks),
# DECODER (the whole decoder layer; remat_config=3 in Tunix's CLI examples).
REMAT = {"none": "NONE", "block": "BLOCK", "decoder": "DECODER"}


def model_config(
    cfg: dict,
    param_dtype: str = "float32",
    compute_dtype: str = "float32",
    remat: str = "none",
    flash_attention: bool = False,
    flash_attention_block_size: int = 256,
):
    """Tunix's ``ModelConfig`` for an HF Qwen3 ``config.json`` (weights in ``param_dtype``, activations in
    ``compute_dtype``; ``remat``, ``flash_attention`` and its block size: ``tunix.*``, Tunix's ``remat_config``,
    ``use_flash_attention`` and ``flash_attention_block_size``)."""
    import jax.numpy as jnp
    from tunix.models.qwen3 import model as qwen3_model

    kwargs = dict(
        num_layers=cfg["num_hidden_layers"],
        vocab_size=cfg["vocab_size"],
        embed_dim=cfg["hidden_size"],
        hidden_dim=cfg["intermediate_size"],
        num_heads=cfg["num_attention_heads"],
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
        num_kv_heads=cfg["num_key_value_heads"],
        rope_theta=rope_theta(cfg),
        norm_eps=cfg["rms_norm_eps"],
        use_tied_embedding=bool(cfg.get("tie_word_embeddings", False)),
        dtype=getattr(jnp, compute_dtype),
        param_dtype=getattr(jnp, param_dtype),
        remat_config=qwen3_model.RematConfig[REMAT[remat]],
        use_flash_attention=flash_attention,
        flash_attention_block_size=flash_attention_block_size,
    )
    return qwen3_model.ModelConfig(**kwargs)


def _bind_rope_theta(theta: float) -> None:
    """Make Tunix's Qwen3 attention use ``theta`` (see the module docstring). Idempotent for one θ per process."""
    from tunix.models.qwen3 import model as qwen3_model

    current = qwen3_model.apply_rope
    original = getattr(current, "func", current)
    bound = getattr(current, "keywords", {}).get("rope_theta")
    if bound is not None and bound != theta:
        raise DataError(f"one process cannot hold Qwen3 models with different rope_theta ({bound} and {theta})")
    qwen3_model.apply_rope = functools.partial(original, rope_theta=theta)


def load(model_dir: str | Path, mesh, param_dtype: str = "float32", compute_dtype: str = "float32", **options):
    """An HF Qwen3 model dir as a Tunix ``Qwen3`` module on ``mesh``, its weights cast to ``param_dtype``
    (``options``: ``remat``, ``flash_attention``, ``flash_attention_block_size`` of ``model_config``)."""
    import jax.numpy as jnp
    from tunix.models.qwen3 import params as qwen3_params

    cfg = hf_config(model_dir)
    _bind_rope_theta(rope_theta(cfg))
    return qwen3_params.create_model_from_safe_tensors(
        str(model_dir),
        model_config(cfg, param_dtype, compute_dtype, **options),
        mesh,
        dtype=getattr(jnp, param_dtype),
    )


def check_flash_attention(platform: str) -> None:
    """Tunix's flash attention is the Pallas splash kernel for TPUs (jax.experimental.pallas.ops.tpu): refuse it
    on any other platform before a model is built."""
    from grpoflow.errors import ConfigError

    if platform != "tpu":
        raise ConfigError(
            f"config error: tunix.flash_attention is true but this job's JAX devices are {platform}: Tunix's flash "
            "attention is a TPU kernel (Pallas splash attention); set tunix.flash_attention: false off TPUs"
        )


# grpo.lora.target_modules "all-linear": every projection of Tunix's Qwen3 (attention and MLP).
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_provider(lora: dict):
    """qwix's LoRA for ``grpo.lora`` (rank, alpha, dropout, target_modules: "all-linear" or module names)."""
    import re as _re

    import qwix

    targets = lora.get("target_modules", "all-linear")
    names = ALL_LINEAR if targets == "all-linear" else [targets] if isinstance(targets, str) else list(targets)
    pattern = ".*(" + "|".join(_re.escape(n) for n in names) + ")"
    return qwix.LoraProvider(
        module_path=pattern, rank=lora["rank"], alpha=float(lora["alpha"]), dropout=lora["dropout"]
    )


def with_lora(model, lora: dict):
    """``model`` with qwix LoRA adapters on the ``grpo.lora`` target modules (its own weights stay frozen)."""
    import qwix

    return qwix.apply_lora_to_model(model, lora_provider(lora), **model.get_model_input())


def _flat_params(model, lora_scale: float | None = None) -> dict[str, object]:
    """``{"layers.0.attn.q_proj.w": array, ...}``: the module's parameters by Tunix path. qwix LoRA pairs
    (``<param>_lora_a`` ``(..., r)``, ``<param>_lora_b`` ``(r, ...)``) are merged into their parameter:
    W + (a · b) × alpha / rank."""
    import numpy as np
    from flax import nnx

    flat = {}
    for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        flat[".".join(str(p) for p in path)] = np.asarray(getattr(value, "value", value), dtype=np.float32)
    for key in [k for k in flat if k.endswith("_lora_a")]:
        target = key[: -len("_lora_a")]
        a, b = flat.pop(key), flat.pop(target + "_lora_b")
        if lora_scale is None:
            raise DataError(f"the model holds LoRA adapters ({key}) but no LoRA scale was given to merge them")
        flat[target] = flat[target] + np.tensordot(a, b, axes=1).reshape(flat[target].shape) * lora_scale
    return flat


def export(model, start_dir: str | Path, out_dir: str | Path, lora: dict | None = None) -> dict:
    """Write ``model``'s weights as an HF checkpoint shaped like ``start_dir`` (same tensor names, shapes, dtype),
    with the start's config, generation config and tokenizer files; ``lora`` (``grpo.lora``): its adapters are
    merged in first."""
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
    from tunix.models.qwen3 import params as qwen3_params

    start, out = Path(start_dir), Path(out_dir)
    cfg = hf_config(start)
    mapping = [
        (re.compile(f"^{pattern}$"), target, transform)
        for pattern, (target, transform) in qwen3_params._get_key_and_transform_mapping(model_config(cfg)).items()
    ]
    params = _flat_params(model, lora["alpha"] / lora["rank"] if lora else None)
    dtypes = _numpy_dtypes()
    used: set[str] = set()
    shards = sorted(start.glob("*.safetensors"))
    if not shards:
        raise DataError(f"{start}: no *.safetensors weights to export against")
    index: dict[str, str] = {}
    for shard in shards:
        tensors = {}
        with safe_open(str(shard), framework="numpy") as fh:
            for key in fh.keys():
                ref = fh.get_slice(key)  # shape and dtype only: numpy cannot read every dtype (bf16)
                shape, dtype = tuple(ref.get_shape()), dtypes[ref.get_dtype()]
                hit = next(((rx, tgt, tf) for rx, tgt, tf in mapping if rx.match(key)), None)
                if hit is None:
                    raise DataError(
                        f"{shard}: tensor {key} has no Tunix counterpart: cannot export a Qwen3 model with it"
                    )
                rx, target, transform = hit
                path = rx.sub(target, key)
                if path not in params:
                    raise DataError(f"the trained Tunix model has no parameter {path} (for {key})")
                value = np.asarray(params[path], dtype=np.float32)
                permute, _reshape = transform or (None, None)
                if permute:
                    # Tunix loads v.transpose(permute).reshape(shape): undo the reshape, then the transpose.
                    value = value.reshape(tuple(shape[i] for i in permute)).transpose(np.argsort(permute))
                else:
                    value = value.reshape(shape)
                tensors[key] = np.ascontiguousarray(value.astype(dtype))
                used.add(path)
                index[key] = shard.name
        save_file(tensors, str(out / shard.name), metadata={"format": "pt"})
    unused = sorted(set(params) - used)
    if unused:
        raise DataError(
            f"{len(unused)} trained Tunix parameter(s) have no place in the HF checkpoint (e.g. {unused[0]})"
        )
    if len(shards) > 1:
        total = sum((out / s.name).stat().st_size for s in shards)
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=2), encoding="utf-8"
        )
    for name in _MODEL_FILES + _TOKENIZER_FILES:
        if (start / name).is_file():
            shutil.copy2(start / name, out / name)
    return {"tensors": len(index), "shards": len(shards)}
