"""Slices of partitioned record files: one partition on its own, read as the file; on an
object store, dedup's reduce tasks fetch their partition's byte range of each band file,
never the whole file, and of dedup's finalize only the members tasks fetch docs files,
each those of its document range's units."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow.fs as pafs
import pytest
from test_s3 import dedup_config, scratch, upload_sample  # noqa: F401 (fixtures)

from pipeline.engine import global_run, storage
from pipeline.engine.run import run_pipeline
from pipeline.formats import partfile
from stages.dedup import clusters

RECORD = np.dtype([("key", "<u8"), ("row", "<u4")])


def _file(path, partitions=4, n=50):
    records = np.zeros(n, RECORD)
    records["key"] = np.arange(n) * 7919
    records["row"] = np.arange(n)
    partfile.write(path, records, records["key"] % partitions, partitions, count=n)
    return records


def test_a_slice_reads_as_its_partition_of_the_file(tmp_path):
    whole = tmp_path / "u.bands"
    _file(whole)
    data = whole.read_bytes()
    partitions, count, offsets = partfile.parse_header(data)
    for p in range(partitions):
        start, end = partfile.byte_range(offsets, p, partfile.record_size(offsets, len(data)))
        partfile.write_slice(partfile.slice_path(whole, p), data, p, data[start:end])
    expected = [partfile.read(whole, p, RECORD) for p in range(partitions)]
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for p in range(partitions):  # only the slices, as a task's mirror holds them
        partfile.slice_path(whole, p).rename(partfile.slice_path(moved / "u.bands", p))
    assert all((partfile.read(moved / "u.bands", p, RECORD) == expected[p]).all() for p in range(partitions))
    assert partfile.header(moved / "u.bands")[:2] == (partitions, count) == (4, 50)
    assert partfile.sliced_name(partfile.slice_path(whole, 3).name) == "u.bands"
    assert partfile.sliced_name("u.bands") is None


@pytest.mark.parametrize("cut", [0, 10, 40])
def test_a_damaged_header_is_a_one_line_error(tmp_path, cut):
    whole = tmp_path / "u.bands"
    _file(whole)
    whole.write_bytes(whole.read_bytes()[:cut])
    with pytest.raises(ValueError, match="u.bands"):
        partfile.read(whole, 0, RECORD)


def test_remote_dedup_fetches_partitions_not_whole_band_files(s3, tmp_path, monkeypatch):
    upload_sample(s3, "slices")
    whole, ranged = [], []
    download, open_ranged = storage.download, storage.RunStore.open_ranged

    def counting_download(fs, key, local):
        whole.append(key)
        download(fs, key, local)

    def counting_open_ranged(self, info):
        ranged.append(info.path)
        return open_ranged(self, info)

    monkeypatch.setattr(storage, "download", counting_download)
    monkeypatch.setattr(storage.RunStore, "open_ranged", counting_open_ranged)
    config = dedup_config(tmp_path / "remote.toml", "s3://slices/in")
    manifest = run_pipeline(config, "s3://slices/run", workers=1, quiet=True)  # tasks in this process
    assert manifest["stages"]["dedup"]["rejected"].get("exact-duplicate", 0) > 0
    partitioned = (".bands", ".forest", ".part")
    assert not [key for key in whole if key.endswith(partitioned)]
    # Each reduce task fetched its partition of every unit's band file. (Here the forests
    # and step files stay in this machine's mirror after upload: on other machines their
    # tasks would fetch ranges of them the same way.)
    assert {key.rsplit(".", 1)[-1] for key in ranged} == {"bands"}
    assert set(Counter(ranged).values()) == {4}  # each unit's band file, once per partition


def test_remote_finalize_fetches_docs_files_only_for_their_ranges(s3, tmp_path, monkeypatch):
    upload_sample(s3, "docs")
    running: list[tuple[str, int]] = []  # the finalize task in progress (none: another phase)
    asked: dict[tuple[str, int], list[str]] = {}  # per finalize task, the whole files it fetched
    finalize_task, pull = global_run.finalize_task, storage.RunStore.pull

    def tracked(config, store, segment_index, step, k, task, progress=None):
        running.append((step.name, task))
        try:
            return finalize_task(config, store, segment_index, step, k, task, progress)
        finally:
            running.pop()

    def recording_pull(self, rel, keep=None):
        if running:  # what was asked for, whether or not this mirror already held it
            asked.setdefault(running[-1], []).extend(name for name, _ in self.listing(rel, keep or (lambda _: True)))
        pull(self, rel, keep)

    monkeypatch.setattr(global_run, "finalize_task", tracked)
    monkeypatch.setattr(storage.RunStore, "pull", recording_pull)
    config = dedup_config(tmp_path / "remote.toml", "s3://docs/in")
    # tasks in this process; work/ kept, as the units table below is read from it
    manifest = run_pipeline(config, "s3://docs/run", workers=1, quiet=True, keep_work=True)
    assert manifest["stages"]["dedup"]["rejected"].get("near-duplicate", 0) > 0
    docs = {task: sorted(n for n in names if n.endswith(".docs.arrow")) for task, names in asked.items()}
    assert {task for task in docs if task[0] in ("decide", "regroup")} == {
        (k, t) for k in ("decide", "regroup") for t in range(4)
    }
    assert all(not names for task, names in docs.items() if task[0] != "members")
    # Members task r fetched exactly the docs files of the units with documents in range r.
    (found,) = [
        i for i in s3.get_file_info(pafs.FileSelector("docs/run", recursive=True)) if i.base_name == "units.json"
    ]
    with s3.open_input_stream(found.path) as f:
        units = json.loads(f.read())["units"]
    work = found.path[len("docs/run/") : -len("units.json")]
    expected: dict[int, list[str]] = {r: [] for r in range(4)}
    total, start = sum(u["count"] for u in units), 0
    for u in units:
        if u["count"]:
            first, last = clusters.node_partition(np.array([start, start + u["count"] - 1]), total, 4)
            for r in range(first, last + 1):
                expected[r].append(work + u["docs"])
        start += u["count"]
    assert {r: docs[("members", r)] for r in range(4)} == {r: sorted(v) for r, v in expected.items()}
    assert sum(len(v) for v in expected.values()) < 4 * len(units)  # not every task all of them
