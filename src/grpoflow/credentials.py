"""Credentials come from the environment only: the rule that tells a setting's name is one, and the refusal of one
written in a config's free-form settings (each backend's check asks it of its own: they become the training
command, which Snakemake prints and every log keeps, and config files end up in git). grpoflow.hub redacts by the
same rule. A leaf below the backends.
"""

from __future__ import annotations

import re

from grpoflow.errors import ConfigError

# A name is a credential when it ends in a secret's word (HF_TOKEN, hub_token, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY)
# or says secret/password anywhere. Only the last words count, because trainers have many ordinary settings that
# contain them: data.response_key, data.reward_fn_key, ppo_max_token_len_per_gpu, pad_token, TOKENIZERS_PARALLELISM.
_SECRET_WORDS = {"secret", "password", "passwd", "credential", "credentials", "apikey"}
_TOKEN_KINDS = {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "max", "min", "num", "special", "chat"}
_KEY_KINDS = {"api", "access", "secret", "private", "auth", "signing", "encryption"}


def is_credential_name(name: str) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if not words:
        return False
    before = words[-2] if len(words) > 1 else ""
    return (
        bool(_SECRET_WORDS.intersection(words))
        or (words[-1] == "token" and before not in _TOKEN_KINDS)
        or (words[-1] == "key" and before in _KEY_KINDS)
    )


def refuse_credentials(where: str, named: list[tuple[str, str]], export_as=None) -> None:
    """``named``: (key as the config writes it, the name it sets); a credential among them is a one-line
    ConfigError naming the key. ``export_as(name)``: the variable to export it as instead (default: HF_TOKEN,
    WANDB_API_KEY)."""
    for key, name in named:
        if is_credential_name(name):
            env = export_as(name) if export_as else "HF_TOKEN, WANDB_API_KEY"
            raise ConfigError(
                f"config error: {where}.{key} is a credential, which would be printed and logged with the training "
                f"command: remove it from the config and export it in the shell that runs snakemake ({env}); every "
                "job inherits that environment"
            )
