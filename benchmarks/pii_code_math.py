"""Every PII replacement the ``pii`` stage makes in code and math, for a person to read.

The stage runs with the policies a RedPajama-style config gets (``code_sources = ["code"]``,
``math_sources = ["math"]``: see configs/redpajama.toml) over the bundled sample's code and
math and the shared code and math corpora. It prints the count per corpus and type, then
checks the reviewed list (``tests/data/pii_code_math_review.jsonl``: one replacement a line
with ``verdict`` true or false and ``why``): how many of the replacements made now were
reviewed, and how many of those were judged false. ``--new N`` writes N replacements
nobody has reviewed yet (a random pick, fixed seed) to stdout, ready to be judged and
appended.

    python -m benchmarks.pii_code_math [--data ../shared/data] [--new 100]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from collections import Counter
from pathlib import Path

from stages.pii import Pii

REPO = Path(__file__).resolve().parents[1]
REVIEW = REPO / "tests" / "data" / "pii_code_math_review.jsonl"


def corpora(data: Path | None) -> list[tuple[str, Path, str]]:
    """(name, path, kind of text) of every code and math corpus there is."""
    found = [
        (f"sample/{p.parent.name}/{p.name}", p, p.parent.name)
        for p in sorted((REPO / "data" / "sample").glob("*/*.gz"))
    ]
    if data is not None:
        found += [(f"shared/{p.parent.name}/{p.name}", p, p.parent.name) for p in sorted(data.glob("*/*.jsonl.gz"))]
    return [(name, path, kind) for name, path, kind in found if kind in ("code", "math")]


def replacements(name: str, path: Path, kind: str, stage: Pii) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    texts = [row.get("text") or "" for row in rows]
    made = []
    for row, text, spans in zip(rows, texts, stage.find(texts, kind)):
        for start, end, pii_type in spans:
            made.append(
                {
                    "corpus": name,
                    "id": str(row.get("id")),
                    "start": start,
                    "type": pii_type,
                    "match": text[start:end],
                    "context": text[max(0, start - 80) : end + 80],
                }
            )
    return made


def key(item: dict) -> tuple:
    return item["corpus"], item["id"], item["start"], item["type"]


def read_review(path: Path = REVIEW) -> dict[tuple, dict]:
    with open(path, encoding="utf-8") as f:
        return {key(item): item for item in map(json.loads, f)}


def main() -> None:
    here = REPO.parent / "shared" / "data"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=here if here.is_dir() else None)
    parser.add_argument("--new", type=int, default=0, help="print this many unreviewed replacements as JSON lines")
    args = parser.parse_args()
    stage = Pii(Pii.Options())
    made = [item for name, path, kind in corpora(args.data) for item in replacements(name, path, kind, stage)]
    for (corpus, pii_type), count in sorted(Counter((m["corpus"], m["type"]) for m in made).items()):
        print(f"{corpus:48s} {pii_type:12s} {count:6,d}")
    review = read_review() if REVIEW.exists() else {}
    judged = [review[key(m)] for m in made if key(m) in review]
    false = [j for j in judged if j["verdict"] == "false"]
    print(f"\n{len(made):,} replacements; {len(judged):,} reviewed, {len(false):,} of them judged false")
    for corpus in sorted({m["corpus"] for m in made} | {"sample/code", "sample/math"}):
        if corpus.startswith("sample/"):
            mine = [m for m in made if m["corpus"].startswith(corpus)]
            unreviewed = [m for m in mine if key(m) not in review]
            if mine or corpus in ("sample/code", "sample/math"):
                print(f"  {corpus}: {len(mine)} made, {len(unreviewed)} not reviewed")
    for item in false:
        print(f"  false: {item['corpus']} {item['type']} {item['match']!r}: {item['why']}")
    if args.new:
        fresh = [m for m in made if key(m) not in review]
        for item in random.Random(0).sample(fresh, min(args.new, len(fresh))):
            print(json.dumps(item, ensure_ascii=False))


if __name__ == "__main__":
    main()
