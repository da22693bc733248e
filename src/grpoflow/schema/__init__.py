"""The configuration's pure parts: the JSON schema (``config.schema.yaml`` beside this file, with the defaults
of nested objects filled in), validation with one-line messages, merging, the canonical form and its hash, and
the checkpoint steps a run keeps. Imports nothing of grpoflow but its error type and the built-in benchmarks
(``grpoflow.schema.benchmarks``, a leaf beside it; each training backend's section is read from its folder), so that
every area can check its own part of a config (rewards, evaluation, backends) without importing ``grpoflow.config``,
which calls them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

from grpoflow.errors import ConfigError


@lru_cache(maxsize=1)
def load_schema() -> dict:
    text = resources.files("grpoflow").joinpath("schema/config.schema.yaml").read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    _add_backend_sections(schema)
    _add_object_defaults(schema)
    _add_registry_names(schema)
    return schema


def _add_backend_sections(schema: dict) -> None:
    """Each training backend's settings section, written in its own folder (``backends/<name>/schema.yaml``), as
    ``$defs.<name>`` and an experiment's ``<name>:`` property (placed after ``rewards``, where the schema had them),
    and the ``backend`` enum: the folders that hold a section, in alphabetical order (the registry's,
    grpoflow.backends.registry, which tests/backends/test_registry.py checks): a new backend adds no line here. Read
    as files, not through the registry: the backends import this module's helpers, and the registry imports them."""
    folder = resources.files("grpoflow").joinpath("backends")
    props = schema["$defs"]["experiment"]["properties"]
    names = sorted(p.name for p in folder.iterdir() if p.joinpath("schema.yaml").is_file())
    sections = {}
    notes = {}
    for name in names:
        schema["$defs"][name] = yaml.safe_load(folder.joinpath(name, "schema.yaml").read_text(encoding="utf-8"))
        notes[name] = schema["$defs"][name].pop("x-describes", None) or {}
        sections[name] = {"$ref": f"#/$defs/{name}"}
    props["backend"]["enum"] = names
    _add_backend_descriptions(schema, notes)
    # A training backend with a generator (its folder's generate.py) is an evaluation backend of its name too.
    evaluation = schema["$defs"]["evaluation"]["properties"]["backend"]
    evaluation["enum"] = evaluation["enum"] + [n for n in names if folder.joinpath(n, "generate.py").is_file()]
    at = list(props).index("rewards") + 1
    items = list(props.items())
    schema["$defs"]["experiment"]["properties"] = dict(items[:at] + list(sections.items()) + items[at:])


def _add_backend_descriptions(schema: dict, notes: dict[str, dict[str, str]]) -> None:
    """What a backend says about a shared key (its schema.yaml's ``x-describes``: a path in the assembled schema,
    ``/$defs/resources/properties/nodes``, and the words), appended to that key's description in the backends'
    alphabetical order: a backend's knowledge stays in its folder, and config/README.md still shows it by the key."""
    for name, described in notes.items():
        for path, words in described.items():
            node = schema
            for part in path.strip("/").split("/"):
                if not isinstance(node, dict) or part not in node:
                    raise KeyError(f"backends/{name}/schema.yaml: x-describes names {path}, which the schema lacks")
                node = node[part]
            node["description"] = f"{str(node.get('description', '')).rstrip()} {words}".strip()


def _add_registry_names(schema: dict) -> None:
    """The names a config may give that a registry defines, as the schema's enums: written once, in the registry.
    ``schema.benchmarks`` (the built-in benchmarks) imports nothing of grpoflow."""
    from grpoflow.schema.benchmarks import BUILTIN

    schema["$defs"]["benchmark"]["properties"]["builtin"]["enum"] = list(BUILTIN)


def _add_object_defaults(schema: dict) -> None:
    """Give nested object properties ``default: {}`` so their own defaults get filled when the key is absent.

    Skipped for objects that must be given explicitly (``required``, ``minProperties``, ``oneOf``) and for
    those marked ``x-no-default`` (e.g. a dataset's `hub`, which only makes sense for hub datasets)."""
    defs = schema["$defs"]

    def target(sub: dict) -> dict:
        ref = sub.get("$ref", "")
        return defs[ref.rsplit("/", 1)[-1]] if ref.startswith("#/$defs/") else sub

    for d in defs.values():
        for sub in (d.get("properties") or {}).values():
            t = target(sub)
            if (
                isinstance(t, dict)
                and t.get("type") == "object"
                and "default" not in sub
                and not (
                    t.get("required")
                    or t.get("minProperties")
                    or t.get("oneOf")
                    or sub.get("x-no-default")
                    or t.get("x-no-default")
                )
            ):
                sub["default"] = {}
            if isinstance(t, dict) and t is sub:  # inline object: recurse one level (e.g. verl.rollout)
                for inner in (t.get("properties") or {}).values():
                    if (
                        isinstance(inner, dict)
                        and inner.get("type") == "object"
                        and "default" not in inner
                        and not (inner.get("required") or inner.get("minProperties") or inner.get("x-no-default"))
                    ):
                        inner["default"] = {}


# --------------------------------------------------------------------------------------------------------------
# Schema validation with one-line messages


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _allowed(error: jsonschema.ValidationError) -> str:
    v, s = error.validator, error.schema
    if isinstance(s, dict) and "x-allowed" in s:  # a schema's own words for what it accepts (e.g. a tag name)
        return s["x-allowed"]
    if v == "enum":
        return "one of " + ", ".join(map(str, error.validator_value))
    if v == "const":
        return repr(error.validator_value)
    if v == "type":
        t = error.validator_value
        t = [{"number": "finite number", "integer": "integer"}.get(x, x) for x in (t if isinstance(t, list) else [t])]
        return "a value of type " + " or ".join(t)
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[v]
        return f"a number {op} {error.validator_value}"
    if v == "pattern":
        return f"a string matching {error.validator_value}"
    if v == "minItems":
        return f"at least {error.validator_value} item(s)"
    if v == "minProperties":
        return f"at least {error.validator_value} key(s)"
    if v == "uniqueItems":
        return "no repeated items"
    if v == "not" and "enum" in error.validator_value:
        return "a name other than the reserved " + ", ".join(error.validator_value["enum"])
    return s.get("description", v) if isinstance(s, dict) else str(v)


def _format_error(error: jsonschema.ValidationError) -> str:
    # A scalar that fits none of several shapes ('latest' or an integer): name them all.
    if error.validator in ("oneOf", "anyOf") and not isinstance(error.instance, dict) and error.context:
        options = []
        for sub in error.context:
            text = _allowed(sub)
            if text not in options:
                options.append(text)
        return f"{_key_path(error)} = {_short(error.instance)}: must be {' or '.join(options)}"
    # Prefer the most specific error of a oneOf/anyOf when there is a single obvious one.
    if error.context:
        best = jsonschema.exceptions.best_match(error.context)
        if best is not None and best.validator not in ("required", "oneOf", "anyOf"):
            error = best
    key = _key_path(error)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        allowed = ", ".join(sorted(error.schema.get("properties", {}))) or "none"
        where = "" if key == "(top level)" else f" under {key}"
        return f"unknown key {', '.join(repr(e) for e in extra)}{where} (allowed: {allowed})"
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return f"{key}: missing required key {missing!r}"
    if error.validator == "oneOf" and isinstance(error.instance, dict):
        options = [sorted(o.get("required", [])) for o in error.validator_value]
        keys = " or ".join("+".join(o) for o in options if o)
        return f"{key}: give exactly one of {keys}"
    if error.validator == "propertyNames" or (error.validator == "not" and isinstance(error.instance, str)):
        return f"{key}: invalid name {_short(error.instance)}: must be {_allowed(error)}"
    return f"{key} = {_short(error.instance)}: must be {_allowed(error)}"


def _with_defaults(validator_class):
    """A validator that also fills ``default`` values in place (the pattern snakemake.utils.validate uses)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate(instance: Any, schema: dict, *, fill_defaults: bool, where: str = "") -> None:
    root = load_schema()
    base = jsonschema.validators.validator_for(root)
    # NaN and infinities (YAML's .nan, .inf) are no setting anyone means: not numbers here.
    types = base.TYPE_CHECKER.redefine(
        "number", lambda _, x: base.TYPE_CHECKER.is_type(x, "number") and math.isfinite(x)
    )
    cls = jsonschema.validators.extend(base, type_checker=types)
    if fill_defaults:
        cls = _with_defaults(cls)
    resolver_schema = dict(schema)
    resolver_schema.setdefault("$defs", root["$defs"])
    validator = cls(resolver_schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(list(e.absolute_path)), str(e.path)))
    if errors:
        msg = _format_error(errors[0])
        if where and not msg.startswith(where):
            msg = f"{where}.{msg}" if not msg.startswith("unknown key") else f"{msg} in {where}"
        raise ConfigError(f"config error: {msg}")


def check_schema(instance: Any, schema: dict, where: str = "") -> None:
    """Validate ``instance`` against ``schema`` (which may use the config schema's ``#/$defs``) with the config's
    one-line errors, ``where`` naming its place in the config (e.g. ``experiments.E.rewards``)."""
    validate(instance, schema, fill_defaults=False, where=where)


# --------------------------------------------------------------------------------------------------------------
# Merging


def deep_merge(base: dict, override: dict) -> dict:
    """Dicts merge recursively; lists and scalars in ``override`` replace those in ``base``."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _resolve_ref(node: Any, defs: dict) -> Any:
    while isinstance(node, dict) and str(node.get("$ref", "")).startswith("#/$defs/"):
        path = node["$ref"][len("#/$defs/") :].split("/")
        node = defs
        for part in path:
            node = node[part]
    return node


def _types(node: Any, defs: dict) -> set[str]:
    """Every JSON type a schema node allows (through $ref, oneOf and anyOf)."""
    node = _resolve_ref(node, defs)
    if not isinstance(node, dict):
        return set()
    t = node.get("type")
    out = set(t if isinstance(t, list) else [t] if t else [])
    for alt in node.get("oneOf", []) + node.get("anyOf", []):
        out |= _types(alt, defs)
    return out


def _sub_schemas(node: Any, defs: dict) -> list[dict]:
    node = _resolve_ref(node, defs)
    if not isinstance(node, dict):
        return []
    return [node] + [s for alt in node.get("oneOf", []) + node.get("anyOf", []) for s in _sub_schemas(alt, defs)]


# A YAML 1.2 float. PyYAML (and Snakemake's loader) follow YAML 1.1, where `1e-6` (no dot) is a *string*.
_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def canonical(value: Any, schema: Any = None, defs: dict | None = None, *, ints: bool = True) -> Any:
    """``value`` with every dict's keys sorted (at every level) and, where ``schema`` says a number may not be an
    integer, integers as floats (``lr: 1`` is ``1.0``).

    Snakemake compares params by their ``repr``: a dict in another key order, or ``1`` where another config file
    says ``1.0``, would rerun every job (days of GPU time on a cluster) although the settings are the same. Equal
    floats written differently (``1.0e-6``, ``0.000001``) already load as the same float. Free-form parts of the
    config (``trl.extra_args``, ``verl.env``) have no schema types: their keys are sorted, their numbers kept as
    written. A string that spells a number (``1e-6``, which YAML 1.1 loads as text) where the schema wants a number
    and no string becomes that float. ``ints=False`` leaves integers as they are."""
    if defs is None:
        defs = load_schema()["$defs"]
    if isinstance(value, dict):
        subs = _sub_schemas(schema, defs) if schema is not None else []
        out = {}
        for key in sorted(value, key=str):
            child = None
            for s in subs:
                props = s.get("properties") or {}
                if key in props:
                    child = props[key]
                    break
                if isinstance(s.get("additionalProperties"), dict):
                    child = s["additionalProperties"]
                    break
            out[key] = canonical(value[key], child, defs, ints=ints)
        return out
    if isinstance(value, (list, tuple)):
        subs = _sub_schemas(schema, defs) if schema is not None else []
        items = next((s["items"] for s in subs if isinstance(s.get("items"), dict)), None)
        return [canonical(v, items, defs, ints=ints) for v in value]
    if ints and isinstance(value, int) and not isinstance(value, bool) and schema is not None:
        types = _types(schema, defs)
        # Only where a number is all the schema allows: in [string, number, boolean] (verl.env) 1 stays "1".
        if "number" in types and not types & {"integer", "string"}:
            return float(value)
    if isinstance(value, str) and schema is not None and _FLOAT_TEXT.match(value.strip()):
        types = _types(schema, defs)
        if "number" in types and "string" not in types:
            return float(value)
    return value


def config_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def saved_steps(total: int, save_freq: int, keep: int | None) -> list[int]:
    """The checkpoint steps left on disk after a full run, for every backend: every save_freq-th step plus the
    last one (verl, HF Trainer and Tunix always save the final step), of which the newest ``keep`` survive rotation.
    (Tunix's Orbax manager also saves the first step an attempt trains; rotation removes it unless ``keep`` is
    unset, and merge_step does not offer it.)"""
    steps = sorted({s for s in range(save_freq, total + 1, save_freq)} | {total})
    return steps[-keep:] if keep else steps
