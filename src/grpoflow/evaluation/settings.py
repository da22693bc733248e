"""Which config values an evaluation depends on (so changing only these reruns evaluate + report), and what they
resolve to for each benchmark (presets, overrides, checks): ``resolve_benchmark``, called once per benchmark
when the config loads (``WorkflowConfig.benchmark_runs``); the evaluate job decodes that ``BenchmarkRun`` from its
JSON (``BenchmarkRun.from_json``) and resolves nothing.

Defaults live in the config schema (``$defs/evaluation``), which config load fills in: the functions here read
the keys it fills and have no default of their own. Settings written by hand (the demo's SFT probe, tests) get
the schema's defaults from ``with_defaults``.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

from grpoflow.errors import ConfigError

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
# The token limit when neither the config (evaluation.max_new_tokens: null) nor the preset sets one.
DEFAULT_MAX_NEW_TOKENS = 1024


def settings_of(evaluation: dict) -> dict:
    """The evaluation-wide settings of an ``evaluation`` section: all but its structural keys, sorted."""
    return {k: v for k, v in sorted(evaluation.items()) if k not in _STRUCTURAL}


def with_defaults(settings: dict) -> dict:
    """``settings`` (keys of the ``evaluation`` section) with the schema's defaults filled in, as config load
    fills them, and checked against the schema: for settings written outside a config (the demo's SFT probe,
    tests)."""
    from grpoflow.schema import validate

    filled = copy.deepcopy(settings)
    validate(filled, {"$ref": "#/$defs/evaluation"}, fill_defaults=True, where="evaluation")
    return settings_of(filled)


def benchmark_prompt(evaluation: dict, datasets: dict, benchmark: str) -> dict | None:
    """The chat prompt a benchmark is asked with: its own `prompt`, else its dataset's (same as training)."""
    bench = evaluation["benchmarks"][benchmark]
    if bench.get("prompt"):
        return bench["prompt"]
    if "dataset" in bench:
        return datasets[bench["dataset"]]["prompt"]
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

    @classmethod
    def from_dict(cls, d: dict) -> Generation:
        return cls(**{k: v for k, v in d.items() if k != "greedy"})


@dataclass(frozen=True)
class BenchmarkRun:
    """How one benchmark is evaluated, resolved from the config: what the evaluate job generates and scores with."""

    benchmark: str
    settings: dict  # the evaluation-wide settings with the benchmark's decoding keys over them (provenance hashes it)
    generation: Generation
    backend: str
    chat_template_kwargs: dict
    answer_format: dict  # evaluation.answer_format with the benchmark's own over it
    vllm: dict

    def as_json(self) -> dict:
        """The plan as the evaluate job is handed it (in its --kwargs JSON): ``from_json`` gives it back, equal."""
        return {**asdict(self), "generation": self.generation.as_dict()}

    @classmethod
    def from_json(cls, d: dict) -> BenchmarkRun:
        return cls(**{**d, "generation": Generation.from_dict(d["generation"])})


def resolve_benchmark(settings: dict, name: str, benchmark: dict) -> BenchmarkRun:
    """Benchmark ``name`` (its config entry ``benchmark``) under the evaluation-wide ``settings`` (an ``evaluation``
    section, schema defaults filled; structural keys are ignored). Raises a one-line ``ConfigError`` naming the
    benchmark's key when its decoding is contradictory."""
    merged = benchmark_settings(settings_of(settings), benchmark)
    try:
        gen = generation_settings(merged)
    except ConfigError as err:
        raise ConfigError(str(err).replace("evaluation.", f"evaluation.benchmarks.{name}.", 1)) from None
    return BenchmarkRun(
        benchmark=name,
        settings=merged,
        generation=gen,
        backend=merged["backend"],
        chat_template_kwargs=chat_template_kwargs(merged),
        answer_format={**merged["answer_format"], **(benchmark.get("answer_format") or {})},
        vllm=dict(merged["vllm"]),
    )


def benchmark_settings(settings: dict, benchmark: dict) -> dict:
    """The evaluation settings for one benchmark: its own decoding keys over the evaluation-wide ones. A
    benchmark that names another preset starts from that preset (the evaluation-wide temperature/top_p/top_k
    belong to the evaluation-wide preset)."""
    from grpoflow.schema.benchmarks import DECODING_KEYS

    own = {k: benchmark[k] for k in DECODING_KEYS if benchmark.get(k) not in (None, {})}
    out = dict(settings)
    if "preset" in own and own["preset"] != settings["preset"]:
        for key in ("temperature", "top_p", "top_k"):
            out.pop(key, None)
    out.update(own)
    return out


def chat_template_kwargs(settings: dict) -> dict:
    """``chat_template_kwargs`` of the settings, else the preset's (Qwen3 thinking: enable_thinking)."""
    given = settings["chat_template_kwargs"]
    if given:
        return dict(given)
    return dict(PRESET_DEFAULTS.get(settings["preset"], {}).get("chat_template_kwargs", {}))


def generation_settings(settings: dict) -> Generation:
    """Preset values overridden by any explicit ``temperature``/``top_p``/``top_k``; checks the combination."""
    preset = settings["preset"]
    values = dict(PRESETS[preset])
    for key in ("temperature", "top_p", "top_k"):
        # null (the schema's default) or absent (dropped for a benchmark's own preset): the preset's value
        if settings.get(key) is not None:
            values[key] = settings[key]
    top_k = int(values["top_k"])
    gen = Generation(
        preset=preset,
        temperature=float(values["temperature"]),
        top_p=float(values["top_p"]),
        top_k=-1 if top_k <= 0 else top_k,
        samples=int(settings["samples"]),
        max_new_tokens=int(
            settings["max_new_tokens"]
            or PRESET_DEFAULTS.get(preset, {}).get("max_new_tokens")
            or DEFAULT_MAX_NEW_TOKENS
        ),
        seed=int(settings["seed"]),
        batch_size=int(settings["batch_size"]),
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


def check_evaluation_config(evaluation: dict) -> dict[str, BenchmarkRun]:
    """Cross checks of the resolved `evaluation` section that the schema cannot express (config load time), and
    each benchmark's resolved run, by name."""
    generation_settings(evaluation)
    if evaluation["backend"] == "vllm":
        # vLLM starts one worker per tensor-parallel rank, each on its own GPU: more ranks than the job's GPUs fail at
        # engine start (after the queue wait); fewer leave GPUs idle.
        tp = evaluation["vllm"]["tensor_parallel_size"]
        gpus = evaluation["resources"]["gpus"]
        if gpus == 0 and tp != 1:
            # No GPUs: vLLM's CPU build in its own environment (grpoflow.evaluation.backends), one engine process.
            raise ConfigError(
                f"config error: evaluation.vllm.tensor_parallel_size = {tp} with evaluation.resources.gpus = 0: vLLM's CPU build runs here as one process; set tensor_parallel_size to 1 (or ask for GPUs)"
            )
        if gpus and tp != gpus:
            raise ConfigError(
                f"config error: evaluation.vllm.tensor_parallel_size = {tp} but evaluation.resources.gpus = {gpus}: vLLM runs one rank per GPU; make them equal"
            )
    return {name: resolve_benchmark(evaluation, name, bench) for name, bench in evaluation["benchmarks"].items()}
