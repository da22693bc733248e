"""Hub start models fetched once, on the login node (rule ``download_model``), for compute nodes without internet.

A Hub id given as ``sft.model`` or as an ``evaluation.models.<name>.path`` is downloaded with
``huggingface_hub.snapshot_download`` at ``sft.revision`` (a commit, tag or branch; ``main`` when unset) into
the shared cache ``hf_home`` (``<hf_home>/hub``, Hugging Face's own cache layout), and a manifest records the
commit it resolved to and every file's size and SHA-256. The manifest is the rule's output, written last: a
half-finished download never looks complete, and the commit it names is the one every later job uses (a moved
branch does not change a run that already has its manifest; delete the manifest to fetch again).

``discover_sft_checkpoint`` then records the snapshot directory (``<hf_home>/hub/models--org--name/snapshots/<commit>``)
as the start model's path, and ``evaluate`` loads an evaluation model's snapshot from its manifest, so the trainers,
the merge and the evaluation load a local directory. Every job also
runs with ``HF_HUB_OFFLINE=1`` and ``HF_HOME=<hf_home>`` (grpoflow.deployment): nothing on a compute node asks
the Hub, and a file that is not in the cache fails at once instead of hanging on a network timeout.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from grpoflow.errors import DataError
from grpoflow.hubid import is_hub_id
from grpoflow.io import atomic_write_json, read_json, sha256_file

log = logging.getLogger(__name__)

DEFAULT_HF_HOME = "resources/hf"


def wildcard(repo_id: str) -> str:
    """The rule's {hub_model} wildcard for a Hub id: org/name -> org--name (as the HF cache names repos)."""
    return repo_id.replace("/", "--")


def manifest_path(repo_id: str) -> str:
    return f"resources/models/{wildcard(repo_id)}/manifest.json"


def download_model(repo_id: str, revision: str | None, hf_home: str, manifest: str, where: str) -> dict:
    """Fetch ``repo_id`` at ``revision`` into ``<hf_home>/hub`` and write ``manifest`` last."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    rev = revision or "main"
    cache = Path(hf_home, "hub")
    try:
        snapshot = Path(snapshot_download(repo_id, revision=rev, cache_dir=str(cache)))
    except (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError) as exc:
        raise DataError(
            f"{where}: cannot fetch model {repo_id!r} at revision {rev!r} from the Hub ({exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}): run on a node with internet (download_model is a localrule: the login node), check the id and revision, and HF_TOKEN for gated repos"
        ) from None
    files = {}
    for path in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        rel = path.relative_to(snapshot).as_posix()
        files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    if "config.json" not in files:
        raise DataError(f"{where}: {repo_id} at {rev} has no config.json: it is not a Hugging Face model repo")
    record = {
        "repo_id": repo_id,
        "revision": rev,
        "commit": snapshot.name,
        "snapshot": str(snapshot.resolve()),
        "hf_home": str(Path(hf_home).resolve()),
        "files": files,
    }
    atomic_write_json(manifest, record)
    log.info("%s@%s (commit %s): %d files in %s", repo_id, rev, snapshot.name, len(files), snapshot)
    return record


def snapshot_of(manifest: str, verify: bool = False) -> str:
    """The local snapshot directory a download_model manifest names (its files checked by size, or by SHA-256
    with ``verify``)."""
    record = read_json(manifest)
    snap = Path(record["snapshot"])
    for rel, meta in record["files"].items():
        p = snap / rel
        if not p.is_file() or p.stat().st_size != meta["size"] or (verify and sha256_file(p) != meta["sha256"]):
            raise DataError(
                f"{snap / rel} is missing or changed since download_model fetched {record['repo_id']} (manifest {manifest}): delete the manifest and rerun to fetch it again"
            )
    return str(snap)


def hf_home_dir(raw: str | None) -> str:
    """hf_home as the jobs' shell sees it: relative paths under the job's working dir (the project dir)."""
    import shlex

    value = raw or DEFAULT_HF_HOME
    return shlex.quote(value) if os.path.isabs(value) else f'"$PWD"/{shlex.quote(value)}'


def hub_start_models(cfg) -> dict[str, dict]:
    """{wildcard: {"repo_id", "revision", "where"}} of every Hub id the jobs load: each experiment's ``sft.model``
    and each ``evaluation.models.<name>.path``. One model has one revision: two experiments that pin different
    ones are refused (one line naming both keys). An evaluation model has no revision key of its own: it is
    fetched at the revision an experiment pins for the same id, else ``main`` (the manifest pins the commit)."""
    from grpoflow.errors import ConfigError

    out: dict[str, dict] = {}
    for name, exp in sorted(cfg.experiments.items()):
        sft = exp.get("sft") or {}
        if not is_hub_id(sft.get("model")):
            continue
        key = wildcard(sft["model"])
        rev = sft.get("revision") or "main"
        where = f"experiments.{name}.sft"
        if key in out and out[key]["revision"] != rev:
            raise ConfigError(
                f"config error: {where}.revision = {rev!r} but {out[key]['where']}.revision = {out[key]['revision']!r} for the same model {sft['model']}: download_model fetches one revision per model; make them equal"
            )
        out.setdefault(key, {"repo_id": sft["model"], "revision": rev, "where": where})
    for name, entry in sorted(((cfg.evaluation or {}).get("models") or {}).items()):
        path = entry.get("path")
        if is_hub_id(path) and not os.path.isdir(path):  # a local dir named like org/name is a dir, not an id
            out.setdefault(wildcard(path), {"repo_id": path, "revision": "main", "where": f"evaluation.models.{name}"})
    return out


def evaluation_model_manifest(entry: dict) -> str | None:
    """The download_model manifest an ``evaluation.models`` entry is loaded from (its ``path`` a Hub id), else
    None (a local model dir)."""
    path = entry.get("path")
    return manifest_path(path) if is_hub_id(path) and not os.path.isdir(path) else None
