"""Derive the ``langid`` stage's per-language thresholds (``stages/models/lid.176.thresholds.json``).

FineWeb-2's rule on held-out data (see ``stages/langid/thresholds.py`` for why, and for the
cap at FineWeb's English 0.65): for every label the bundled lid.176 gives to at least
``--min-docs`` of the held-out documents, the median and standard deviation of those
documents' top scores. The held-out documents are 1-2 KB of the even-numbered lingua test
sentences of each language (``benchmarks/langid.py`` measures on the odd-numbered ones and
on UDHR). English keeps FineWeb's 0.65.

    python -m benchmarks.langid_thresholds [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

import pyarrow as pa

from benchmarks.langid import default_data_dir, lingua_documents
from pipeline.util.atomic import atomic_path
from stages.langid import bundled_model_path, detect, load_model
from stages.langid.thresholds import ENGLISH_THRESHOLD, THRESHOLDS_FILE, fineweb2_threshold


def derive(data, min_docs: int) -> dict:
    documents = lingua_documents(data, half=0)
    texts = [text for texts in documents.values() for text in texts]
    found = detect(load_model(str(bundled_model_path())), pa.array(texts, pa.large_string()), 2000)
    scores: dict[str, list[float]] = defaultdict(list)
    for label, score in zip(found.lang.to_pylist(), found.score):
        if label is not None:
            scores[label].append(float(score))
    table = {}
    for label, values in sorted(scores.items()):
        if len(values) < min_docs:
            continue
        median, deviation = statistics.median(values), statistics.pstdev(values)
        threshold = ENGLISH_THRESHOLD if label == "en" else fineweb2_threshold(median, deviation)
        table[label] = {
            "threshold": round(threshold, 3),
            "documents": len(values),
            "median": round(median, 4),
            "std": round(deviation, 4),
        }
    return {
        "rule": "min(0.65, max(0.3, min(0.9, median - std))) of the top scores of held-out documents "
        "labelled so; en: FineWeb's 0.65 (stages/langid/thresholds.py)",
        "held_out": "1-2 KB documents of the even-numbered lingua test sentences (benchmarks/langid_thresholds.py)",
        "thresholds": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=default_data_dir())
    parser.add_argument("--min-docs", type=int, default=20)
    args = parser.parse_args()
    derived = derive(args.data, args.min_docs)
    with atomic_path(THRESHOLDS_FILE) as tmp:
        tmp.write_text(json.dumps(derived, indent=1, sort_keys=True) + "\n")
    low = sorted(derived["thresholds"].items(), key=lambda item: item[1]["threshold"])[:8]
    print(f"{len(derived['thresholds'])} languages -> {THRESHOLDS_FILE}")
    print("lowest:", ", ".join(f"{label} {entry['threshold']}" for label, entry in low))


if __name__ == "__main__":
    main()
