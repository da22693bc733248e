"""`download_data`: bring one dataset's raw files into resources/data/{dataset}/ and describe them.

Every source ends the same way: one JSONL/JSON/Parquet file per split next to a ``manifest.json`` recording
where the data came from (Hub repo + resolved commit, local path, or generator settings), each file's
SHA-256 and row count. ``convert_to_parquet`` reads only what the manifest lists.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from grpoflow.data.readers import FORMATS, read_records
from grpoflow.data.synthetic import generate_arithmetic
from grpoflow.errors import DataError
from grpoflow.io import atomic_path, atomic_write_json, atomic_write_jsonl, sha256_file

log = logging.getLogger(__name__)


def download_dataset(name: str, spec: dict, manifest_path: str, endpoint: str | None = None) -> dict:
    """Fetch dataset ``name`` (its resolved config ``spec``) and write ``manifest_path`` last. ``endpoint``: another
    Hub than ``HF_ENDPOINT``'s (the tests' stand-in)."""
    out_dir = Path(manifest_path).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    where = f"datasets.{name}"
    source = spec["source"]
    if source == "synthetic":
        files, origin = _synthetic(spec["synthetic"], out_dir, where)
    elif source == "local":
        files, origin = _local(spec["local"], out_dir, where)
    else:
        files, origin = _hub(spec["hub"], out_dir, where, name, endpoint)
    manifest = {"dataset": name, "source": source, "origin": origin, "files": {}}
    for split, path in sorted(files.items()):
        what = f"{where} {split} file"
        if source == "local":  # name what the user can fix: the config key and their file, not the copy made here
            key = _local_name(spec["local"], split)
            what = f"{where}.local.{key} = {spec['local'][key]!r}, read from its copy"
        rows = read_records(str(path), what=what)
        manifest["files"][split] = {"path": os.path.basename(path), "sha256": sha256_file(path), "rows": len(rows)}
        log.info("%s: %s split: %d rows from %s", name, split, len(rows), path)
    # The manifest is the rule's output: written last, so a half-finished download never looks complete.
    atomic_write_json(manifest_path, manifest)
    return manifest


def _synthetic(spec: dict, out_dir: Path, where: str):
    splits = generate_arithmetic(spec, where=f"{where}.synthetic")
    files = {}
    for split, rows in splits.items():
        path = out_dir / f"{split}.jsonl"
        atomic_write_jsonl(path, rows)
        files[split] = path
    return files, {"generator": "grpoflow.data.synthetic.generate_arithmetic", "settings": spec}


def _copy_into(src: str, out_dir: Path, split: str) -> Path:
    ext = os.path.splitext(src)[1].lower()
    dest = out_dir / f"{split}{ext}"
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return dest


def _local_name(spec: dict, split: str) -> str:
    """The `local:` key that gives a split's file (`path` is the train split)."""
    return "path" if "path" in spec and split == "train" else split


def _local(spec: dict, out_dir: Path, where: str):
    wanted = {("train" if key == "path" else key): path for key, path in spec.items()}
    files, origin = {}, {}
    for split, path in sorted(wanted.items()):
        key = f"{where}.local.{_local_name(spec, split)}"
        if not os.path.isfile(path):
            raise DataError(
                f"{key}: file {path!r} not found (relative paths are relative to the workflow directory {os.getcwd()}): fix the path"
            )
        if os.path.splitext(path)[1].lower() not in FORMATS:
            raise DataError(f"{key}: {path!r} is not a .jsonl, .json or .parquet file")
        files[split] = _copy_into(path, out_dir, split)
        origin[split] = os.path.abspath(path)
    return files, {"local_files": origin}


def _snapshot_of(cached: str) -> Path:
    """The snapshot folder (``.../snapshots/<commit>``) a file of the HF cache lies in."""
    snapshot = Path(cached).parent
    while snapshot.parent.name != "snapshots" and snapshot != snapshot.parent:
        snapshot = snapshot.parent
    return snapshot


def _hub(spec: dict, out_dir: Path, where: str, name: str, endpoint: str | None = None):
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    repo, rtype, rev = spec["repo_id"], spec["repo_type"], spec["revision"]
    try:
        if spec.get("filename") or spec.get("files"):
            wanted = spec.get("files") or {"train": spec["filename"]}
            cached = {
                split: hf_hub_download(repo, path, repo_type=rtype, revision=rev, endpoint=endpoint)
                for split, path in sorted(wanted.items())
            }
            snapshot = _snapshot_of(next(iter(cached.values())))
            found = {split: [Path(p)] for split, p in cached.items()}
        else:
            prefix = f"{spec['config']}/" if spec.get("config") else ""
            snapshot = Path(
                snapshot_download(
                    repo,
                    repo_type=rtype,
                    revision=rev,
                    allow_patterns=[f"{prefix}*"] if prefix else None,
                    endpoint=endpoint,
                )
            )
            found = {
                ours: _find_split_files(snapshot, prefix, theirs, where) for ours, theirs in spec["splits"].items()
            }
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
        raise DataError(_offline_message(spec, where, name, exc)) from None
    except HfHubHTTPError as exc:
        raise DataError(
            f"{where}.hub: the Hub refused {rtype} {repo!r} at revision {rev!r} ({exc.__class__.__name__}): check repo_id/revision, and HF_TOKEN for gated or private repos"
        ) from None
    files = {split: _copy_or_join(paths, out_dir, split) for split, paths in found.items()}
    commit = snapshot.name if snapshot.parent.name == "snapshots" else None
    return files, {
        "repo_id": repo,
        "repo_type": rtype,
        "revision": rev,
        "resolved_commit": commit,
        "config": spec.get("config"),
        "filename": spec.get("filename"),
        "files": spec.get("files"),
        "hub_files": {s: [str(p.relative_to(snapshot)) if commit else p.name for p in ps] for s, ps in found.items()},
    }


def _copy_or_join(paths: list[Path], out_dir: Path, split: str) -> Path:
    if len(paths) == 1:
        return _copy_into(str(paths[0]), out_dir, split)
    dest = out_dir / f"{split}.jsonl"  # shards of one split become one file, in shard order
    atomic_write_jsonl(dest, (row for p in paths for row in read_records(str(p))))
    return dest


def _find_split_files(snapshot: Path, prefix: str, split: str, where: str) -> list[Path]:
    """The data files of one split in a Hub snapshot: {config}/{split}-0000N-of-0000M.parquet and friends."""
    folder = snapshot / prefix if prefix else snapshot
    candidates = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in FORMATS
        and (p.name == split + p.suffix or p.name.startswith((f"{split}-", f"{split}_", f"{split}.")))
    )
    if not candidates:
        listing = ", ".join(sorted(str(p.relative_to(snapshot)) for p in folder.rglob("*") if p.is_file())[:10])
        raise DataError(
            f"{where}.hub.splits: no file for split {split!r} in the snapshot (files: {listing or 'none'}): set hub.config/hub.splits to match the repo"
        )
    return candidates


def _offline_message(spec: dict, where: str, name: str, exc: Exception) -> str:
    repo = spec["repo_id"]
    if spec.get("files"):
        splits = ", ".join(f"local.{s}: <{p.rsplit('/', 1)[-1]}>" for s, p in sorted(spec["files"].items()))
        placement = f"download {', '.join(sorted(spec['files'].values()))} from {repo} and set {where}.source: local with {splits}"
    elif spec.get("filename"):
        placement = f"download {spec['filename']} from {repo} and set {where}.source: local with {where}.local.path: <that file>"
    else:
        splits = ", ".join(f"local.{s}: <{s}.jsonl>" for s in spec["splits"])
        placement = f"save its splits as JSONL/Parquet and set {where}.source: local with {splits}"
    offline = (
        " (HF_HUB_OFFLINE=1 is set, and the local Hugging Face cache has no copy)"
        if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True")
        else ""
    )
    return (
        f"{where}: cannot download {spec['repo_type']} {repo!r} (revision {spec['revision']}) from the Hugging Face Hub{offline}: "
        f"no network and no cached copy. Either run once where the Hub is reachable (the HF cache is reused; HF_HUB_OFFLINE=1 then works), "
        f"or {placement}"
    )
