"""Dedup on MinHash signatures that ship with the corpus (``signatures = "<column>"``).

The shipped column is built here in RedPajama-V2's band format (``stages.dedup.shipped``:
one binary per band, ``rows`` big-endian uint32 minima) from minima prep's own ``Signer``
computes, so a run on the column and a run computing the signatures must decide alike.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_config
from test_dedup import _commit, _plant, load_texts, make_units, needs_data, run_stage

from pipeline.engine.run import run_pipeline
from pipeline.stage import UnitContext
from stages.dedup import Dedup
from stages.dedup.minhash import Signer
from stages.dedup.shipped import ShippedSignatures, SignatureColumnError

COLUMN = "minhash_sim0.8"
LAYOUT = {"bands": 9, "rows": 13, "seed": 5}  # RedPajama-V2's layout for 0.8


def redpajama_bands(texts: list[str], bands: int, rows: int, seed: int) -> pa.ListArray:
    """The ``signature_sim<t>`` column RedPajama-V2 would ship for prep's minima of
    ``texts``: per band ``minima[k*rows:(k+1)*rows].byteswap()`` as bytes (big-endian),
    null for a document without shingles (RedPajama's too-short documents)."""
    signed = Signer(bands=bands, rows=rows, seed=seed).sign(pa.array(texts, pa.string()))
    out = []
    for minima, count in zip(signed["sigs"], signed["n_shingles"]):
        big_endian = minima.astype(">u4")
        out.append([big_endian[k * rows : (k + 1) * rows].tobytes() for k in range(bands)] if count else None)
    return pa.array(out, pa.list_(pa.binary()))


def _with_column(units: dict, column: pa.Array, name: str = COLUMN) -> dict:
    """``units`` (``make_units``'s, in order) with ``column`` added batch by batch."""
    out, at = {}, 0
    for key, batches in units.items():
        out[key] = []
        for batch in batches:
            part = column.slice(at, batch.num_rows)
            out[key].append(pa.RecordBatch.from_arrays([*batch.columns, part], [*batch.schema.names, name]))
            at += batch.num_rows
    return out


def _planted_corpus(n_originals: int = 220) -> tuple[list[str], list[str]]:
    """Real web pages, most with one or two copies edited by a few words, shuffled."""
    rng = random.Random(21)
    ids, texts = [], []
    for i, text in enumerate(load_texts("web/web_gold.jsonl.gz", min_words=80, limit=n_originals)):
        ids.append(f"orig{i:04d}")
        texts.append(text)
        for k in range(rng.choice([0, 1, 2])):
            ids.append(f"dup{i:04d}_{k}")
            texts.append(_plant(rng, text))
    ids += ["empty0", "empty1", "x_copy0"]
    texts += ["", "...", texts[0]]  # no shingles (null signatures), an exact copy
    order = list(range(len(ids)))
    rng.shuffle(order)
    return [ids[i] for i in order], [texts[i] for i in order]


def _family(doc_id: str) -> str:
    """The original page a planted document copies ("orig0007", "dup0007_1": "0007")."""
    return "0000" if doc_id == "x_copy0" else doc_id.removeprefix("orig").removeprefix("dup")[:4]


@needs_data
def test_shipped_signatures_decide_as_computed_ones(tmp_path):
    ids, texts = _planted_corpus()
    units = make_units(ids, texts, 3, batch_size=50)
    shipped_units = _with_column(units, redpajama_bands(texts, **LAYOUT))
    for verify in (False, True):  # similarity from the stored sketch, then exact Jaccard
        computed = Dedup.Options(partitions=4, verify=verify, **LAYOUT)
        summary_c, removed_c = run_stage(computed, units, tmp_path / f"computed-{verify}")
        options = Dedup.Options(partitions=4, signatures=COLUMN, verify=verify, **LAYOUT)
        summary_s, removed_s = run_stage(options, shipped_units, tmp_path / f"shipped-{verify}")
        assert summary_s == summary_c
        assert removed_s == removed_c  # who, for which survivor, at which similarity
        near = [d for d, (reason, _) in removed_c.items() if reason == "near-duplicate"]
        assert len(near) >= 100 and removed_c["x_copy0"][0] == "exact-duplicate"
        # Planted families (web_gold also holds a real near-duplicate pair: 0058, 0065).
        assert sum(_family(d) != _family(removed_c[d][1]["survivor"]) for d in near + ["x_copy0"]) <= 2


def test_a_duplicate_in_another_snapshot_and_in_an_imported_index(tmp_path):
    rng = random.Random(4)
    vocab = [f"w{i}" for i in range(5000)]
    pages = [" ".join(rng.choice(vocab) for _ in range(120)) for _ in range(30)]
    edited = pages[3].split()
    edited[60] = "changed"
    a_ids, a_texts = [f"2023-06/{i}" for i in range(30)], pages
    b_ids, b_texts = ["2023-14/0", "2023-14/1"], [" ".join(edited), "an unrelated page " * 10]

    def snapshot(source: str, ids: list[str], texts: list[str]) -> dict:
        units = make_units(ids, texts, 2, batch_size=7)
        units = {(source, unit): batches for (_, unit), batches in units.items()}
        return _with_column(units, redpajama_bands(texts, **LAYOUT))

    options = Dedup.Options(partitions=3, signatures=COLUMN, **LAYOUT)
    both = {**snapshot("2023-06", a_ids, a_texts), **snapshot("2023-14", b_ids, b_texts)}
    _, removed = run_stage(options, both, tmp_path / "both")
    assert set(removed) == {"2023-14/0"} and removed["2023-14/0"][1]["survivor"] == "2023-06/3"
    # Without the exact key (and the text nulled out), the shipped signatures alone find it.
    text_free = Dedup.Options(partitions=3, signatures=COLUMN, exact=False, **LAYOUT)
    no_text = {
        k: [b.set_column(b.schema.get_field_index("text"), "text", pa.nulls(b.num_rows, pa.string())) for b in v]
        for k, v in both.items()
    }
    _, removed = run_stage(text_free, no_text, tmp_path / "no-text")
    assert set(removed) == {"2023-14/0"} and removed["2023-14/0"][1]["survivor"] == "2023-06/3"
    # The same snapshot against a previous run's index of the other.
    run_stage(options, snapshot("2023-06", a_ids, a_texts), tmp_path / "first")
    later = Dedup.Options(partitions=3, signatures=COLUMN, index_from=str(tmp_path / "first"), **LAYOUT)
    _, removed = run_stage(later, snapshot("2023-14", b_ids, b_texts), tmp_path / "later")
    assert set(removed) == {"2023-14/0"} and removed["2023-14/0"][1]["survivor"] == "2023-06/3"


def _map_counters(options: Dedup.Options, batches: list[pa.RecordBatch], work) -> dict[str, int]:
    ctx = UnitContext(out_dir=work, source="web", unit="u0")
    counters = Dedup(options).map_unit(iter(batches), ctx, work)
    _commit(ctx)
    return counters


def test_null_and_misshapen_signatures_are_counted_not_fatal(tmp_path):
    rng = random.Random(9)
    vocab = [f"w{i}" for i in range(5000)]
    pages = [" ".join(rng.choice(vocab) for _ in range(80)) for _ in range(6)]
    texts = pages + [pages[0], pages[1] + " tail", pages[2] + " tail", pages[3] + " tail", pages[4] + " tail"]
    column = redpajama_bands(texts, **LAYOUT).to_pylist()
    column[6] = None  # an exact copy without a signature: still an exact duplicate
    column[7] = None  # a near copy without one (a tail shard, a missing minhash file)
    column[8] = column[8][:-1]  # a band missing
    column[9] = [band[:-1] for band in column[9]]  # bands one byte short
    column[10] = column[10][:-1] + [None]  # a null band
    ids = [f"d{i:02d}" for i in range(len(texts))]
    units = _with_column(make_units(ids, texts, 1, batch_size=4), pa.array(column, pa.list_(pa.binary())))
    options = Dedup.Options(partitions=2, signatures=COLUMN, **LAYOUT)
    assert _map_counters(options, units[("web", "unit000")], tmp_path / "m") == {
        "dedup.signed": 6,
        "dedup.unsigned": 5,
    }
    _, removed = run_stage(options, units, tmp_path / "run")
    assert removed == {"d06": ("exact-duplicate", {"survivor": "d00", "survivor_source": "web", "similarity": 1.0})}
    # Computed, the near copies are found: the shipped run lost them only for their signatures.
    _, computed = run_stage(Dedup.Options(partitions=2, **LAYOUT), make_units(ids, texts, 1), tmp_path / "c")
    assert set(computed) == {f"d{i:02d}" for i in range(6, 11)}


def test_decoding_reads_sliced_arrays_and_big_endian_minima():
    minima = np.array([[0x01020304, 0xA0B0C0D0, 7, 8], [9, 10, 11, 0xFFFFFFFE]], np.uint32)
    bands = [[row[:2].astype(">u4").tobytes(), row[2:].astype(">u4").tobytes()] for row in minima]
    column = pa.array([None, bands[0], [b"\x00" * 8], bands[1]], pa.list_(pa.binary()))
    assert bands[0][0] == b"\x01\x02\x03\x04\xa0\xb0\xc0\xd0"  # RedPajama's byteswap() on x86
    batch = pa.RecordBatch.from_arrays([column], ["sig"])
    reader = ShippedSignatures("sig", bands=2, rows=2)
    decoded, signed = reader.decode(batch.slice(1))
    assert signed.tolist() == [True, False, True]
    assert (decoded[[0, 2]] == minima).all() and (decoded[1] == 0xFFFFFFFF).all()
    large = pa.RecordBatch.from_arrays([column.cast(pa.large_list(pa.large_binary()))], ["sig"])
    assert (reader.decode(large)[0] == reader.decode(batch)[0]).all()


def test_signature_column_errors_name_the_column(tmp_path):
    texts = ["one two three four five six seven", "eight nine ten eleven twelve thirteen"]
    units = make_units(["a", "b"], texts, 1)
    options = Dedup.Options(partitions=2, signatures=COLUMN, **LAYOUT)
    with pytest.raises(SignatureColumnError, match=r"'minhash_sim0\.8' is not in the input"):
        _map_counters(options, units[("web", "unit000")], tmp_path / "absent")
    wrong = _with_column(units, pa.array(["x", "y"]))
    with pytest.raises(SignatureColumnError, match=r"'minhash_sim0\.8' is string, not list<binary>"):
        _map_counters(options, wrong[("web", "unit000")], tmp_path / "type")
    # The 0.7 layout (14 x 9) read as 0.8's: every row misshapen is the config, not the data.
    other = _with_column(units, redpajama_bands(texts, bands=14, rows=9, seed=5))
    with pytest.raises(SignatureColumnError, match="one has 14 bands of 36 bytes: set bands = 14, rows = 9"):
        _map_counters(options, other[("web", "unit000")], tmp_path / "layout")


def test_index_from_refuses_another_signature_source(tmp_path):
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "iota kappa lambda mu nu xi omicron pi"]
    units = make_units(["a", "b"], texts, 1)
    shipped = _with_column(units, redpajama_bands(texts, **LAYOUT))
    run_stage(Dedup.Options(partitions=2, **LAYOUT), units, tmp_path / "computed")
    run_stage(Dedup.Options(partitions=2, signatures=COLUMN, **LAYOUT), shipped, tmp_path / "shipped")
    mixes = [
        (Dedup.Options(partitions=2, signatures=COLUMN, index_from=str(tmp_path / "computed"), **LAYOUT), shipped),
        (Dedup.Options(partitions=2, index_from=str(tmp_path / "shipped"), **LAYOUT), units),
        (
            Dedup.Options(partitions=2, signatures="minhash_sim0.9", index_from=str(tmp_path / "shipped"), **LAYOUT),
            _with_column(units, redpajama_bands(texts, **LAYOUT), "minhash_sim0.9"),
        ),
    ]
    for k, (options, batches) in enumerate(mixes):
        with pytest.raises(ValueError, match=r"other dedup settings \(signatures\)"):
            run_stage(options, batches, tmp_path / f"mix{k}")


@needs_data
def test_parquet_snapshots_through_the_pipeline(tmp_path):
    """Two snapshots as Parquet sources with the shipped column, through ``run_pipeline``:
    the reader keeps the column, and the shipped run removes what the computing run does."""
    ids, texts = _planted_corpus(80)
    column = redpajama_bands(texts, **LAYOUT)
    half = len(ids) // 2
    for name, lo, hi in (("2023-06", 0, half), ("2023-14", half, len(ids))):
        folder = tmp_path / name
        folder.mkdir()
        table = pa.table({"id": ids[lo:hi], "text": texts[lo:hi], COLUMN: column.slice(lo, hi - lo)})
        pq.write_table(table, folder / "part.parquet")
    sources = "".join(f'[sources."{n}"]\npaths = ["{tmp_path / n}/*.parquet"]\n' for n in ("2023-06", "2023-14"))
    stage = '[[stages]]\nname = "dedup"\npartitions = 3\nbands = 9\nrows = 13\nseed = 5\n'
    rejected, mapped = {}, {}
    for kind, extra in (("computed", ""), ("shipped", f'signatures = "{COLUMN}"\n')):
        config = write_config(tmp_path / f"{kind}.toml", sources + stage + extra)
        out = tmp_path / f"out-{kind}"
        rejected[kind] = run_pipeline(config, out, workers=1, quiet=True)["stages"]["dedup"]["rejected"]
        mapped[kind] = Counter()  # map_unit's counters, in each unit's marker
        for marker in (out / "stats" / "global-1-map").rglob("*.json"):
            mapped[kind].update(json.loads(marker.read_text())["counters"])
    assert rejected["shipped"] == rejected["computed"]
    assert rejected["shipped"].get("near-duplicate", 0) >= 30
    # "..." has no shingles, so a null signature, as RedPajama ships one (the empty page
    # never reaches dedup: the reader sets it aside as bad-input:empty-text).
    assert mapped["shipped"] == {"dedup.signed": len(ids) - 2, "dedup.unsigned": 1}
    assert mapped["computed"] == {"dedup.signed": len(ids) - 1}
