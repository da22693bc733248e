"""A fourth training backend is one folder plus one registry line (issue 42, "Done when").

The toy backend (tests/backends/toy/, a stand-in trainer: its docstring says what it does not do) is added to a copy
of this checkout exactly as a contributor would add one: its folder as ``src/grpoflow/backends/toy/`` and one line in
the registry, ``src/grpoflow/backends/registry.py`` (``from grpoflow.backends.toy import BACKEND as toy``, in the
alphabetical order of its lines). Nothing else in the copy changes. Then
the workflow runs on the copy, in its own processes (Snakemake's, the jobs'), as it would for a user:

- a config with ``backend: toy`` resolves, with the toy's own section, and the toy's check refuses what it refuses;
- ``snakemake -n -p`` builds the DAG and composes the toy's ``train_grpo`` command;
- ``snakemake results/<experiment>/model`` runs the toy's ``train_grpo`` and ``merge_checkpoint`` jobs for real;
- ``evaluation.backend: toy`` names the toy's generator;
- the docs checks of tests/backends/test_registry.py hold: the toy's settings page (its folder's SETTINGS.md) and
  docs/backends.md's side-by-side table of the backends it shows.

What the copy needs beyond the folder and the line is what the architecture still asks of a new backend.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import REPO, SMALL_ARITH, SNAKEMAKE, load_yaml

TOY = Path(__file__).resolve().parent / "toy"
# What a contributor's checkout holds that the workflow reads (tests are not needed to run it).
CHECKOUT = ("Snakefile", "src", "rules", "workflow", "config", "envs", "profiles", "data", "docs")


def checkout_files() -> list[str]:
    """The files of this checkout as they are now (tracked, or new and not ignored), under CHECKOUT."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *CHECKOUT],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


REGISTRY = "src/grpoflow/backends/registry.py"
TOY_LINE = "from grpoflow.backends.toy import BACKEND as toy"


def add_registry_line(registry: Path, line: str) -> None:
    """``line`` among the registry's lines (``from grpoflow.backends.<name> import BACKEND as <name>``), in their
    alphabetical order."""
    text = registry.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    at = [n for n, node in enumerate(ast.parse(text).body) if _is_registry_line(node)]
    if not at:
        raise RuntimeError(f"no registry lines in {registry}: write the registry line of this test anew")
    nodes = ast.parse(text).body
    rows = [nodes[n].lineno - 1 for n in at]
    where = next((r for r in rows if lines[r].strip() > line), rows[-1] + 1)
    lines.insert(where, line + "\n")
    registry.write_text("".join(lines), encoding="utf-8")


def _is_registry_line(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("grpoflow.backends.")
        and [a.name for a in node.names] == ["BACKEND"]
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout with the toy's folder and its one registry line."""
    root = tmp_path_factory.mktemp("toy-checkout")
    for name in checkout_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(TOY, root / "src/grpoflow/backends/toy", ignore=shutil.ignore_patterns("__pycache__"))
    add_registry_line(root / REGISTRY, TOY_LINE)
    return root


def env_of(root: Path) -> dict:
    """The copy's grpoflow first, as its Snakefile puts it for every job."""
    return {**os.environ, "PYTHONPATH": str(root / "src"), "PATH": f"{Path(SNAKEMAKE).parent}:{os.environ['PATH']}"}


def python(root: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_of(root), cwd=root)


def toy_demo(root: Path) -> Path:
    """The demo config with every experiment on the toy backend."""
    cfg = load_yaml(REPO / "config/config.yaml")
    cfg["defaults"]["backend"] = "toy"
    cfg["defaults"].pop("trl")
    cfg["defaults"]["toy"] = {"max_steps": 500}
    path = root / "toy-demo.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}, no output"


def needs_to_resolve(root: Path) -> list[str]:
    config = toy_demo(root)
    code = (
        "import json, sys, yaml\n"
        "from grpoflow import backends\n"
        "from grpoflow.config import resolve_config\n"
        "from grpoflow.errors import ConfigError\n"
        f"raw = yaml.safe_load(open({str(config)!r}))\n"
        "toy = backends.get('toy')\n"
        "missing = [n for n in backends.INTERFACE if not hasattr(toy, n)]\n"
        "cfg = resolve_config(raw)\n"
        "exp = next(iter(cfg.experiments.values()))\n"
        "raw['defaults']['grpo']['total_steps'] = 600\n"
        "try:\n"
        "    resolve_config(raw); refused = None\n"
        "except ConfigError as err:\n"
        "    refused = str(err)\n"
        "print(json.dumps({'missing': missing, 'backend': exp['backend'], 'toy': exp.get('toy'), 'refused': refused}))\n"
    )
    proc = python(root, code)
    if proc.returncode:
        return [f"resolve: a config with backend: toy does not resolve: {last_line(proc)}"]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    needs = [f"resolve: the toy lacks {n} of the interface" for n in got["missing"]]
    if (got["backend"], got["toy"]) != ("toy", {"max_steps": 500}):
        needs.append(f"resolve: the experiment resolved to backend {got['backend']!r} with toy: {got['toy']!r}")
    if not got["refused"] or "toy.max_steps" not in got["refused"]:
        needs.append(f"resolve: the toy's config check did not run (refused: {got['refused']!r})")
    return needs


def workdir_in(root: Path, name: str) -> Path:
    """A scratch working directory of the copy that sees its config/ and data/ (as tests' make_workdir does)."""
    wd = root.parent / f"{root.name}-{name}"
    wd.mkdir()
    for sub in ("config", "data"):
        (wd / sub).symlink_to(root / sub)
    return wd


def needs_to_dry_run(root: Path, workdir: Path) -> list[str]:
    cmd = [SNAKEMAKE, "-s", str(root / "Snakefile"), "-d", str(workdir), "-n", "-p"]
    proc = subprocess.run(
        [*cmd, "--configfile", str(toy_demo(root))], capture_output=True, text=True, env=env_of(root), cwd=workdir
    )
    if proc.returncode:
        return [f"dry-run: snakemake -n fails: {last_line(proc)}"]
    if "-m grpoflow.backends.toy.train --spec" not in proc.stdout:
        return ["dry-run: the train_grpo jobs do not run the toy's command"]
    return []


def needs_to_train_and_merge(root: Path, workdir: Path, start_model: str) -> list[str]:
    """The toy's train_grpo and merge_checkpoint, run by Snakemake, from a tiny model on the small arith set."""
    cfg = {
        "datasets": {
            "arith": {
                "source": "synthetic",
                "format": "gsm8k",
                "synthetic": SMALL_ARITH["datasets"]["arith"]["synthetic"],
                "validation": SMALL_ARITH["datasets"]["arith"]["validation"],
            }
        },
        "experiments": {
            "toy-run": {
                "backend": "toy",
                "data": {"dataset": "arith"},
                "sft": {"model": start_model},
                "grpo": {"total_steps": 3, "save_freq": 1},
                "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "mem_mb": 2000, "runtime": 10},
            }
        },
        "evaluation": {"benchmarks": {"arith": {"dataset": "arith", "split": "test"}}},
    }
    config = root / "toy-run.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    cmd = [SNAKEMAKE, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2", "--configfile", str(config)]
    proc = subprocess.run(
        [*cmd, "--", "results/toy-run/model"], capture_output=True, text=True, env=env_of(root), cwd=workdir
    )
    if proc.returncode:
        logs = sorted((workdir / "logs").rglob("*.log")) if (workdir / "logs").is_dir() else []
        failed = [p for p in logs if "grpoflow: error" in p.read_text(errors="replace")]
        why = failed[0].read_text(errors="replace").strip().splitlines()[-1] if failed else last_line(proc)
        return [f"run: the toy's train_grpo / merge_checkpoint jobs fail: {why}"]
    marker = json.loads((workdir / "results/toy-run/training_complete.json").read_text())
    merged = json.loads((workdir / "results/toy-run/model/grpoflow_merge.json").read_text())
    if (marker["backend"], marker["final_step"], merged["backend"]) != ("toy", 3, "toy"):
        return [f"run: the marker or merge record is not the toy's: {marker['backend']}, {merged['backend']}"]
    return []


def needs_for_its_generator(root: Path) -> list[str]:
    """``evaluation.backend: toy`` evaluates with the toy's generator (the issue: a backend owns its generator)."""
    config = toy_demo(root)
    code = (
        "import yaml\n"
        "from grpoflow.config import resolve_config\n"
        "from grpoflow.evaluation.backends import evaluation_row\n"
        f"raw = yaml.safe_load(open({str(config)!r}))\n"
        "raw['evaluation']['backend'] = 'toy'\n"
        "print(evaluation_row(resolve_config(raw).evaluation).module)\n"
    )
    proc = python(root, code)
    if proc.returncode:
        return [f"generator: a config with evaluation.backend: toy does not resolve: {last_line(proc)}"]
    if proc.stdout.strip() != "grpoflow.backends.toy.generate":
        return [f"generator: evaluation.backend: toy evaluates with {proc.stdout.strip()}, not the toy's generator"]
    return []


def needs_in_the_docs(root: Path) -> list[str]:
    """The docs the checks of tests/backends/test_registry.py hold on the copy: every registered backend's settings
    page (its folder's SETTINGS.md, the toy's included) and docs/backends.md's side-by-side table of the backends it
    shows."""
    code = (
        "import re\n"
        "from grpoflow import backends\n"
        "stale = [n for n in backends.names()\n"
        "         if open(f'src/grpoflow/backends/{n}/SETTINGS.md').read() != backends.settings_page(n)]\n"
        "doc = open('docs/backends.md').read()\n"
        "m = re.search(r'<!-- settings table[^>]*-->\\n(.*?)<!-- end settings table -->', doc, re.S)\n"
        "shown = [c.strip() for c in m.group(1).splitlines()[0].strip('|').split('|')][1:]\n"
        "if m.group(1) != backends.settings_table(shown) or not set(shown) <= set(backends.names()):\n"
        "    stale.append('docs/backends.md')\n"
        "print(' '.join(stale) or 'ok')\n"
    )
    proc = python(root, code)
    if proc.returncode or proc.stdout.strip() != "ok":
        return [f"docs: the settings pages do not hold on the copy: {proc.stdout.strip() or last_line(proc)}"]
    return []


def test_the_toy_folder_and_registry_line_are_all_the_copy_adds(checkout):
    """The copy is the checkout plus the toy's folder and one line: the measure below is of nothing else."""
    registry = (checkout / REGISTRY).read_text().splitlines()
    mine = (REPO / REGISTRY).read_text().splitlines()
    assert [line for line in registry if line not in mine] == [TOY_LINE]
    files = {p.relative_to(checkout).as_posix() for p in checkout.rglob("*") if p.is_file()}
    added = {p for p in files if "__pycache__" not in p and not p.startswith("toy-")} - set(checkout_files())
    assert {
        p.removeprefix("src/grpoflow/backends/toy/") for p in added if p.startswith("src/grpoflow/backends/toy/")
    } == {p.relative_to(TOY).as_posix() for p in TOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert not [p for p in added if not p.startswith("src/grpoflow/backends/toy/")]


@pytest.mark.timeout(1200)
def test_a_fourth_backend_is_one_folder_plus_one_registry_line(checkout, tiny_model):
    needs = needs_to_resolve(checkout)
    needs += needs_to_dry_run(checkout, workdir_in(checkout, "dry"))
    needs += needs_to_train_and_merge(checkout, workdir_in(checkout, "run"), tiny_model)
    needs += needs_for_its_generator(checkout)
    needs += needs_in_the_docs(checkout)
    assert not needs, "a fourth backend needs more than one folder and one registry line:\n" + "\n".join(needs)


def test_the_registry_line_is_added_among_the_lines_in_order(tmp_path):
    registry = tmp_path / "registry.py"
    registry.write_text(
        '"""doc"""\nimport x\nfrom grpoflow.backends.a import BACKEND as a\nfrom grpoflow.backends.z import BACKEND as z\n\nY = 2\n'
    )
    add_registry_line(registry, TOY_LINE)
    assert registry.read_text() == (
        '"""doc"""\nimport x\nfrom grpoflow.backends.a import BACKEND as a\n'
        + TOY_LINE
        + "\nfrom grpoflow.backends.z import BACKEND as z\n\nY = 2\n"
    )
