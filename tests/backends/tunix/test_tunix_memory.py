"""The Tunix HBM check at config load (grpoflow.backends.tunix.memory): recipe 003's config fits the TPUs it is meant
for, the settings it replaced are refused on a v6e-8 (also by `snakemake -n`), and the estimate's terms follow
Tunix's sharding and remat. No JAX: arithmetic on the resolved config."""

from __future__ import annotations

import copy

import pytest
from grpoflow_testing import REPO, load_shipped, make_workdir, snakemake

from grpoflow.backends.tunix import memory
from grpoflow.config import resolve_config
from grpoflow.errors import ConfigError

RECIPE = "config/qwen3-8b-gsm8k-tunix.yaml"
NAME = "qwen3-8b-gsm8k-tunix"
# What config/qwen3-8b-gsm8k-tunix.yaml ran before it declared a TPU: no remat, no flash attention, an fsdp-only mesh.
BEFORE = {"remat": "none", "flash_attention": False, "mesh": {"fsdp": -1, "tp": 1}}


def recipe(**tunix) -> dict:
    raw = copy.deepcopy(load_shipped(RECIPE))
    raw["defaults"]["tunix"].update(tunix)
    return raw


def experiment(**tunix) -> dict:
    return resolve_config(recipe(**tunix)).experiment(NAME)


@pytest.mark.parametrize("tpu", ["v5p-8", "v6e-8"])
def test_recipe_003_fits_the_tpus_it_is_meant_for(tpu):
    exp = experiment(tpu=tpu)  # resolving runs the check: it would raise
    b = memory.estimate(NAME, exp)
    assert b.fits and b.mesh == {"v5p-8": (1, 4), "v6e-8": (2, 4)}[tpu]
    # Full fine-tuning: fp32 weights, AdamW and gradients of 8.19 B parameters over the chips dominate.
    step = next(p for p in b.phases if p.name == "optimizer step")
    assert step.terms["AdamW state"] == pytest.approx(2 * step.terms["actor params"])
    assert step.terms["actor params"] == pytest.approx(8.19e9 * 4 / b.tpu.chips / 2**30, rel=0.01)


def test_the_settings_before_are_refused_on_a_v6e_8_naming_memory_and_the_knobs():
    with pytest.raises(ConfigError) as err:
        experiment(tpu="v6e-8", **BEFORE)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"config error: experiments.{NAME}.tunix.tpu = v6e-8: the estimated HBM peak per chip")
    for knob in ("tunix.remat: decoder", "tunix.mesh.tp", "grpo.lora", "v5p-8"):
        assert knob in message, knob
    # Flash attention would help but is refused with the vanilla rollout (the recipe's): not offered.
    assert "flash_attention" not in message
    # The same settings fit a v5p-8 (95 GiB chips), and pass on a v6e-8 once the check is switched off.
    assert memory.estimate(NAME, experiment(tpu="v5p-8", **BEFORE)).fits
    raw = recipe(tpu="v6e-8", **BEFORE)
    raw["defaults"]["checks"] = {"tpu_memory": False}
    assert not memory.estimate(NAME, resolve_config(raw).experiment(NAME)).fits


@pytest.mark.slow  # one `snakemake -n` (~6 s alone, 12 s on the shared machine)
def test_snakemake_dry_run_refuses_the_v6e_8_settings_before(tmp_path):
    import yaml

    wd = make_workdir(tmp_path)
    overlay = wd / "v6e-8.yaml"
    overlay.write_text(yaml.safe_dump({"defaults": {"tunix": {"tpu": "v6e-8", **BEFORE}}}))
    proc = snakemake(["-n", "--configfile", str(REPO / RECIPE), str(overlay)], wd, check=False)
    assert proc.returncode != 0
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("grpoflow: config error"))
    assert "tunix.tpu = v6e-8: the estimated HBM peak per chip at update" in line and "tunix.remat: decoder" in line


def test_remat_flash_and_tp_lower_only_the_activations():
    base = memory.estimate(NAME, experiment(tpu="v5p-8", remat="none", mesh={"fsdp": 1, "tp": 4}))

    def update(b):
        return next(p for p in b.phases if p.name == "update").terms["activations+logits"]

    decoder = memory.estimate(NAME, experiment(tpu="v5p-8", remat="decoder", mesh={"fsdp": 1, "tp": 4}))
    block = memory.estimate(NAME, experiment(tpu="v5p-8", remat="block", mesh={"fsdp": 1, "tp": 4}))
    assert update(decoder) < update(block) < update(base)
    for b in (decoder, block):
        assert b.phases[-1].terms == base.phases[-1].terms  # the optimizer step holds no activations
    # tp splits every sequence's activations and logits; fsdp splits the sequences, and a step with fewer sequences
    # than shards (recipe 003: one prompt × two completions on 4 chips) leaves one whole sequence on each chip.
    fsdp_only = memory.estimate(NAME, experiment(tpu="v5p-8", remat="none", mesh={"fsdp": -1, "tp": 1}))
    raw = recipe(tpu="v5p-8", remat="none", mesh={"fsdp": -1, "tp": 1})
    raw["defaults"]["grpo"]["num_generations"] = 4
    four = memory.estimate(NAME, resolve_config(raw).experiment(NAME))
    assert update(four) == update(fsdp_only) > 1.5 * update(base)


@pytest.mark.parametrize(
    "tunix, match",
    [
        (
            {"tpu": "v5p-8", "mesh": {"fsdp": 2, "tp": 4}},
            r"tunix.mesh fsdp 2 × tp 4 does not cover the 4 chips of a v5p-8",
        ),
        ({"tpu": "v6e-8", "mesh": {"fsdp": -1, "tp": 3}}, r"tunix.mesh fsdp -1 × tp 3 does not cover the 8 chips"),
        ({"mesh": {"fsdp": 1, "tp": 16}, "tpu": None}, None),  # no TPU declared: no mesh or memory check
        ({"flash_attention": True}, r"tunix.flash_attention is true with tunix.rollout_engine: vanilla"),
        (
            {"flash_attention": True, "rollout_engine": "vllm", "flash_attention_block_size": 512},
            r"grpo.max_prompt_length = 256 is not a multiple of tunix.flash_attention_block_size = 512",
        ),
    ],
)
def test_mesh_and_flash_attention_settings_that_cannot_run_are_one_line_errors(tunix, match):
    if match is None:
        experiment(**tunix)
        return
    with pytest.raises(ConfigError, match=match) as err:
        experiment(**tunix)
    assert "\n" not in str(err.value)


def test_the_dry_run_line_names_the_tpu_and_the_peak():
    line = memory.summary(NAME, experiment())
    assert line.startswith(f"train {NAME} with Tunix on a v5p-8. HBM per chip on a v5p-8 (mesh fsdp 1 × tp 4;")
    assert "remat decoder" in line and "GiB of 94.25" in line and "fits" in line


# Tunix's published example configurations (google/tunix v0.1.7, commit ce63a9fd65f02c4c398e74f000f98371c1575eb6),
# per micro-batch (Tunix's train_micro_batch_size prompts × num_generations sequences), on the TPUs they name or
# imply. (settings, TPU, fits?, peak GiB per chip).
def _published(
    arch, prompts, generations, prompt, response, remat, flash, mesh, param, compute, engine="vanilla", util=0.2, lora=0
):
    return {
        "architecture": arch,
        "sft": {},
        "grpo": {"prompts_per_step": prompts, "num_generations": generations, "max_prompt_length": prompt,
                 "max_response_length": response, "kl_coef": 0.08, "lora": {"rank": lora}},
        "tunix": {"mesh": dict(zip(("fsdp", "tp"), mesh)), "remat": remat, "flash_attention": flash,
                  "param_dtype": param, "compute_dtype": compute, "rollout_engine": engine, "vllm_hbm_utilization": util},
    }  # fmt: skip


PUBLISHED = {
    # examples/rl/grpo/gsm8k/run_qwen3.sh: Qwen3-1.7B-base, LoRA 64, mesh (2,4), remat_config=3, flash attention,
    # train_micro_batch_size 4 × 4 generations, 128 + 512 tokens, the checkpoint's bf16 weights, Tunix's default
    # float32 activations; 8 chips (Tunix's TPU CI runs v5e-8).
    "run_qwen3.sh on v5e-8": (
        _published("qwen3-1.7b", 4, 4, 128, 512, "decoder", True, (2, 4), "bfloat16", "float32", lora=64),
        "v5e-8",
        True,
        3.8,
    ),
    # examples/rl/grpo/gsm8k/run_qwen3_8b_disagg.sh: Qwen3-8B full fine-tune, trainer mesh (8,1), remat_config=3,
    # train_micro_batch_size 1 × 4 generations, 256 + 768 tokens, bf16 weights, float32 activations; the rollout
    # on 8 other chips (vLLM), so the trainer's 8 chips hold no KV cache or vLLM share (utilisation 0 here).
    "run_qwen3_8b_disagg.sh trainer on 8 v6e chips": (
        _published(
            "qwen3-8b", 1, 4, 256, 768, "decoder", False, (8, 1), "bfloat16", "float32", engine="vllm", util=0.0
        ),
        "v6e-8",
        True,
        23.4,
    ),
    # examples/frozenlake/train_frozenlake_qwen3.py: Qwen3-8B full fine-tune, fp32 actor, bf16 reference and
    # activations, remat decoder, flash attention, mesh (1, n), vLLM rollout; "Targets v5p-8 / v6e-4 -class hosts".
    # Its model states alone (34.3 GiB per chip on 4 chips) exceed a v6e chip.
    "frozenlake on v6e-4": (
        _published("qwen3-8b", 4, 8, 2048, 2048, "decoder", True, (1, 4), "float32", "bfloat16", engine="vllm"),
        "v6e-4",
        False,
        None,
    ),
}


@pytest.mark.parametrize("case", PUBLISHED)
def test_tunix_published_configurations(case):
    exp, tpu, fits, peak = PUBLISHED[case]
    b = memory.estimate(case, exp, memory.TPUS[tpu])
    assert b.fits is fits, b.line()
    if peak is not None:
        assert b.peak.total == pytest.approx(peak, abs=0.05)
    if case.startswith("frozenlake"):
        states = sum(b.peak.terms[k] for k in ("actor params", "AdamW state", "grads", "reference"))
        assert states == pytest.approx(34.3, abs=0.05) and states > b.capacity
