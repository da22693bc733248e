"""The reward registry: every reward declared once — name, parameters with defaults, per-sample or group-level,
docstring — and the one place that validates a ``rewards`` config section (``check_reward_config``).

verl, TRL and evaluation all look rewards up here (open-r1 style), so a name or a default never differs
between backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from grpoflow.errors import ConfigError

__all__ = [
    "Param",
    "RewardSpec",
    "REGISTRY",
    "register",
    "registry",
    "check_reward_config",
    "resolve_params",
    "resolve_reward_set",
    "ResolvedRewards",
    "number",
    "integer",
    "nullable",
    "BOOLEAN",
    "TAG",
]


@dataclass(frozen=True)
class Param:
    """One reward parameter: its default and the JSON Schema its value must satisfy (checked by the same
    validator, with the same one-line messages, as the rest of the config: ``grpoflow.config``)."""

    default: Any
    schema: dict
    doc: str = ""


def number(**bounds) -> dict:
    return {"type": "number", **bounds}


def integer(**bounds) -> dict:
    return {"type": "integer", **bounds}


BOOLEAN = {"type": "boolean"}
# A bare tag name: the rewards add the angle brackets themselves.
TAG = {
    "type": "string",
    "pattern": r"^[A-Za-z][\w.-]*$",
    "x-allowed": "a tag name such as think or answer (no angle brackets)",
}


def nullable(schema: dict) -> dict:
    """None allowed too (e.g. a length filled from the run's max_response_length)."""
    return {**schema, "type": [schema["type"], "null"]}


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


def register(
    name: str,
    *,
    group: bool = False,
    uses_length: bool = False,
    uses_verdict: bool = False,
    params: dict[str, Param] | None = None,
):
    """Declare a reward. Per-sample: ``fn(sample, **params) -> float``; group: ``fn(samples, **params) -> list``."""

    def deco(fn: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"reward {name!r} registered twice")
        REGISTRY[name] = RewardSpec(
            name, fn, dict(params or {}), group, (fn.__doc__ or "").strip(), uses_length, uses_verdict
        )
        return fn

    return deco


def registry() -> dict[str, RewardSpec]:
    """Every declared reward. The declarations in ``funcs`` populate it: importing this module imports the
    ``grpoflow.rewards`` package first, which imports ``funcs``."""
    return REGISTRY


def check_reward_config(rewards_cfg: dict, where: str = "rewards") -> dict:
    """Validate a ``rewards`` section (names, weights, parameters); raise a one-line ``ConfigError``. The section's
    shape and every parameter value are checked against the config schema (``$defs/rewards`` and each
    parameter's ``Param.schema``); what depends on the registry's names is checked here. Returns a copy with the
    schema's defaults filled in (``normalize``, ``eps``, ...: the schema is their one place)."""
    import copy

    from grpoflow.schema import check_schema, validate

    reg = registry()
    check_schema(rewards_cfg, {"$ref": "#/$defs/rewards"}, where=where)
    rewards_cfg = copy.deepcopy(rewards_cfg)
    validate(rewards_cfg, {"$ref": "#/$defs/rewards"}, fill_defaults=True, where=where)
    funcs = rewards_cfg["funcs"]
    for name in funcs:
        if name not in reg:
            raise ConfigError(f"config error: {where}.funcs: unknown reward {name!r} (known: {', '.join(sorted(reg))})")
    dup = sorted({n for n in funcs if funcs.count(n) > 1})
    if dup:
        raise ConfigError(
            f"config error: {where}.funcs lists {dup[0]!r} more than once: give each reward once and set its weight in {where}.weights"
        )
    weights = rewards_cfg.get("weights")
    if weights is not None and len(weights) != len(funcs):
        raise ConfigError(f"config error: {where}.weights must be a list of {len(funcs)} numbers, one per func {funcs}")
    for rname, values in (rewards_cfg.get("params") or {}).items():
        if rname not in reg:
            raise ConfigError(
                f"config error: {where}.params: unknown reward {rname!r} (known: {', '.join(sorted(reg))})"
            )
        if rname not in funcs:
            raise ConfigError(
                f"config error: {where}.params.{rname}: parameters given for {rname!r}, which is not in {where}.funcs {funcs}: add it to funcs or remove its params"
            )
        spec = reg[rname]
        unknown = sorted(set(values) - set(spec.params))
        if unknown:
            known = ", ".join(sorted(spec.params)) or "none"
            raise ConfigError(
                f"config error: {where}.params.{rname}: unknown parameter {unknown[0]!r} (known: {known})"
            )
        check_schema(
            values,
            {"type": "object", "properties": {k: p.schema for k, p in spec.params.items()}},
            where=f"{where}.params.{rname}",
        )
        merged = {**spec.defaults(), **values}
        cross = _CROSS_CHECKS.get(rname)
        msg = cross(merged) if cross else None
        if msg:
            raise ConfigError(f"config error: {where}.params.{rname}: {msg}")
    return rewards_cfg


# Checks between the parameters of one reward (registered next to the reward in funcs.py).
_CROSS_CHECKS: dict[str, Callable[[dict], str | None]] = {}


def cross_check(name: str):
    def deco(fn):
        _CROSS_CHECKS[name] = fn
        return fn

    return deco


def resolve_params(
    rewards_cfg: dict, *, max_response_length: int | None = None, where: str = "rewards"
) -> dict[str, dict]:
    """Every configured reward's parameters with defaults filled (and ``None`` lengths set from the run's
    ``max_response_length``). Validates first."""
    rewards_cfg = check_reward_config(rewards_cfg, where)
    reg = registry()
    out: dict[str, dict] = {}
    for name in rewards_cfg["funcs"]:
        values = {**reg[name].defaults(), **((rewards_cfg.get("params") or {}).get(name) or {})}
        for pname, p in reg[name].params.items():
            if values[pname] is None and "null" in p.schema["type"]:
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


@dataclass(frozen=True)
class ResolvedRewards:
    """An experiment's reward set as training computes it: R = Σ w_k r_k over ``funcs`` (``params[f]`` each, defaults
    filled, null lengths set from the run's ``max_response_length``), then ``normalize`` with ``eps``."""

    funcs: tuple[str, ...]
    weights: tuple[float, ...]
    normalize: str
    eps: float
    params: dict[str, dict]


def resolve_reward_set(
    rewards_cfg: dict, *, max_response_length: int | None = None, where: str = "rewards"
) -> ResolvedRewards:
    """A ``rewards`` section resolved: validated, schema defaults filled, weights all 1.0 unless given, parameters
    resolved (``resolve_params``). What config load keeps per experiment (``WorkflowConfig.reward_sets``) and what
    ``RewardSet`` is built from in the training job."""
    filled = check_reward_config(rewards_cfg, where)
    params = resolve_params(filled, max_response_length=max_response_length, where=where)
    funcs = tuple(filled["funcs"])
    weights = filled["weights"] if filled["weights"] is not None else [1.0] * len(funcs)
    return ResolvedRewards(
        funcs=funcs,
        weights=tuple(float(w) for w in weights),
        normalize=filled["normalize"],
        eps=float(filled["eps"]),
        params=params,
    )
