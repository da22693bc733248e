"""Which config values an evaluation depends on (so changing only these reruns evaluate + report), and the
generation settings they resolve to (presets, overrides, checks)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from grpoflow.errors import ConfigError

if TYPE_CHECKING:  # grpoflow.config calls this module's checks: a runtime import would close a circle
    from grpoflow.config import WorkflowConfig

# Structural keys decide *what* is evaluated (the DAG), not *how*; they are not job params.
_STRUCTURAL = {"benchmarks", "models", "stages", "resources"}

# The TPU recipe's three evaluation presets. Its "greedy" used temperature 1e-4 / top_k 1, i.e. argmax
# decoding; here greedy is exact argmax (temperature 0), which both backends implement without sampling.
# qwen3-thinking: the sampling Qwen3's model card recommends for thinking mode (T 0.6, top_p 0.95, top_k 20;
# greedy decoding makes thinking models repeat themselves) with its 32,768-token output budget.
PRESETS: dict[str, dict] = {
    "greedy": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
    "standard": {"temperature": 0.7, "top_p": 0.95, "top_k": 50},
    "liberal": {"temperature": 0.85, "top_p": 1.0, "top_k": 2000},
    "qwen3-thinking": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
}
# What a preset sets besides sampling, where the config leaves it unset.
PRESET_DEFAULTS: dict[str, dict] = {
    "qwen3-thinking": {"max_new_tokens": 32768, "chat_template_kwargs": {"enable_thinking": True}},
}
DEFAULT_MAX_NEW_TOKENS = 1024


def evaluation_settings(cfg: WorkflowConfig) -> dict:
    return {k: v for k, v in sorted(cfg.evaluation.items()) if k not in _STRUCTURAL}


def benchmark_prompt(cfg: WorkflowConfig, benchmark: str) -> dict | None:
    """The chat prompt a benchmark is asked with: its own `prompt`, else its dataset's (same as training)."""
    bench = cfg.evaluation["benchmarks"][benchmark]
    if bench.get("prompt"):
        return bench["prompt"]
    if "dataset" in bench:
        return cfg.datasets[bench["dataset"]]["prompt"]
    return None


@dataclass(frozen=True)
class Generation:
    """Resolved decoding settings, identical for both backends. ``top_k = -1`` means no top-k filtering."""

    preset: str
    temperature: float
    top_p: float
    top_k: int
    samples: int
    max_new_tokens: int
    seed: int
    batch_size: int

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "greedy": self.greedy}


def benchmark_settings(settings: dict, benchmark: dict) -> dict:
    """The evaluation settings for one benchmark: its own decoding keys over the evaluation-wide ones. A
    benchmark that names another preset starts from that preset (the evaluation-wide temperature/top_p/top_k
    belong to the evaluation-wide preset)."""
    from grpoflow.evaluation.registry import DECODING_KEYS

    own = {k: benchmark[k] for k in DECODING_KEYS if benchmark.get(k) not in (None, {})}
    out = dict(settings)
    if "preset" in own and own["preset"] != settings.get("preset", "greedy"):
        for key in ("temperature", "top_p", "top_k"):
            out.pop(key, None)
    out.update(own)
    return out


def chat_template_kwargs(settings: dict) -> dict:
    """``chat_template_kwargs`` of the settings, else the preset's (Qwen3 thinking: enable_thinking)."""
    given = settings.get("chat_template_kwargs")
    if given:
        return dict(given)
    return dict(PRESET_DEFAULTS.get(settings.get("preset", "greedy"), {}).get("chat_template_kwargs", {}))


def generation_settings(settings: dict) -> Generation:
    """Preset values overridden by any explicit ``temperature``/``top_p``/``top_k``; checks the combination."""
    preset = settings.get("preset", "greedy")
    values = dict(PRESETS[preset])
    for key in ("temperature", "top_p", "top_k"):
        if settings.get(key) is not None:
            values[key] = settings[key]
    top_k = int(values["top_k"])
    gen = Generation(
        preset=preset,
        temperature=float(values["temperature"]),
        top_p=float(values["top_p"]),
        top_k=-1 if top_k <= 0 else top_k,
        samples=int(settings.get("samples", 1)),
        max_new_tokens=int(
            settings.get("max_new_tokens")
            or PRESET_DEFAULTS.get(preset, {}).get("max_new_tokens")
            or DEFAULT_MAX_NEW_TOKENS
        ),
        seed=int(settings.get("seed", 0)),
        batch_size=int(settings.get("batch_size", 32)),
    )
    check_generation(gen)
    return gen


def check_generation(gen: Generation) -> None:
    if gen.greedy and gen.samples > 1:
        raise ConfigError(
            f"config error: evaluation.samples = {gen.samples} with greedy decoding gives {gen.samples} identical "
            "completions per problem: set evaluation.preset to standard or liberal (or evaluation.temperature > 0) "
            "for pass@k/maj@k, or samples: 1"
        )


def check_evaluation_config(evaluation: dict) -> None:
    """Cross checks of the resolved `evaluation` section that the schema cannot express (config load time)."""
    generation_settings(evaluation)
    if evaluation.get("backend") == "vllm":
        # vLLM starts one worker per tensor-parallel rank, each on its own GPU: more ranks than the job's GPUs fail at
        # engine start (after the queue wait); fewer leave GPUs idle.
        tp = (evaluation.get("vllm") or {}).get("tensor_parallel_size", 1)
        gpus = (evaluation.get("resources") or {}).get("gpus", 1)
        if tp != gpus:
            raise ConfigError(
                f"config error: evaluation.vllm.tensor_parallel_size = {tp} but evaluation.resources.gpus = {gpus}: vLLM runs one rank per GPU; make them equal"
            )
    for name, bench in evaluation.get("benchmarks", {}).items():
        try:
            generation_settings(benchmark_settings(evaluation, bench))
        except ConfigError as err:
            raise ConfigError(str(err).replace("evaluation.", f"evaluation.benchmarks.{name}.", 1)) from None
