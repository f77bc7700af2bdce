"""The ``paragraph_dedup`` global stage: units cut and put back together, the phases against
an independent plain-Python reference on real web text, planted partial copies caught,
licence headers removed from all but the first file, the ledger, and byte-identical
output from ``prep run`` for any worker count and after a crash in the global phase."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomllib
from click.testing import CliRunner
from conftest import REPO, SHARED_DATA, write_config, write_jsonl

from benchmarks.paragraph_dedup import WS, resolved_unit
from benchmarks.paragraph_dedup import split_units as ref_units  # the units by plain string operations
from pipeline.commands.main import main
from pipeline.engine.run import run_pipeline
from pipeline.stage import UnitContext
from stages.paragraph_dedup import ParagraphDedup
from stages.paragraph_dedup.split import Units
from stages.paragraph_dedup.work import _later

needs_data = pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data is absent")


# -- driving the protocol ------------------------------------------------------------------


def _commit(ctx: UnitContext) -> None:
    for tmp, final in ctx.pending.items():
        os.replace(tmp, final)
    ctx.pending.clear()


def run_stage(options, units: dict[tuple[str, str], list[pa.RecordBatch]], work: Path):
    """map, reduce (in reverse order), finalize, then filter in a fresh instance.

    Returns {id: ("kept", text) or ("partial-copy", detail dict)} and the finalize counters."""
    stage = ParagraphDedup(options)
    for (source, unit), batches in units.items():
        ctx = UnitContext(out_dir=work, source=source, unit=unit)
        stage.map_unit(iter(batches), ctx, work)
        _commit(ctx)
    for p in reversed(range(stage.partitions())):
        stage.reduce_partition(p, work)
    summary = stage.finalize(work)
    assert ParagraphDedup(options).finalize(work) == summary  # safe to run again
    filtering = ParagraphDedup(options)
    filtering.bind(work)
    result = {}
    for (source, unit), batches in units.items():
        ctx = UnitContext(out_dir=work, source=source, unit=unit)
        filtering.open_unit(ctx)
        for batch in batches:
            out = filtering.process(batch, source)
            rows = zip(
                out.batch.column("id").to_pylist(),
                out.batch.column("text").to_pylist(),
                out.drop_reason.to_pylist(),
                out.detail.to_pylist(),
            )
            for doc_id, text, reason, detail in rows:
                result[doc_id] = ("kept", text) if reason is None else (reason, json.loads(detail))
        filtering.close_unit(ctx)
    return result, summary


def make_units(ids, texts, n_units: int, batch_size: int = 50):
    units = {}
    bounds = np.linspace(0, len(ids), n_units + 1).astype(int)
    for u in range(n_units):
        lo, hi = bounds[u], bounds[u + 1]
        batches = [
            pa.RecordBatch.from_pydict(
                {"id": ids[s : min(hi, s + batch_size)], "text": texts[s : min(hi, s + batch_size)]}
            )
            for s in range(lo, hi, batch_size)
        ]
        units[("web", f"unit{u:03d}")] = batches
    return units


# -- an independent reference --------------------------------------------------------------


def reference(ids, texts, unit="paragraph", min_chars=20, max_seen=0.5):
    """First occurrence in input order wins, its document keeping every copy; {id: ("kept", kept unit contents) or
    ("partial-copy", detail)}."""
    first: dict[str, str] = {}
    out = {}
    for doc_id, text in zip(ids, texts):
        units = ref_units(text, unit)
        counted = [len(u) >= min_chars for u in units]
        hit = []
        for u, c in zip(units, counted):
            hit.append(c and first.get(u, doc_id) != doc_id)  # repeats within the first document stay
            if c and u not in first:
                first[u] = doc_id
        total = sum(len(u) for u, c in zip(units, counted) if c)
        seen = sum(len(u) for u, h in zip(units, hit) if h)
        if seen > max_seen * total:
            largest = max((u for u, h in zip(units, hit) if h), key=len)  # max keeps the first of equals
            detail = {
                "seen_fraction": round(seen / total, 4),
                "seen_chars": seen,
                "chars": total,
                "threshold": max_seen,
            }
            out[doc_id] = ("partial-copy", {**detail, "first_seen_in": first[largest]})
            continue
        kept = []
        for k, u in enumerate(units):
            if counted[k]:
                gone = hit[k]
            else:  # short: goes only between two removed counted units
                before = [hit[j] for j in range(k) if counted[j]]
                after = [hit[j] for j in range(k + 1, len(units)) if counted[j]]
                gone = bool(before and after and before[-1] and after[0])
            if not gone:
                kept.append(u)
        out[doc_id] = ("kept", kept)
    return out


def as_units(result, unit, ids, texts):
    """The kept texts cut as their original was ("auto" decides on the text before cutting)."""
    units = {i: resolved_unit(t, unit) for i, t in zip(ids, texts)}
    return {k: (r, ref_units(v, units[k]) if r == "kept" else v) for k, (r, v) in result.items()}


# -- real documents ------------------------------------------------------------------------


def _load(rel: str, limit: int, keep=lambda r: True) -> list[dict]:
    out = []
    with gzip.open(SHARED_DATA / rel, "rt") as f:
        for line in f:
            row = json.loads(line)
            if isinstance(row.get("text"), str) and keep(row):
                out.append(row)
                if len(out) >= limit:
                    break
    return out


def _paragraphs(text: str) -> list[str]:
    return [p for p in ref_units(text, "paragraph") if len(p) >= 80]


def planted_corpus(seed: int = 0):
    """Real web pages, then copies assembled from their paragraphs (each mostly copied,
    with one new sentence of its own), then pages quoting one paragraph of another."""
    rng = random.Random(seed)
    docs, seen = [], set()
    for d in _load("web/web_gold.jsonl.gz", 400):  # pages sharing no paragraph (real boilerplate)
        units = [u for u in ref_units(d["text"], "paragraph") if len(u) >= 20]
        if len(set(units)) == len(units) and not seen.intersection(units):
            docs.append(d)
            seen.update(units)
    originals = [d for d in docs if len(_paragraphs(d["text"])) >= 6][:60]
    ids = [f"orig{i:03d}" for i in range(len(originals))]
    texts = [d["text"] for d in originals]
    copies = {}
    for c in range(25):
        a, b = rng.sample(range(len(originals)), 2)
        pieces = rng.sample(_paragraphs(texts[a]), 3) + rng.sample(_paragraphs(texts[b]), 2)
        rng.shuffle(pieces)
        pieces.insert(rng.randint(0, 5), f"Copy {c} adds one short line of its own here.")
        ids.append(f"copy{c:03d}")
        texts.append("\n\n".join(pieces))
        copies[ids[-1]] = (a, b, pieces)
    quoting = {}
    others = [d for d in docs if d not in originals and len(_paragraphs(d["text"])) >= 8][:10]
    for q, d in enumerate(others):
        quote = _paragraphs(texts[q])[0]
        ids.append(f"quote{q:03d}")
        texts.append(d["text"] + "\n\n" + quote)
        quoting[ids[-1]] = (q, d["text"], quote)
    return ids, texts, copies, quoting


# -- the tests ---------------------------------------------------------------------------------


def test_units_cut_and_rebuild():
    texts = pa.array(["\n\nFirst paragraph, two\nlines.\n\n \nSecond one.\n", "", " \n\t\n", "a\nb\n\nc", None])
    for typ in (pa.string(), pa.large_string()):
        u = Units(texts.cast(typ), "paragraph", min_chars=0)
        assert u.doc.tolist() == [0, 0, 3, 3] and u.index.tolist() == [0, 1, 0, 1]
        assert u.counted_chars().tolist() == [38, 0, 0, 4, 0]
        removed = np.array([False, True, False, True])  # a last unit goes with the separator before it
        assert u.rebuild(removed).to_pylist() == ["\n\nFirst paragraph, two\nlines.", "", " \n\t\n", "a\nb", ""]
        assert u.rebuild(~removed).to_pylist()[0] == "Second one.\n"
        lines = Units(texts.cast(typ), "line", min_chars=2)
        assert lines.index.tolist() == [0, 1, 2, 0, 1, 2] and lines.short.tolist() == [0, 0, 0, 1, 1, 1]
        assert (
            lines.rebuild(np.array([0, 1, 0, 0, 0, 0], bool)).to_pylist()[0]
            == "\n\nFirst paragraph, two\nSecond one.\n"
        )


@needs_data
@pytest.mark.parametrize(
    "unit,min_chars,n_units,partitions",
    [("paragraph", 20, 3, 4), ("line", 20, 5, 3), ("line", 0, 1, 1), ("auto", 20, 4, 2)],
)
def test_matches_a_plain_python_reference(tmp_path, unit, min_chars, n_units, partitions):
    ids, texts, _, _ = planted_corpus()
    extra = _load("web/dolma_ccmain_20190717_00140.jsonl.gz", 150)  # one paragraph a line
    ids += [f"cc{i:03d}" for i in range(len(extra))] + ["empty", "blank", "spaces"]
    texts += [d["text"] for d in extra] + ["", "\n\n  \n", "   "]
    options = ParagraphDedup.Options(unit=unit, min_chars=min_chars, partitions=partitions)
    result, summary = run_stage(options, make_units(ids, texts, n_units, batch_size=37), tmp_path)
    expected = reference(ids, texts, unit, min_chars)
    got = as_units(result, unit, ids, texts)
    assert got == expected
    for doc_id in ("empty", "blank", "spaces"):  # no unit to judge: untouched
        assert result[doc_id] == ("kept", texts[ids.index(doc_id)])
    dropped = sum(r == "partial-copy" for r, _ in result.values())
    assert summary["paragraph_dedup.partial_copies"] == dropped >= 25
    assert summary["paragraph_dedup.documents"] == len(ids)


@needs_data
def test_partial_copies_are_dropped_and_originals_keep_their_text(tmp_path):
    ids, texts, copies, quoting = planted_corpus(seed=1)
    result, _ = run_stage(ParagraphDedup.Options(partitions=3), make_units(ids, texts, 4), tmp_path)
    for doc_id, text in zip(ids, texts):
        if doc_id.startswith("orig"):
            assert result[doc_id] == ("kept", text), doc_id
    for doc_id, (a, b, pieces) in copies.items():
        reason, detail = result[doc_id]
        assert reason == "partial-copy", doc_id
        assert 0.5 < detail["seen_fraction"] < 1.0 and detail["seen_chars"] < detail["chars"]
        largest = max((p for p in pieces if not p.startswith("Copy ")), key=len)
        owner = a if largest in _paragraphs(texts[a]) else b
        assert detail["first_seen_in"] == ids[owner]
    for doc_id, (_, own, quote) in quoting.items():  # one quoted paragraph: cut, not dropped
        reason, text = result[doc_id]
        assert reason == "kept" and quote not in text and text.startswith(own.rstrip(WS + "\n")[:2000])


def line_corpus(seed: int = 0):
    """The real C4 and CCNet (RedPajama head) documents, which put one paragraph on each
    line, then 100 copies each assembled from whole lines of two of them (joined the same
    way, a paragraph a line) and a line of its own. Returns ids, texts and each copy's
    two originals."""
    rng = random.Random(seed)
    originals = [d["text"] for d in _load("web/olmo_paloma_c4_100_domains_guardian_val.jsonl.gz", 10)]
    originals += [d["text"] for d in _load("web/dolma_cc_en_head_and_provided.jsonl.gz", 30)]
    lines = [[ln for ln in ref_units(t, "line") if len(ln) >= 20] for t in originals]
    ids, texts = [f"orig{i:03d}" for i in range(len(originals))], list(originals)
    sources = {}
    for c in range(100):
        a, b = rng.sample([k for k, ls in enumerate(lines) if len(ls) >= 3], 2)
        pieces = rng.sample(lines[a], len(lines[a]) // 2) + rng.sample(lines[b], len(lines[b]) // 2)
        rng.shuffle(pieces)
        pieces.insert(rng.randint(0, len(pieces)), f"Copy {c} adds one short line of its own here.")
        ids.append(f"copy{c:03d}")
        texts.append("\n".join(pieces))
        sources[ids[-1]] = (texts[a], texts[b])
    return ids, texts, sources


def _paragraph_dedup_unit(config: str) -> str:
    stages = tomllib.loads((REPO / "configs" / config).read_text())["stages"]
    return next(s for s in stages if s["name"] == "paragraph_dedup").get("unit", ParagraphDedup.Options().unit)


@needs_data
@pytest.mark.parametrize("config", ["c4.toml", "redpajama.toml"])
def test_the_shipped_configs_catch_copies_in_text_written_a_paragraph_a_line(tmp_path, config):
    """C4 and CCNet text has almost no blank line (none of the 10 C4 documents, 2 of the
    30 CCNet ones), so blocks between blank lines make each page one unit and no copy
    assembled from its paragraphs is caught: the configs for those corpora cut lines."""
    ids, texts, sources = line_corpus()
    units = make_units(ids, texts, 3)
    blocks, _ = run_stage(ParagraphDedup.Options(unit="paragraph", partitions=2), units, tmp_path / "paragraph")
    assert sum(blocks[c][0] == "partial-copy" for c in sources) == 0
    result, _ = run_stage(ParagraphDedup.Options(unit=_paragraph_dedup_unit(config), partitions=2), units, tmp_path)
    assert all(result[c][0] == "partial-copy" for c in sources)
    originals = [i for i in ids if i.startswith("orig")]
    assert sum(result[i] == ("kept", texts[ids.index(i)]) for i in originals) >= 0.95 * len(originals)


@needs_data
def test_auto_cuts_a_page_without_blank_lines_into_lines(tmp_path):
    """The default decides per document: every copy whose originals have no blank line
    between their lines is caught. A page that has one is cut into blocks, so copies of
    its single lines are missed: what the corpus configs' ``unit = "line"`` is for."""
    ids, texts, sources = line_corpus()
    result, _ = run_stage(ParagraphDedup.Options(partitions=2), make_units(ids, texts, 3), tmp_path)
    by_lines = [c for c, pair in sources.items() if all(resolved_unit(t, "auto") == "line" for t in pair)]
    assert len(by_lines) >= 80
    assert all(result[c][0] == "partial-copy" for c in by_lines)
    blocks = [i for i, t in zip(ids, texts) if resolved_unit(t, "auto") == "paragraph"]
    assert len(blocks) == 2  # the two CCNet pages with blank lines


def _glibc_headers(n: int) -> list[dict]:
    licence = "   The GNU C Library is free software; you can redistribute it and/or"
    return _load("code/c_headers_usr_include.jsonl.gz", n, lambda r: licence in r["text"] and len(r["text"]) > 6000)


@needs_data
def test_shared_licence_headers_go_and_bodies_stay(tmp_path):
    """Real glibc headers (the LGPL notice, paragraph for paragraph) and real stdlib modules
    under one synthetic header: every file but the first loses the shared notice and keeps
    its body. ``min_chars = 100``, the setting for code, spares short shared lines
    (``#include <features.h>``) that the default would remove."""
    headers = _glibc_headers(12)
    header = (
        "# Copyright (c) 2024 Example Corporation and the Example Project contributors.\n"
        "# All rights reserved; see the AUTHORS file for the full list of contributors.\n\n"
        "# Licensed under the Example Licence, Version 2.0; you may not use this file except\n"
        "# in compliance with the Licence. You may obtain a copy of the Licence at\n"
        "# https://example.com/licence\n\n"
        "# Unless required by applicable law or agreed to in writing, software distributed\n"
        "# under the Licence is distributed on an AS IS BASIS, WITHOUT WARRANTIES."
    )
    stdlib = _load("code/python_stdlib.jsonl.gz", 10, lambda r: r["id"].startswith("cpython-stdlib/json/"))
    docs = [(h["id"], h["text"]) for h in headers] + [(r["id"], header + "\n\n" + r["text"]) for r in stdlib]
    ids, texts = [d[0] for d in docs], [d[1] for d in docs]
    options = ParagraphDedup.Options(unit="paragraph", min_chars=100, partitions=2)
    result, _ = run_stage(options, make_units(ids, texts, 3), tmp_path)
    assert as_units(result, "paragraph", ids, texts) == reference(ids, texts, min_chars=100)
    notice = [p for p in ref_units(texts[0], "paragraph")[1:4]]
    assert all("GNU" in p for p in notice)
    for i, (doc_id, text) in enumerate(docs):
        reason, kept = result[doc_id]
        assert reason == "kept", doc_id
        if i in (0, len(headers)):  # the first of each family keeps everything
            assert kept == text
        elif doc_id.endswith(".py"):
            assert kept == text[len(header) + 2 :], doc_id
        else:
            units = ref_units(text, "paragraph")
            gone = [p for p in units if p not in ref_units(kept, "paragraph")]
            assert set(notice) <= set(gone), doc_id
            body = sum(len(p) for p in units if p not in notice)
            assert sum(len(p) for p in gone if p not in notice) < 0.1 * body, doc_id  # a shared comment at most


def _digest(out: Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[:2] != ("stats", "cost") and p.name != "cost.json"
    }


@pytest.fixture(scope="module")
def cli_corpus(tmp_path_factory):
    if SHARED_DATA is None:
        pytest.skip("../shared/data is absent")
    root = tmp_path_factory.mktemp("pd")
    ids, texts, copies, _ = planted_corpus(seed=2)
    rows = [{"id": i, "text": t} for i, t in zip(ids, texts)]
    for k, lo in enumerate(range(0, len(rows), 20)):
        write_jsonl(root / "web" / f"part{k:02d}.jsonl", rows[lo : lo + 20])
    config = write_config(
        root / "pd.toml",
        "[run]\ngroup_bytes = 0\n"  # a unit per file: the kill test needs several units
        f'[sources.web]\npaths = ["{root}/web/*.jsonl"]\n[[stages]]\nname = "paragraph_dedup"\npartitions = 3\n',
    )
    return root, config, copies


def test_prep_run_is_byte_identical_for_one_or_two_workers_and_writes_the_ledger(cli_corpus):
    root, config, copies = cli_corpus
    for w in ("1", "2"):
        result = CliRunner().invoke(main, ["run", str(config), "--out", str(root / f"w{w}"), "-w", w, "-q"])
        assert result.exit_code == 0, result.output
    assert _digest(root / "w1") == _digest(root / "w2")
    ledger = pq.read_table(root / "w1" / "rejects").to_pylist()
    assert {r["id"] for r in ledger} == set(copies)
    for row in ledger:
        assert row["stage"] == "paragraph_dedup" and row["reason"] == "partial-copy"
        detail = json.loads(row["detail"])
        assert detail["first_seen_in"].startswith("orig") and detail["seen_fraction"] > 0.5
    manifest = json.loads((root / "w1" / "manifest.json").read_text())
    assert manifest["stages"]["paragraph_dedup"]["rejected"] == {"partial-copy": len(copies)}


KILLER = """
import os, signal, sys
from pipeline.engine.run import run_pipeline
from stages.paragraph_dedup.stage import ParagraphDedup

map_unit = ParagraphDedup.map_unit
calls = []

def killing_map(self, batches, unit, work_dir):
    result = map_unit(self, batches, unit, work_dir)  # written, not yet committed
    calls.append(unit.unit)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

ParagraphDedup.map_unit = killing_map
run_pipeline(sys.argv[1], sys.argv[2], workers=1, quiet=True)
"""


def test_a_run_killed_in_the_global_phase_resumes_byte_identical(cli_corpus, monkeypatch):
    """SIGKILL after a unit's map files are written but before they are committed, then a
    crash after finalize wrote its decisions but before its marker: the resumed run is
    the clean run, byte for byte."""
    root, config, _ = cli_corpus
    if not (root / "w1").exists():
        assert CliRunner().invoke(main, ["run", str(config), "--out", str(root / "w1"), "-w", "1", "-q"]).exit_code == 0
    out = root / "killed"
    (root / "killer.py").write_text(KILLER)
    result = subprocess.run([sys.executable, str(root / "killer.py"), str(config), str(out)], cwd=REPO)
    assert result.returncode == -signal.SIGKILL
    finalize = ParagraphDedup.finalize

    def crashing_finalize(self, work_dir):
        finalize(self, work_dir)
        raise RuntimeError("crash after finalize")

    monkeypatch.setattr(ParagraphDedup, "finalize", crashing_finalize)
    with pytest.raises(RuntimeError, match="crash after finalize"):
        run_pipeline(config, out, workers=1, quiet=True)
    assert not (out / "manifest.json").exists() and (out / "work" / "global" / "1" / "done.json").exists()
    monkeypatch.setattr(ParagraphDedup, "finalize", finalize)
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(out), "-w", "1", "-q"])
    assert result.exit_code == 0, result.output
    assert not list(out.rglob(".*.tmp"))
    assert _digest(root / "w1") == _digest(out)


@pytest.mark.parametrize(
    "bad,match",
    [({"unit": "word"}, "unit must be"), ({"min_chars": -1}, "min_chars"), ({"max_seen_fraction": 1.5}, "within")],
)
def test_options_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        ParagraphDedup.Options(**bad)


def test_first_occurrences_table_agrees_with_sorting_and_refuses_records_out_of_order():
    """The reduce's one-pass table against the definition: per hash, the smallest gid is
    its first document; every occurrence in another document is a later one. Few hashes
    over many records, so slots collide and probe."""
    rng = np.random.default_rng(7)
    gids = np.sort(rng.integers(0, 300, 5000)).astype(np.int64)
    hashes = rng.choice(np.array([0, 1, 2**63, 2**64 - 1, 17, 33], np.uint64), 5000)
    later, first = _later(hashes, gids, 16)
    smallest = {int(h): int(gids[hashes == h].min()) for h in np.unique(hashes)}
    expected_first = np.array([smallest[int(h)] for h in hashes])
    assert np.array_equal(first, expected_first)
    assert np.array_equal(later, gids != expected_first)
    with pytest.raises(ValueError, match="out of global order"):
        _later(hashes[::-1].copy(), gids[::-1].copy(), 16)
