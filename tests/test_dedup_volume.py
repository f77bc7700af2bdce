"""The dedup-at-volume benchmark's corpus: passages cut without losing text, planted copies
at the similarity they record and near the one asked for, the same corpus from the same
seed, every document in exactly one shard, and a planted pair's outcome as defined."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import SAMPLE

from benchmarks.dedup import shingles
from benchmarks.dedup_volume import outcomes
from benchmarks.neardup_corpus import TARGETS, _cut, build, jaccard, passages, write_shards

SOURCES = ["web/ccmain.jsonl.gz", "web/redpajama_pile.jsonl.gz"]


def test_passages_keep_every_line_of_a_document():
    with gzip.open(SAMPLE / SOURCES[0], "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][:100]
    for text in texts:
        parts = _cut(text)
        assert "".join(parts) == text
        assert all(len(p.split()) >= 50 for p in parts[:-1]) or len(parts) == 1


def test_planted_copies_record_their_true_similarity_near_the_target():
    documents, planted, _ = build(SAMPLE, SOURCES, docs=300, pairs=40, seed=3)
    text = {d["id"]: d["text"] for d in documents}
    assert len(text) == len(documents) == 340
    low, high = TARGETS
    for p in planted:
        true = jaccard(set(shingles(text[p["original"]])), set(shingles(text[p["copy"]])))
        assert true == p["jaccard"]
        assert low <= p["target"] <= high
        assert text[p["copy"]] != text[p["original"]]
    misses = [p for p in planted if abs(p["jaccard"] - p["target"]) > 0.05]
    assert len(misses) <= len(planted) // 10, misses
    assert {p["style"] for p in planted} == {"words", "paragraph", "boilerplate"}


def test_the_same_seed_builds_the_same_corpus_and_shards(tmp_path):
    first = build(SAMPLE, SOURCES, docs=200, pairs=20, seed=5)
    assert build(SAMPLE, SOURCES, docs=200, pairs=20, seed=5) == first
    assert build(SAMPLE, SOURCES, docs=200, pairs=20, seed=6)[1] != first[1]
    paths = write_shards(first[0], tmp_path, 3, seed=5)
    written = [json.loads(line)["id"] for path in paths for line in path.read_text().splitlines()]
    assert sorted(written) == sorted(d["id"] for d in first[0])
    assert all(path.stat().st_size > 0 for path in paths)


def test_a_pair_is_found_when_exactly_one_of_its_documents_survives():
    planted = [{"original": f"o{k}", "copy": f"c{k}"} for k in range(4)]
    kept = {"o0", "c1", "o2", "c2"}
    assert outcomes(planted, kept) == ["found", "found", "missed", "both gone"]


def test_an_unreadable_source_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SystemExit, match="bad.jsonl.gz: cannot read it as gzipped JSON lines") as e:
        passages(tmp_path, ["bad.jsonl.gz"], 10)
    assert "\n" not in str(e.value)
