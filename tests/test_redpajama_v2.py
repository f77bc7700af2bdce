"""RedPajama-V2 read as it ships: documents joined by row with their quality signals,
duplicate ids and MinHash bands, through a whole run, on a tree built to the published
layout (``rpv2_fixture``) from real CCNet head documents."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rpv2_fixture import build_rpv2_tree, minhash_bands, normalize, write_duplicates

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline
from pipeline.readers.rpv2_signals import DOC_SIGNALS, LINE_SIGNALS
from pipeline.readers.splits import plan_spans

CCNET_DOCS = "web/dolma_cc_en_head_and_provided.jsonl.gz"
ZSTD = pa.Codec("zstd", compression_level=3)
KEPT = ("url", "date_download", "digest", "language", "perplexity", "bucket", "source_domain")


@pytest.fixture
def tree(shared_data, tmp_path):
    with gzip.open(shared_data / CCNET_DOCS) as f:
        docs = [json.loads(line) for line in f]
    return build_rpv2_tree(tmp_path / "rpv2", docs)


def run(tmp_path, paths: list[str], source_keys: str = "minhash = 0.8", name: str = "out", length: int = 1000):
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f"""
[sources.web]
paths = {json.dumps([str(p) for p in paths])}
format = "redpajama-v2"
{source_keys}
[[stages]]
name = "length"
min_chars = {length}
[[stages]]
name = "tokenize"
"""
    )
    out = tmp_path / name
    manifest = run_pipeline(config, out, workers=2, quiet=True)
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"]
    docs = pq.read_table(out / "docs") if any((out / "docs").rglob("*.parquet")) else None  # none kept: no files
    rejects = pq.read_table(out / "rejects") if (out / "rejects").exists() else None  # none rejected: no folder
    return manifest, docs, rejects


def every_id(docs, rejects) -> set[str]:
    return set(docs.column("id").to_pylist()) | set(rejects.column("id").to_pylist())


def test_the_root_gives_every_document_with_what_ships_beside_it(tree, tmp_path):
    manifest, docs, rejects = run(tmp_path, [tree.root])
    assert manifest["balance"]["input"] == len(tree.expected) == 60
    assert every_id(docs, rejects) == set(tree.expected)
    assert set(rejects.column("reason").to_pylist()) == {"too-short"}  # only the recipe's rule
    assert not [w for w in manifest["warnings"] if "never produced" in w]
    assert docs.num_rows > 20
    for row in docs.to_pylist():
        want = tree.expected[row["id"]]
        assert row["text"] == want["record"]["raw_content"]
        assert {k: row[k] for k in KEPT} == {k: want["record"][k] for k in KEPT}
        assert row["is_duplicate"] == want["is_duplicate"]
        signals = want["signals"]
        if signals is None:  # tail: documents only
            assert row["bucket"] == "tail" and row["minhash_sim0.8"] is None and row["rps_lines_spans"] is None
            assert all(row[name] is None for name in DOC_SIGNALS)
            continue
        for name in DOC_SIGNALS:
            value = signals[name][0][2]
            assert row[name] == (None if value is None else float(value)), name
        spans = row["rps_lines_spans"]
        for name in LINE_SIGNALS:
            values = [v for _, _, v in signals[name]]
            assert row[f"{name}_sum"] == pytest.approx(sum(values)), name
            assert row[f"{name}_frac"] == pytest.approx(sum(values) / len(values)), name
            assert spans[name] == values
        assert spans["start"] == [s for s, _, _ in signals[LINE_SIGNALS[0]]]
        assert spans["end"] == [e for _, e, _ in signals[LINE_SIGNALS[0]]]
        assert row["minhash_sim0.8"] == want["minhash"]["0.8"]
    copies: dict[str, list[tuple[str, bool]]] = {}
    for doc_id, want in tree.expected.items():
        if want["is_duplicate"] is not None:
            copies.setdefault(want["record"]["digest"], []).append((doc_id, want["is_duplicate"]))
    assert all(sum(not dup for _, dup in found) == 1 for found in copies.values())  # one copy of each is kept
    across = [found for found in copies.values() if {i[:7] for i, _ in found} == {"2023-06", "2023-14"}]
    assert across and all(next(i for i, dup in found if not dup).startswith("2023-14/") for found in across)
    assert manifest["stages"]["tokenize"]["counters"]["tokens"] > 0


def test_the_fixture_bands_are_datasketchs_minhash_as_redpajama_bands_it(tree):
    """An independent check of the fixture's MinHash: RedPajama adapted datasketch's
    (same seed, permutations and sha1_hash32), so datasketch's legacy scheme gives the same 128 values,
    and the bands are those values as big-endian uint32, 9 bands of 13 at 0.8."""
    from datasketch import MinHash

    checked = 0
    for want in tree.expected.values():
        if want["minhash"] is None or want["minhash"]["0.8"] is None:
            continue
        words = normalize(want["record"]["raw_content"]).split()
        reference = MinHash(num_perm=128, seed=42, scheme="legacy")  # the scheme before 2.0
        for i in range(len(words) - 12):
            reference.update(" ".join(words[i : i + 13]).encode())
        values = np.asarray(reference.hashvalues, dtype=np.uint32)
        assert want["minhash"]["0.8"] == [values[i * 13 : (i + 1) * 13].astype(">u4").tobytes() for i in range(9)]
        assert want["minhash"]["1.0"] == [values.astype(">u4").tobytes()]
        checked += 1
    assert checked > 20
    texts = {w["record"]["raw_content"] for w in tree.expected.values()}
    pairs = [
        (text, original)
        for text in texts
        for original in texts
        if original != text and re.sub(r"\b(\w+)\b", "planted", original, count=1) == text
    ]
    assert pairs  # a near duplicate (one word changed) shares bands with its original, not all
    bands = [(minhash_bands(text), minhash_bands(original)) for text, original in pairs]
    assert all(set(near["0.7"]) & set(first["0.7"]) for near, first in bands)  # LSH candidates at 0.7
    assert any(near["1.0"] != first["1.0"] for near, first in bands)  # yet not the same signature


def test_a_snapshot_a_listing_and_a_glob_name_their_documents(tree, tmp_path):
    _, docs, rejects = run(tmp_path, [tree.root / "documents" / "2023-06"], name="snapshot")
    assert every_id(docs, rejects) == {i for i in tree.expected if i.startswith("2023-06/")}
    _, docs, rejects = run(tmp_path, [tree.listings["en-2023-14-head_middle"]], name="listing")
    assert every_id(docs, rejects) == {i for i in tree.expected if i.startswith("2023-14/") and "_tail" not in i}
    _, docs, rejects = run(tmp_path, ["rpv2/documents/*/0001/*_head.json.gz"], name="glob")
    assert every_id(docs, rejects) == {i for i in tree.expected if "/0001/en_head" in i}


def test_a_config_named_by_a_relative_path_finds_its_tree(tree, tmp_path, monkeypatch):
    """`prep run configs/redpajama_v2.toml`, as README runs a config: the documents files,
    found relative to the config's folder, were joined to that folder a second time
    ("matches no file (looked for configs/configs/../...)"); only an absolute path worked."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "rp.toml").write_text('[sources.web]\npaths = ["../rpv2"]\nformat = "redpajama-v2"\n')
    monkeypatch.chdir(tmp_path)
    files = load_config(Path("configs") / "rp.toml").sources["web"].files
    assert [os.path.realpath(f) for f in files] == [os.path.realpath(f) for f in tree.documents]


@pytest.mark.parametrize("line", ["../../outside", "/abs/outside", "2023-06/*/en_head", "**/en_head"])
def test_a_listing_line_that_names_no_file_of_its_tree_is_one_line(tree, tmp_path, line):
    """Lines are data: ``../`` and absolute lines read files outside the tree, and globs
    were expanded, ``**`` walking the whole tree."""
    listing = tree.listings["en-2023-14-head_middle"]
    listing.write_text(f"2023-14/0000/en_head\n{line}\n")
    with pytest.raises(ConfigError, match=r"en-2023-14-head_middle\.txt line 2: .* is no <snapshot>"):
        run(tmp_path, [listing])


def test_a_fifo_named_as_a_listing_is_one_line(tree, tmp_path):
    fifo = tree.root / "listings" / "en-2023-14-fifo.txt"
    os.mkfifo(fifo)  # read, it blocked the run for good
    with pytest.raises(ConfigError, match="FIFO"):
        run(tmp_path, [fifo])


def test_without_minhash_the_bands_are_not_read(tree, tmp_path):
    _, docs, _ = run(tmp_path, [tree.root], source_keys="")
    assert not [c for c in docs.column_names if c.startswith("minhash_sim")]
    assert "is_duplicate" in docs.column_names


def test_a_component_never_produced_is_one_warning_naming_it(tree, tmp_path):
    gone = [
        tree.root / "quality_signals" / "2023-06" / "0000" / "en_head.signals.json.gz",
        tree.root / "minhash" / "2023-06" / "0000" / "en_head.minhash.parquet",
    ]
    for path in gone:
        path.unlink()
    manifest, docs, rejects = run(tmp_path, [tree.root])
    warned = [w for w in manifest["warnings"] if "never produced" in w]
    assert len(warned) == 2 and all(any(str(p) in w for w in warned) for p in gone)
    assert every_id(docs, rejects) == set(tree.expected)
    rows = [r for r in docs.to_pylist() if r["id"].startswith("2023-06/0000/en_head.json.gz/")]
    assert rows and all(r["rps_doc_word_count"] is None and r["minhash_sim0.8"] is None for r in rows)
    assert all(r["is_duplicate"] == tree.expected[r["id"]]["is_duplicate"] for r in rows)


@pytest.mark.parametrize("damage", ["other-file", "short", "garbage"])
def test_a_mismatched_signals_file_quarantines_its_documents(tree, tmp_path, damage):
    signals = tree.root / "quality_signals" / "2023-06" / "0000" / "en_head.signals.json.gz"
    other = tree.root / "quality_signals" / "2023-06" / "0001" / "en_head.signals.json.gz"
    if damage == "other-file":
        shutil.copy(other, signals)
    elif damage == "short":
        signals.write_bytes(gzip.compress(b"".join(gzip.decompress(signals.read_bytes()).splitlines(True)[:3])))
    else:
        signals.write_bytes(gzip.compress(b'{"id": "x", "quality_signals": {"rps_doc_word_count": [[0]]}}\n'))
    manifest, docs, rejects = run(tmp_path, [tree.root])
    prefix = "2023-06/0000/en_head.json.gz/"
    assert not [i for i in docs.column("id").to_pylist() if i.startswith(prefix)]
    bad = [r for r in rejects.to_pylist() if r["id"].startswith(prefix)]
    kind = "bad-input:signals-unreadable" if damage == "garbage" else "bad-input:signals-mismatch"
    assert {r["reason"] for r in bad} == {kind} and sorted(r["line"] for r in bad) == [1, 2, 3, 4, 5]
    assert all(r["file"].endswith("2023-06/0000/en_head.json.gz") for r in bad)
    assert every_id(docs, rejects) == set(tree.expected)
    assert manifest["bad_input"] == {kind: 5}


def test_duplicates_of_another_file_are_quarantined(tree, tmp_path):
    tag = "2023-14/0001/en_middle"
    write_duplicates(
        tree.root / "duplicates" / f"{tag}.duplicates.parquet",
        [{"shard_id": "x", "doc_id": "2023-06/0000/en_head.json.gz/1", "digest": "d"}],
    )
    manifest, docs, rejects = run(tmp_path, [tree.root])
    assert manifest["bad_input"] == {"bad-input:duplicates-mismatch": 5}
    assert every_id(docs, rejects) == set(tree.expected)


def test_a_documents_file_is_never_cut(tree, tmp_path):
    plain = tmp_path / "plain" / "documents" / "2023-06" / "0000" / "en_head.json.gz"
    plain.parent.mkdir(parents=True)
    plain.write_bytes(gzip.decompress(tree.documents[0].read_bytes()) * 50)  # uncompressed: JSON lines could be cut
    assert plan_spans(plain, "jsonl", 4096, 1024) is not None
    assert plan_spans(plain, "redpajama-v2", 4096, 1024) is None


@pytest.mark.parametrize(
    "keys, message",
    [('format = "redpajama-v2"\nminhash = 0.75', "must be one of"), ('format = "jsonl"\nminhash = 0.8', "only")],
)
def test_minhash_takes_redpajamas_thresholds_only(tree, tmp_path, keys, message):
    config = tmp_path / "bad.toml"
    config.write_text(f'[sources.web]\npaths = ["{tree.documents[0]}"]\n{keys}\n[[stages]]\nname = "tokenize"\n')
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_a_file_outside_the_layout_is_one_unreadable_row(tree, tmp_path):
    stray = tmp_path / "stray" / "en_head.json.gz"
    stray.parent.mkdir()
    shutil.copy(tree.documents[0], stray)
    manifest, docs, rejects = run(tmp_path, [stray], source_keys="")
    assert docs is None and manifest["balance"] == {"input": 1, "output": 0, "rejected": 1}
    [row] = rejects.to_pylist()
    assert row["reason"] == "bad-input:unreadable-file" and "documents/<snapshot>/<shard>" in row["detail"]


def test_a_kept_field_of_another_type_is_a_warning_not_a_crash(tree, tmp_path):
    document = tree.documents[0]
    records = [json.loads(line) for line in gzip.decompress(document.read_bytes()).splitlines()]
    for record in records:
        record["perplexity"] = "high"
    document.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records)))
    manifest, docs, rejects = run(tmp_path, [tree.root])
    assert [w for w in manifest["warnings"] if "'perplexity'" in w and "2023-06/0000/en_head" in w]
    assert every_id(docs, rejects) == set(tree.expected)


def test_the_shipped_config_keeps_what_its_recipe_in_plain_python_keeps(tree, tmp_path):
    """configs/redpajama_v2.toml as it ships, on the tree: the documents its column_filter
    drops, and the rule each is dropped for, are the recipe's in plain Python over the
    signals the reader gives (a run that filters nothing shows them); its dedup runs on
    the shipped MinHash bands."""
    from conftest import REPO
    from test_column_filter import _recipe_in_python

    text = (REPO / "configs" / "redpajama_v2.toml").read_text()
    text, replaced = re.subn(r"(?m)^paths = .*$", f"paths = [{json.dumps(str(tree.root))}]", text)
    assert replaced == 1
    (tmp_path / "rpv2.toml").write_text(text)
    manifest = run_pipeline(tmp_path / "rpv2.toml", tmp_path / "recipe", workers=2, quiet=True)
    rejects = pq.read_table(tmp_path / "recipe" / "rejects").to_pylist()
    dropped = {r["id"]: r["reason"] for r in rejects if r["stage"] == "column_filter"}

    _, everything, nothing = run(tmp_path, [tree.root], name="all", length=0)
    assert nothing is None
    recipe = {row["id"]: _recipe_in_python(row) for row in everything.to_pylist()}
    assert dropped == {doc: reason for doc, reason in recipe.items() if reason is not None}
    assert "column_filter:duplicate" in dropped.values() and len(dropped) < len(recipe)  # both outcomes occur
    stages = manifest["stages"]
    assert stages["dedup"]["input"] == len(recipe) - len(dropped)
    signed = [json.loads(p.read_text()) for p in (tmp_path / "recipe" / "stats").glob("global-*-map/web/*.json")]
    assert sum(s["counters"].get("dedup.signed", 0) for s in signed) > 0  # the shipped bands, not computed ones


def test_documents_after_a_skipped_zstd_frame_are_not_joined_to_other_rows(tree, tmp_path):
    """A documents file as zstd frames, one unreadable: the documents after it were numbered
    as if it held one line and joined to the signals, duplicates and id of other rows."""
    path = next(p for p in tree.documents if p.name.endswith("_head.json.gz"))
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    frames = [
        bytearray(bytes(ZSTD.compress(b"".join(part), asbytes=True))) for part in (lines[:1], lines[1:3], lines[3:])
    ]
    frames[1][12:-4] = bytes(len(frames[1]) - 16)  # two documents lost with their frame
    path.write_bytes(b"".join(frames))
    resumed = len(frames[0]) + len(frames[1])
    manifest, docs, rejects = run(tmp_path, [path], length=0)
    assert manifest["balance"] == {"input": 4, "output": 1, "rejected": 3}
    tag = str(path.relative_to(tree.root / "documents"))
    assert docs.column("id").to_pylist() == [f"{tag}/0"]
    rows = sorted((r["reason"], r["file"].rsplit("/", 1)[-1], r["line"]) for r in rejects.to_pylist())
    assert rows == [
        ("bad-input:corrupt-zstd", path.name, 2),
        ("bad-input:row-unknown", f"{path.name}@{resumed}", 1),
        ("bad-input:row-unknown", f"{path.name}@{resumed}", 2),
    ]
