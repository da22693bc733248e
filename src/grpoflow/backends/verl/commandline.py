"""The shell command `train_grpo` runs for a verl experiment.

    [env K=V ...] python -m grpoflow.backends.verl.train --marker ... --metrics ... --config-hash ... -- \\
        python -m verl.trainer.main_ppo <overrides>

The part after ``--`` is verl's own command line, exactly as it runs (``snakemake -n -p`` prints it): copy it
to reproduce a run by hand. The wrapper in front (``grpoflow.backends.verl.train``) runs it directly on one node or
through the Ray launcher on several, then turns verl's checkpoints and file logs into the completion marker
and ``train_metrics.jsonl``.
"""

from __future__ import annotations

import shlex

from grpoflow.backends.verl import overrides as ov
from grpoflow.schema import config_hash
from grpoflow.training import ResolvedConfig

# The experiment sections that define what gets trained. The marker's config hash covers exactly these, so
# changing e.g. upload.repo_id or merge_step neither changes the command nor retrains.
TRAINING_SECTIONS = ("backend", "data", "sft", "grpo", "rewards", "verl", "checkpoint_dir")


def training_hash(exp: dict) -> str:
    shape = {k: exp["resources"][k] for k in ("nodes", "gpus_per_node")}
    return config_hash({**{k: exp.get(k) for k in TRAINING_SECTIONS}, "resources": shape})


def environment(exp: dict) -> dict[str, str]:
    """Variables exported before verl (and, on several nodes, before every `ray start`)."""
    env = ov.reward_environment(exp["rewards"])
    for key, value in exp["verl"]["env"].items():
        env[key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return env


def command(cfg: ResolvedConfig, experiment: str, inputs: dict, outputs: dict) -> str:
    exp = cfg.experiment(experiment)
    items = ov.build(exp, experiment, inputs, cfg.checkpoint_dir(experiment))
    env = environment(exp)
    prefix = ("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())) + " ") if env else ""
    wrapper = [
        "python",
        "-m",
        "grpoflow.backends.verl.train",
        "--marker",
        outputs["marker"],
        "--metrics",
        outputs["metrics"],
        "--config-hash",
        training_hash(exp),
    ]
    if exp["resume_across_changes"]:
        wrapper.append("--resume-across-changes")
    return f"{prefix}{shlex.join(wrapper)} -- \\\n    {ov.ENTRYPOINT} \\\n    {ov.render(items)}"


def trainer_argv(cfg: ResolvedConfig, experiment: str, inputs: dict, model_path: str, cwd: str) -> list[str]:
    """verl's argv with the job-time values filled in (what the shell would pass): for validation."""
    exp = cfg.experiment(experiment)
    items = ov.build(exp, experiment, inputs, cfg.checkpoint_dir(experiment))
    return ov.ENTRYPOINT.split() + [expand(o, model_path, cwd) for o in items]


def expand(o: ov.Override, model_path: str, cwd: str) -> str:
    if not o.shell:
        return o.hydra
    text = o.text.replace("$PWD", cwd)
    if text.startswith("$(python -m grpoflow.discovery path"):
        text = model_path
    return f"{o.prefix}{o.key}={ov.hydra_value(text)}"
