"""The typed plans a config resolves to, once, and that a job rebuilds from the JSON it is handed.

``grpoflow.config.resolve_config`` resolves every experiment to an ``ExperimentPlan`` (its grpo settings, its resolved
reward set, its resources and its backend's section) and every benchmark to a ``BenchmarkRun``
(``grpoflow.evaluation.settings``): frozen dataclasses, typed where the trainers read them. A job never resolves a
config again: the evaluate job decodes its ``BenchmarkRun`` from its ``--kwargs`` JSON (``BenchmarkRun.from_json``),
a TRL or Tunix training job its ``TrainingPlan`` from its ``--spec`` JSON (``TrainingPlan.decode``).

The ``--spec`` JSON stays what ``grpoflow.training.common.training_spec`` (formerly ``grpoflow.backends.common``) has always written: it is part of
``train_grpo``'s ``params.command``, which Snakemake compares to decide reruns, so a new key there would rerun every
finished training. It carries the ``rewards`` section as the config wrote it (schema defaults filled), so decoding
fills each reward's registry defaults (``ResolvedRewards.of``); ``tests/test_plan.py`` checks that the plan a job
decodes from its command is the plan config load resolved, for every shipped config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # imported when a plan is resolved: config load stays free of the reward library until then
    from grpoflow.rewards.registry import ResolvedRewards

__all__ = ["ExperimentPlan", "GrpoSettings", "Lora", "TrainingPlan"]


@dataclass(frozen=True)
class Lora:
    """``grpo.lora``: rank 0 is full fine-tuning."""

    rank: int
    alpha: float
    dropout: float
    target_modules: str | tuple[str, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Lora:
        targets = d["target_modules"]
        return cls(
            rank=int(d["rank"]),
            alpha=float(d["alpha"]),
            dropout=float(d["dropout"]),
            target_modules=targets if isinstance(targets, str) else tuple(targets),
        )

    def as_dict(self) -> dict:
        out = asdict(self)
        if not isinstance(self.target_modules, str):
            out["target_modules"] = list(self.target_modules)
        return out


@dataclass(frozen=True)
class GrpoSettings:
    """An experiment's ``grpo`` section, typed (the schema's ``$defs/grpo``: every key, defaults filled)."""

    seed: int
    total_steps: int
    prompts_per_step: int
    num_generations: int
    learning_rate: float
    lr_scheduler: str
    lr_warmup_ratio: float
    kl_coef: float
    clip_ratio: float
    clip_ratio_high: float | None
    max_grad_norm: float
    temperature: float
    top_p: float
    top_k: int
    max_prompt_length: int
    max_response_length: int
    save_freq: int
    max_checkpoints_to_keep: int | None
    report_to: tuple[str, ...]
    lora: Lora

    @classmethod
    def from_dict(cls, grpo: Mapping[str, Any]) -> GrpoSettings:
        """The section as resolved (canonical: numbers typed by the schema). A key the plan does not know is an error:
        the schema and this class name the same keys."""
        unknown = sorted(set(grpo) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"grpo.{unknown[0]} is not a field of GrpoSettings (grpoflow.plan): add it there")
        values = {**grpo, "report_to": tuple(grpo["report_to"]), "lora": Lora.from_dict(grpo["lora"])}
        return cls(**values)

    def as_dict(self) -> dict:
        """The section as the config holds it (what the training spec's JSON carries)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "report_to": list(self.report_to), "lora": self.lora.as_dict()}


def _rewards(section: Mapping[str, Any], grpo: GrpoSettings, where: str) -> ResolvedRewards:
    from grpoflow.rewards.registry import resolve_reward_set

    return resolve_reward_set(dict(section), max_response_length=grpo.max_response_length, where=where)


@dataclass(frozen=True)
class ExperimentPlan:
    """One experiment as config load resolves it: what its jobs train with (``WorkflowConfig.plans``)."""

    name: str
    backend: str
    grpo: GrpoSettings
    rewards: ResolvedRewards
    resources: Mapping[str, Any]
    backend_section: Mapping[str, Any]

    @classmethod
    def resolve(cls, name: str, exp: Mapping[str, Any]) -> ExperimentPlan:
        """The plan of resolved experiment ``exp`` (validated, defaults filled); a bad reward section raises the
        reward registry's one-line ConfigError naming ``experiments.<name>.rewards``."""
        grpo = GrpoSettings.from_dict(exp["grpo"])
        backend = exp["backend"]
        return cls(
            name=name,
            backend=backend,
            grpo=grpo,
            rewards=_rewards(exp["rewards"], grpo, f"experiments.{name}.rewards"),
            resources=exp["resources"],
            backend_section=exp[backend],
        )


@dataclass(frozen=True)
class TrainingPlan:
    """What a TRL or Tunix train_grpo job trains, decoded from its ``--spec`` JSON (``training_spec``'s keys):
    the typed parts of its experiment's plan, its backend's training section, and the spec itself for the paths and
    the rest."""

    experiment: str
    backend: str
    grpo: GrpoSettings
    rewards: ResolvedRewards
    backend_section: Mapping[str, Any]
    spec: Mapping[str, Any]

    @classmethod
    def decode(cls, backend: str, spec: Mapping[str, Any]) -> TrainingPlan:
        grpo = GrpoSettings.from_dict(spec["grpo"])
        return cls(
            experiment=spec["experiment"],
            backend=backend,
            grpo=grpo,
            rewards=_rewards(spec["rewards"], grpo, f"experiments.{spec['experiment']}.rewards"),
            backend_section=spec[backend],
            spec=spec,
        )

    def matches(self, plan: ExperimentPlan) -> bool:
        """Whether the typed parts are what config load resolved for the experiment (``tests/test_plan.py``). The
        backend section is the backend's training view of the config's (its ``training_spec`` keeps what training
        reads: TRL drops ``trl.vllm.server_gpus``, Tunix ``tunix.tpu``)."""
        return (self.experiment, self.backend, self.grpo, self.rewards) == (
            plan.name,
            plan.backend,
            plan.grpo,
            plan.rewards,
        )
