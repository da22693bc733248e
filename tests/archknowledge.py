"""Where a training backend's name, modules or knowledge appear outside its own folder (issue 42: "no backend's name,
module or knowledge outside its folder"). Read from the source; used by tests/test_backend_knowledge.py and
benchmarks/architecture.py.

A backend's folder is ``src/grpoflow/backends/<name>/``. Everything else is outside it: the rest of
``src/grpoflow`` (the registry's resolver ``backends/__init__.py``, its table ``registry.py`` and the shared
``training/`` included), another
backend's folder, ``workflow/scripts``, the ``Snakefile`` and ``rules/*.smk`` (as Snakemake's parser translates
them) and the schema ``src/grpoflow/schema/config.schema.yaml``. Docstrings and comments are not code and are not
read; messages are (a message that names a backend's setting is that backend's knowledge).

The rules, each finding one ``Finding``:

- ``import``: an import of a module in a backend's folder, of any kind (module level, in a function, importlib,
  ``TYPE_CHECKING``/annotation); the registry's own lines (``grpoflow.backends.registry``: ``from
  grpoflow.backends.<name> import BACKEND as <name>``, the only way in) are allowed;
- ``layout``: a string that spells where every backend's modules are (``f"grpoflow.backends.{backend}.runner"``);
- ``name``: a string equal to a backend's name (``"verl"``), in a comparison or anywhere else;
- ``key``: a string naming a backend's own setting (``trl.vllm``, a key of its ``schema.yaml``), a verl Hydra
  root (``actor_rollout_ref``), or an environment variable or constant spelled with its name (``GRPOFLOW_TUNIX_TPU``);
- ``definition``: a function, class, constant, parameter or module named after a backend (``check_trl_gpu``,
  ``backends/verl/rewards.py``, ``envcheck.VERL``);
- ``registers itself``: a backend module that registers a function into a table outside its folder when it is
  imported (``@register_backend_check``): the registry must list, not be filled by side effects;
- ``schema``: a key or text of the shared schema that names a backend.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import archgraph as A
import yaml

BACKENDS_DIR = A.SRC / A.ROOT / "backends"
# verl's Hydra roots that only verl's config has (its SETTINGS name them); data./trainer. are too common a word.
VERL_HYDRA = ("actor_rollout_ref", "custom_reward_function", "reward_manager", "main_ppo")


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    rule: str
    backend: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} ({self.backend}): {self.text}"


@lru_cache(maxsize=1)
def names() -> tuple[str, ...]:
    return tuple(A.registry_names())


def folder_of(path: Path) -> str | None:
    """The backend whose folder holds ``path``, or None."""
    try:
        parts = path.relative_to(BACKENDS_DIR).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in names() else None


def own_keys(name: str) -> list[str]:
    """``<name>.<key>`` of every key of the backend's section (its ``schema.yaml``), nested keys included."""
    path = BACKENDS_DIR / name / "schema.yaml"
    if not path.exists():
        return []

    def walk(node, prefix):
        for key, sub in ((node or {}).get("properties") or {}).items():
            yield f"{prefix}.{key}"
            if isinstance(sub, dict):
                yield from walk(sub, f"{prefix}.{key}")

    return list(walk(yaml.safe_load(path.read_text(encoding="utf-8")), name))


@lru_cache(maxsize=1)
def key_patterns() -> dict[str, re.Pattern]:
    out = {}
    for name in names():
        words = [re.escape(k) for k in own_keys(name)] + [rf"\b{name}\.[a-z_]+"]
        upper = name.upper()  # in an UPPER_CASE word: GRPOFLOW_TUNIX_TPU, VERL_USE_EXTERNAL_MODULES
        words.append(rf"(?<=_){upper}(?![a-z])|(?<![A-Za-z]){upper}(?=_)")
        if name == "verl":
            words += [rf"\b{w}\b" for w in VERL_HYDRA]
        out[name] = re.compile("|".join(words))
    return out


def name_tokens(identifier: str) -> set[str]:
    """The words of an identifier (snake_case, CamelCase, UPPER_CASE), lower-cased."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", identifier)
    return {w.lower() for w in words}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _defined_names(tree: ast.AST):
    """(line, name) of every function, class, assigned name and parameter a module defines."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        yield node.lineno, n.id
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg


def _registry_table(tree: ast.AST) -> set[int]:
    """The string constants of the registry's own table (``BACKENDS = {...}``): the one place that lists them."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BACKENDS" for t in node.targets):
            return {id(c) for c in ast.walk(node.value)}
    return set()


def python_findings(path: str, tree: ast.AST, own: str | None, linemap: dict[int, int]) -> list[Finding]:
    """The name, key, layout and definition findings of one file's Python."""
    found = []
    skip = _docstrings(tree) | (_registry_table(tree) if path == "src/grpoflow/backends/registry.py" else set())
    others = [n for n in names() if n != own]

    def at(node) -> int:
        return linemap.get(node.lineno, node.lineno)

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if "grpoflow.backends.{}" in text:
                found.append(Finding(path, at(node), "layout", "every", ast.unparse(node)[:100]))
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
            continue
        for name in others:
            if node.value == name:
                found.append(Finding(path, at(node), "name", name, repr(node.value)))
            elif key_patterns()[name].search(node.value):
                found.append(Finding(path, at(node), "key", name, _excerpt(node.value, key_patterns()[name])))
    for line, defined in _defined_names(tree):
        hit = name_tokens(defined) & set(others)
        for name in sorted(hit):
            found.append(Finding(path, linemap.get(line, line), "definition", name, defined))
    return found


def _excerpt(text: str, pattern: re.Pattern) -> str:
    m = pattern.search(text)
    start = max(0, m.start() - 30)
    return (
        ("..." if start else "")
        + text[start : m.end() + 30].replace("\n", " ")
        + ("..." if m.end() + 30 < len(text) else "")
    )


def _import_findings() -> list[Finding]:
    found = []
    registry_lines = set(A.registry_lines().values())
    for e in [*A.edges(), *A.workflow_edges()]:
        target = e.target.split(".")
        if len(target) < 3 or target[1] != "backends" or target[2] not in names():
            continue
        name = target[2]
        source = e.source.split(".")
        if len(source) > 2 and source[1] == "backends" and source[2] == name:
            continue
        if e.source == A.BACKEND_REGISTRY and e.kind == "module" and e.target in registry_lines:
            continue
        found.append(Finding(e.path, e.line, "import", name, f"{e.source} -> {e.target} ({e.kind})"))
    return found


def self_registrations(path: str, module: str, tree: ast.Module, own: str) -> list[Finding]:
    """Module-level decorators of a backend's module that call a ``register*`` function imported from outside."""
    imported = A.imported_names(module, tree)
    found = []
    for node in tree.body:
        for deco in getattr(node, "decorator_list", []):
            func = deco.func if isinstance(deco, ast.Call) else deco
            name = ast.unparse(func)
            source = imported.get(name.split(".")[0], "")
            if name.split(".")[-1].startswith("register") and not source.startswith(f"grpoflow.backends.{own}"):
                text = f"@{ast.unparse(deco)} ({source})"
                found.append(Finding(path, deco.lineno, "registers itself", own, text))
    return found


def _schema_findings() -> list[Finding]:
    """Lines of the shared schema naming a backend: ``schema`` in a key or value (``backend: {default: verl}``),
    ``schema text`` in a description (a folded description's lines included)."""
    path = A.SRC / A.ROOT / "schema" / "config.schema.yaml"
    found = []
    words = re.compile(r"\b(" + "|".join(names()) + r")\b", re.I)
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.lstrip().startswith("#"):
            continue
        for m in words.finditer(text):
            described = "description:" in text[: m.start()] or not re.match(r"\s*(- )?[\w$-]+:", text)
            rule = "schema text" if described else "schema"
            found.append(Finding(A.rel(path), number, rule, m.group(1).lower(), text.strip()[:100]))
    return found


def findings() -> list[Finding]:
    """Every place outside a backend's folder that knows that backend."""
    found = _import_findings() + _schema_findings()
    files = sorted((A.SRC / A.ROOT).rglob("*.py")) + sorted((A.REPO / "workflow").rglob("*.py"))
    for path in files:
        own = folder_of(path)
        tree = A.tree(path)
        found += python_findings(A.rel(path), tree, own, {})
        if own:
            module = ".".join(path.relative_to(A.SRC).with_suffix("").parts).removesuffix(".__init__")
            found += self_registrations(A.rel(path), module, tree, own)
        elif path.is_relative_to(A.SRC) and name_tokens(path.stem) & set(names()):
            for name in sorted(name_tokens(path.stem) & set(names())):
                found.append(Finding(A.rel(path), 1, "definition", name, f"module {path.name}"))
    for path in A.workflow_files():
        code, linemap = A.snakemake_python(path)
        found += python_findings(A.rel(path), ast.parse(code), None, linemap)
    return sorted(set(found))
