"""paragraph_dedup speed and agreement against its peers, on the same real web documents.

Documents: every real web text file of ../shared/data except raw HTML (web_gold,
CommonCrawl samples, RedPajama/Pile, C4), in file order, as they are: no planted copies,
so what is removed is the boilerplate real pages share (navigation, footers, bylines).
Text is counted in UTF-8 bytes; one core.

1. prep: the stage's four phases in this process (map every unit, reduce every
   partition, finalize, filter every unit), documents handed over as Arrow batches (no
   reading or writing of documents is timed). Its numba kernels are loaded from their
   cache by a warm-up run first.
2. A plain-Python dict with the same semantics (first occurrence in input order wins,
   its own document keeps every copy): the obvious implementation, in memory.
3. datatrove 0.10's ``SentenceDedup`` as a line dedup (``split_sentences=False``,
   ``n_sentences=1``, text normalisation off, no minimum words or sentences), its three
   steps called directly with one task: the closest offline peer. dolma's paragraph dedup
   (a Rust Bloom filter, ``dolma dedupe``) is not installable here. datatrove hashes with
   sha1: the installed ``xxhash`` 4 refuses ``str``, which datatrove's default passes.

Agreement is over (document, line) removals, prep run with ``unit = "line"``,
``min_chars = 0`` and ``max_seen_fraction = 1.0`` (cut only, as datatrove is here):
removals both make over removals either makes. datatrove also removes a repeated line
within the document that first has it; prep leaves those to the repetition filters, so
agreement below 100% is expected and the split is printed.

    python -m benchmarks.paragraph_dedup [--units 8] [--unit auto|paragraph|line]

``--dolma``: instead, the whole ``prep run`` of a config holding ``paragraph_dedup``
alone (``unit = "line"``, the shipped configs' settings) against ``dolma dedupe`` of
paragraphs (a Bloom filter, dolma's C4 settings: ``skip_empty``, false-positive rate
1e-6 at the corpus's line count), each in its own process tree with ``--workers``
processes, alternating, ``--repeats`` times, on the same gzipped JSON lines: the text of
web (raw HTML aside), code and math of ../shared/data cut into 8 shards of about equal
size. Wall and CPU seconds (user + system of every process of the tree, from /proc)
per side; prep's CPU by phase from its ``cost.json``. The work differs: dolma writes
span attributes, prep writes the deduplicated documents (Parquet) and its rejects.

    python -m benchmarks.paragraph_dedup --dolma [--workers 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.stage import UnitContext
from stages.paragraph_dedup import ParagraphDedup

HERE = Path(__file__).resolve()
DATA = next((p for p in (HERE.parents[2] / "shared" / "data", Path("/work/shared/data")) if p.is_dir()), None)
FILES = [
    "web/web_gold.jsonl.gz",
    "web/dolma_ccmain_20190717_00140.jsonl.gz",
    "web/dolma_cc_en_head_and_provided.jsonl.gz",
    "web/datajuicer_redpajama_pile_samples.jsonl.gz",
    "web/olmo_paloma_c4_100_domains_guardian_val.jsonl.gz",
    "web/nltk_webtext.jsonl.gz",
]
WS = " \t\r\f\v"


def load_documents() -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for rel in FILES:
        with gzip.open(DATA / rel, "rt") as f:
            for n, line in enumerate(f):
                text = json.loads(line).get("text")
                if isinstance(text, str):
                    ids.append(f"{rel}:{n}")
                    texts.append(text)
    return ids, texts


def run_prep(ids, texts, options, n_units: int, work: Path) -> tuple[dict, dict[str, float]]:
    """The four phases; returns ({id: kept text or None}, seconds per phase)."""
    bounds = np.linspace(0, len(ids), n_units + 1).astype(int)
    units = {
        f"u{u:03d}": [
            pa.record_batch(
                {"id": ids[s : min(bounds[u + 1], s + 2048)], "text": texts[s : min(bounds[u + 1], s + 2048)]}
            )
            for s in range(bounds[u], bounds[u + 1], 2048)
        ]
        for u in range(n_units)
    }
    stage, times = ParagraphDedup(options), {}
    started = time.perf_counter()
    for name, batches in units.items():
        ctx = UnitContext(out_dir=work, source="web", unit=name)
        stage.map_unit(iter(batches), ctx, work)
        for tmp, final in ctx.pending.items():
            os.replace(tmp, final)
    times["map"] = time.perf_counter() - started
    started = time.perf_counter()
    for p in range(stage.partitions()):
        stage.reduce_partition(p, work)
    times["reduce"] = time.perf_counter() - started
    started = time.perf_counter()
    stage.finalize(work)
    times["finalize"] = time.perf_counter() - started
    started = time.perf_counter()
    filtering, kept = ParagraphDedup(options), {}
    filtering.bind(work)
    for name, batches in units.items():
        ctx = UnitContext(out_dir=work, source="web", unit=name)
        filtering.open_unit(ctx)
        for batch in batches:
            out = filtering.process(batch, "web")
            for doc_id, text, reason in zip(
                out.batch.column("id").to_pylist(), out.batch.column("text").to_pylist(), out.drop_reason.to_pylist()
            ):
                kept[doc_id] = text if reason is None else None
        filtering.close_unit(ctx)
    times["filter"] = time.perf_counter() - started
    return kept, times


def resolved_unit(text: str, unit: str) -> str:
    """``unit``, with "auto" resolved for this text: "paragraph" when a blank line lies
    between two non-blank lines, else "line"."""
    if unit != "auto":
        return unit
    blank = [line.strip(WS) == "" for line in text.split("\n")]
    text_at = [k for k, b in enumerate(blank) if not b]
    return "paragraph" if text_at and any(blank[text_at[0] : text_at[-1]]) else "line"


def split_units(text: str, unit: str) -> list[str]:
    """The contents of a text's units (paragraphs, lines, or per text as "auto" resolves),
    by plain string operations; ``tests/test_paragraph_dedup.py``'s reference uses it too."""
    by_line = resolved_unit(text, unit) == "line"
    units, current = [], None
    for line in text.split("\n"):
        if line.strip(WS) == "":
            current = None
        elif by_line or current is None:
            current = [line]
            units.append(current)
        else:
            current.append(line)
    return ["\n".join(u).strip(WS) for u in units]


def run_dict(ids, texts, unit: str, min_chars: int, max_seen: float) -> dict[str, list[str] | None]:
    """The same rules in plain Python: {id: kept unit contents, or None when dropped}
    (short units are kept as they are: the sandwich rule is left out of this baseline)."""
    first: dict[str, str] = {}
    out = {}
    for doc_id, text in zip(ids, texts):
        units = split_units(text, unit)
        hit, total, seen = [], 0, 0
        for u in units:
            counted = len(u) >= min_chars
            hit.append(counted and first.setdefault(u, doc_id) != doc_id)
            total += len(u) if counted else 0
            seen += len(u) if hit[-1] else 0
        out[doc_id] = None if seen > max_seen * total else [u for u, h in zip(units, hit) if not h]
    return out


def run_datatrove(ids, texts, work: Path) -> dict[str, str | None]:
    from datatrove.data import Document
    from datatrove.pipeline.dedup import (
        SentDedupConfig,
        SentenceDedupFilter,
        SentenceDedupSignature,
        SentenceFindDedups,
    )
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    norm = TextNormConfig(**{f.name: False for f in dataclasses.fields(TextNormConfig)})
    config = SentDedupConfig(
        n_sentences=1,
        split_sentences=False,
        min_doc_words=0,
        min_num_sentences=0,
        norm_config=norm,
        hash_config=HashConfig(hash_fc="sha1"),
    )

    def docs():
        return (Document(text=t, id=i) for i, t in zip(ids, texts))

    SentenceDedupSignature(str(work / "sig"), config=config, finder_workers=1).run(data=docs(), rank=0, world_size=1)
    SentenceFindDedups(str(work / "sig"), str(work / "dups"), config=config).run(rank=0, world_size=1)
    kept = {i: None for i in ids}
    for doc in SentenceDedupFilter(str(work / "dups"), config=config).run(data=docs(), rank=0, world_size=1):
        kept[doc.id] = doc.text
    return kept


def removed_lines(ids, texts, kept_lines) -> Counter:
    """(document, line) removals as a multiset: lines of the input minus lines kept."""
    removed = Counter()
    for doc_id, text in zip(ids, texts):
        before = Counter(x.strip(WS) for x in text.split("\n") if x.strip(WS))
        after = Counter(x.strip(WS) for x in (kept_lines[doc_id] or "").split("\n") if x.strip(WS))
        for line, n in (before - after).items():
            removed[(doc_id, line)] = n
    return removed


DOLMA = Path(os.environ.get("PREP_DOLMA", "/work/venvs/dolma/bin/dolma"))
PREP_ALONE = """[sources.all]
paths = ["{documents}/*.jsonl.gz"]

[[stages]]
name = "paragraph_dedup"
unit = "line"
"""


def write_corpus(documents: Path, shards: int = 8) -> dict[str, int]:
    """The text of web (raw HTML aside), code and math under ``DATA``, in file order, as
    ``shards`` gzipped JSON lines files of about equal text (what dolma reads: ``id``,
    ``text``, ``source``); returns its documents, UTF-8 bytes and ``\\n``-separated lines."""
    rows = []
    for path in sorted(p for folder in ("web", "code", "math") for p in (DATA / folder).glob("*.jsonl.gz")):
        if path.name == "web_html.jsonl.gz":
            continue
        with gzip.open(path, "rt") as f:
            for n, line in enumerate(f):
                text = json.loads(line).get("text")
                if isinstance(text, str):
                    rows.append({"id": f"{path.name}:{n}", "text": text, "source": path.parent.name})
    sizes = np.cumsum([len(r["text"]) for r in rows])
    bounds = np.searchsorted(sizes, np.linspace(0, sizes[-1], shards + 1)[1:-1])
    documents.mkdir(parents=True)
    for k, part in enumerate(np.split(np.arange(len(rows)), bounds)):
        with gzip.open(documents / f"shard-{k:02d}.jsonl.gz", "wt", compresslevel=1) as f:
            f.writelines(json.dumps(rows[i]) + "\n" for i in part)
    return {
        "documents": len(rows),
        "bytes": sum(len(r["text"].encode()) for r in rows),
        "lines": sum(r["text"].count("\n") + 1 for r in rows),
    }


def dolma_config(documents: Path, bloom: Path, lines: int, workers: int) -> dict:
    """dolma's C4 paragraph dedup (its configs/dolma-v1_5/para_dedupe/c4.yaml) on ``documents``."""
    return {
        "documents": [str(documents / "*.jsonl.gz")],
        "dedupe": {
            "name": "dedupe_paragraphs",
            "paragraphs": {"attribute_name": "bff_duplicate_paragraph_spans"},
            "skip_empty": True,
        },
        "bloom_filter": {
            "file": str(bloom),
            "read_only": False,
            "estimated_doc_count": lines,
            "desired_false_positive_rate": 1e-6,
        },
        "processes": workers,
    }


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``command``'s whole process tree (``benchmarks.proctree``)."""
    from benchmarks.proctree import cpu_and_peak_memory

    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=HERE.parents[1], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code, cpu, _ = cpu_and_peak_memory(proc)
    if code:
        raise SystemExit(f"{command[0]} failed with exit code {code}")
    return time.perf_counter() - started, cpu


def against_dolma(workers: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        documents = tmp / "corpus" / "documents"
        corpus = write_corpus(documents)
        print(f"{corpus['documents']:,} documents, {corpus['bytes'] / 1e6:.1f} MB, {corpus['lines']:,} lines")
        config = tmp / "prep.toml"
        config.write_text(PREP_ALONE.format(documents=documents))
        dolma = tmp / "dolma.json"
        dolma.write_text(json.dumps(dolma_config(documents, tmp / "bloom.bin", corpus["lines"], workers)))

        def prep_run(k):
            return [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(tmp / f"prep{k}"), "-q"]

        timed([*prep_run("warm"), "-w", "1", "--sample", "0.05"])  # numba's caches filled, untimed
        runs = {"dolma": [], "prep": []}
        for k in range(repeats):
            for side in ("dolma", "prep") if k % 2 == 0 else ("prep", "dolma"):
                if side == "dolma":
                    shutil.rmtree(documents.parent / "attributes", ignore_errors=True)
                    (tmp / "bloom.bin").unlink(missing_ok=True)
                    runs[side].append(timed([str(DOLMA), "-c", str(dolma), "dedupe"]))
                else:
                    runs[side].append(timed([*prep_run(k), "-w", str(workers)]))
                print(f"  {side} run {k}: wall {runs[side][-1][0]:.2f} s, CPU {runs[side][-1][1]:.2f} s", flush=True)
        for side, results in runs.items():
            walls, cpus = zip(*results)
            print(f"{side:>5}: wall {np.median(walls):6.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), ", end="")
            print(f"CPU {np.median(cpus):6.2f} s (runs {', '.join(f'{c:.2f}' for c in cpus)})")
        (dolma_wall, dolma_cpu), (prep_wall, prep_cpu) = (np.median(runs[s], axis=0) for s in ("dolma", "prep"))
        print(f"prep is {dolma_wall / prep_wall:.2f}x dolma's wall time, {dolma_cpu / prep_cpu:.2f}x its CPU time")
        cost = json.loads((tmp / "prep0" / "cost.json").read_text())["cpu_seconds"]
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in cost.items())
        print(f"prep's CPU by phase (cost.json of its first run): {phases}")
        counters = json.loads((tmp / "prep0" / "manifest.json").read_text())["stages"]["paragraph_dedup"]["counters"]
        spans = 0
        for path in (documents.parent / "attributes" / "dedupe_paragraphs").glob("*.jsonl.gz"):
            with gzip.open(path, "rt") as f:
                spans += sum(len(json.loads(line)["attributes"].get("bff_duplicate_paragraph_spans", [])) for line in f)
        print(f"removed: prep {counters['paragraph_dedup.units_removed']:,} lines (min_chars 20) and ", end="")
        print(f"{counters['paragraph_dedup.partial_copies']:,} partial copies; dolma marks {spans:,} spans")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--unit", choices=["paragraph", "line", "auto"], default="auto")
    parser.add_argument("--dolma", action="store_true", help="prep run against dolma dedupe, whole runs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.dolma:
        return against_dolma(args.workers, args.repeats)
    logging.disable(logging.INFO)
    from loguru import logger

    logger.remove()
    ids, texts = load_documents()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(ids):,} real web documents, {mb:.1f} MB of text")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_prep(ids[:50], texts[:50], ParagraphDedup.Options(partitions=2), 1, tmp / "warm")  # numba cache
        options = ParagraphDedup.Options(unit=args.unit)
        kept, times = run_prep(ids, texts, options, args.units, tmp / "prep")
        prep_s = sum(times.values())
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in times.items())
        dropped = sum(v is None for v in kept.values())
        changed = sum(v is not None and v != t for v, t in zip(kept.values(), texts))
        print(f"prep {args.unit}: {mb / prep_s:6.1f} MB/s ({prep_s:.2f}s: {phases}); {changed} cut, {dropped} dropped")
        started = time.perf_counter()
        reference = run_dict(ids, texts, args.unit, options.min_chars, options.max_seen_fraction)
        dict_s = time.perf_counter() - started
        same = sum(
            (kept[i] is None) == (reference[i] is None)
            and (kept[i] is None or split_units(kept[i], resolved_unit(t, args.unit)) == reference[i])
            for i, t in zip(ids, texts)
        )
        print(f"python dict: {mb / dict_s:6.1f} MB/s ({dict_s:.2f}s); prep is {dict_s / prep_s:.1f}x; ", end="")
        print(f"same decision and kept units for {same / len(ids):.2%} of documents (short units aside)")

        line = ParagraphDedup.Options(unit="line", min_chars=0, max_seen_fraction=1.0)
        kept, times = run_prep(ids, texts, line, args.units, tmp / "line")
        line_s = sum(times.values())
        started = time.perf_counter()
        theirs = run_datatrove(ids, texts, tmp / "dt")
        dt_s = time.perf_counter() - started
        ours, others = removed_lines(ids, texts, kept), removed_lines(ids, texts, theirs)
        both, either = sum((ours & others).values()), sum((ours | others).values())
        print(f"prep line (cut only): {mb / line_s:6.1f} MB/s ({line_s:.2f}s); ", end="")
        print(f"datatrove line dedup: {mb / dt_s:6.1f} MB/s ({dt_s:.2f}s); prep is {dt_s / line_s:.1f}x")
        only_dt = sum((others - ours).values())
        print(
            f"agreement on removed lines: {both / max(either, 1):.2%} ({both:,} both, "
            f"{sum((ours - others).values()):,} prep only, {only_dt:,} datatrove only)"
        )
        first: dict[str, str] = {}
        for doc_id, text in zip(ids, texts):
            for x in text.split("\n"):
                first.setdefault(x.strip(WS), doc_id)
        within = sum(n for (doc_id, line), n in (others - ours).items() if first.get(line) == doc_id)
        print(f"  of the datatrove-only removals, {within:,} are repeats inside the document that first has the line;")
        print(f"  without those, agreement is {both / max(either - within, 1):.2%}")


if __name__ == "__main__":
    main()
