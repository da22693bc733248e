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
    for knob in ("tunix.remat: decoder", "tunix.flash_attention: true", "tunix.mesh.tp", "grpo.lora", "v5p-8"):
        assert knob in message, knob
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
