"""A RedPajama-V2 tree on disk, built to the published layout from real CCNet documents.

No RedPajama-V2 shard is in ``../shared/data``, so the reader's tests build one here.

Checked against the spec (togethercomputer/RedPajama-Data @6d2cee9, ``app/src``, and the
Hugging Face dataset card):

* Layout: ``documents/<snapshot>/<shard:04d>/<lang>_<bucket>.json.gz``, and for head and
  middle ``quality_signals/<...>.signals.json.gz``, ``minhash/<...>.minhash.parquet`` and
  ``duplicates/<...>.duplicates.parquet``; listings ``listings/<lang>-<snapshot>-<part>.txt``
  (``head_middle``, ``tail``), one ``<snapshot>/<shard>/<lang>_<bucket>`` a line (card).
* Document ids ``<snapshot>/<shard>/<lang>_<bucket>.json.gz/<row>``, row = 0-based line
  (``core/worker.py``); ``id_int`` = the first 8 bytes of sha1(id) read in the machine's
  byte order, little-endian on the x86 machines that built it (``_BYTE_ORDER``).
* Signals file: one JSON line per document, ``id``, ``id_int``, ``metadata`` (the worker's
  keys), ``quality_signals``: name -> list of ``[start, end, value]`` (``core/schema/rp.py``).
  ``ccnet_*`` are the document's own CCNet fields, bucket as 0/1/2 (``worker.py``).
* Computed as RedPajama does, on its lines (``split_paragraphs``: ``[^\\n]*\\n|[^\\n]+$``)
  and its normalization (punctuation removed, lowercased, whitespace collapsed, NFD):
  all six ``rps_lines_*``, and every ``rps_doc_*`` signal in ``COMPUTED``
  (``rpv2_signals_ref``, which cites each definition): word count, mean word length,
  symbol-to-word ratio, ellipsis lines, non-alphabetic words, unique words, unigram
  entropy, all-caps words, sentences, top 2/3/4-gram and duplicate 5..10-gram character
  fractions, LDNOOBW words (over this repository's 2016 list, see there), lorem ipsum and
  curly brackets. So a recipe on them (``configs/redpajama_v2.toml``) keeps and drops real
  documents for real reasons.
* MinHash (``dedupe/minhash.py``, ``dedupe/utils.py``): 128 permutations from
  ``RandomState(42)`` (the pipeline's default seed), 13-grams of the normalized words,
  sha1_hash32 (little-endian), ``(h * a + b) % (2**61 - 1) & (2**32 - 1)`` in wrapping
  uint64, signatures as uint32, each band's bytes ``byteswap``ped: big-endian uint32s.
  Bands x rows as the card states: 0.7: 14x9, 0.8: 9x13, 0.9: 5x25, 1.0: 1x128 (also
  what RedPajama's ``optimal_param`` gives for 128 permutations, recomputed once). A
  document with fewer than 13 words has null signatures. The values are checked against
  datasketch's ``legacy`` scheme, which RedPajama adapted (``test_redpajama_v2``). Schema ``shard_id``, ``id``,
  ``id_int`` (uint64), ``signature_sim1.0``, ``..0.9``, ``..0.8``, ``..0.7`` (list<binary>).
* Duplicates (``bloomfilter.py``): ``shard_id``, ``doc_id``, ``digest`` (without
  ``sha1:``); only head and middle are deduplicated; snapshots newest first, so the
  first occurrence kept is the one in the newest snapshot.

Assumed (not in the code read): the bloom filter's run order within a snapshot (it
shuffles files; here listing order), so which copy is "first" inside one snapshot; the
per-file split of the per-snapshot duplicates output; the digest as ccnet's base32 sha1
of the text; tail shipping documents only (the card's ``tail`` partition has no signals);
the values of the signals not computed here: the classifier and importance scores and
``rps_doc_stop_word_fraction`` (its list is not in this repository) are seeded values in
[0, 1), ``rps_doc_ut1_blacklist`` null (a domain on no list).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rpv2_signals_ref import computed_signals, normalize

from pipeline.readers.rpv2_signals import DOC_SIGNALS, LINE_SIGNALS

BANDS = {"1.0": (1, 128), "0.9": (5, 25), "0.8": (9, 13), "0.7": (14, 9)}
NGRAM = 13
MERSENNE = np.uint64((1 << 61) - 1)
MAX_HASH = np.uint64((1 << 32) - 1)
_BULLETS = ("\u2022", "\u2023", "\u25b6", "\u25c0", "\u25e6", "\u25a0", "\u25a1", "\u25aa", "\u25ab", "\u2013")
COMPUTED = frozenset(computed_signals(""))  # the rps_doc_* signals computed as RedPajama does


@dataclass
class Rpv2Tree:
    root: Path
    documents: list[Path]  # every documents file, in listing order
    expected: dict[str, dict] = field(default_factory=dict)  # id -> what the reader must give
    listings: dict[str, Path] = field(default_factory=dict)  # "en-2023-06-head_middle" -> file


def lines(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in re.finditer(r"([^\n]*\n|[^\n]+$)", text)]


def line_signals(text: str) -> dict[str, list]:
    raw = lines(text)
    norm = [(normalize(t), s, e) for t, s, e in raw]

    def frac(pred, t):
        return 0.0 if not t else round(sum(map(pred, t)) / len(t), 8)

    out = {
        "rps_lines_ending_with_terminal_punctution_mark": [
            [s, e, float(t.rstrip().endswith((".", "!", "?", "\u201d")))] for t, s, e in raw
        ],
        "rps_lines_javascript_counts": [[s, e, float(t.split().count("javascript"))] for t, s, e in norm],
        "rps_lines_num_words": [[s, e, len(t.split())] for t, s, e in norm],
        "rps_lines_numerical_chars_fraction": [[s, e, frac(str.isnumeric, t)] for t, s, e in norm],
        "rps_lines_start_with_bulletpoint": [[s, e, float(t.lstrip().startswith(_BULLETS))] for t, s, e in raw],
        "rps_lines_uppercase_letter_fraction": [[s, e, frac(str.isupper, t)] for t, s, e in raw],
    }
    assert set(out) == set(LINE_SIGNALS)
    return out


_PERMUTATIONS = None


def permutations() -> np.ndarray:
    global _PERMUTATIONS
    if _PERMUTATIONS is None:
        rng = np.random.RandomState(42)
        pairs = [
            (rng.randint(1, MERSENNE, dtype=np.uint64), rng.randint(0, MERSENNE, dtype=np.uint64)) for _ in range(128)
        ]
        _PERMUTATIONS = np.array(pairs, dtype=np.uint64).T
    return _PERMUTATIONS


def minhash_bands(text: str) -> dict[str, list[bytes] | None]:
    words = normalize(text).split()
    if len(words) < NGRAM:
        return {s: None for s in BANDS}
    grams = {" ".join(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)}
    h = np.array([int.from_bytes(hashlib.sha1(g.encode()).digest()[:4], "little") for g in grams], dtype=np.uint64)
    a, b = permutations()
    with np.errstate(over="ignore"):
        phv = np.bitwise_and((np.outer(h, a) + b) % MERSENNE, MAX_HASH)
    signature = np.minimum(phv.min(axis=0), MAX_HASH).astype(np.uint32)
    return {
        s: [signature[i * r : (i + 1) * r].astype(">u4").tobytes() for i in range(bands)]
        for s, (bands, r) in BANDS.items()
    }


def digest(text: str) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(text.encode()).digest()).decode()


def id_int(doc_id: str) -> int:
    return int.from_bytes(hashlib.sha1(doc_id.encode()).digest()[:8], "little")


def doc_signals(doc: dict, text: str, seed: int) -> dict[str, list]:
    n = len(text)
    meta = doc["metadata"]
    bucket = {"head": 0.0, "middle": 1.0, "tail": 2.0}[meta["bucket"]]
    ccnet = {
        "ccnet_length": meta["length"],
        "ccnet_original_length": meta["original_length"],
        "ccnet_nlines": meta["nlines"],
        "ccnet_original_nlines": meta["original_nlines"],
        "ccnet_language_score": meta["language_score"],
        "ccnet_perplexity": meta["perplexity"],
        "ccnet_bucket": bucket,
    }
    computed = computed_signals(text)
    rng = np.random.default_rng(seed)
    out = {}
    for name in DOC_SIGNALS:
        if name in ccnet:
            value = float(ccnet[name])
        elif name in computed:
            value = computed[name]
        elif name == "rps_doc_ut1_blacklist":
            value = None
        else:
            value = round(float(rng.random()), 8)
        out[name] = [[0, n, value]]
    return out


def _gz_lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records)))


def _texts(web_docs: list[dict], count: int) -> list[tuple[dict, str]]:
    """``count`` (document, text) pairs from the real ones: every 7th repeats an earlier
    text exactly (an exact duplicate), every 11th is an earlier text with one word
    changed (a near duplicate, same MinHash bands but a few)."""
    out: list[tuple[dict, str]] = []
    for k in range(count):
        doc = web_docs[k % len(web_docs)]
        text = doc["text"]
        if k % 7 == 6:
            text = out[k // 2][1]
        elif k % 11 == 10:
            text = re.sub(r"\b(\w+)\b", "planted", out[k - 3][1], count=1)
        out.append((doc, text))
    return out


def build_rpv2_tree(
    root: Path, web_docs: list[dict], snapshots=("2023-06", "2023-14"), shards: int = 2, docs_per_file: int = 5
) -> Rpv2Tree:
    root = Path(root)
    tree = Rpv2Tree(root=root, documents=[])
    buckets = ("head", "middle", "tail")
    plan = [(snap, shard, bucket) for snap in snapshots for shard in range(shards) for bucket in buckets]
    texts = iter(_texts(web_docs, len(plan) * docs_per_file))
    seen: set[str] = set()
    rows: dict[str, list] = {}
    for snap, shard, bucket in plan:
        rows[f"{snap}/{shard:04d}/en_{bucket}"] = [next(texts) for _ in range(docs_per_file)]
    # the bloom filter's order: newest snapshot first, head and middle only
    duplicates: dict[str, set[int]] = {}
    for tag in sorted((t for t in rows if not t.endswith("_tail")), key=lambda t: t.split("/")[0], reverse=True):
        duplicates[tag] = set()
        for row, (_, text) in enumerate(rows[tag]):
            if (d := digest(text)) in seen:
                duplicates[tag].add(row)
            seen.add(d)
    for seed, (tag, docs) in enumerate(rows.items()):
        snap, shard_name, name = tag.split("/")
        bucket = name.split("_")[1]
        records, signals, minhash = [], [], []
        for row, (doc, text) in enumerate(docs):
            meta = {**doc["metadata"], "bucket": bucket}
            doc_id = f"{tag}.json.gz/{row}"
            records.append(
                {
                    "url": meta["url"],
                    "date_download": meta["date_download"],
                    "digest": digest(text),
                    "length": meta["length"],
                    "nlines": meta["nlines"],
                    "source_domain": meta["source_domain"],
                    "title": meta.get("title", ""),
                    "raw_content": text,
                    "cc_segment": meta["cc_segment"],
                    "original_nlines": meta["original_nlines"],
                    "original_length": meta["original_length"],
                    "line_ids": meta.get("line_ids", []),
                    "language": meta["language"],
                    "language_score": meta["language_score"],
                    "perplexity": meta["perplexity"],
                    "bucket": bucket,
                }
            )
            qs = {**doc_signals({"metadata": meta}, text, seed * 100 + row), **line_signals(text)}
            bands = minhash_bands(text)
            signals.append(
                {
                    "id": doc_id,
                    "id_int": id_int(doc_id),
                    "metadata": {
                        "cc_segment": meta["cc_segment"],
                        "cc_net_source": f"{tag}.json.gz",
                        "url": meta["url"],
                        "source_domain": meta["source_domain"],
                        "language": meta["language"],
                        "snapshot_id": snap,
                    },
                    "quality_signals": qs,
                }
            )
            columns = {f"signature_sim{s}": value for s, value in bands.items()}
            minhash.append({"shard_id": f"{tag}.json.gz", "id": doc_id, "id_int": id_int(doc_id), **columns})
            tree.expected[doc_id] = {
                "record": records[-1],
                "signals": qs if bucket != "tail" else None,
                "is_duplicate": None if bucket == "tail" else row in duplicates[tag],
                "minhash": bands if bucket != "tail" else None,
            }
        document = root / "documents" / f"{tag}.json.gz"
        _gz_lines(document, records)
        tree.documents.append(document)
        if bucket == "tail":
            continue
        _gz_lines(root / "quality_signals" / f"{tag}.signals.json.gz", signals)
        write_minhash(root / "minhash" / f"{tag}.minhash.parquet", minhash)
        dupes = sorted(duplicates[tag])
        write_duplicates(
            root / "duplicates" / f"{tag}.duplicates.parquet",
            [
                {"shard_id": f"{tag}.json.gz", "doc_id": f"{tag}.json.gz/{r}", "digest": digest(docs[r][1])[5:]}
                for r in dupes
            ],
        )
    for snap in snapshots:
        for part, buckets in (("head_middle", ("head", "middle")), ("tail", ("tail",))):
            listing = root / "listings" / f"en-{snap}-{part}.txt"
            listing.parent.mkdir(parents=True, exist_ok=True)
            tags = [t for t in rows if t.startswith(snap + "/") and t.rsplit("_", 1)[1] in buckets]
            listing.write_text("".join(t + "\n" for t in tags))
            tree.listings[f"en-{snap}-{part}"] = listing
    return tree


MINHASH_SCHEMA = pa.schema(
    [("shard_id", pa.string()), ("id", pa.string()), ("id_int", pa.uint64())]
    + [(f"signature_sim{s}", pa.list_(pa.binary())) for s in BANDS]
)
DUPLICATES_SCHEMA = pa.schema([("shard_id", pa.string()), ("doc_id", pa.string()), ("digest", pa.string())])


def write_minhash(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=MINHASH_SCHEMA), path)


def write_duplicates(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=DUPLICATES_SCHEMA), path)
