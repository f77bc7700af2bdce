"""Precision, recall and speed of the ``pii`` stage.

1. Precision / recall per type against the gold spans of presidio-research's generated
   sentences (a predicted span counts when it overlaps a gold span of the same type; every
   other prediction, including hits on gold PERSON/DATE/... spans, is a false positive).
   IP addresses are scored with ``public_ips_only = false`` too, since the gold set labels
   private addresses as IPs and the default deliberately keeps those.
2. False positives on real Debian changelogs and copyright files: every replaced IP address
   and phone number is listed by kind of context (version strings are the bait).
3. Speed: documents/s of ``Pii.process`` and of datatrove's ``PIIFormatter`` (e-mail and
   IPv4 only) on the same documents in the same run, one core, and the ratio.

Run: python -m benchmarks.pii [--data DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.pii import Pii

PRESIDIO_TO_OURS = {
    "EMAIL_ADDRESS": "email",
    "IP_ADDRESS": "ip",
    "PHONE_NUMBER": "phone",
    "CREDIT_CARD": "credit_card",
    "US_SSN": "ssn",
    "IBAN_CODE": "iban",
}


def default_data_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else Path("/work/shared/data")


def read_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def score(rows: list[dict], stage: Pii) -> dict[str, dict[str, int]]:
    """Per type: tp_gold (gold spans found), gold, tp_pred (predictions on a gold span), pred, exact."""
    found = stage.find([r["text"] for r in rows])
    table = {t: Counter() for t in PRESIDIO_TO_OURS.values()}
    for row, predicted in zip(rows, found):
        gold = [(s["start_position"], s["end_position"], PRESIDIO_TO_OURS.get(s["entity_type"])) for s in row["spans"]]
        for gs, ge, gt in gold:
            if gt is None:
                continue
            table[gt]["gold"] += 1
            hits = [(ps, pe) for ps, pe, pt in predicted if pt == gt and ps < ge and gs < pe]
            table[gt]["tp_gold"] += bool(hits)
            table[gt]["exact"] += (gs, ge) in hits
        for ps, pe, pt in predicted:
            table[pt]["pred"] += 1
            table[pt]["tp_pred"] += any(gt == pt and ps < ge and gs < pe for gs, ge, gt in gold)
    return table


def print_scores(title: str, table: dict[str, Counter]) -> None:
    print(f"\n{title}")
    print(f"{'type':<12}{'precision':>10}{'recall':>8}{'exact':>7}{'gold':>6}{'pred':>6}")
    for name, c in table.items():
        p = c["tp_pred"] / c["pred"] if c["pred"] else float("nan")
        r = c["tp_gold"] / c["gold"] if c["gold"] else float("nan")
        e = c["exact"] / c["gold"] if c["gold"] else float("nan")
        print(f"{name:<12}{p:>10.3f}{r:>8.3f}{e:>7.3f}{c['gold']:>6}{c['pred']:>6}")


def misses(rows: list[dict], stage: Pii, limit: int = 12) -> None:
    """Print gold spans of our types that were not found, and predictions that hit no gold."""
    found = stage.find([r["text"] for r in rows])
    fn, fp = [], []
    for row, predicted in zip(rows, found):
        gold = [(s["start_position"], s["end_position"], s["entity_type"]) for s in row["spans"]]
        for gs, ge, gt in gold:
            t = PRESIDIO_TO_OURS.get(gt)
            if t and not any(pt == t and ps < ge and gs < pe for ps, pe, pt in predicted):
                fn.append(f"{t}: {row['text'][gs:ge]!r}")
        for ps, pe, pt in predicted:
            if not any(PRESIDIO_TO_OURS.get(gt) == pt and ps < ge and gs < pe for gs, ge, gt in gold):
                under = [gt for gs, ge, gt in gold if ps < ge and gs < pe]
                fp.append(f"{pt}: {row['text'][ps:pe]!r} (gold: {under or 'none'})")
    print(f"missed ({len(fn)}):", "; ".join(fn[:limit]))
    print(f"false positives ({len(fp)}):", "; ".join(fp[:limit]))


def debian_false_positives(rows: list[dict], stage: Pii) -> None:
    found = stage.find([r["text"] for r in rows])
    weak_ipv4 = sum(str(r["weak_spans"]).count("'type': 'IPV4'") for r in rows)
    per_type = Counter(t for spans in found for _, _, t in spans)
    print(f"\nDebian changelogs/copyright: {len(rows)} documents, {weak_ipv4} IPv4-shaped strings (mostly versions)")
    print("replacements per type:", dict(per_type))
    for kind in ("ip", "phone"):
        shown = [
            repr(r["text"][max(0, s - 30) : e + 15]) for r, spans in zip(rows, found) for s, e, t in spans if t == kind
        ]
        print(f"  {kind}: {len(shown)} replaced; e.g. {'; '.join(shown[:6])}")


def speed(docs: list[str], repeat: int) -> None:
    from datatrove.pipeline.formatters import PIIFormatter

    mb = sum(len(d.encode()) for d in docs) / 1e6
    batch = pa.record_batch(
        {
            "id": pa.array([str(i) for i in range(len(docs))]),
            "text": pa.array(docs),
            "source": pa.array(["web"] * len(docs)),
        }
    )
    batches = [batch.slice(i, 1000) for i in range(0, len(docs), 1000)]
    ours_all, ours_same = Pii(Pii.Options()), Pii(Pii.Options(types=["email", "ip"]))
    peer = PIIFormatter()

    def run_ours(stage):
        for b in batches:
            stage.process(b, "web")

    def run_peer():
        for d in docs:
            peer.format(d)

    results = {}
    for name, fn in (("prep pii, all 7 types", lambda: run_ours(ours_all)),
                     ("prep pii, email+ip only", lambda: run_ours(ours_same)),
                     ("datatrove PIIFormatter (email+ip)", run_peer)):  # fmt: skip
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        results[name] = best
    print(f"\nspeed: {len(docs)} documents, {mb:.1f} MB, one core, best of {repeat}")
    peer_time = results["datatrove PIIFormatter (email+ip)"]
    for name, took in results.items():
        print(f"{name:<36}{len(docs) / took:>9.0f} docs/s{mb / took:>7.1f} MB/s   x{peer_time / took:.2f} vs datatrove")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    pii_dir = args.data / "pii"
    if not pii_dir.is_dir():
        sys.exit(f"no shared data at {args.data}")

    presidio = read_jsonl(pii_dir / "presidio_tests_generated_large.jsonl.gz")
    print_scores("presidio generated (large), defaults", score(presidio, Pii(Pii.Options())))
    all_ips = Pii(Pii.Options(public_ips_only=False))
    print_scores("presidio generated (large), public_ips_only = false", score(presidio, all_ips))
    misses(presidio, all_ips)

    debian = read_jsonl(pii_dir / "debian_changelog_copyright.jsonl.gz")
    debian_false_positives(debian, Pii(Pii.Options()))

    docs = [r["text"] for r in read_jsonl(args.data / "web" / "web_gold.jsonl.gz")]
    docs += [r["text"] for r in read_jsonl(args.data / "web" / "dolma_ccmain_20190717_00140.jsonl.gz")]
    docs += [r["text"] for r in read_jsonl(pii_dir / "web_pii_candidates.jsonl.gz")]
    docs += [r["text"] for r in debian]
    speed(docs, args.repeat)


if __name__ == "__main__":
    main()
