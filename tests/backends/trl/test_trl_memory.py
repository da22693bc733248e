"""The TRL GPU-memory estimate (grpoflow.backends.trl.memory) against TRL 1.16's fused, chunked LM head: the recipe
002 grid on one 40 or 48 GB GPU passes the config-load check, a config that cannot fit is still refused, and the
LM-head term follows TRL's own tile sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpoflow.backends.trl.commandline import memory_estimate
from grpoflow.backends.trl.memory import LM_HEAD_TOKEN_CHUNK, LM_HEAD_VOCAB_CHUNK, lm_head_bytes
from grpoflow.config import deep_merge, resolve_config
from grpoflow.errors import ConfigError

RECIPE_002 = Path(__file__).resolve().parents[3] / "config" / "qwen3-0.6b-lora-ablations.yaml"
GIB = 1024**3


def grid_on_one_gpu(gpu_mem_gb: float, **defaults):
    """Recipe 002's grid as its header documents the cheaper layout (gpus_per_node: 1), on a card of that size."""
    raw = yaml.safe_load(RECIPE_002.read_text())
    over = deep_merge({"resources": {"gpus_per_node": 1, "gpu_mem_gb": gpu_mem_gb}}, defaults)
    return resolve_config(deep_merge(raw, {"defaults": over}))


@pytest.mark.parametrize("gpu_mem_gb", [40, 48])
def test_the_002_grid_on_one_40_or_48_gb_gpu_passes_the_check(gpu_mem_gb):
    cfg = grid_on_one_gpu(gpu_mem_gb)  # resolve_config runs the check: a refusal would raise here
    for name in cfg.experiments:
        b = memory_estimate(name, cfg.experiment(name))
        assert b.fits, b.line()
    # The biggest micro-batch (28 completions of 512 + 1,024 tokens) is the worst arm; it fits with room.
    worst = memory_estimate("r32-ng7-bs28-seed1", cfg.experiment("r32-ng7-bs28-seed1"))
    assert worst.peak.total < 0.6 * worst.capacity, worst.line()


def test_a_config_that_does_not_fit_is_still_refused():
    # vLLM reserving 90 % of a 40 GB card leaves less than the trainer's weights, activations and CUDA context.
    with pytest.raises(ConfigError, match=r"resources.gpu_mem_gb = 40: the estimated peak per GPU"):
        grid_on_one_gpu(40, trl={"vllm": {"gpu_memory_utilization": 0.9}})
    # A full fine-tune of Qwen3-8B with a reference copy: fp32 weights, gradients, AdamW and the reference alone
    # are 5 x 32 GB.
    with pytest.raises(ConfigError, match=r"resources.gpu_mem_gb = 80"):
        grid_on_one_gpu(80, architecture="qwen3-8b", grpo={"lora": {"rank": 0}, "kl_coef": 0.04})


def test_the_lm_head_term_follows_trls_chunking():
    from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    # The tile sizes are TRL's own (the pinned library's private constants: this breaks first if they change).
    assert (LM_HEAD_TOKEN_CHUNK, LM_HEAD_VOCAB_CHUNK) == (TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE)
    H = 1024
    # The vocabulary only sets the tile's width, up to one chunk: Qwen's 151,936 costs what 32,768 does (LoRA).
    assert lm_head_bytes(24_576, H, 151_936, False) == lm_head_bytes(24_576, H, 32_768, False)
    # Past one token chunk the tile is fixed; each further token adds its hidden state (bf16, saved), the fp32
    # gradient of it and 11 fp32 statistics, never a vocabulary row.
    slope = lm_head_bytes(2 * 8192, H, 151_936, False) - lm_head_bytes(8192, H, 151_936, False)
    assert slope == 8192 * (H * (2 + 4) + 11 * 4)
    tile = 4096 * 32_768 * 2
    assert lm_head_bytes(4096, H, 151_936, False) == tile + 4096 * (H * 6 + 44)
    # Below one token chunk the tile shrinks with the tokens (min(N, 4096) rows).
    assert lm_head_bytes(100, H, 151_936, False) == 100 * 32_768 * 2 + 100 * (H * 6 + 44)
    # A full fine-tune trains the head: its fp32 gradient [vocab, hidden] and a bf16 copy of one weight tile.
    assert lm_head_bytes(4096, H, 151_936, True) - lm_head_bytes(4096, H, 151_936, False) == (
        151_936 * H * 4 + 32_768 * H * 2
    )
    # The 002 grid's micro-batch on one GPU: 24 completions x 1,024 tokens. Full [tokens, vocab] logits would be
    # 24,576 x 151,936 x 8 bytes = 27.8 GiB; TRL's chunked head holds 0.4 GiB.
    cfg = grid_on_one_gpu(40)
    b = memory_estimate("r32-ng6-bs24-seed1", cfg.experiment("r32-ng6-bs24-seed1"))
    assert lm_head_bytes(24 * 1024, H, 151_936, False) / GIB == pytest.approx(0.39, abs=0.01)
    assert b.peak.terms["activations+LM head"] < 6.0, b.line()
