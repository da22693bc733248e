"""The walk of a setting (issue 42): the path one config key takes from ``config/config.yaml`` to the trainer's own
setting, hop by hop, with the file and line of each hop, where it goes dark and where it climbs back up.

The hops are written by hand (``WALKS``): static analysis cannot follow a value through a JSON string, a shell
command or a dict. What is computed: each hop's line (its ``anchor``, a regular expression, found in its file: a
hop whose anchor is gone raises ``LookupError``, and the walk must be written again), its module and layer, and
whether the import edges the hop says it uses exist.

Layers: those of the static module graph (``archgraph``: module-level and in-function imports; circles collapsed),
with the Snakefile and ``rules/*.smk`` as one node, ``rules``, above what they import; a data file is read by the
module named in ``DATA_FILES``; a library outside grpoflow is below everything (layer -1).

How the value reaches a hop (``via``), from the previous hop's module or from ``frm``:

- ``start``: where the value is written;
- ``read``: a file is read (the config YAML by Snakemake, the schema by ``grpoflow.schema``);
- ``call``: a function is called with the value (an import leads from caller to callee: "go to definition" follows);
- ``return``: the value comes back to a caller;
- ``registered``: a function is called through a table it put itself into when its module was imported (dark);
- ``importlib``: a function of a module imported by a name computed at run time (dark);
- ``json``: the value becomes text in a JSON string (dark);
- ``process``: a shell command starts a new process (dark);
- ``argparse``: the value is read back from the command line (dark: "go to definition" stops at ``parse_args``).

A hop *climbs back up* when a call-like hop (call, registered, importlib, argparse) calls into a module at a higher
layer than the caller: a call can only do that in the dark (a static import from caller to callee would put the
callee below). The *back-arrows in the walk* are the import edges of every kind (``archgraph.ALL``) between two
modules of the walk (or the packages above them) that run against the static layer order: from a module to one at
its own layer or above (``archgraph.against_the_layers``).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import archgraph as A

DARK = frozenset({"registered", "importlib", "json", "process", "argparse"})
CALLS = frozenset({"call", "registered", "importlib", "argparse"})
# A data file -> the node that reads it.
DATA_FILES = {"src/grpoflow/schema/config.schema.yaml": "grpoflow.schema", "config/config.yaml": "config file"}
EXTERNAL = -1


@dataclass(frozen=True)
class Hop:
    path: str  # relative to the repository; "site-packages:<path>" for an installed library
    anchor: str  # a regular expression found on the hop's line (the first match)
    what: str
    via: str
    frm: str | None = None  # the module the value comes from, when not the previous hop's


def _demo_to_spec(key: str, demo_line: str, schema_line: str) -> list[Hop]:
    """From the demo config through resolve_config (and the backend's check), to the train_grpo command's JSON."""
    return [
        Hop("config/config.yaml", demo_line, f"the demo's value, under defaults.grpo.{key}", "start"),
        Hop("rules/common.smk", r"CFG = resolve_config\(config\)", "Snakemake's `config` dict, handed over", "read"),
        Hop("src/grpoflow/config.py", r"^def resolve_config\(", "resolve_config: an untyped dict", "call"),
        Hop(
            "src/grpoflow/config.py",
            r'validate\(merged, \{"\$ref": "#/\$defs/experiment"\}',
            "defaults deep-merged under the experiment, validated with defaults filled",
            "call",
        ),
        Hop("src/grpoflow/schema/__init__.py", r"^def validate\(", "jsonschema checks and fills it", "call"),
        Hop("src/grpoflow/schema/config.schema.yaml", schema_line, "the key's type and default", "read"),
        Hop(
            "src/grpoflow/config.py",
            r"experiments=\{n: canonical\(e, ",
            "canonical: a dict in WorkflowConfig.experiments",
            "return",
        ),
    ]


def _spec_to_runner() -> list[Hop]:
    """From the resolved config through the rule's params and the shell command into the TRL runner."""
    return [
        Hop("rules/common.smk", r"CFG = resolve_config\(config\)", "the rules' CFG", "return", "grpoflow.config"),
        Hop("rules/train.smk", r"command=lambda wc: training_command\(wc\.experiment\)", "the rule's param", "call"),
        Hop("rules/common.smk", r"_training_command\(CFG, experiment", "composed from CFG", "call"),
        Hop(
            "src/grpoflow/backends/__init__.py",
            r"return get\(backend\)\.command\(cfg, experiment, inputs, outputs\)",
            "the registry: the backend's command",
            "call",
        ),
        Hop(
            "src/grpoflow/backends/trl/__init__.py",
            r"return command\(cfg, experiment, inputs, outputs\)",
            "TRL's Backend object (the registry's trl line) composes the command",
            "call",
            "grpoflow.backends.registry",
        ),
        Hop(
            "src/grpoflow/backends/trl/commandline.py",
            r"spec = training_spec\(cfg, experiment, inputs, outputs\)",
            "TRL's command",
            "call",
        ),
        Hop(
            "src/grpoflow/training/common.py",
            r'"grpo": cfg\.plans\[experiment\]\.grpo\.as_dict\(\),',
            "the training spec: the plan's GrpoSettings as a dict",
            "call",
        ),
        Hop(
            "src/grpoflow/training/common.py",
            r"--spec \{shlex\.quote\(json\.dumps\(spec",
            "the spec as JSON text in the shell command",
            "json",
        ),
        Hop("rules/train.smk", r"\{params\.command\} > \{log\} 2>&1", "the rule's shell command", "return"),
        Hop(
            "src/grpoflow/backends/trl/train.py",
            r'code = train_main\("trl", ENTRY, argv, run_training, env_check\)',
            "`python -m grpoflow.backends.trl.train --spec JSON` in the job",
            "process",
        ),
        Hop(
            "src/grpoflow/training/common.py",
            r"spec = json\.loads\(args\.spec\)",
            "parse_args, json.loads: a dict again",
            "argparse",
        ),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r"^def run_training\(spec",
            "the runner (the entry point hands train_main its run_training, which calls it)",
            "call",
            "grpoflow.backends.trl.train",
        ),
    ]


def _trl_site(name: str) -> str:
    return f"site-packages:trl/trainer/grpo_config.py#{name}"


WALKS: dict[str, list[Hop]] = {
    "learning_rate": [
        *_demo_to_spec(
            "learning_rate",
            r"^\s+learning_rate: 5\.0e-5",
            r"^\s+learning_rate: \{type: number, exclusiveMinimum: 0, default: 1\.0e-6\}",
        ),
        Hop("src/grpoflow/config.py", r"return ExperimentPlan\.resolve\(name, exp\)", "the experiment's plan", "call"),
        Hop(
            "src/grpoflow/plan.py", r"grpo = GrpoSettings\.from_dict\(exp\[\"grpo\"\]\)", "typed: GrpoSettings", "call"
        ),
        Hop(
            "src/grpoflow/backends/trl/__init__.py",
            r"check_trl_experiment\(name, exp, cfg\)",
            "TRL's Backend object (the registry's trl line) checks it: config asks backends.get(...).check",
            "call",
            "grpoflow.backends.registry",
        ),
        Hop(
            "src/grpoflow/backends/trl/commandline.py",
            r"grpo\.learning_rate = \{exp\['grpo'\]\['learning_rate'\]",
            "TRL's config check",
            "call",
        ),
        *_spec_to_runner(),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r'grpo, trl = GrpoSettings\.from_dict\(spec\["grpo"\]\), spec\["trl"\]',
            "the spec's grpo section decoded: GrpoSettings",
            "call",
        ),
        Hop("src/grpoflow/plan.py", r"^    def from_dict\(cls, grpo: Mapping", "GrpoSettings.from_dict", "call"),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r"learning_rate=grpo\.learning_rate",
            "GRPOConfig kwargs",
            "return",
        ),
        Hop("src/grpoflow/backends/trl/runner.py", r"return GRPOConfig\(\*\*", "GRPOConfig(**kwargs)", "call"),
        Hop(_trl_site("learning_rate"), r"^\s+learning_rate: float = field\(", "GRPOConfig.learning_rate", "call"),
    ],
    "max_response_length": [
        *_demo_to_spec(
            "max_response_length",
            r"^\s+max_response_length: 32",
            r"^\s+max_response_length: \{type: integer",
        ),
        Hop("src/grpoflow/config.py", r"return ExperimentPlan\.resolve\(name, exp\)", "the experiment's plan", "call"),
        Hop(
            "src/grpoflow/plan.py",
            r"resolve_reward_set\(dict\(section\), max_response_length=grpo\.max_response_length",
            "its reward set",
            "call",
        ),
        Hop(
            "src/grpoflow/rewards/registry.py",
            r"values\[pname\] = int\(max_response_length\)",
            "resolve_reward_set fills the length parameters (WorkflowConfig.plans)",
            "call",
        ),
        *_spec_to_runner(),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r"max_completion_length=grpo\.max_response_length",
            "GRPOConfig kwargs",
            "call",
        ),
        Hop("src/grpoflow/backends/trl/runner.py", r"return GRPOConfig\(\*\*", "GRPOConfig(**kwargs)", "call"),
        Hop(
            _trl_site("max_completion_length"),
            r"^\s+max_completion_length: int \| None = field\(",
            "GRPOConfig.max_completion_length",
            "call",
        ),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r'plan = TrainingPlan\.decode\("trl", spec\)',
            "the job's plan, decoded from the spec",
            "call",
            "grpoflow.backends.trl.runner",
        ),
        Hop(
            "src/grpoflow/plan.py",
            r"resolve_reward_set\(dict\(section\), max_response_length=grpo\.max_response_length",
            "its reward set: the spec carries the config's rewards section, not its resolution (the command is fixed)",
            "call",
        ),
        Hop(
            "src/grpoflow/rewards/registry.py",
            r"values\[pname\] = int\(max_response_length\)",
            "resolve_reward_set, as at config load (tests/test_plan.py: the same plan)",
            "call",
        ),
        Hop(
            "src/grpoflow/backends/trl/runner.py",
            r"plan\.rewards, grpo\[\"num_generations\"\], tokenizer=tokenizer",
            "the plan's reward set to the reward functions",
            "return",
        ),
        Hop(
            "src/grpoflow/backends/trl/rewards.py",
            r"rset = RewardSet\(rewards_cfg, max_response_length=max_response_length\)",
            "the TRL reward adapter: RewardSet takes the resolved set as it is",
            "call",
        ),
    ],
}


@dataclass(frozen=True)
class Step:
    n: int
    hop: Hop
    where: str  # path:line
    module: str
    layer: int
    caller: str | None
    dark: bool
    climbs: bool
    problem: str | None  # the edge the hop says it uses is not in the graph


def _site_packages_file(path: str) -> Path:
    rel_path = path.removeprefix("site-packages:").partition("#")[0]
    spec = importlib.util.find_spec(rel_path.split("/")[0])
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"{rel_path}: {rel_path.split('/')[0]} is not installed")
    return Path(list(spec.submodule_search_locations)[0]).parent / rel_path


def locate(hop: Hop) -> tuple[str, int]:
    """(path shown, line) of a hop's anchor; LookupError when it is gone."""
    file = _site_packages_file(hop.path) if hop.path.startswith("site-packages:") else A.REPO / hop.path
    pattern = re.compile(hop.anchor)
    for number, text in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if pattern.search(text):
            return hop.path.partition("#")[0], number
    raise LookupError(
        f"the walk's anchor {hop.anchor!r} is not in {hop.path}: the code moved; write the walk again (tests/archwalk.py)"
    )


def module_of(path: str) -> str:
    if path.startswith("site-packages:"):
        return path.removeprefix("site-packages:").split("/")[0] + " (library)"
    if path in DATA_FILES:
        return DATA_FILES[path]
    if path == "Snakefile" or path.startswith("rules/"):
        return "rules"
    parts = list(Path(path).relative_to("src").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def walk_layers() -> dict[str, int]:
    """The static module graph's layers, with the rules' node on top of what they import."""
    g = A.graph(A.STATIC)
    g["rules"] = {e.target for e in A.workflow_edges()}
    return A.layers(g)


def _imports(source: str, target: str, kinds) -> bool:
    """An edge of ``kinds`` from ``source`` to ``target`` or to a package above it (which re-exports it)."""
    edges = [*A.edges(), *A.workflow_edges()]
    return any(e.source == source and e.kind in kinds and (target + ".").startswith(e.target + ".") for e in edges)


def _problem(via: str, caller: str, callee: str) -> str | None:
    if caller == callee or "(library)" in callee or caller in ("config file",):
        return None
    if via in ("call", "argparse") and not _imports(caller, callee, A.STATIC):
        return f"no import from {caller} to {callee}"
    if via == "importlib" and not _imports(caller, callee, {"dynamic"}):
        return f"no importlib edge from {caller} to {callee}"
    if via == "registered" and not _imports(callee, caller, A.STATIC):
        return f"{callee} does not import {caller} (where it would register)"
    return None


def walk(key: str) -> list[Step]:
    layer = walk_layers()
    steps: list[Step] = []
    previous = None
    for n, hop in enumerate(WALKS[key], 1):
        path, line = locate(hop)
        module = module_of(path)
        frm = hop.frm or previous
        own = EXTERNAL if "(library)" in module else layer.get(module, EXTERNAL)
        caller = frm if hop.via in CALLS else None
        climbs = bool(caller) and caller in layer and own > layer[caller]
        problem = _problem(hop.via, caller, module) if caller else None
        steps.append(Step(n, hop, f"{path}:{line}", module, own, caller, hop.via in DARK, climbs, problem))
        previous = module
    return steps


def back_arrows_in(steps: list[Step]) -> list[A.Edge]:
    """The edges of every kind between modules of the walk (and the packages above them, whose ``__init__`` an import
    of them runs) that run against the static layer order."""
    on_walk = set()
    for s in steps:
        parts = s.module.split(".")
        on_walk |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & set(A.modules()) | {s.module}
    layer = walk_layers()
    es = [e for e in A.edges() if e.source in on_walk and e.target in on_walk]
    return A.against_the_layers(es, layer)
