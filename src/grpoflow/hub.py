"""`upload_to_hub`: publish an experiment's merged model with a generated model card.

- ``upload.enabled: false`` (the default): nothing is sent; the record says so (the job stays in the DAG, so
  switching upload on later reruns only this job).
- ``upload.dry_run: true``: lists every file that would be uploaded (path, size, sha256) and the model card;
  sends nothing and needs no token.
- Otherwise: ``create_repo(exist_ok=True)`` (``private`` applies when the repo is created), the branch
  ``revision`` if it is not ``main``, then one ``upload_folder`` of the model dir + README.md. Idempotent: the
  card is built only from the run's files (no upload time), and the Hub skips files whose content it already
  has, so re-uploading the same model creates no commit (the record then says ``changed: false``).

The token comes from ``HF_TOKEN`` or the Hugging Face cache (``hf auth login``) via huggingface_hub, and is
checked before anything is sent. It is never logged or written: records hold no headers, and error messages
are scrubbed of it.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import tempfile
from pathlib import Path

import yaml

from grpoflow.credentials import is_credential_name
from grpoflow.errors import GrpoflowError
from grpoflow.generation import first_line
from grpoflow.hubid import HUB_ID
from grpoflow.io import atomic_write_json, read_json, sha256_file

log = logging.getLogger(__name__)

CARD_NAME = "README.md"


# ---- what would be uploaded -------------------------------------------------------------------------------------


def model_files(model_dir: str) -> list[dict]:
    """Files of the merged model dir that upload_folder would send (its default ignores applied), sorted.
    A README.md in the model dir is replaced by the generated card."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    root = Path(model_dir)
    if not root.is_dir():
        raise GrpoflowError(
            f"model dir {model_dir} not found: run merge_checkpoint first (snakemake results/<experiment>/model)"
        )
    rel = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    kept = [r for r in filter_repo_objects(rel, ignore_patterns=list(DEFAULT_IGNORE_PATTERNS)) if r != CARD_NAME]
    return [{"path": r, "size": (root / r).stat().st_size, "sha256": sha256_file(root / r)} for r in kept]


def _public_config(experiment_cfg: dict) -> dict:
    """The experiment config as the card shows it: environment values and anything named like a credential
    (e.g. WANDB_API_KEY in verl.env, a hub_token in trl.extra_args) redacted."""

    def redact(value, key: str = "", under_env: bool = False):
        if isinstance(value, dict):
            return {k: redact(v, k, under_env or (key == "env")) for k, v in value.items()}
        if isinstance(value, list):
            return [redact(v) for v in value]
        # The same rule that keeps credentials out of the config (grpoflow.credentials.is_credential_name).
        return "<redacted>" if under_env or is_credential_name(key) else value

    cfg = redact(copy.deepcopy(experiment_cfg))
    cfg.pop("upload", None)
    return cfg


def _base_model(experiment_cfg: dict) -> str | None:
    """The SFT start as a Hub id (for the card's base_model), when it is one."""
    path = (experiment_cfg.get("sft") or {}).get("model")
    return path if path and not os.path.exists(path) and HUB_ID.match(path) else None


def card_sources(cfg, experiment: str) -> dict:
    """What the model card names beyond the experiment's own settings (from the resolved config ``cfg``): the
    training dataset's Hub repo and revision (or its local name) and prompt, and each benchmark's Hub repo,
    revision, config and split when it comes from the Hub."""
    from grpoflow.schema.benchmarks import hub_source

    exp = cfg.experiment(experiment)

    def hub_of(dataset: str | None) -> dict:
        ds = cfg.datasets.get(dataset) if dataset else None
        if not ds or ds["source"] != "hub":
            return {"name": dataset}
        hub = ds["hub"]
        return {"name": dataset, "repo_id": hub["repo_id"], "revision": hub["revision"], "config": hub.get("config")}

    def hub_split(dataset: str, split: str) -> tuple[str | None, str | None]:
        """(split, config) of the Hub repo that grpoflow's ``split`` of ``dataset`` was read from, or None where
        the Hub does not say: grpoflow's split names are its own (a benchmark is always its ``test`` split, AIME
        2024's problems are the Hub's ``train`` split)."""
        ds = cfg.datasets[dataset]
        hub = ds["hub"]
        builtin = hub_source(dataset)
        if builtin and builtin["repo_id"] == hub["repo_id"] and hub.get("files") == _builtin_files(dataset):
            return builtin["split"], builtin["config"]
        if hub.get("files") or hub.get("filename") or isinstance(ds.get(split), dict):
            return None, hub.get("config")  # a file's split is the repo's README's to say; a carved split is ours
        return (hub.get("splits") or {}).get(split), hub.get("config")

    train = exp["data"]["dataset"]
    benchmarks = {}
    for name, bench in cfg.evaluation["benchmarks"].items():
        entry = hub_of(bench.get("dataset"))
        entry["split"] = None
        if "dataset" in bench and entry.get("repo_id"):
            entry["split"], entry["config"] = hub_split(bench["dataset"], bench.get("split"))
        benchmarks[name] = entry
    return {"train_dataset": hub_of(train), "prompt": cfg.datasets[train]["prompt"], "benchmarks": benchmarks}


def _builtin_files(name: str) -> dict | None:
    from grpoflow.schema.benchmarks import BUILTIN

    return BUILTIN[name]["dataset"]["hub"].get("files")


def _eval_result(ev: dict, source: dict):
    """One evaluation as a model-index entry: the Hub dataset id and revision when the benchmark has one, the
    metric named as the field does (accuracy for greedy; pass@1 over n samples reported as avg@n)."""
    from huggingface_hub import EvalResult

    samples = ev.get("samples_per_problem") or (ev.get("generation") or {}).get("samples") or 1
    return EvalResult(
        task_type="text-generation",
        dataset_type=source.get("repo_id") or ev["benchmark"],
        dataset_name=ev["benchmark"],
        dataset_config=source.get("config"),
        dataset_split=source.get("split") if source.get("repo_id") else None,
        dataset_revision=source.get("revision"),
        metric_type="accuracy" if samples == 1 else "pass@1",
        metric_name="accuracy" if samples == 1 else f"avg@{samples}",
        metric_value=round(ev["metrics"]["accuracy"], 4),
    )


def model_card(
    experiment: str,
    experiment_cfg: dict,
    marker: dict,
    evaluations: list[dict],
    repo_id: str,
    sources: dict | None = None,
) -> str:
    """README.md for the Hub: metadata (license, base model, datasets, languages, model-index), evaluation
    table, training prompt, training config and provenance — all from the run's own files and config, so the
    same run always yields the same card. ``sources``: ``card_sources(cfg, experiment)``."""
    from huggingface_hub import ModelCard

    sources = sources or {}
    name = repo_id.split("/")[-1]
    meta = _card_metadata(experiment, experiment_cfg, evaluations, name, sources)
    lines = ["---", meta.to_yaml(), "---", "", f"# {name}", ""]
    lines += _card_summary(experiment, experiment_cfg, marker)
    lines += _card_evaluation(evaluations)
    lines += _card_prompt(sources.get("prompt"))
    lines += [
        "## Training configuration",
        "",
        "```yaml",
        yaml.safe_dump(_public_config(experiment_cfg), sort_keys=True).strip(),
        "```",
        "",
    ]
    lines += _card_provenance(marker)
    return str(ModelCard("\n".join(lines).rstrip() + "\n"))  # ModelCard parses (and so checks) the metadata


def _card_metadata(experiment: str, experiment_cfg: dict, evaluations: list[dict], name: str, sources: dict):
    """The card's YAML metadata (a ``ModelCardData``); warns when it has no license."""
    from huggingface_hub import ModelCardData

    grpo, upload = experiment_cfg["grpo"], experiment_cfg.get("upload") or {}
    tags = ["grpo", "reinforcement-learning", "math", "grpoflow"] + (
        ["lora-merged"] if grpo.get("lora", {}).get("rank") else []
    )
    # The accuracies also go into the card's metadata (model-index), where the Hub shows them as evaluation results.
    bench_sources = sources.get("benchmarks") or {}
    results = [
        _eval_result(ev, bench_sources.get(ev["benchmark"]) or {})
        for ev in sorted(evaluations, key=lambda e: e["benchmark"])
    ]
    train_repo = (sources.get("train_dataset") or {}).get("repo_id")
    meta = ModelCardData(
        license=upload.get("license"),
        language=upload.get("language") or None,
        base_model=_base_model(experiment_cfg),
        datasets=[train_repo] if train_repo else None,
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=tags,
        model_name=name if results else None,
        eval_results=results or None,
    )
    if not upload.get("license"):
        log.warning(
            "%s: the model card has no license: set upload.license (the base model's, e.g. apache-2.0)", experiment
        )
    return meta


def _card_summary(experiment: str, experiment_cfg: dict, marker: dict) -> list[str]:
    """The paragraph under the title: what was fine-tuned, how, on what."""
    grpo, data = experiment_cfg["grpo"], experiment_cfg["data"]
    start = _base_model(experiment_cfg) or "its SFT checkpoint"
    return [
        f"GRPO fine-tune of `{start}` for math reasoning, trained with grpoflow (experiment `{experiment}`, "
        f"backend {experiment_cfg['backend']}, {marker.get('final_step', grpo['total_steps'])} optimizer steps, "
        f"{grpo['prompts_per_step']} prompts × {grpo['num_generations']} completions per step, rewards: {', '.join(experiment_cfg['rewards']['funcs'])}) "
        f"on dataset `{data['dataset']}` (split {data['train_split']}). "
        + (
            f"The LoRA adapter (rank {grpo['lora']['rank']}) is merged into the weights: this is a plain transformers model."
            if grpo.get("lora", {}).get("rank")
            else "Full fine-tuning."
        ),
        "",
    ]


def _card_evaluation(evaluations: list[dict]) -> list[str]:
    """The evaluation table (nothing without evaluations)."""
    if not evaluations:
        return []
    lines = [
        "## Evaluation",
        "",
        "| benchmark | accuracy | format | partial (±10%) | no answer | truncated | mean tokens | problems | decoding |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|:---|",
    ]
    for ev in sorted(evaluations, key=lambda e: e["benchmark"]):
        m, g = ev["metrics"], ev["generation"]
        decoding = "greedy" if g.get("greedy") else f"{g['preset']} (T {g['temperature']}, avg@{g['samples']})"
        lines.append(
            f"| {ev['benchmark']} | {100 * m['accuracy']:.1f}% | {100 * m['format_accuracy']:.1f}% | {100 * m['partial_accuracy']:.1f}% | "
            f"{100 * m['no_answer_rate']:.1f}% | {100 * m['truncation_rate']:.1f}% | {m['mean_response_tokens']:.1f} | {ev['n_problems']} | "
            f"{decoding}, max {g['max_new_tokens']} tokens |"
        )
    return lines + [
        "",
        "Accuracy is graded by grpoflow's answer verifier (final `\\boxed{}`, `<answer>` tag, `####` line or answer phrase, compared symbolically).",
        "",
    ]


def _card_prompt(prompt: dict | None) -> list[str]:
    """The chat messages of training (nothing when the sources do not give them)."""
    if not prompt:
        return []
    lines = [
        "## Training prompt",
        "",
        "The chat messages every training problem was asked with (`{question}`: the problem):",
        "",
    ]
    if prompt.get("system"):
        lines += ["System:", "", "```text", prompt["system"], "```", ""]
    return lines + ["User:", "", "```text", prompt["template"], "```", ""]


def _card_provenance(marker: dict) -> list[str]:
    """Commit, config hash, finish time, steps, last training metrics and package versions of the run."""
    prov = marker.get("provenance") or {}
    lines = ["## Provenance", ""]
    if prov.get("git_commit"):
        lines.append(f"- grpoflow commit: `{prov['git_commit']}`")
    if prov.get("config_hash"):
        lines.append(f"- experiment config hash: `{prov['config_hash']}`")
    if prov.get("time"):
        lines.append(f"- training finished: {prov['time']}")
    lines.append(f"- final step: {marker.get('final_step')} of {marker.get('planned_steps')}")
    if marker.get("metrics_summary"):
        lines.append(
            "- last training step: "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in sorted(marker["metrics_summary"].items())
            )
        )
    for name, version in sorted((prov.get("packages") or {}).items()):
        lines.append(f"- {name} {version}")
    return lines


# ---- the job ------------------------------------------------------------------------------------------------------


def find_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def upload_experiment(
    experiment: str,
    upload: dict,
    experiment_config: dict,
    model_dir: str,
    marker_path: str,
    evaluations: list[str],
    record_path: str,
    endpoint: str | None = None,
    card: dict | None = None,
) -> dict:
    """Upload (or dry-run, or record as disabled) one experiment's merged model; write ``record_path``. ``card``:
    ``card_sources(cfg, experiment)`` for the model card."""
    record = {
        "experiment": experiment,
        "enabled": bool(upload.get("enabled")),
        "dry_run": bool(upload.get("dry_run")),
        "sent": False,
    }
    if not upload.get("enabled"):
        record["reason"] = (
            f"upload disabled: set experiments.{experiment}.upload.enabled: true and upload.repo_id to publish"
        )
        atomic_write_json(record_path, record)
        log.info("%s: upload disabled; nothing sent", experiment)
        return record
    repo_id, revision, private = upload["repo_id"], upload.get("revision") or "main", bool(upload.get("private", True))
    record.update(repo_id=repo_id, revision=revision, private=private)
    card = model_card(
        experiment, experiment_config, read_json(marker_path), [read_json(p) for p in evaluations], repo_id, card
    )
    files = model_files(model_dir) + [
        {"path": CARD_NAME, "size": len(card.encode()), "sha256": _sha256_text(card), "generated": True}
    ]
    record["files"] = files
    record["total_bytes"] = sum(f["size"] for f in files)
    token = find_token()
    if record["dry_run"]:
        return _record_dry_run(experiment, record, record_path, card, token)
    if not token:
        raise GrpoflowError(
            f"no Hugging Face token for uploading {experiment} to {repo_id}: set HF_TOKEN or run `hf auth login` on the machine that runs upload_to_hub (nothing was uploaded)"
        )
    message = upload.get("commit_message") or f"grpoflow: {experiment}"
    try:
        record.update(_send(model_dir, files, card, repo_id, revision, private, token, endpoint, message))
    except GrpoflowError:
        raise
    except Exception as exc:  # HTTP/network errors of huggingface_hub: one line, never the token
        raise GrpoflowError(
            _scrub(f"upload of {experiment} to {repo_id}@{revision} failed: {first_line(exc)}", token)
        ) from None
    record["sent"] = True
    atomic_write_json(record_path, record)
    log.info(
        "%s: %s %s@%s (commit %s)",
        experiment,
        "uploaded to" if record["changed"] else "unchanged on",
        repo_id,
        revision,
        record["commit"],
    )
    return record


def _record_dry_run(experiment: str, record: dict, record_path: str, card: str, token: str | None) -> dict:
    """Write the record of a dry run (the files and card that would be sent, whether a token was found); log it."""
    record.update(token_found=token is not None, model_card=card)
    record["reason"] = "dry run: nothing sent"
    atomic_write_json(record_path, record)
    log.info(
        "%s: dry run: would upload %d files (%d bytes) to %s@%s",
        experiment,
        len(record["files"]),
        record["total_bytes"],
        record["repo_id"],
        record["revision"],
    )
    for f in record["files"]:
        log.info("  %s (%d bytes)", f["path"], f["size"])
    return record


def _send(
    model_dir: str,
    files: list[dict],
    card: str,
    repo_id: str,
    revision: str,
    private: bool,
    token: str,
    endpoint: str | None,
    message: str,
) -> dict:
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    api = HfApi(endpoint=endpoint, token=token)
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    if revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    before = api.repo_info(repo_id, revision=revision).sha
    # Upload a staging dir of links to the model's files + the card: the model dir (another rule's output)
    # is never written to.
    with tempfile.TemporaryDirectory(prefix="grpoflow-upload-") as stage:
        for f in files:
            dest = Path(stage) / f["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            if f.get("generated"):
                dest.write_text(card, encoding="utf-8")
            else:
                os.symlink(os.path.abspath(os.path.join(model_dir, f["path"])), dest)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=stage, revision=revision, commit_message=message, repo_type="model"
        )
    return {
        "url": str(url),
        "commit": info.oid,
        "commit_url": info.commit_url,
        "parent_commit": before,
        "changed": info.oid != before,
    }


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _scrub(message: str, token: str | None) -> str:
    return message.replace(token, "<token>") if token else message
