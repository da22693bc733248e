"""Load, validate and resolve the workflow configuration.

``resolve_config(raw)`` is what the Snakefile calls: it checks the raw config against the JSON schema
(one line per error: key, bad value, what is allowed), deep-merges ``defaults`` into every experiment,
fills schema defaults, runs the cross-field checks a schema cannot express (references between sections,
reward names, verl batch arithmetic) and returns a ``WorkflowConfig`` that the rules query.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import yaml

from grpoflow import backends
from grpoflow.errors import ConfigError
from grpoflow.plan import ExperimentPlan
from grpoflow.schema import (  # the pure parts, re-exported: callers import them from here
    canonical,
    deep_merge,
    load_schema,
    saved_steps,
    validate,
)

if TYPE_CHECKING:  # resolved at load by their own areas, which import nothing of config
    from grpoflow.evaluation.settings import BenchmarkRun
    from grpoflow.rewards.registry import ResolvedRewards

SPLITS = ("train", "val", "test")
RESULTS = "results"
RESOURCES = "resources"
DEMO_MODEL_DIR = f"{RESOURCES}/demo/tiny-qwen3"
DEMO_SFT_RUN_DIR = f"{RESOURCES}/demo/sft-run"


# --------------------------------------------------------------------------------------------------------------
# The resolved configuration


@dataclass
class WorkflowConfig:
    """The validated, default-filled configuration with the queries the rules need."""

    raw: dict
    datasets: dict[str, dict]
    experiments: dict[str, dict]
    evaluation: dict
    report: dict
    demo: dict | None
    # model name -> {"kind": "grpo"|"sft"|"external", "experiment": ..., "path": ...}
    models: dict[str, dict] = field(default_factory=dict)
    # Resolved once, at load, the typed plans (grpoflow.plan): each benchmark's decoding, backend and answer format
    # (what its evaluate jobs run with: handed to them in their JSON) and each experiment's plan (its grpo settings,
    # resolved reward set, resources and backend section: what its training job decodes from its spec).
    benchmark_runs: dict[str, BenchmarkRun] = field(default_factory=dict)
    plans: dict[str, ExperimentPlan] = field(default_factory=dict)

    @property
    def reward_sets(self) -> dict[str, ResolvedRewards]:
        return {name: plan.rewards for name, plan in self.plans.items()}

    # ---- datasets ----
    def dataset_splits(self, name: str) -> list[str]:
        return dataset_splits(self.datasets[name])

    def parquet(self, dataset: str, split: str) -> str:
        return f"{RESULTS}/data/{dataset}/{split}.parquet"

    # ---- experiments ----
    def experiment(self, name: str) -> dict:
        return self.experiments[name]

    def checkpoint_dir(self, name: str) -> str:
        return self.experiments[name].get("checkpoint_dir") or f"{RESULTS}/{name}/checkpoints"

    def uses_demo_sft(self, name: str) -> bool:
        return self.experiments[name]["sft"].get("run_dir") == DEMO_SFT_RUN_DIR

    # ---- evaluation ----
    def evaluated_models(self) -> list[str]:
        return sorted(self.models)

    def benchmarks(self) -> list[str]:
        return sorted(self.evaluation["benchmarks"])

    def eval_targets(self) -> list[str]:
        return [f"{RESULTS}/{m}/eval/{b}.json" for m in self.evaluated_models() for b in self.benchmarks()]

    def evaluation_settings(self) -> dict:
        """The evaluation-wide settings (the ``evaluation`` section less its structural keys)."""
        from grpoflow.evaluation.settings import settings_of

        return settings_of(self.evaluation)

    def benchmark_prompt(self, benchmark: str) -> dict | None:
        from grpoflow.evaluation.settings import benchmark_prompt

        return benchmark_prompt(self.evaluation, self.datasets, benchmark)


def dataset_splits(ds: dict) -> list[str]:
    """The splits a dataset provides after carving: those its source has (a benchmark may have only test), and
    val/test carved from train."""
    src = ds["source"]
    if src == "hub":
        hub = ds["hub"]
        have = set(hub.get("files") or ({"train": 1} if hub.get("filename") else hub["splits"]))
    elif src == "local":
        have = {"train" if s == "path" else s for s in ds["local"]}
    else:
        have = {"train", "test"}
    if ds.get("validation"):
        have.add("val")
    if ds.get("test"):
        have.add("test")
    return [s for s in SPLITS if s in have]


def _check_dataset(name: str, ds: dict) -> None:
    where = f"datasets.{name}"
    if "{question}" not in ds["prompt"]["template"]:
        raise ConfigError(
            f"config error: {where}.prompt.template = {ds['prompt']['template']!r} has no {{question}} placeholder: the problem text would be dropped"
        )
    native = set(dataset_splits({**ds, "validation": None, "test": None}))
    for key in ("validation", "test"):
        if ds.get(key) and "train" not in native:
            raise ConfigError(
                f"config error: {where}.{key} carves a split out of train, but the source has no train split (splits: {', '.join(sorted(native))}): remove {where}.{key}"
            )
    for key, split in (("validation", "val"), ("test", "test")):
        if ds.get(key) and split in native:
            raise ConfigError(
                f"config error: {where}.{key}: the source already provides a {split!r} split; remove {where}.{key} (or drop that split from the source)"
            )


def _check_experiment(name: str, exp: dict, cfg: WorkflowConfig) -> ExperimentPlan:
    """Cross checks of one experiment; returns its plan."""
    where = f"experiments.{name}"
    data = exp.get("data") or {}
    if "dataset" not in data:
        raise ConfigError(
            f"config error: {where}.data.dataset is missing: name the dataset to train on (one of: {', '.join(cfg.datasets) or 'none defined under datasets'})"
        )
    ds = data["dataset"]
    if ds not in cfg.datasets:
        raise ConfigError(
            f"config error: {where}.data.dataset = {ds!r} is not defined under datasets (defined: {', '.join(cfg.datasets) or 'none'})"
        )
    splits = cfg.dataset_splits(ds)
    for key in ("train_split", "val_split"):
        split = data.get(key)
        if split is not None and split not in splits:
            fix = " (add datasets.%s.validation: {fraction: 0.05} to carve one)" % ds if split == "val" else ""
            raise ConfigError(
                f"config error: {where}.data.{key} = {split!r}: dataset {ds!r} has splits {', '.join(splits)}{fix}"
            )
    sft = exp.get("sft") or {}
    if bool(sft.get("model")) == bool(sft.get("run_dir")):
        raise ConfigError(
            f"config error: {where}.sft: give exactly one of sft.model (an HF model dir or Hub id) or sft.run_dir (an SFT run dir whose latest checkpoint is discovered)"
        )
    if sft.get("run_dir") == DEMO_SFT_RUN_DIR and not cfg.demo:
        raise ConfigError(
            f"config error: {where}.sft.run_dir = {DEMO_SFT_RUN_DIR!r} is built by the demo, but this config has no `demo:` section"
        )
    grpo = exp["grpo"]
    if "total_steps" not in grpo:
        raise ConfigError(f"config error: {where}.grpo.total_steps is missing: how many optimizer steps to train")
    rewards = exp["rewards"]
    if rewards.get("weights") is not None and len(rewards["weights"]) != len(rewards["funcs"]):
        raise ConfigError(
            f"config error: {where}.rewards.weights has {len(rewards['weights'])} values for {len(rewards['funcs'])} funcs {rewards['funcs']}: give one weight per func"
        )
    plan = _resolve_plan(name, exp)
    _check_merge_step(where, exp)
    _check_term_before_limit(where, exp["resources"])
    backends.get(exp["backend"]).check(name, exp, cfg)  # the backend's own cross-check, through the registry
    up = exp["upload"]
    if up["enabled"] and not up.get("repo_id"):
        raise ConfigError(
            f"config error: {where}.upload.enabled is true but upload.repo_id is not set (e.g. your-org/{name})"
        )
    return plan


def _check_merge_step(where: str, exp: dict) -> None:
    merge, grpo = exp["merge_step"], exp["grpo"]
    if merge == "last":
        return
    kept = saved_steps(grpo["total_steps"], grpo["save_freq"], grpo["max_checkpoints_to_keep"])
    if merge not in kept:
        shown = ", ".join(map(str, kept[-6:])) + (" …" if len(kept) > 6 else "")
        raise ConfigError(
            f"config error: {where}.merge_step = {merge}: that checkpoint will not exist after training (kept steps: {shown}); pick one of them, or change grpo.save_freq / max_checkpoints_to_keep"
        )


def _check_term_before_limit(where: str, res: dict) -> None:
    """resources.term_before_limit_s (sbatch --signal=TERM@N) on a job step it reaches, inside every attempt's limit."""
    lead = res.get("term_before_limit_s")
    if lead is None:
        return
    key = f"config error: {where}.resources.term_before_limit_s = {lead}"
    if res["nodes"] > 1:
        raise ConfigError(
            f"{key} with resources.nodes = {res['nodes']}: a job of several nodes runs its trainer in the batch script, which SLURM's --signal does not reach (docs/cluster.md, Time limits and preemption); remove it"
        )
    for name in ("runtime", "retry_runtime"):
        minutes = res.get(name)
        if minutes is not None and lead >= minutes * 60:
            raise ConfigError(
                f"{key} is not shorter than resources.{name} = {minutes} min ({minutes * 60} s): SLURM would send SIGTERM as the job starts; give fewer seconds or a longer {name}"
            )


def _resolve_plan(name: str, exp: dict) -> ExperimentPlan:
    try:
        import grpoflow.rewards.registry  # noqa: F401 (the reward library resolves the reward set)
    except ImportError:  # reward library not importable: fail loudly, never train with an unchecked reward
        raise ConfigError(
            "config error: grpoflow.rewards cannot be imported to check the reward config: reinstall the package (pip install -e .)"
        )
    return ExperimentPlan.resolve(name, exp)


def _build_models(cfg: WorkflowConfig) -> None:
    """Every model that gets evaluated, by name: GRPO results, their SFT starting points, external models."""
    # Entries are `evaluate` params: only what identifies the model goes in (not where it was configured),
    # so adding an experiment never reruns another model's evaluations.
    models: dict[str, dict] = {}
    defined_at: dict[str, str] = {}

    def add(mname: str, entry: dict, where: str) -> None:
        if mname in models and models[mname] != entry:
            raise ConfigError(
                f"config error: {where}: model name {mname!r} is already used by {defined_at[mname]} for a different model; give one of them another name"
            )
        models.setdefault(mname, entry)
        defined_at.setdefault(mname, where)

    stages = cfg.evaluation["stages"]
    for name, exp in cfg.experiments.items():
        if "grpo" in stages:
            add(name, {"kind": "grpo", "experiment": name}, f"experiments.{name}")
        if "sft" in stages:
            sft = exp["sft"]
            sft_key = {k: sft.get(k) for k in ("model", "run_dir", "hf_subdir", "step", "trust_remote_code")}
            sname = sft.get("name") or f"{name}-sft"
            if sname in models and models[sname]["kind"] == "sft" and models[sname]["sft"] == sft_key:
                continue  # shared SFT model: evaluated once, via the first experiment that uses it
            add(sname, {"kind": "sft", "experiment": name, "sft": sft_key}, f"experiments.{name}.sft.name")
    for mname, spec in cfg.evaluation["models"].items():
        add(
            mname,
            {"kind": "external", "path": spec["path"], "trust_remote_code": spec["trust_remote_code"]},
            f"evaluation.models.{mname}",
        )
    clash = set(models) & set(cfg.experiments) - {n for n, m in models.items() if m["kind"] == "grpo"}
    if clash:
        raise ConfigError(
            f"config error: name {sorted(clash)[0]!r} is both an experiment and another model: rename one"
        )
    cfg.models = models


def _check_evaluation(cfg: WorkflowConfig) -> None:
    from grpoflow.evaluation.settings import check_evaluation_config

    cfg.benchmark_runs = check_evaluation_config(cfg.evaluation)
    for bname, bench in cfg.evaluation["benchmarks"].items():
        where = f"evaluation.benchmarks.{bname}"
        if "dataset" in bench:
            ds = bench["dataset"]
            if ds not in cfg.datasets:
                raise ConfigError(
                    f"config error: {where}.dataset = {ds!r} is not defined under datasets (defined: {', '.join(cfg.datasets) or 'none'})"
                )
            if bench["split"] not in cfg.dataset_splits(ds):
                raise ConfigError(
                    f"config error: {where}.split = {bench['split']!r}: dataset {ds!r} has splits {', '.join(cfg.dataset_splits(ds))}"
                )
    if (cfg.experiments or cfg.evaluation["models"]) and not cfg.evaluation["benchmarks"]:
        raise ConfigError(
            "config error: evaluation.benchmarks is empty: name at least one benchmark (a dataset split or a file) to evaluate on"
        )
    primary = cfg.report.get("primary_benchmark")
    if primary and primary not in cfg.evaluation["benchmarks"]:
        raise ConfigError(
            f"config error: report.primary_benchmark = {primary!r} is not one of evaluation.benchmarks ({', '.join(cfg.benchmarks())})"
        )


def expand_seeds(name: str, exp: dict, named: dict) -> list[tuple[str, dict]]:
    """An experiment (``defaults`` merged in) as the runs it stands for: itself, or with ``seeds: [k, ...]`` one
    run per seed named ``<name>-seed<k>`` with ``grpo.seed: k``, sharing one SFT start name (``<name>-sft``
    unless ``sft.name`` is set). What would otherwise collide between the runs gets the seed too: an explicit
    ``checkpoint_dir`` (``<dir>/seed<k>``) and ``upload.repo_id`` (``<repo_id>-seed<k>``)."""
    exp = copy.deepcopy(exp)
    seeds = exp.pop("seeds", None)
    if seeds is None:
        return [(name, exp)]
    if not isinstance(seeds, list):
        return [(name, {**exp, "seeds": seeds})]  # the schema check names the bad value
    runs = []
    for k in seeds:
        run_name = f"{name}-seed{k}"
        if run_name in named:
            raise ConfigError(
                f"config error: experiments.{name}.seeds expands to {run_name!r}, which is also an experiment's name: rename one"
            )
        run = copy.deepcopy(exp)
        run.setdefault("grpo", {})["seed"] = k
        run.setdefault("sft", {}).setdefault("name", f"{name}-sft")
        if run.get("checkpoint_dir"):
            run["checkpoint_dir"] = f"{run['checkpoint_dir'].rstrip('/')}/seed{k}"
        if (run.get("upload") or {}).get("repo_id"):
            run["upload"]["repo_id"] = f"{run['upload']['repo_id']}-seed{k}"
        runs.append((run_name, run))
    return runs


def resolve_config(raw: dict) -> WorkflowConfig:
    """Validate ``raw`` (as Snakemake loaded it) and return the resolved configuration. Raises ConfigError."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            "config error: the configuration is empty: run from the repository root (config/config.yaml is the default) or pass --configfile config/<name>.yaml"
        )
    schema = load_schema()
    # A deep copy in which `1e-6` written without a dot is a number too; integers stay as written until the end,
    # so error messages quote the value the user wrote.
    raw = canonical(raw, schema, schema["$defs"], ints=False)
    # 1. Structure and unknown keys everywhere (no defaults yet, so `defaults` stays a partial experiment).
    validate(raw, schema, fill_defaults=False)
    # 2. Each section with its defaults filled and checked on its own.
    experiments = _resolve_experiments(raw)
    datasets = _resolve_datasets(raw)
    evaluation = _resolve_section(raw, "evaluation")
    from grpoflow.schema.benchmarks import resolve_builtin_benchmarks

    evaluation = resolve_builtin_benchmarks(evaluation)
    report = _resolve_section(raw, "report")
    demo = _resolve_demo(raw, datasets)
    # 3. Canonical from here on (sorted keys, numbers as the schema types them): every rule param is built from
    # these, so the same settings in another key order or number spelling rerun nothing.
    defs = schema["$defs"]
    cfg = WorkflowConfig(
        raw=raw,
        datasets={n: canonical(d, {"$ref": "#/$defs/dataset"}, defs) for n, d in sorted(datasets.items())},
        experiments={n: canonical(e, {"$ref": "#/$defs/experiment"}, defs) for n, e in sorted(experiments.items())},
        evaluation=canonical(evaluation, {"$ref": "#/$defs/evaluation"}, defs),
        report=canonical(report, {"$ref": "#/$defs/report"}, defs),
        demo=canonical(demo, {"$ref": "#/$defs/demo"}, defs) if demo is not None else None,
    )
    # 4. Checks across sections, resolving what the jobs take: reward sets, models, benchmark runs.
    cfg.plans = {name: _check_experiment(name, exp, cfg) for name, exp in cfg.experiments.items()}
    _build_models(cfg)
    cfg.models = canonical(cfg.models)
    _check_evaluation(cfg)
    return cfg


def _resolve_experiments(raw: dict) -> dict[str, dict]:
    """Experiments = defaults ⊕ experiment (seeds expanded), then defaults filled and checked as a whole."""
    defaults = raw.get("defaults") or {}
    experiments = {}
    named = dict(raw.get("experiments") or {})
    runs = [run for name, exp in named.items() for run in expand_seeds(name, deep_merge(defaults, exp or {}), named)]
    for name, merged in runs:
        if name in experiments:
            raise ConfigError(
                f"config error: experiments: two seed expansions are both named {name!r}: rename one of the experiments"
            )
        merged.setdefault("backend", backends.default())  # the registry's, where the schema's defaults were
        validate(merged, {"$ref": "#/$defs/experiment"}, fill_defaults=True, where=f"experiments.{name}")
        # Keep only the chosen backend's section: the others' defaults must not change training params.
        for other in backends.names():
            if other != merged["backend"]:
                merged.pop(other, None)
        experiments[name] = merged
    return experiments


def _resolve_datasets(raw: dict) -> dict[str, dict]:
    """The config's datasets and those its built-in benchmarks need, defaults filled and checked."""
    from grpoflow.schema.benchmarks import builtin_datasets

    raw_datasets = {**(raw.get("datasets") or {})}
    raw_datasets.update(builtin_datasets(raw.get("evaluation") or {}, raw_datasets))
    datasets = {}
    for name, ds in raw_datasets.items():
        ds = copy.deepcopy(ds)
        validate(ds, {"$ref": "#/$defs/dataset"}, fill_defaults=True, where=f"datasets.{name}")
        ds.setdefault("prompt", {"system": None, "template": "{question}"})
        if ds.get("data_source") is None:
            ds["data_source"] = f"grpoflow/{name}"
        _check_dataset(name, ds)
        datasets[name] = ds
    return datasets


def _resolve_section(raw: dict, key: str) -> dict:
    """A top-level section (``evaluation``, ``report``) with its schema defaults filled."""
    section = copy.deepcopy(raw.get(key) or {})
    validate(section, {"$ref": f"#/$defs/{key}"}, fill_defaults=True, where=key)
    return section


def _resolve_demo(raw: dict, datasets: dict[str, dict]) -> dict | None:
    """The ``demo`` section with its defaults filled and checked against the datasets, or None without one."""
    if raw.get("demo") is None:
        return None
    demo = copy.deepcopy(raw["demo"])
    validate(demo, {"$ref": "#/$defs/demo"}, fill_defaults=True, where="demo")
    demo.setdefault("tiny_model", {})
    validate(
        demo["tiny_model"],
        {"$ref": "#/$defs/demo/properties/tiny_model"},
        fill_defaults=True,
        where="demo.tiny_model",
    )
    if "sft" not in demo:
        raise ConfigError(
            "config error: demo.sft is missing: the demo needs an SFT stage (demo.sft.dataset names its data)"
        )
    if demo["sft"]["dataset"] not in datasets:
        raise ConfigError(
            f"config error: demo.sft.dataset = {demo['sft']['dataset']!r} is not defined under datasets (defined: {', '.join(datasets) or 'none'})"
        )
    _check_demo_target(demo["sft"], datasets)
    return demo


def _check_demo_target(sft: dict, datasets: dict[str, dict]) -> None:
    target = sft.get("target_accuracy")
    if not target:
        return
    low, high = target["band"]
    if not low < high:
        raise ConfigError(
            f"config error: demo.sft.target_accuracy.band = {target['band']} is not [low, high] with low < high: e.g. [0.35, 0.65]"
        )
    splits = dataset_splits(datasets[sft["dataset"]])
    if target["split"] not in splits or target["split"] == "test":
        raise ConfigError(
            f"config error: demo.sft.target_accuracy.split = {target['split']!r}: dataset {sft['dataset']!r} has splits {', '.join(splits)}; "
            "use a validation split (datasets.<name>.validation carves one), never the test split the report scores"
        )


def load_config_files(paths: Iterable[str]) -> dict:
    """Merge YAML config files the way ``snakemake --configfile a b`` does (later files win, dicts merge)."""
    merged: dict = {}
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            merged = deep_merge(merged, yaml.safe_load(fh) or {})
    return merged
