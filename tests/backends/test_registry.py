"""The backend registry and the interface every backend provides; docs/backends.md's table and each backend's
SETTINGS.md are its SETTINGS; the shared writers and the checkpoint scanner of grpoflow.training.common."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from grpoflow_testing import REPO

from grpoflow import backends, envcheck, planes
from grpoflow.errors import GrpoflowError
from grpoflow.training import common


def test_each_backends_settings_section_is_its_folders_and_the_backend_enum_is_the_registry():
    """A backend's config section is written once, in its folder (backends/<name>/schema.yaml), and the schema's
    ``backend`` enum is the registry's names: adding a backend writes no line in config.schema.yaml."""
    import yaml

    from grpoflow.schema import load_schema

    text = (REPO / "src/grpoflow/schema/config.schema.yaml").read_text()
    assert not [name for name in backends.names() if re.search(rf"^\s+{name}:", text, re.M)]
    schema = load_schema()
    experiment = schema["$defs"]["experiment"]["properties"]
    assert experiment["backend"]["enum"] == list(backends.names())
    for name in backends.names():
        own = yaml.safe_load((REPO / f"src/grpoflow/backends/{name}/schema.yaml").read_text())
        assert experiment[name]["$ref"] == f"#/$defs/{name}"
        assert schema["$defs"][name]["properties"].keys() == own["properties"].keys()


@pytest.mark.parametrize("name", sorted(backends.names()))
def test_every_backend_provides_the_interface(name):
    module = backends.get(name)
    for attr in backends.INTERFACE:
        assert hasattr(module, attr), f"grpoflow.backends.{name} lacks {attr}"
    data = ("name", "SETTINGS", "METRICS", "MERGE_CHECK", "MERGE_CHECKED_WITH", "GENERATOR")
    assert all(callable(getattr(module, f)) for f in backends.INTERFACE if f not in data)
    assert module.MERGE_CHECK is None or isinstance(module.MERGE_CHECK, envcheck.Check)
    assert module.SETTINGS and all(k.startswith("grpo.") for k in module.SETTINGS)
    assert module.METRICS and all(isinstance(v, str) for v in module.METRICS.values())


@pytest.mark.parametrize(
    "config, plane, accelerator, merge_check, summary",
    [
        ("config/config.yaml", planes.LOCAL, planes.NO_ACCELERATOR, None, None),  # TRL on the CPU (the demo)
        ("config/qwen2.5-math-1.5b-lora-binary.yaml", planes.CLUSTER, planes.GPU, None, "with TRL on 1 GPU"),
        (
            "config/qwen3-32b-gsm8k.yaml",
            planes.CLUSTER,
            planes.GPU,
            "merge_checkpoint (backend verl)",
            "with verl. GPU memory",
        ),
        (
            "config/qwen3-8b-gsm8k-tunix.yaml",
            planes.TUNIX,
            planes.TPU,
            "merge_checkpoint (backend tunix)",
            "with Tunix on a v5p-8",
        ),
    ],
)
def test_each_backend_answers_what_the_workflow_asks_of_a_shipped_config(
    config, plane, accelerator, merge_check, summary
):
    """What rules/common.smk, grpoflow.deployment, preflight and workflow ask a backend instead of its name."""
    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config

    cfg = resolve_config(load_shipped(config))
    name, exp = next(iter(cfg.experiments.items()))
    backend = backends.of(exp)
    merge_job = backend.MERGE_CHECK.job if backend.MERGE_CHECK else None
    assert (backend.plane(exp), backend.accelerator(exp), merge_job) == (plane, accelerator, merge_check)
    line = backend.summary(name, exp)
    assert line is None if summary is None else summary in line
    needs = {rule: backend.environment(exp, rule) for rule in ("train_grpo", "merge_checkpoint")}
    if plane == planes.LOCAL:
        assert needs == {"train_grpo": None, "merge_checkpoint": None}
    else:
        assert all(needs.values()) and all(len(n) == 3 for rule in needs.values() for n in rule)
    if merge_check:
        assert needs["merge_checkpoint"] == envcheck.needs_of(backend.MERGE_CHECK)


def test_an_experiment_naming_no_backend_gets_the_registrys_default():
    """The default backend is the registry's (``DEFAULT``), filled in by grpoflow.config, not the shared schema's:
    the shipped verl config without its ``backend:`` line resolves to exactly what it resolves to with it."""
    from grpoflow_testing import load_shipped

    from grpoflow.config import resolve_config
    from grpoflow.schema import load_schema

    assert "default" not in load_schema()["$defs"]["experiment"]["properties"]["backend"]
    raw = load_shipped("config/qwen3-32b-gsm8k.yaml")
    assert raw["defaults"]["backend"] == backends.default()
    written = resolve_config(raw).experiments
    del raw["defaults"]["backend"]
    assert resolve_config(raw).experiments == written


def test_what_a_backend_says_of_a_shared_key_is_in_that_keys_description():
    """A backend's schema.yaml describes shared keys in its ``x-describes`` (its knowledge stays in its folder); the
    assembled schema, and so config/README.md, shows it at the key."""
    import yaml

    from grpoflow.schema import load_schema

    schema = load_schema()
    for name in backends.names():
        own = yaml.safe_load((REPO / f"src/grpoflow/backends/{name}/schema.yaml").read_text())
        assert "x-describes" not in schema["$defs"][name]
        for path, words in (own.get("x-describes") or {}).items():
            node = schema
            for part in path.strip("/").split("/"):
                node = node[part]
            assert words in node["description"], f"{name}: {path}"


def test_the_registry_is_a_table_and_each_backend_checks_its_own_section():
    """The registry lists the backends (nothing registers itself on import); each Backend object's check runs at
    config load, called by grpoflow.config through the registry."""
    for name in backends.names():
        backend = backends.get(name)
        assert backend.name == name and callable(backend.check)
    with pytest.raises(KeyError, match="unknown backend"):
        backends.get("nope")


def test_importing_the_backends_imports_no_trainer():
    code = (
        "import sys, grpoflow.backends as b\n"
        "[b.get(n) for n in b.names()]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'trl', 'verl', 'ray', 'jax', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def docs_table() -> tuple[list[str], str]:
    """docs/backends.md's side-by-side settings table: the backends of its header row, and the table."""
    doc = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- settings table[^>]*-->\n(.*?)<!-- end settings table -->", doc, re.S)
    assert m, "docs/backends.md lost its settings-table markers"
    header = m.group(1).splitlines()[0]
    return [c.strip() for c in header.strip("|").split("|")][1:], m.group(1)


def test_docs_table_is_the_settings_tables_of_the_backends_it_shows():
    """docs/backends.md shows the shipped backends side by side: each a registered backend, each column its SETTINGS
    (a new backend's page is its folder's SETTINGS.md, below, so adding one edits no shared page)."""
    shown, table = docs_table()
    assert shown and set(shown) <= set(backends.names()), f"docs/backends.md shows unregistered backends: {shown}"
    assert table == backends.settings_table(shown), (
        f"docs/backends.md is stale: paste `python -m grpoflow.backends table` (columns {', '.join(shown)})"
    )


@pytest.mark.parametrize("name", sorted(backends.names()))
def test_every_backend_ships_its_settings_page(name):
    page = REPO / f"src/grpoflow/backends/{name}/SETTINGS.md"
    assert page.is_file() and page.read_text(encoding="utf-8") == backends.settings_page(name), (
        f"{page.relative_to(REPO)} is stale: run `python -m grpoflow.backends settings {name} > "
        f"{page.relative_to(REPO)}`"
    )


def test_table_command_prints_the_table_and_a_backends_page():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "grpoflow.backends", *args], capture_output=True, text=True)

    assert run("table").stdout == backends.settings_table()
    name = backends.names()[0]
    assert run("settings", name).stdout == backends.settings_page(name)
    wrong = run("settings", "nope")
    assert wrong.returncode == 2 and "NAME: one of" in wrong.stderr


def test_marker_has_the_shared_keys_and_only_for_a_complete_run(tmp_path):
    path = tmp_path / "training_complete.json"
    shared = dict(
        experiment="E",
        backend="x",
        planned_steps=3,
        checkpoint_dir="ck",
        final_checkpoint="ck/3",
        metrics_summary={"step": 3},
        settings_history=[],
        provenance={"p": 1},
    )
    with pytest.raises(GrpoflowError, match="step 2 of 3"):
        common.write_marker(path, final_step=2, **shared)
    assert not path.exists()
    marker = common.write_marker(path, final_step=3, nodes=1, **shared)
    assert json.loads(path.read_text()) == marker
    assert set(marker) == {
        "experiment",
        "backend",
        "planned_steps",
        "final_step",
        "checkpoint_dir",
        "final_checkpoint",
        "nodes",
        "metrics_summary",
        "settings_history",
        "provenance",
    }


def test_scanner_keeps_complete_step_dirs_in_step_order(tmp_path):
    for step in (10, 2, 7):
        (tmp_path / f"step-{step}").mkdir()
    (tmp_path / "step-3").write_text("a file, not a checkpoint")
    (tmp_path / "other-1").mkdir()
    pattern = re.compile(r"^step-(\d+)$")
    found = common.scan_checkpoints(tmp_path, pattern, lambda path, step: step != 10)
    assert list(found) == [2, 7] and found[7] == tmp_path / "step-7"
    assert sorted(common.step_dirs(tmp_path, pattern)) == [2, 7, 10]
    assert common.latest_checkpoint(found) == (7, tmp_path / "step-7")
    assert common.latest_checkpoint({}) is None
    assert common.scan_checkpoints(tmp_path / "missing", pattern, lambda p, s: True) == {}


def test_metrics_mapping_takes_numbers_first_listed_source_wins(tmp_path):
    table = {"a/mean": "a", "a_old": "a", "b": "b", "c": "c", "d": "d"}
    row = common.map_metrics(4, {"a_old": 1.0, "a/mean": 2.0, "b": math.nan, "c": True, "d": 3, "e": 5}, table)
    assert row == {"step": 4, "a": 2.0, "d": 3, "nonfinite": ["b"]}  # NaN is named, not dropped (grpoflow.health)
    assert common.map_metrics(5, {"a_old": 1.5}, table) == {"step": 5, "a": 1.5}
    out = tmp_path / "train_metrics.jsonl"
    common.write_metrics(out, [row])
    assert [json.loads(line) for line in out.read_text().splitlines()] == [row]


@pytest.mark.parametrize("name", sorted(backends.names()))
def test_every_backend_scans_with_the_common_scanner(name, tmp_path):
    assert backends.get(name).checkpoints(tmp_path) == {}
    assert backends.get(name).checkpoints(tmp_path / "missing") == {}
