"""What ``benchmarks.dolma`` reads back from each side's output, and how it compares them.

Everything here runs after the timing, in the benchmark's own process: the corpus both
sides read, prep's token shards and Parquet documents, dolma's memmaps, attribute files
and mixer output, and the agreement of the two on each step. ``tests/test_benchmark_dolma``
runs these on a tiny corpus.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.e2e import CORPUS
from benchmarks.paragraph_dedup import WS, removed_lines

# e2e's web, code and math files, and the two shared files of those kinds it leaves out
# (the CCNet "head" sample and the C headers), so the corpus is the shared text of all three.
FILES = {
    "web": [*CORPUS["web"], "web/dolma_cc_en_head_and_provided.jsonl.gz"],
    "code": [*CORPUS["code"], "code/c_headers_usr_include.jsonl.gz"],
    "math": list(CORPUS["math"]),
}
SHARDS_PER_SOURCE = 4
EOS = 50256  # GPT-2's <|endoftext|>, the end of every document on both sides
PII_TYPES = {"EMAIL_ADDRESS": "email", "PHONE_NUMBER": "phone", "IP_ADDRESS": "ip"}


def read_records(data: Path, fraction: float) -> dict[str, list[dict]]:
    """Per source, each file's first documents with non-blank text, up to ``fraction`` of
    the file's text (the document that crosses it included), as
    dolma's document format wants them (id, text, source, version). Ids are the file and
    line: unique across files. Texts are stripped of leading and trailing whitespace:
    ``dolma tokens`` strips them before encoding, so both sides now tokenize one string."""
    out: dict[str, list[dict]] = {}
    for source, names in FILES.items():
        records = out.setdefault(source, [])
        for name in names:
            with gzip.open(data / name, "rt", encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
            kept = [
                (n, r["text"].strip())
                for n, r in enumerate(rows)
                if isinstance(r.get("text"), str) and r["text"].strip()
            ]
            sizes = np.cumsum([len(t.encode()) for _, t in kept])
            take = int(np.searchsorted(sizes, fraction * sizes[-1])) + 1 if kept else 0
            records += [{"id": f"{name}:{n}", "text": t, "source": source, "version": "v0"} for n, t in kept[:take]]
    return out


def write_corpus(records: dict[str, list[dict]], folder: Path) -> tuple[int, int]:
    """``folder/documents/<source>-<k>.jsonl.gz``, each source's documents in order over
    ``SHARDS_PER_SOURCE`` files; returns (documents, bytes of text).

    Flat, because ``dolma tag`` writes ``attributes/<name>/<file name>`` without the
    folders below ``documents/`` that its mixer then looks under."""
    documents = folder / "documents"
    documents.mkdir(parents=True)
    count = size = 0
    for source, rows in records.items():
        bounds = np.linspace(0, len(rows), SHARDS_PER_SOURCE + 1).astype(int)
        for k in range(SHARDS_PER_SOURCE):
            with gzip.open(documents / f"{source}-{k:03d}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as f:
                for row in rows[bounds[k] : bounds[k + 1]]:
                    f.write(json.dumps(row) + "\n")
        count += len(rows)
        size += sum(len(r["text"].encode()) for r in rows)
    return count, size


def read_jsonl_folder(folder: Path) -> list[dict]:
    """Every record of the ``*.json*.gz`` files under ``folder``, files in name order."""
    records = []
    for path in sorted(folder.rglob("*.json*.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            records += [json.loads(line) for line in f]
    return records


def corpus_texts(folder: Path) -> dict[str, str]:
    """{id: text} of the corpus, in the order prep reads it (sources, then files)."""
    return {r["id"]: r["text"] for r in read_jsonl_folder(folder / "documents")}


# -- tokens -------------------------------------------------------------------------------


def prep_tokens(out: Path) -> dict[str, np.ndarray]:
    """{id: token ids} of a prep run's Megatron shards (``tokens/<source>/<unit>``)."""
    import pyarrow.parquet as pq

    from pipeline.formats.indexed_shard import IndexedShard
    from pipeline.formats.token_shards import docs_path

    tokens = {}
    for idx in sorted((out / "tokens").rglob("*.idx")):
        prefix = str(idx)[: -len(".idx")]
        shard = IndexedShard(prefix)
        ids = pq.read_table(docs_path(prefix), columns=["id"]).column("id").to_pylist()
        tokens.update((doc_id, np.asarray(shard[i])) for i, doc_id in enumerate(ids))
    return tokens


def dolma_tokens(folder: Path) -> dict[str, np.ndarray]:
    """{id: token ids} of ``dolma tokens``' memmaps: each ``.npy`` is raw uint16 tokens and
    its ``.csv.gz`` one row per document (start, end, id, source file, line)."""
    tokens = {}
    for path in sorted(folder.glob("*.npy")):
        memmap = np.fromfile(path, np.uint16)
        with gzip.open(path.with_suffix(".csv.gz"), "rt", encoding="utf-8") as f:
            for start, end, doc_id, *_ in csv.reader(f):
                tokens[doc_id] = memmap[int(start) : int(end)]
    return tokens


def token_agreement(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> dict[str, int]:
    """Documents whose token ids are identical on both sides, and where they are not."""
    both = ours.keys() & theirs.keys()
    same = sum(np.array_equal(ours[i], theirs[i]) for i in both)
    return {
        "documents": len(ours.keys() | theirs.keys()),
        "identical": same,
        "different": len(both) - same,
        "prep_only": len(ours.keys() - theirs.keys()),
        "dolma_only": len(theirs.keys() - ours.keys()),
        "prep_tokens": int(sum(len(t) for t in ours.values())),
        "dolma_tokens": int(sum(len(t) for t in theirs.values())),
    }


# -- paragraph dedup ----------------------------------------------------------------------


def prep_documents(out: Path) -> dict[str, str]:
    """{id: text} of the documents a prep run kept (``docs/**/*.parquet``)."""
    import pyarrow.parquet as pq

    kept = {}
    for path in sorted((out / "docs").rglob("*.parquet")):
        table = pq.read_table(path, columns=["id", "text"])
        kept.update(zip(table.column("id").to_pylist(), table.column("text").to_pylist()))
    return kept


def dolma_documents(folder: Path) -> dict[str, str]:
    """{id: text} of what ``dolma mix`` wrote."""
    return {r["id"]: r["text"] for r in read_jsonl_folder(folder)}


def dedup_agreement(texts: dict[str, str], ours: dict[str, str], theirs: dict[str, str]) -> dict[str, int]:
    """(document, line) removals of each side (``benchmarks.paragraph_dedup.removed_lines``),
    split by why they differ. dolma removes every copy after the first, the first
    document's own repeats included; prep keeps a document's own repeats (the repetition
    filters judge those). A dolma removal of a line that occurs once in the whole corpus is
    a Bloom-filter false positive."""
    ids, values = list(texts), list(texts.values())
    mine = removed_lines(ids, values, {i: ours.get(i) for i in ids})
    other = removed_lines(ids, values, {i: theirs.get(i) for i in ids})
    first: dict[str, str] = {}
    occurrences: Counter = Counter()
    for doc_id, text in texts.items():
        for line in text.split("\n"):
            key = line.strip(WS)
            if key:
                first.setdefault(key, doc_id)
                occurrences[key] += 1
    dolma_only = other - mine
    return {
        "prep": sum(mine.values()),
        "dolma": sum(other.values()),
        "both": sum((mine & other).values()),
        "prep_only": sum((mine - other).values()),
        "dolma_only": sum(dolma_only.values()),
        "dolma_only_own_repeats": sum(n for (d, line), n in dolma_only.items() if first[line] == d),
        "dolma_false_positives": sum(n for (_, line), n in dolma_only.items() if occurrences[line] == 1),
    }


def hashed_paragraphs(texts: dict[str, str]) -> int:
    """How many paragraphs (non-empty lines) ``dolma dedupe`` puts through its filter."""
    return sum(1 for text in texts.values() for line in text.split("\n") if line)


def bloom_false_positive_rate(path: Path, inserted: int) -> tuple[int, int, float]:
    """(hash functions, bits, false-positive rate after ``inserted`` items) of a dolma
    Bloom filter file: magic, version and hasher count (u32 each), 4 u64 seeds per
    hasher, the count of u32 words (u64), then the bits."""
    with open(path, "rb") as f:
        _, _, k = struct.unpack("<III", f.read(12))
        f.seek(12 + 32 * k)
        (words,) = struct.unpack("<Q", f.read(8))
    bits = 32 * words
    return k, bits, (1 - math.exp(-k * inserted / bits)) ** k


# -- quality ------------------------------------------------------------------------------


def prep_rejects(out: Path) -> dict[str, str]:
    """{id: drop reason} of a prep run's rejects ledger (``rejects/**/*.parquet``)."""
    import pyarrow.parquet as pq

    reasons = {}
    for path in sorted((out / "rejects").rglob("*.parquet")):
        table = pq.read_table(path, columns=["id", "reason"])
        reasons.update(zip(table.column("id").to_pylist(), table.column("reason").to_pylist()))
    return reasons


def attributes(folder: Path) -> dict[str, dict]:
    """{id: attributes} of a dolma attribute folder."""
    return {r["id"]: r["attributes"] for r in read_jsonl_folder(folder)}


def first_dolma_rule(attrs: dict, rules: list[tuple[str, str, float]]) -> str | None:
    """The first of ``rules`` (attribute key, "<" or ">", threshold) a document's
    attributes break, as the mixer's filter reads them (a missing attribute never fires)."""
    for key, op, threshold in rules:
        spans = attrs.get(key)
        if not spans:
            continue
        value = spans[0][2]
        if (value < threshold) if op == "<" else (value > threshold):
            return key.split("__")[-1]
    return None


def decision_agreement(
    ids: list[str], prep_kept: set[str], dolma_kept: set[str], prep_reasons: dict, dolma_reasons: dict
) -> dict:
    """Kept/dropped per document on each side; for documents only one side drops, that
    side's reasons, most common first."""
    both_drop = sum(i not in prep_kept and i not in dolma_kept for i in ids)
    both_keep = sum(i in prep_kept and i in dolma_kept for i in ids)
    prep_only = [i for i in ids if i not in prep_kept and i in dolma_kept]
    dolma_only = [i for i in ids if i in prep_kept and i not in dolma_kept]
    return {
        "documents": len(ids),
        "same": both_drop + both_keep,
        "both_keep": both_keep,
        "both_drop": both_drop,
        "prep_only_drop": len(prep_only),
        "dolma_only_drop": len(dolma_only),
        "prep_only_reasons": Counter(prep_reasons.get(i) for i in prep_only).most_common(4),
        "dolma_only_reasons": Counter(dolma_reasons.get(i) for i in dolma_only).most_common(4),
    }


# -- pii ----------------------------------------------------------------------------------


def dolma_pii_spans(attrs: dict[str, dict]) -> dict[str, list[tuple[int, int, str]]]:
    """{id: [(start, end, type)]} of the PII spans in dolma's attributes (prep's type names)."""
    spans = {}
    for doc_id, values in attrs.items():
        spans[doc_id] = [
            (int(s), int(e), PII_TYPES[key.split("__")[-1]])
            for key, found in values.items()
            if key.split("__")[-1] in PII_TYPES
            for s, e, _ in found
        ]
    return spans


def pii_agreement(ours: dict[str, list], theirs: dict[str, list]) -> dict[str, Counter]:
    """Per type: spans each side found, and how many of each side's overlap a span of the
    same type on the other side (dolma's e-mail and phone spans take in the whitespace and
    punctuation around the address, so spans match by overlap, not by equal bounds)."""
    table = {t: Counter() for t in PII_TYPES.values()}
    for doc_id in ours.keys() | theirs.keys():
        mine, other = ours.get(doc_id, []), theirs.get(doc_id, [])
        for side, spans, against in (("prep", mine, other), ("dolma", other, mine)):
            for s, e, t in spans:
                table[t][side] += 1
                table[t][f"{side}_matched"] += any(t == u and s < f and r < e for r, f, u in against)
    return table


def format_counter(pairs: list[tuple]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in pairs) or "none"
