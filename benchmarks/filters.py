"""Quality filters, side by side: prep's ``quality`` stage against datatrove's four
filters chained (GopherRepetition -> GopherQuality -> C4Quality -> FineWebQuality, the
order of FineWeb's recipe), on the same web documents, in the same run, one core each.

    python -m benchmarks.filters [--docs N] [--data ../shared/data] [--profile]

datatrove runs its filters' ``filter`` methods directly on ``Document`` objects, as its
pipeline would but without its reader/writer/stats overhead (in datatrove's favour); a
document dropped by one filter is not seen by the next, and C4's rewritten text is what
FineWeb reads, as in a pipeline. Ours computes every signal for every document (they
become columns), so it does strictly more work. numba compilation is reported apart
(it is cached on disk after the first run). The documents are the shared web corpora
as they are (no repetition); both sides' keep counts are printed as a sanity check.

Times are CPU seconds of this process (``time.process_time``), so other work on a shared
machine weighs less than in wall time; ours is the median of three runs (datatrove runs
once: it takes minutes). ``--profile`` adds where our web kernel's time goes, per signal
family, in MB/s per core next to a pass that decodes every character once
(``quality_profile.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import pyarrow as pa

from stages.quality import QualityStage

ROOT = Path(__file__).resolve().parents[1]


def load(data: Path, limit: int | None) -> list[str]:
    """Texts of the shared web corpora (all but the raw-HTML one), in a fixed order."""
    texts: list[str] = []
    for path in sorted((data / "web").glob("*.jsonl.gz")):
        if path.name != "web_html.jsonl.gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                texts += [json.loads(line)["text"] for line in f]
    return texts[:limit] if limit else texts


def run_ours(texts: list[str], batch_size: int = 1024) -> tuple[float, int]:
    stage = QualityStage(QualityStage.Options())
    batches = [
        pa.RecordBatch.from_pydict(
            {"id": [str(i) for i in range(len(chunk))], "text": chunk, "source": ["web"] * len(chunk)}
        )
        for chunk in (texts[i : i + batch_size] for i in range(0, len(texts), batch_size))
    ]
    seconds = []
    for _ in range(3):
        kept = 0
        t0 = time.process_time()
        for batch in batches:
            kept += stage.process(batch, "web").drop_reason.null_count
        seconds.append(time.process_time() - t0)
    return sorted(seconds)[1], kept


def run_datatrove(texts: list[str]) -> tuple[float, int]:
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    chain = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]
    for f in chain:  # load spaCy before timing
        f.filter(Document(text="Warm up the tokenizer. It has to load once.", id="warmup"))
    kept = 0
    t0 = time.process_time()
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        if all(f.filter(doc) is True for f in chain):
            kept += 1
    return time.process_time() - t0, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1500, help="documents (0: all of the web corpora)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--profile", action="store_true", help="also time each signal family of the web kernel")
    args = parser.parse_args()
    data = args.data if (args.data / "web").is_dir() else Path("/work/shared/data")
    texts = load(data, args.docs or None)
    if not texts:
        sys.exit(f"no web corpora under {data}")
    mb = sum(len(t.encode()) for t in texts) / 1e6

    t0 = time.perf_counter()
    run_ours(texts[:8])
    compile_s = time.perf_counter() - t0
    ours_s, ours_kept = run_ours(texts)
    ref_s, ref_kept = run_datatrove(texts)

    print(
        f"{len(texts)} web documents, {mb:.1f} MB, one core each, CPU seconds"
        f" (numba compile/cache load {compile_s:.1f}s, not timed)"
    )
    print()
    print("| filters | seconds | docs/s | MB/s | kept |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| prep quality (all signals) | {ours_s:.2f} | {len(texts) / ours_s:,.0f} | {mb / ours_s:.2f} | {ours_kept} |"
    )
    print(f"| datatrove 4 filters chained | {ref_s:.2f} | {len(texts) / ref_s:,.0f} | {mb / ref_s:.3f} | {ref_kept} |")
    print()
    print(f"speed-up: {ref_s / ours_s:.1f}x (target >= 100x)")
    if args.profile:
        print_profile(texts, mb)


def print_profile(texts: list[str], mb: float) -> None:
    from benchmarks.quality_profile import profile

    rows = profile(QualityStage(QualityStage.Options()), texts)
    print()
    print("| web kernel step | CPU seconds | MB/s per core |")
    print("|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {mb / seconds if seconds else float('inf'):,.0f} |")
    total = sum(seconds for _, seconds in rows[1:])
    print(f"| all families | {total:.3f} | {mb / total:,.1f} |")


if __name__ == "__main__":
    main()
