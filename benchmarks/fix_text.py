"""What the ``fix_text`` stage flags and repairs on real corpora, and its speed against
ftfy on every document.

1. Per corpus: how many documents the check flags (by kind), how many the stage changes,
   how many ftfy on *every* document changes, and how many outputs differ between the two
   (documents ftfy would repair that the check let through: its misses), with examples.
2. Speed on all the corpora together, one core, best of ``--repeat``: the stage
   (``FixText.process`` over batches of 1,000: the check, then ftfy on the flagged) and
   the check alone, against the peer, datatrove's ``FTFYFormatter`` over every document
   (built with the stage's ftfy settings, so the outputs are comparable; it also asks
   ftfy for an explanation), and plain ``ftfy.fix_text`` with the stage's config on every
   document. MB/s are of UTF-8 input; the ratio is the stage's speed over the peer's.

Run: python -m benchmarks.fix_text [--data DIR] [--repeat N] [--no-lingua]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.fix_text import HTML, MOJIBAKE, FixText, flag, ftfy_config

CORPORA = {
    "dolma_ccmain": "web/dolma_ccmain_20190717_00140.jsonl.gz",
    "web_gold": "web/web_gold.jsonl.gz",
    "udhr2_docs": "langid/udhr2_docs.jsonl.gz",
    "lingua_sentences": "langid/lingua_testdata.jsonl.gz",
}


def default_data_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else Path("/work/shared/data")


def read_texts(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def batches_of(docs: list[str], size: int = 1000) -> list[pa.RecordBatch]:
    batch = pa.record_batch(
        {"id": pa.array([str(i) for i in range(len(docs))]), "text": pa.array(docs), "source": ["web"] * len(docs)}
    )
    return [batch.slice(i, size) for i in range(0, len(docs), size)]


def run_stage(stage: FixText, batches: list[pa.RecordBatch]) -> tuple[list[str], int]:
    out, changed = [], 0
    for b in batches:
        result = stage.process(b, "web")
        out.extend(result.batch.column("text").to_pylist())
        changed += result.changed
    return out, changed


def first_difference(a: str, b: str, context: int = 25) -> str:
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            return f"{a[max(0, i1 - context) : i2 + context]!r} -> {b[max(0, j1 - context) : j2 + context]!r}"
    return "(equal)"


def corpus_report(name: str, docs: list[str], fixer) -> None:
    import ftfy

    flags = flag(pa.array(docs))
    stage_out, changed = run_stage(FixText(FixText.Options()), batches_of(docs))
    every = [ftfy.fix_text(d, fixer) for d in docs]
    ftfy_changed = sum(a != b for a, b in zip(docs, every))
    differ = [i for i, (a, b) in enumerate(zip(stage_out, every)) if a != b]
    n, flagged = len(docs), int(np.count_nonzero(flags))
    clean = [i for i in range(n) if docs[i] == every[i]]
    clean_flagged = sum(1 for i in clean if flags[i])
    print(f"\n{name}: {n:,} documents, {sum(len(d.encode()) for d in docs) / 1e6:.1f} MB")
    print(
        f"  flagged {flagged:,} ({flagged / n:.2%}): mojibake {np.count_nonzero(flags & MOJIBAKE):,}, "
        f"html {np.count_nonzero(flags & HTML):,}"
    )
    print(f"  changed by the stage {changed:,} ({changed / n:.2%}); by ftfy on every document {ftfy_changed:,}")
    idle = flagged - changed
    print(f"  flagged but left as they were {idle:,} ({idle / max(flagged, 1):.0%} of flagged)")
    print(f"  documents ftfy leaves alone that the check flags: {clean_flagged:,} of {len(clean):,}")
    print(f"  agreement with ftfy on every document: {n - len(differ):,} of {n:,} outputs equal ({len(differ)} missed)")
    for i in differ[:3]:
        print(f"    missed: {first_difference(docs[i], every[i])}")
    for i in [i for i in range(n) if stage_out[i] != docs[i]][:2]:
        print(f"    repaired: {first_difference(docs[i], stage_out[i])}")


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def speed(docs: list[str], fixer, repeat: int) -> None:
    import ftfy

    mb = sum(len(d.encode()) for d in docs) / 1e6
    batches = batches_of(docs)
    stage = FixText(FixText.Options())
    run_stage(stage, batches[:1])  # compile (or load) the kernel outside the timing
    results: dict[str, float] = {}
    results["prep fix_text (check + ftfy on flagged)"] = best_of(
        repeat, lambda: [stage.process(b, "web") for b in batches]
    )
    results["  of which the check alone"] = best_of(repeat, lambda: [flag(b.column("text")) for b in batches])
    peer_name = None
    try:
        from datatrove.pipeline.formatters import FTFYFormatter

        settings = {k: v for k, v in fixer._asdict().items() if k not in ("explain", "max_decode_length")}
        peer = FTFYFormatter(**settings)
        peer_name = "datatrove FTFYFormatter, every document"
        peer_out = [peer.format(d) for d in docs]
        results[peer_name] = best_of(repeat, lambda: [peer.format(d) for d in docs])
    except ImportError as error:
        print(f"(datatrove's FTFYFormatter is not importable: {error}; the peer is plain ftfy)")
        peer_out = None
    plain = "ftfy.fix_text, every document"
    every = [ftfy.fix_text(d, fixer) for d in docs]
    results[plain] = best_of(repeat, lambda: [ftfy.fix_text(d, fixer) for d in docs])
    peer_name = peer_name or plain
    ours, _ = run_stage(stage, batches)
    print(f"\nspeed: {len(docs):,} documents, {mb:.1f} MB, one core, best of {repeat}")
    for name, took in results.items():
        ratio = f"   x{results[peer_name] / took:.1f} vs {peer_name.split(',')[0]}"
        print(f"{name:<44}{mb / took:>9.1f} MB/s{len(docs) / took:>10.0f} docs/s{ratio}")
    reference = peer_out if peer_out is not None else every
    agree = sum(a == b for a, b in zip(ours, reference))
    print(f"agreement with {peer_name.split(',')[0]}: {agree:,} of {len(docs):,} outputs equal")
    if peer_out is not None:
        print(f"datatrove and plain ftfy agree on {sum(a == b for a, b in zip(peer_out, every)):,} of {len(docs):,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-lingua", action="store_true", help="skip the 222,790 lingua sentences")
    args = parser.parse_args()
    if not (args.data / "web").is_dir():
        sys.exit(f"no shared data at {args.data}")
    fixer = ftfy_config()
    everything: list[str] = []
    for name, path in CORPORA.items():
        if name == "lingua_sentences" and args.no_lingua:
            continue
        docs = read_texts(args.data / path)
        corpus_report(name, docs, fixer)
        everything += docs
    speed(everything, fixer, args.repeat)


if __name__ == "__main__":
    main()
