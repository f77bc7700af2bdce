"""Stages are found by the engine, not by the contract: built-in ones from the ``stages``
package, others from the ``prep.stages`` entry points of installed packages; and the
code's imports have no circle (the contract once imported its own plug-ins)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import REPO, write_config, write_jsonl
from pipeline.engine import stage_registry
from pipeline.engine.run import run_pipeline
from pipeline.stage import Stage, StageOutput


class Shout(Stage):
    """A stage from "another package": upper-cases every text."""

    name = "shout"

    @dataclass
    class Options:
        pass

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        text = pc.utf8_upper(batch.column("text"))
        return StageOutput(batch.set_column(batch.schema.get_field_index("text"), "text", text), changed=batch.num_rows)


@pytest.fixture
def plugins(monkeypatch):
    """Pretend these entry points are installed, for this test only."""

    def install(*entries: tuple[str, str]):
        points = [metadata.EntryPoint(name, value, stage_registry.ENTRY_POINT_GROUP) for name, value in entries]
        real = metadata.entry_points

        def entry_points(**selection):
            return points if selection.get("group") == stage_registry.ENTRY_POINT_GROUP else real(**selection)

        monkeypatch.setattr(stage_registry.metadata, "entry_points", entry_points)
        stage_registry._load.cache_clear()

    yield install
    stage_registry._load.cache_clear()


def test_built_in_stages_are_registered():
    assert {"normalize", "length", "langid", "quality", "pii", "dedup", "tokenize"} <= set(stage_registry.registry())


def test_a_stage_from_an_entry_point_runs_in_a_config(plugins, tmp_path):
    plugins(("shout", "test_stage_registry:Shout"))
    assert stage_registry.registry()["shout"] is Shout
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "quiet words"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "shout"\n')
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "out" / "docs").column("text").to_pylist() == ["QUIET WORDS"]


def test_a_broken_plugin_is_named(plugins):
    plugins(("broken", "no_such_module_anywhere:Stage"))
    with pytest.raises(stage_registry.PluginError, match="'broken'.*no_such_module_anywhere"):
        stage_registry.registry()


def _module_imports(root: Path) -> dict[str, set[str]]:
    """Each module of pipeline/ and stages/ and the modules of those packages it imports."""
    files = {}
    for path in [*root.glob("pipeline/**/*.py"), *root.glob("stages/**/*.py")]:
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        files[name] = path
    graph = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in files and t != name)
        graph[name] = deps
    return graph


def test_the_imports_have_no_circle():
    graph = _module_imports(REPO)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(dep):] + [module, dep]))
            if dep not in state:
                visit(dep, path + [module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
