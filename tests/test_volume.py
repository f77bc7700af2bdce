"""What ``benchmarks.volume`` relies on: the manifest's dedup counts are the documents
removed (not twice them), and the corpus builder writes what its docstring says."""

from __future__ import annotations

import json
import random

import pyarrow.parquet as pq

from benchmarks import volume
from pipeline.engine.run import run_pipeline

CONFIG = """
[sources.docs]
paths = ["{corpus}/*.jsonl"]
[[stages]]
name = "dedup"
"""


def _words(rng: random.Random, n: int) -> list[str]:
    return [f"w{rng.randrange(5000)}" for _ in range(n)]


def test_manifest_counts_each_removed_document_once(tmp_path):
    """dedup's counts reached the manifest twice: from finalize's summary and again from
    every unit's filter, so 10 removed documents read as 20."""
    rng = random.Random(7)
    originals = [_words(rng, 80) for _ in range(20)]
    lines = [{"id": f"o{i}", "text": " ".join(w)} for i, w in enumerate(originals)]
    lines += [{"id": f"x{i}", "text": " ".join(originals[i])} for i in range(4)]  # exact copies
    for i in range(4, 10):  # one word replaced of 80: a near copy
        near = list(originals[i])
        near[40] = "replaced"
        lines.append({"id": f"n{i}", "text": " ".join(near)})
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for part in range(2):  # two units, so per-unit counts are summed
        rows = lines[part::2]
        (corpus / f"part-{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "dedup.toml"
    config.write_text(CONFIG.format(corpus=corpus))
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    ledger = pq.read_table(tmp_path / "out" / "rejects").column("reason").to_pylist()
    counters = manifest["stages"]["dedup"]["counters"]
    assert ledger.count("exact-duplicate") == counters["dedup.exact_removed"] == 4
    assert ledger.count("near-duplicate") == counters["dedup.near_removed"] == 6


def test_a_corpus_holds_unique_ids_and_the_copies_it_says(tmp_path, monkeypatch):
    """Copy 0 is each passage, every EXACT_EVERY-th copy repeats it byte for byte, the
    others differ from it in at most EDITS words; ids are unique; the same arguments
    give the same bytes, and a finished corpus is found rather than rebuilt."""
    passages = [
        {"id": f"p{i}", "text": f"Passage {i} has several words.\nAnd a second line of text {i}."} for i in range(50)
    ]
    monkeypatch.setattr(volume, "kept_by_filters", lambda docs, work: docs)
    monkeypatch.setattr(volume, "passages", lambda data, sources, limit, words: (passages, 0))
    monkeypatch.setattr(volume, "SHARD_BYTES", 20_000)
    first = volume.build(tmp_path, tmp_path / "a", 50_000 / 1e9)
    second = volume.build(tmp_path, tmp_path / "b", 50_000 / 1e9)
    files = sorted((tmp_path / "a").glob("*.jsonl"))
    assert len(files) == first["shards"] > 1 and first["bytes"] >= 50_000
    assert [f.read_bytes() for f in files] == [f.read_bytes() for f in sorted((tmp_path / "b").glob("*.jsonl"))]
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(records) == first["documents"] == len({r["id"] for r in records}) == second["documents"]
    original = {p["id"]: p["text"] for p in passages}
    for r in records:
        passage, copy = r["id"].split("#")
        changed = sum(a != b for a, b in zip(r["text"].split(), original[passage].split()))
        if int(copy) % volume.EXACT_EVERY == 0:
            assert r["text"] == original[passage]
        else:
            assert 0 <= changed <= volume.EDITS and len(r["text"].split()) == len(original[passage].split())
    assert any(r["text"] != original[r["id"].split("#")[0]] for r in records)
    (tmp_path / "a" / "part-0000.jsonl").write_text("")  # found by its recipe, not rebuilt
    assert volume.build(tmp_path, tmp_path / "a", 50_000 / 1e9) == first
