"""`merge_checkpoint`: a training checkpoint → a plain Hugging Face model dir (``results/{experiment}/model``).

Each backend converts its own checkpoints (its Backend object's ``merge``): verl's FSDP shards with verl's merger,
TRL's ``checkpoint-N/`` as it is (a PEFT adapter merged into the SFT start), Tunix's Orbax step exported tensor by
tensor. LoRA adapters are merged with PEFT (grpoflow.training.merging.peft_merge: in float32, saved in the base's
dtype), so evaluation gets a plain model.

Then, before the dir is moved into place (atomically, so a failed merge never leaves a model that looks
done): the weights load with transformers (no missing, unexpected or resized tensor; all finite), the tokenizer
loads and has a chat template, and ``generation_config`` equals the SFT start's (copied from it when the
checkpoint has none). ``grpoflow_merge.json`` in the model dir records what was merged and how.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from grpoflow import backends
from grpoflow.errors import GrpoflowError
from grpoflow.io import atomic_dir, atomic_write_json, read_json
from grpoflow.provenance import compute_environment

log = logging.getLogger("grpoflow.merge")

MERGE_RECORD = "grpoflow_merge.json"


# ---- entry point --------------------------------------------------------------------------------------------


def merge_checkpoint(
    backend: str, checkpoint_dir: str, step: int | str, sft_json: str, marker: str, out_dir: str
) -> dict:
    """Merge step ``step`` ('last' = the marker's final step) of ``checkpoint_dir`` into ``out_dir``."""
    started = time.monotonic()
    sft = read_json(sft_json)
    base = sft["path"]
    final = read_json(marker)["final_step"]
    step = int(final if step in ("last", None) else step)
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        if backend not in backends.names():
            raise GrpoflowError(f"merge_checkpoint: unknown backend {backend!r}")
        # The backend's own merge (its Backend object's merge imports its trainer's libraries, only here), checked
        # the way its environment can (MERGE_CHECKED_WITH: the Tunix one has no torch).
        converter = backends.get(backend)
        info = converter.merge(checkpoint_dir, step, base, tmp)
        info["checks"] = check_merged(tmp, base, load_with=converter.MERGE_CHECKED_WITH)
        info.update(
            {"backend": backend, "step": step, "base_model": base, "seconds": round(time.monotonic() - started, 1)}
        )
        # The CPU, thread variables and torch threads the merge ran with (PEFT's merge and verl's merger compute on
        # the host CPU: their rounding may depend on the thread count).
        info["compute"] = compute_environment()
        atomic_write_json(tmp / MERGE_RECORD, info)
    log.info("merged %s step %d into %s in %.0f s", backend, step, out, time.monotonic() - started)
    return info


# ---- shared pieces ------------------------------------------------------------------------------------------


def _local_model_dir(base: str) -> Path | None:
    """The SFT start as a local dir (a Hub id resolved through the HF cache only, never downloaded)."""
    if Path(base).is_dir():
        return Path(base)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(base, local_files_only=True))
    except Exception:  # noqa: BLE001 (not cached, or not a Hub id: the comparison is skipped, and said so)
        return None


def _generation_config(path: Path) -> dict | None:
    f = path / "generation_config.json"
    if not f.is_file():
        return None
    data = json.loads(f.read_text())
    data.pop("transformers_version", None)
    return data


def check_merged(model_dir: Path, base: str, load_with: str = "transformers") -> dict[str, Any]:
    """The checks a merged model must pass before it replaces results/{experiment}/model. ``load_with``:
    ``transformers`` loads it with AutoModelForCausalLM (torch); ``safetensors`` compares its tensors' names,
    shapes and dtypes with the SFT start's and checks their values are finite (numpy: the Tunix environment)."""
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    checks: dict[str, Any] = {}
    # generation_config: verl writes the base's when the base had one; HF full fine-tunes save their own.
    base_dir = _local_model_dir(base)
    if base_dir is None:
        log.warning("SFT start %s is not available locally: generation_config not compared", base)
        checks["generation_config"] = "not compared (SFT start not local)"
    else:
        want, have = _generation_config(base_dir), _generation_config(model_dir)
        if have is None and want is not None:
            shutil.copy2(base_dir / "generation_config.json", model_dir / "generation_config.json")
            log.info("generation_config.json copied from the SFT start %s (the checkpoint had none)", base_dir)
            have = want
        if have != want:
            diff = sorted(k for k in set(have or {}) | set(want or {}) if (have or {}).get(k) != (want or {}).get(k))
            raise GrpoflowError(
                f"the merged model's generation_config differs from the SFT start's ({base_dir}) in {', '.join(diff)}: the checkpoint was trained from another model than sft.json names; rerun discover_sft_checkpoint or check checkpoint_dir"
            )
        checks["generation_config"] = "equal to the SFT start's" if want is not None else "absent in both"

    checks["weights"] = (_check_weights_torch if load_with == "transformers" else _check_weights_safetensors)(
        model_dir, base_dir
    )

    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception as err:  # noqa: BLE001
        raise GrpoflowError(
            f"the merged model in {model_dir} has no loadable tokenizer: {' '.join(str(err).split())[:200]}"
        )
    if not tok.chat_template:
        raise GrpoflowError(
            f"the merged model in {model_dir} has no chat template (evaluation renders prompts with it): the checkpoint's tokenizer lacks it; give the SFT model one"
        )
    tok.apply_chat_template([{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True)
    checks["tokenizer"] = {"class": type(tok).__name__, "vocab": len(tok), "chat_template": True}
    return checks


def _check_weights_torch(model_dir: Path, base_dir: Path | None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", output_loading_info=True)
    except Exception as err:  # noqa: BLE001 (any load failure is the finding)
        raise GrpoflowError(
            f"the merged model in {model_dir} does not load with transformers: {type(err).__name__}: {' '.join(str(err).split())[:300]}"
        )
    problems = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if problems:
        kind, keys = next(iter(problems.items()))
        raise GrpoflowError(
            f"the merged model in {model_dir} loads with {len(keys)} {kind.replace('_', ' ')} (e.g. {list(keys)[0]}): the merge is incomplete"
        )
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise GrpoflowError(
            f"the merged model has non-finite values in {len(bad)} tensor(s) (e.g. {bad[0]}): the checkpoint is damaged; merge another step"
        )
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
    }


def _tensor_specs(model_dir: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    from safetensors import safe_open

    specs = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(shard), framework="numpy") as fh:
            for key in fh.keys():
                part = fh.get_slice(key)
                specs[key] = (tuple(part.get_shape()), part.get_dtype())
    return specs


def _check_weights_safetensors(model_dir: Path, base_dir: Path | None) -> dict:
    import ml_dtypes  # noqa: F401 (numpy reads bf16 tensors through it)
    import numpy as np
    from safetensors import safe_open

    have = _tensor_specs(model_dir)
    if not have:
        raise GrpoflowError(f"the merged model in {model_dir} has no *.safetensors weights")
    if base_dir is not None:
        want = _tensor_specs(base_dir)
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        if diff:
            raise GrpoflowError(
                f"the merged model's tensor {diff[0]} is {have.get(diff[0])} but the SFT start's is {want.get(diff[0])} ({len(diff)} differ): the merge is incomplete"
            )
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(shard), framework="numpy") as fh:
            for key in fh.keys():
                if not np.isfinite(fh.get_tensor(key).astype(np.float32)).all():
                    raise GrpoflowError(
                        f"the merged model has non-finite values in {key}: the checkpoint is damaged; merge another step"
                    )
    return {
        "parameters": sum(int(np.prod(shape)) for shape, _ in have.values()),
        "dtype": sorted({dtype for _, dtype in have.values()}),
        "tensors": "names, shapes and dtypes equal to the SFT start's" if base_dir is not None else len(have),
    }


def main(argv: list[str] | None = None) -> int:
    """python -m grpoflow.merge BACKEND CHECKPOINT_DIR STEP SFT_JSON MARKER OUT_DIR (the rule's call, by hand)."""
    from grpoflow.joblog import guarded, setup_logging

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 6:
        print(main.__doc__, file=sys.stderr)
        return 2
    setup_logging()
    backend, ckpt, step, sft_json, marker, out = args
    guarded(
        merge_checkpoint,
        backend,
        ckpt,
        step if step == "last" else int(step),
        sft_json,
        marker,
        out,
        what="merge_checkpoint",
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
