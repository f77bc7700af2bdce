"""Runs over many input files: what a task carries does not grow with the number of files.

Each task used to carry the whole config, input list included, so every worker unpickled
every input path once per unit, and a run's time grew as the number of files squared
(1,000 one-line files: 6.6 s; 4,000: 59.6 s)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine import run as run_module
from pipeline.engine.executor import LocalExecutor
from pipeline.engine.run import run_pipeline


class RecordingExecutor(LocalExecutor):
    """A one-process executor that keeps the pickled size of every task it is given."""

    sizes: list[int] = []

    def run(self, tasks, bar, after=None):
        RecordingExecutor.sizes += [len(pickle.dumps(args)) for _, args in tasks]
        return super().run(tasks, bar, after)


def _largest_task(tmp_path, files: int, monkeypatch) -> int:
    folder = tmp_path / f"in{files}"
    folder.mkdir()
    for i in range(files):
        (folder / f"part-{i:05d}.jsonl").write_text(f'{{"id": "{i}", "text": "document number {i}"}}\n')
    config = tmp_path / f"c{files}.toml"
    # a unit per file (no packs): a task's size is then its one file's, whatever the run's
    config.write_text(
        f'[run]\ngroup_bytes = 0\n[sources.web]\npaths = ["{folder}/*.jsonl"]\n[[stages]]\nname = "normalize"\n'
    )
    RecordingExecutor.sizes = []
    monkeypatch.setattr(run_module, "_executor", lambda options: RecordingExecutor(1))
    manifest = run_pipeline(config, tmp_path / f"out{files}", workers=1, quiet=True)
    assert manifest["balance"]["input"] == files
    return max(RecordingExecutor.sizes)


def test_a_task_carries_the_same_bytes_for_ten_files_or_four_hundred(tmp_path, monkeypatch):
    few = _largest_task(tmp_path, 10, monkeypatch)
    many = _largest_task(tmp_path, 400, monkeypatch)
    assert many < few + 200, (few, many)  # the file's own name and number, not the list


def _small_files(folder: Path, files: int) -> None:
    """``files`` one-to-three-line files; file 7 holds a broken line, every 5th file a
    copy of file 0's first document (for dedup) and every 4th a short one (for length)."""
    folder.mkdir(parents=True, exist_ok=True)
    first = "the first document of the run, long enough to be kept by the length stage " * 3
    for i in range(files):
        lines = [json.dumps({"id": f"f{i}-a", "text": f"document {i} " + "with enough words to pass " * 8})]
        if i % 5 == 0:
            lines.append(json.dumps({"id": f"f{i}-copy", "text": first}))
        if i % 4 == 0:
            lines.append(json.dumps({"id": f"f{i}-short", "text": "short"}))
        if i == 7:
            lines.append('{"id": "broken", "text": ')
        (folder / f"part-{i:05d}.jsonl").write_text("\n".join(lines) + "\n")


PACK_STAGES = '\n[[stages]]\nname = "length"\nmin_chars = 100\n[[stages]]\nname = "dedup"\n'


def _run(tmp_path: Path, folder: Path, name: str, group_bytes: int) -> tuple[Path, dict]:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'[run]\ngroup_bytes = {group_bytes}\n[sources.web]\npaths = ["{folder}/*.jsonl"]\n' + PACK_STAGES
    )
    out = tmp_path / name
    return out, run_pipeline(config, out, workers=2, quiet=True)


def _kept(out: Path) -> list[tuple[str, str]]:
    rows = []
    for path in sorted((out / "docs" / "web").glob("*.parquet")):
        table = pq.read_table(path)
        assert "_file" not in table.column_names and "_line" not in table.column_names
        rows += list(zip(table.column("id").to_pylist(), table.column("text").to_pylist()))
    return rows


def _ledger(out: Path) -> list[tuple]:
    table = pa.concat_tables(pq.read_table(p) for p in sorted((out / "rejects" / "web").glob("*.parquet")))
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "stage", "reason", "file", "line"))))


def test_small_files_are_packed_into_few_units_with_the_same_documents_and_ledger(tmp_path):
    folder = tmp_path / "in"
    _small_files(folder, 60)
    packed_out, packed = _run(tmp_path, folder, "packed", 4 << 20)
    single_out, single = _run(tmp_path, folder, "single", 0)
    assert [p.name for p in (packed_out / "docs" / "web").glob("*.parquet")] == [
        "00000-part-00000.jsonl.to-00059.parquet"
    ]
    assert len(list((single_out / "docs" / "web").glob("*.parquet"))) == 60
    assert _kept(packed_out) == _kept(single_out)
    ledger = _ledger(packed_out)
    assert ledger == _ledger(single_out)
    # each rejected row names its own file, in the reader (segment 0) and after dedup (segment 1)
    assert ("f10-copy", "dedup", "exact-duplicate", "part-00010.jsonl", 2) in ledger
    assert ("f8-short", "length", "too-short", "part-00008.jsonl", 2) in ledger
    assert [row[3:] for row in ledger if row[1] == "read"] == [("part-00007.jsonl", 2)]
    packed, single = (json.loads((out / "manifest.json").read_text()) for out in (packed_out, single_out))
    for manifest in (packed, single):
        manifest.pop("config"), manifest.pop("config_file")
    assert packed == single  # the manifest lists every file with its size and sha256 either way
    assert len(packed["inputs"]) == 60 and all(i["sha256"] for i in packed["inputs"])


def test_packs_close_at_group_bytes_and_keep_input_order(tmp_path):
    folder = tmp_path / "in"
    _small_files(folder, 30)
    out, _ = _run(tmp_path, folder, "packs", 1000)  # about 3-4 files a pack
    names = [p.name.removesuffix(".json") for p in sorted((out / "stats" / "segment-0" / "web").glob("*.json"))]
    assert 5 < len(names) < 15, names
    firsts = [int(n.split("-")[0]) for n in names]
    lasts = [int(n.rsplit("-", 1)[1]) if ".to-" in n else first for n, first in zip(names, firsts)]
    assert firsts[0] == 0 and lasts[-1] == 29
    assert all(last + 1 == first for last, first in zip(lasts, firsts[1:]))  # consecutive, no gap


def test_a_pack_writes_its_documents_in_few_row_groups_not_one_per_file(tmp_path):
    """The documents of a pack are gathered before the stages run: one batch (and one
    Parquet row group) per file made a pack of 1,000 files 1,000 stage calls and row groups."""
    folder = tmp_path / "in"
    _small_files(folder, 60)
    out, _ = _run(tmp_path, folder, "packed", 4 << 20)
    (docs,) = (out / "docs" / "web").glob("*.parquet")
    assert pq.ParquetFile(docs).metadata.num_row_groups == 1
