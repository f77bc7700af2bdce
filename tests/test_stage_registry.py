"""Stages are found by the engine, not by the contract: built-in ones from the ``stages``
package, others from the ``prep.stages`` entry points of installed packages (the
contract once imported its own plug-ins: tests/test_architecture.py keeps the imports
free of circles)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import write_config, write_jsonl

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
