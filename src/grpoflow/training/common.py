"""What every backend shares, written once: the completion marker, the checkpoint scan, the metrics file, and
reading the RL Parquet. Light (no trainer imports).

- ``write_marker``: ``training_complete.json``, only for a run whose final step is the planned one.
- ``scan_checkpoints`` / ``latest_checkpoint``: step dirs by a name pattern, kept when a backend's completeness
  predicate says so.
- ``map_metrics`` (a trainer's metric dict through a backend's ``METRICS`` table) and ``write_metrics``
  (``train_metrics.jsonl``, atomically).
- ``read_rl_rows``: the verl RL Parquet that convert_to_parquet writes (demo SFT, the tiny model's corpus, TRL).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from grpoflow.errors import DataError, GrpoflowError
from grpoflow.health import STOP_ON_DEFAULT
from grpoflow.io import atomic_write_json, atomic_write_jsonl

log = logging.getLogger("grpoflow.backends")

# ---- completion marker --------------------------------------------------------------------------------------


def write_marker(
    path: str | os.PathLike,
    *,
    experiment: str,
    backend: str,
    planned_steps: int,
    final_step: int,
    checkpoint_dir: str,
    final_checkpoint: str,
    metrics_summary: dict,
    settings_history: list,
    provenance: dict,
    **extra: Any,
) -> dict:
    """Write the completion marker (docs/ARCHITECTURE.md, "Training interface") atomically; returns it.

    ``extra`` holds the backend's own keys (TRL: ``checkpoint_format``, ``start_model``; verl: ``nodes``,
    ``gpus_per_node``, ``trainer_command``). Refuses a run that stopped short of its planned steps: a marker
    means the run is complete."""
    if final_step != planned_steps:
        raise GrpoflowError(
            f"training of {experiment} stopped at step {final_step} of {planned_steps}: not complete, no completion marker written"
        )
    marker = {
        "experiment": experiment,
        "backend": backend,
        "planned_steps": planned_steps,
        "final_step": final_step,
        "checkpoint_dir": checkpoint_dir,
        "final_checkpoint": final_checkpoint,
        **extra,
        "metrics_summary": metrics_summary,
        # Non-empty only when the run continued across a settings change (resume_across_changes): which steps
        # were trained from what.
        "settings_history": settings_history,
        "provenance": provenance,
    }
    atomic_write_json(path, marker)
    return marker


# ---- checkpoint dir -----------------------------------------------------------------------------------------


def step_dirs(checkpoint_dir: str | os.PathLike, pattern: re.Pattern) -> dict[int, Path]:
    """Every dir of ``checkpoint_dir`` whose name matches ``pattern`` (group 1: the step), by step, complete or not;
    {} when ``checkpoint_dir`` does not exist."""
    from grpoflow.discovery import checkpoint_steps  # the same scan finds an SFT run's step dirs

    return checkpoint_steps(checkpoint_dir, pattern)


def scan_checkpoints(
    checkpoint_dir: str | os.PathLike, pattern: re.Pattern, is_complete: Callable[[Path, int], bool]
) -> dict[int, Path]:
    """The complete checkpoints by step, in step order: step dirs matching ``pattern`` for which the backend's
    ``is_complete(path, step)`` holds (a save cut off by a kill is left out)."""
    found = step_dirs(checkpoint_dir, pattern)
    return {step: found[step] for step in sorted(found) if is_complete(found[step], step)}


def latest_checkpoint(checkpoints: dict[int, Path]) -> tuple[int, Path] | None:
    """``(step, path)`` of the highest step of a ``checkpoints`` result, or None."""
    if not checkpoints:
        return None
    step = max(checkpoints)
    return step, checkpoints[step]


# ---- metrics --------------------------------------------------------------------------------------------------


def number(value: Any) -> float | int | None:
    """``value`` when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


def map_metrics(step: int, data: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    """One ``train_metrics.jsonl`` row: ``{"step": step}`` plus each trainer metric of ``data`` named in ``table``
    (trainer name -> project key) under its project key. Non-numbers and NaN/inf are skipped; when several
    trainer names map to one key, the first in ``table`` that ``data`` has wins. NaN/inf values are named under
    ``"nonfinite"`` (JSON has no NaN): a diverged loss must not vanish from the row (grpoflow.health)."""
    row: dict[str, Any] = {"step": step}
    nonfinite = []
    for source, key in table.items():
        if key in row or source not in data:
            continue
        if number(data[source]) is not None:
            row[key] = data[source]
        elif isinstance(data[source], float):
            nonfinite.append(key)
    nonfinite = sorted(set(nonfinite) - set(row))
    if nonfinite:
        row["nonfinite"] = nonfinite
    return row


def write_metrics(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """``train_metrics.jsonl``: one JSON object per optimizer step, written atomically."""
    atomic_write_jsonl(path, rows)


# ---- data -------------------------------------------------------------------------------------------------------

RL_COLUMNS = ("prompt", "reward_model")


def prompts_within(parquet: str, tokenizer, max_prompt_length: int, where: str) -> list[tuple[str, dict]]:
    """The training split's rows whose chat-templated prompt fits ``grpo.max_prompt_length`` tokens, as
    ``(prompt text, row)``: longer ones are dropped (with a warning), never cut; none fitting is an error."""
    rows = read_rl_rows(parquet, f"the training data ({where}.data)")
    texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    kept = [(t, r) for t, r, n in zip(texts, rows, lengths) if n <= max_prompt_length]
    if not kept:
        raise DataError(
            f"every prompt of {parquet} is longer than {where}.grpo.max_prompt_length = {max_prompt_length} tokens (shortest: {min(lengths, default=0)}): raise max_prompt_length"
        )
    if len(kept) < len(rows):
        log.warning(
            "dropped %d of %d prompts longer than grpo.max_prompt_length = %d tokens",
            len(rows) - len(kept),
            len(rows),
            max_prompt_length,
        )
    return kept


def read_rl_rows(parquet: str, what: str) -> list[dict]:
    """The rows of a verl RL Parquet; ``what`` names the file's role (and config key) in errors."""
    from grpoflow.data.readers import read_records

    rows = read_records(parquet, what=what)
    missing = [c for c in RL_COLUMNS if c not in rows[0]]
    if missing:
        raise DataError(
            f"{what} ({parquet}): no {', '.join(missing)} column: not a verl RL Parquet; write it with the convert_to_parquet rule"
        )
    return rows


def split_wrapped_command(argv: list[str], usage: str) -> tuple[list[str], list[str]] | None:
    """(the entry point's own arguments, the command it wraps) of a wrapper run as ``... OWN ARGS -- COMMAND``
    (verl's train wrapper, the TRL launcher); None, with ``usage`` printed on stderr, when there is no ``--``."""
    if "--" not in argv:
        print(usage, file=sys.stderr)
        return None
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]


# ---- a backend's command: python -m grpoflow.backends.<name>.train --spec JSON -----------------------------------


def training_spec(cfg, experiment: str, inputs: dict, outputs: dict, **extra: Any) -> dict:
    """The spec a runner trains from (TRL, Tunix): everything that determines the trained weights and nothing else
    (no evaluation, upload or resource settings), so changing any of it, and only it, reruns training. It holds the
    experiment's ``grpo``, ``rewards`` and its backend's own section; ``extra``: the backend's further keys.
    ``inputs["val"]`` is not used: the runners validate nothing during training; ``evaluate`` does."""
    exp = cfg.experiment(experiment)
    backend = exp["backend"]
    return {
        "experiment": experiment,
        "sft": inputs["sft"],  # sft.json: its "path" is the model GRPO starts from (read when training starts)
        "train": inputs["train"],
        # The plan's typed grpo settings, written back as the section (byte-identical JSON: tests/pipeline's rerun
        # record), which the job decodes again (grpoflow.plan.TrainingPlan).
        "grpo": cfg.plans[experiment].grpo.as_dict(),
        "rewards": exp["rewards"],
        backend: exp[backend],
        "checkpoint_dir": cfg.checkpoint_dir(experiment),
        "resume_across_changes": exp["resume_across_changes"],
        # Only when not the default: a key new to the command would rerun every finished run (Snakemake's params
        # trigger), merge and evaluation after it, for nothing that changes the weights.
        **({"health": exp["health"]} if exp["health"] != {"stop_on": list(STOP_ON_DEFAULT)} else {}),
        "marker": outputs["marker"],
        "metrics": outputs["metrics"],
        **extra,
    }


def spec_command(entry: str, spec: dict) -> str:
    """``python -m <entry> --spec '<spec as sorted JSON>'`` (what `snakemake -n -p` shows): ``entry`` is the backend's
    entry-point module (``grpoflow.backends.<name>.train``), which finished runs' commands name."""
    return f"python -m {entry} --spec {shlex.quote(json.dumps(spec, sort_keys=True))}"


# ---- a backend's entry point: python -m grpoflow.backends.<name>.train --spec JSON ----------------------------------


def train_main(
    backend: str,
    entry: str,
    argv: list[str] | None,
    run_training: Callable[[dict], Any],
    env_check: str | Callable[[dict], None] | None = None,
) -> int:
    """The ``--spec`` entry point of backend ``backend`` (``python -m <entry>``): parse ``--spec``, log the
    interpreter, run the environment check ``env_check`` (a grpoflow.envcheck kind, or a function of the spec;
    seconds, before any trainer import), then ``run_training(spec)`` (the backend's runner, which imports its trainer);
    any failure is one ``grpoflow: error:`` line (grpoflow.joblog.guarded)."""
    from grpoflow import envcheck
    from grpoflow.joblog import guarded, setup_logging

    parser = argparse.ArgumentParser(
        prog=f"python -m {entry}", description=f"GRPO training, the {backend} backend of train_grpo."
    )
    parser.add_argument("--spec", required=True, help=f"JSON training spec, as the {backend} backend composes it")
    process_sigterm_stop()  # before the trainer's imports and model loading: a SIGTERM then is the same stop
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    try:
        spec = json.loads(args.spec)
    except ValueError as exc:
        parser.error(f"--spec is not valid JSON: {exc}")

    def train() -> None:
        envcheck.log_interpreter()
        if callable(env_check):
            env_check(spec)
        elif env_check:
            envcheck.check(env_check)
        run_training(spec)

    guarded(train, what=f"train_grpo ({spec.get('experiment')})")
    return 0


# ---- one training run: resume point, live metrics, SIGTERM, the end -----------------------------------------------
# The steps every backend's runner takes around its trainer (the TRL and Tunix runners; verl's wrapper has its own
# because verl runs in another process tree).


def read_live_metrics(path: str | os.PathLike) -> list[dict]:
    """The rows a run appended so far (a line cut off by a kill mid-write is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def health_monitor(spec: dict, live: str | os.PathLike | None = None):
    """The run's grpoflow.health monitor: its checks log one line each when they fire; ``health.stop_on`` stops.
    ``live``: the run's live metrics, whose rows (those of the steps before a resume) it continues from, so the
    lines after a resume are those the report's replay of every row gives."""
    from grpoflow.health import STOP_ON_DEFAULT, HealthMonitor

    stop_on = spec.get("health", {}).get("stop_on", STOP_ON_DEFAULT)
    before = read_live_metrics(live) if live is not None else []
    if before:
        log.info("health checks: continuing from the %d steps logged before the resume", len(before))
    total = spec["grpo"]["total_steps"]
    return HealthMonitor.resumed(total, before, stop_on=stop_on, experiment=spec["experiment"])


def append_live_metrics(path: str | os.PathLike, row: dict) -> None:
    """One step's row, appended and flushed, so a killed run keeps what it measured."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


# grpo settings that do not change what the steps already trained did: a rerun may change them and still resume
# (total_steps only while the learning-rate schedule does not depend on it: training_identity). Each backend adds
# its own (TRL: trl.logging_steps).
RESUMABLE_GRPO = {
    ("grpo", "total_steps"),
    ("grpo", "save_freq"),
    ("grpo", "max_checkpoints_to_keep"),
    ("grpo", "report_to"),
}


def training_identity(spec: dict, section: str, resumable: set[tuple[str, str]], model_path: str) -> dict:
    """What a checkpoint dir is trained from (grpoflow.checkpoint_record): the spec's grpo, rewards and backend
    ``section`` minus the ``resumable`` settings (which do not change what the steps already trained did), the
    start model's and the data's content. ``total_steps`` counts when the learning-rate schedule is stretched over
    it (cosine, linear, or a warm-up ratio): continuing under another total would change every remaining step."""
    from grpoflow.checkpoint_record import data_fingerprint, model_fingerprint

    settings = {"grpo": dict(spec["grpo"]), "rewards": spec["rewards"], section: dict(spec[section])}
    for part, key in resumable:
        settings[part].pop(key, None)
    grpo = spec["grpo"]
    if grpo.get("lr_scheduler", "constant") != "constant" or grpo.get("lr_warmup_ratio", 0):
        settings["grpo"]["total_steps"] = grpo["total_steps"]
    return {"settings": settings, "start_model": model_fingerprint(model_path), "data": data_fingerprint(spec["train"])}


def check_resume_point(spec: dict, identity: dict, latest: tuple[int, Path] | None) -> int:
    """Refuses a checkpoint past ``grpo.total_steps`` or trained with other settings (grpoflow.checkpoint_record);
    returns the step training resumes from (0: the start model)."""
    from grpoflow import checkpoint_record
    from grpoflow.errors import ConfigError

    ckpt_dir, total = Path(spec["checkpoint_dir"]), spec["grpo"]["total_steps"]
    if latest and latest[0] > total:
        raise ConfigError(
            f"config error: experiments.{spec['experiment']}.grpo.total_steps = {total} but {latest[1]} is already past it: raise total_steps, or delete {ckpt_dir} to train from scratch"
        )
    checkpoint_record.check(
        ckpt_dir,
        identity,
        latest=latest[0] if latest else None,
        finished=bool(latest) and latest[0] == total,
        allow_change=spec.get("resume_across_changes", False),
        where=f"experiments.{spec['experiment']}",
    )
    return latest[0] if latest else 0


def keep_live_metrics_until(live: str | os.PathLike, step: int) -> None:
    """Steps after the resume point are trained again: drop their rows from the live metrics."""
    atomic_write_jsonl(live, [r for r in read_live_metrics(live) if r.get("step", 0) <= step])


def finish_run(
    spec: dict, *, backend: str, live: str | os.PathLike, final_step: int, final_checkpoint: str, **extra: Any
) -> dict:
    """The end of a run: ``train_metrics.jsonl`` from the live metrics, then the completion marker (only when
    ``final_step`` is ``grpo.total_steps``; otherwise one line saying the run was interrupted and reruns resume)."""
    from grpoflow import checkpoint_record
    from grpoflow.provenance import provenance

    name, total = spec["experiment"], spec["grpo"]["total_steps"]
    ckpt_dir = Path(spec["checkpoint_dir"])
    if final_step != total:
        raise GrpoflowError(
            f"training of {name} stopped at step {final_step} of grpo.total_steps = {total} (interrupted); the checkpoints in {ckpt_dir} are kept: rerun to resume"
        )
    rows = [r for r in read_live_metrics(live) if r["step"] <= final_step]
    if not rows:
        raise GrpoflowError(f"training of {name} logged no metrics to {live}")
    write_metrics(spec["metrics"], rows)
    marker = write_marker(
        spec["marker"],
        experiment=name,
        backend=backend,
        planned_steps=total,
        final_step=final_step,
        checkpoint_dir=str(ckpt_dir),
        final_checkpoint=final_checkpoint,
        **extra,
        metrics_summary=rows[-1],
        settings_history=(checkpoint_record.read_record(ckpt_dir) or {}).get("history", []),
        provenance=provenance({k: v for k, v in spec.items() if k not in ("marker", "metrics")}),
    )
    log.info("training of %s complete: %s", name, json.dumps(rows[-1]))
    return marker


class SigtermStop:
    """SIGTERM (a time limit, preemption, scancel) asks the trainer to stop at the next step boundary with a
    checkpoint; ``requested`` says so, and ``on_request`` (if given) is called once. Every later SIGTERM is the same
    request and changes nothing: the step and its save go on until they are done, and only SIGKILL ends them sooner.
    SLURM sends several at a time limit with ``--signal=TERM@<lead>`` (the lead's, then two at the limit, then
    SIGKILL after KillWait: docs/reliability.md, "What a rank gets at a time limit"), and a save still running at
    the limit's would otherwise be lost while KillWait had time for it."""

    def __init__(self, on_request: Callable[[], None] | None = None):
        self.on_request = on_request
        self.requested_at: float | None = None
        self.said_at = 0.0  # when a repeat was last logged
        self.previous = signal.signal(signal.SIGTERM, self._handler)

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def _handler(self, signum, frame) -> None:
        now = time.monotonic()
        if self.requested_at is None:
            self.requested_at = self.said_at = now
            log.warning("SIGTERM: saving a checkpoint after this step, then stopping (SIGKILL stops at once)")
            if self.on_request is not None:
                self.on_request()
        elif now - self.said_at > 1:  # one line for the SIGTERMs that come together (SLURM's two at the limit)
            self.said_at = now
            log.warning(
                "SIGTERM again, %.0f s after the first: still finishing the step and its checkpoint",
                now - self.requested_at,
            )

    def watch(self, on_request: Callable[[], None] | None) -> None:
        """Call ``on_request`` on the stop from now on; at once when it has already been asked for."""
        self.on_request = on_request
        if on_request is not None and self.requested:
            on_request()

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)


_PROCESS_STOP: list[SigtermStop] = []


def process_sigterm_stop() -> SigtermStop:
    """This process's one SigtermStop, installed on first use. A job's entry point installs it before anything slow
    (and before a rank unblocks the SIGTERM torchrun held blocked for it): a SIGTERM while the model loads is then the
    same stop, honoured at the first step boundary, instead of killing the process with Python's default action."""
    if not _PROCESS_STOP:
        _PROCESS_STOP.append(SigtermStop())
    return _PROCESS_STOP[0]
