"""What a checkpoint dir's checkpoints were trained from, and the check that a rerun trains the same thing.

Both backends resume from whatever checkpoint their dir holds (verl ``resume_mode=auto``, TRL from the newest
``checkpoint-N``). So before resuming, the trainer compares what this run would train with
``<checkpoint_dir>/grpoflow_run.json``::

    {"identity": {"settings": {...},                  # the settings that change what is trained (per backend)
                  "start_model": {...},               # content fingerprint of the SFT start (model_fingerprint)
                  "data": {...}},                     # content fingerprint of the training Parquet (sha256)
     "history": [{"up_to_step": 30, "identity": {...}}, ...]}   # earlier settings, when a run continued across a change

Outcomes (``check``):

- no checkpoint yet: the record is (re)written; nothing to protect;
- same identity: resume / finish as before;
- different identity, run not finished, ``resume_across_changes`` false: refused (one line: what changed, the two
  ways on); true: continued, the old identity kept in ``history`` and the change logged;
- different identity, run already at its final step: refused either way. Nothing would be trained under the new
  settings, so "continuing" could only relabel the old weights as the new run;
- checkpoints but no record (saved before grpoflow wrote one, or by another tool): refused unless
  ``resume_across_changes`` adopts them under the current identity.

The start model's fingerprint is cheap on purpose (a 32B SFT checkpoint is ~64 GB on NFS, and this runs at every
attempt): files up to ``FULL_HASH_MAX`` bytes (config, tokenizer, safetensors index, generation config) are hashed
whole; larger files (the weight shards) by their size plus the hash of ``SAMPLES`` blocks of ``SAMPLE_BYTES``
spread evenly over the file (first and last included): ~1 MiB read per shard. Another model, another SFT step or a
retrained one changes every tensor, so it changes sampled bytes; an edit confined to bytes between the samples of
a shard of the same size would go unnoticed. A Hub id is identified by its name (no download here).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from grpoflow.errors import ConfigError
from grpoflow.io import atomic_write_json, read_json, sha256_file

log = logging.getLogger(__name__)

RECORD = "grpoflow_run.json"
FULL_HASH_MAX = 16 << 20
SAMPLES = 16
SAMPLE_BYTES = 64 << 10
OPT_IN = "resume_across_changes"


# ---- fingerprints ---------------------------------------------------------------------------------------------


def _sampled_hash(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for i in range(SAMPLES):
            fh.seek((size - SAMPLE_BYTES) * i // (SAMPLES - 1))
            h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


def file_fingerprint(path: str | os.PathLike) -> str:
    path = Path(path)
    size = path.stat().st_size
    if size <= FULL_HASH_MAX:
        return f"sha256:{sha256_file(path)}"
    return f"size:{size};sampled-sha256:{_sampled_hash(path, size)}"


def model_fingerprint(model: str) -> dict[str, Any]:
    """The start model's identity: ``{file name: fingerprint}`` of a local model dir (its top-level files, hidden
    ones skipped), or ``{"hub_id": id}``. The path itself is not part of it: the same model moved elsewhere is the
    same start."""
    path = Path(model)
    if not path.is_dir():
        return {"hub_id": model}
    return {p.name: file_fingerprint(p) for p in sorted(path.iterdir()) if p.is_file() and not p.name.startswith(".")}


def data_fingerprint(parquet: str | os.PathLike) -> dict[str, Any]:
    """The training data's identity: the sha256 of the Parquet file (seconds even for GBs; not its path)."""
    return {"sha256": sha256_file(parquet)}


# ---- the check ------------------------------------------------------------------------------------------------


def _flatten(d: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    if not isinstance(d, dict) or not d:
        return {prefix: d}
    out: dict[tuple, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, prefix + (str(k),)))
    return out


def _show(value: Any, limit: int = 40) -> str:
    text = "(unset)" if value is _MISSING else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()


def describe_changes(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two identities: ``key old -> new`` for settings; the start model and the
    data by name (their fingerprints mean nothing to a reader)."""
    out = []
    a, b = _flatten(old.get("settings") or {}), _flatten(new.get("settings") or {})
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            out.append(f"{'.'.join(key)} {_show(a.get(key, _MISSING))} -> {_show(b.get(key, _MISSING))}")
    if old.get("start_model") != new.get("start_model"):
        files = sorted(
            k
            for k in set(old.get("start_model") or {}) | set(new.get("start_model") or {})
            if (old.get("start_model") or {}).get(k) != (new.get("start_model") or {}).get(k)
        )
        out.append(f"the start model ({', '.join(files[:3])}{' …' if len(files) > 3 else ''} differ)")
    if old.get("data") != new.get("data"):
        out.append("the training data's content")
    return out


def _summary(changes: list[str], limit: int = 4) -> str:
    return "; ".join(changes[:limit]) + (f"; and {len(changes) - limit} more" if len(changes) > limit else "")


def _shown(path: Path) -> str:
    """Project-relative when inside the working dir (verl gets $PWD/... paths), as the user wrote checkpoint_dir."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def read_record(checkpoint_dir: str | os.PathLike) -> dict | None:
    path = Path(checkpoint_dir) / RECORD
    if not path.is_file():
        return None
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return None
    return (
        record if isinstance(record, dict) and "identity" in record else None
    )  # the pre-identity TRL format counts as none


def check(
    checkpoint_dir: str | os.PathLike,
    identity: dict,
    *,
    latest: int | None,
    finished: bool,
    allow_change: bool,
    where: str,
) -> dict:
    """Compare ``identity`` with the record of ``checkpoint_dir`` (whose newest checkpoint is step ``latest``, the
    final one when ``finished``); raise ConfigError when the checkpoints belong to other settings, else write the
    record and return it. ``where`` is the experiment's config prefix (``experiments.NAME``) for the messages."""
    ckpt = Path(checkpoint_dir)
    identity = json.loads(json.dumps(identity, default=str))  # as it reads back from the record (lists, str keys)
    record = read_record(ckpt)
    fresh = f"set {where}.checkpoint_dir to a fresh dir to train from the start"
    shown = _shown(ckpt)
    if latest is None:
        if record is not None and record["identity"] != identity:
            log.info("%s holds no checkpoint yet: recording the current settings", ckpt)
        new = {"identity": identity, "history": []}
    elif record is None:
        if not allow_change:
            raise ConfigError(
                f"config error: {shown} holds checkpoints (up to step {latest}) with no record of what they were trained from "
                f"(saved before grpoflow kept {RECORD}, or by another tool): {fresh}, or set {where}.{OPT_IN}: true to continue from them under the current settings"
            )
        log.warning(
            "%s: adopting checkpoints up to step %d, which have no record, under the current settings (%s: true)",
            shown,
            latest,
            OPT_IN,
        )
        new = {"identity": identity, "history": [{"up_to_step": latest, "identity": None}]}
    elif record["identity"] == identity:
        return record
    else:
        changes = describe_changes(record["identity"], identity)
        what = f"{shown} holds checkpoints (up to step {latest}) trained with other settings: {_summary(changes)}"
        if finished:
            raise ConfigError(
                f"config error: {what}; that run is finished, so continuing would train nothing and only relabel its weights: {fresh}, or restore those settings"
            )
        if not allow_change:
            raise ConfigError(
                f"config error: {what}: {fresh}, or set {where}.{OPT_IN}: true to continue from step {latest} under the new settings"
            )
        log.warning(
            "%s; continuing from step %d under the new settings (%s: true); the old ones are kept in %s",
            what,
            latest,
            OPT_IN,
            ckpt / RECORD,
        )
        new = {
            "identity": identity,
            "history": record.get("history", []) + [{"up_to_step": latest, "identity": record["identity"]}],
        }
    atomic_write_json(ckpt / RECORD, new)
    return new
