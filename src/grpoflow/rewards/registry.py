"""The reward registry: every reward declared once — name, parameters with defaults, per-sample or group-level,
docstring — and the one place that validates a ``rewards`` config section (``check_reward_config``).

verl, TRL and evaluation all look rewards up here (open-r1 style), so a name or a default never differs
between backends.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from grpoflow.errors import ConfigError

__all__ = ["Param", "RewardSpec", "REGISTRY", "register", "registry", "check_reward_config", "resolve_params"]


@dataclass(frozen=True)
class Param:
    """One reward parameter: its default, the type it must have and a value check (message or None)."""

    default: Any
    kind: str  # number | int | bool | tag | str
    doc: str = ""
    check: Callable[[Any], str | None] | None = None
    nullable: bool = False  # None allowed (e.g. filled from the run's max_response_length)


@dataclass(frozen=True)
class RewardSpec:
    name: str
    fn: Callable
    params: dict[str, Param]
    group: bool  # needs every completion of one prompt (Kimi length): computed per group, not per sample
    doc: str
    uses_length: bool = False  # measures completion length (tokens when the trainer gives them)
    uses_verdict: bool = False  # reads the verifier's verdict

    def defaults(self) -> dict[str, Any]:
        return {k: p.default for k, p in self.params.items()}


REGISTRY: dict[str, RewardSpec] = {}


def register(name: str, *, group: bool = False, uses_length: bool = False, uses_verdict: bool = False,
             params: dict[str, Param] | None = None):
    """Declare a reward. Per-sample: ``fn(sample, **params) -> float``; group: ``fn(samples, **params) -> list``."""

    def deco(fn: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"reward {name!r} registered twice")
        REGISTRY[name] = RewardSpec(name, fn, dict(params or {}), group, (fn.__doc__ or "").strip(),
                                    uses_length, uses_verdict)
        return fn

    return deco


def registry() -> dict[str, RewardSpec]:
    import grpoflow.rewards.funcs  # noqa: F401  (the declarations populate REGISTRY)

    return REGISTRY


# ---------------------------------------------------------------------------------------------------------------
# Value checks shared by the declarations

def positive(v) -> str | None:
    return None if v > 0 else "must be > 0"


def non_positive(v) -> str | None:
    return None if v <= 0 else "must be <= 0 (it is a penalty)"


def at_least_one(v) -> str | None:
    return None if v >= 1 else "must be >= 1"


_TAG_RE = re.compile(r"^[A-Za-z][\w.-]*$")


def _type_error(kind: str, value: Any, nullable: bool) -> str | None:
    if value is None:
        return None if nullable else "must be set"
    if kind == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else "must be a finite number"
    if kind == "tag":
        return None if isinstance(value, str) and _TAG_RE.match(value) else "must be a tag name such as think or answer (no angle brackets)"
    if kind == "str":
        return None if isinstance(value, str) else "must be a string"
    raise AssertionError(kind)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_reward_config(rewards_cfg: dict, where: str = "rewards") -> None:
    """Validate a ``rewards`` section (names, weights, parameters); raise a one-line ``ConfigError``."""
    reg = registry()
    if not isinstance(rewards_cfg, dict):
        raise ConfigError(f"config error: {where} must be a mapping with funcs, weights, normalize, eps, params")
    funcs = rewards_cfg.get("funcs")
    if not isinstance(funcs, list) or not funcs:
        raise ConfigError(f"config error: {where}.funcs must be a non-empty list of reward names (known: {', '.join(sorted(reg))})")
    for name in funcs:
        if name not in reg:
            raise ConfigError(f"config error: {where}.funcs: unknown reward {name!r} (known: {', '.join(sorted(reg))})")
    dup = sorted({n for n in funcs if funcs.count(n) > 1})
    if dup:
        raise ConfigError(f"config error: {where}.funcs lists {dup[0]!r} more than once: give each reward once and set its weight in {where}.weights")
    weights = rewards_cfg.get("weights")
    if weights is not None:
        if not isinstance(weights, list) or len(weights) != len(funcs):
            raise ConfigError(f"config error: {where}.weights must be a list of {len(funcs)} numbers, one per func {funcs}")
        for i, w in enumerate(weights):
            if _type_error("number", w, False):
                raise ConfigError(f"config error: {where}.weights[{i}] = {_short(w)}: must be a finite number")
    normalize = rewards_cfg.get("normalize", "none")
    if normalize not in ("none", "per_prompt"):
        raise ConfigError(f"config error: {where}.normalize = {_short(normalize)}: must be one of none, per_prompt")
    eps = rewards_cfg.get("eps", 1e-6)
    if _type_error("number", eps, False) or eps <= 0:
        raise ConfigError(f"config error: {where}.eps = {_short(eps)}: must be a number > 0")
    params = rewards_cfg.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"config error: {where}.params must be a mapping reward name → {{parameter: value}}")
    for rname, values in params.items():
        if rname not in reg:
            raise ConfigError(f"config error: {where}.params: unknown reward {rname!r} (known: {', '.join(sorted(reg))})")
        if rname not in funcs:
            raise ConfigError(f"config error: {where}.params.{rname}: parameters given for {rname!r}, which is not in {where}.funcs {funcs}: add it to funcs or remove its params")
        if not isinstance(values, dict):
            raise ConfigError(f"config error: {where}.params.{rname} must be a mapping of parameter names to values")
        spec = reg[rname]
        for pname, value in values.items():
            if pname not in spec.params:
                known = ", ".join(sorted(spec.params)) or "none"
                raise ConfigError(f"config error: {where}.params.{rname}: unknown parameter {pname!r} (known: {known})")
            p = spec.params[pname]
            msg = _type_error(p.kind, value, p.nullable) or (p.check(value) if p.check and value is not None else None)
            if msg:
                raise ConfigError(f"config error: {where}.params.{rname}.{pname} = {_short(value)}: {msg}")
        merged = {**spec.defaults(), **values}
        cross = _CROSS_CHECKS.get(rname)
        msg = cross(merged) if cross else None
        if msg:
            raise ConfigError(f"config error: {where}.params.{rname}: {msg}")


# Checks between the parameters of one reward (registered next to the reward in funcs.py).
_CROSS_CHECKS: dict[str, Callable[[dict], str | None]] = {}


def cross_check(name: str):
    def deco(fn):
        _CROSS_CHECKS[name] = fn
        return fn

    return deco


def resolve_params(rewards_cfg: dict, *, max_response_length: int | None = None, where: str = "rewards") -> dict[str, dict]:
    """Every configured reward's parameters with defaults filled (and ``None`` lengths set from the run's
    ``max_response_length``). Validates first."""
    check_reward_config(rewards_cfg, where)
    reg = registry()
    out: dict[str, dict] = {}
    for name in rewards_cfg["funcs"]:
        values = {**reg[name].defaults(), **((rewards_cfg.get("params") or {}).get(name) or {})}
        for pname, p in reg[name].params.items():
            if values[pname] is None and p.nullable:
                if max_response_length is None:
                    raise ConfigError(
                        f"config error: {where}.params.{name}.{pname} is not set and no max_response_length was "
                        f"given to fill it: set {where}.params.{name}.{pname}"
                    )
                values[pname] = int(max_response_length)
        cross = _CROSS_CHECKS.get(name)
        msg = cross(values) if cross else None
        if msg:
            raise ConfigError(f"config error: {where}.params.{name}: {msg}")
        out[name] = values
    return out
