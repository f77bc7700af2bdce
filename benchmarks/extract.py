"""How well the ``extract`` stage finds a page's main text, against human gold, and how fast.

Pages: ``web/web_html.jsonl.gz`` (2,899 real pages, HTML in ``text``) joined on ``id``
with ``web/web_gold.jsonl.gz`` (their main text, extracted by people: CleanEval, Dragnet,
L3S-GN1, Readability, CleanPortalEval); pages whose gold is empty are left out.
``--split even|odd`` takes every other page (the even-indexed or the odd-indexed ones):
tune on one, report the other as held out. ``--pages N`` then takes N of them, evenly spaced.

Quality: both texts lower-cased and split into words (``\\w+``), compared as bags of
words: precision = shared words / extracted words, recall = shared words / gold words
(an empty extraction scores 0). The headline is F1 averaged over pages (each page counts
once, as a reader of the corpus sees it); micro F1 (all pages' words pooled, so long
pages weigh more) beside it.

Rows: the stage (``Extract.process`` over batches of 100 pages in a string column) with
each extractor and mode, and the libraries called directly with their own defaults:
``trafilatura.extract(html)`` and resiliparse's ``extract_plain_text(html,
main_content=True)``.

Speed, one core (CPU seconds of this process): pages per second of the default stage on
the HTML as text and as bytes (the WARC reader's ``html`` column, decoded by the stage),
against resiliparse's ``extract_plain_text`` in a plain loop over the same pages; the
ratio is the stage's speed over the loop's.

Run: python -m benchmarks.extract [--data DIR] [--split even|odd|all] [--pages N] [--skip-trafilatura]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.extract.stage import Extract

WORD = re.compile(r"\w+")
SPLITS = ("even", "odd", "all")
BATCH = 100


def default_data_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else Path("/work/shared/data")


def read_pages(data: Path, pages: int | None, split: str = "all") -> tuple[list[str], list[str]]:
    """(HTML, gold text) of the pages that have both, in the split, N of them evenly spaced."""
    with gzip.open(data / "web" / "web_gold.jsonl.gz", "rt", encoding="utf-8") as f:
        gold = {row["id"]: row["text"] for row in map(json.loads, f)}
    with gzip.open(data / "web" / "web_html.jsonl.gz", "rt", encoding="utf-8") as f:
        both = [(row["text"], gold[row["id"]]) for row in map(json.loads, f) if WORD.search(gold.get(row["id"], ""))]
    if split != "all":
        both = both[SPLITS.index(split) :: 2]
    if pages is not None and pages < len(both):
        both = [both[i * len(both) // pages] for i in range(pages)]
    return [html for html, _ in both], [text for _, text in both]


def words(text: str) -> Counter:
    return Counter(WORD.findall(text.lower()))


def scores(extracted: list[str], gold: list[str]) -> dict[str, float]:
    """Mean per-page precision, recall and F1, and micro F1 (see the module's docstring)."""
    p_sum = r_sum = f_sum = 0.0
    shared_all = got_all = gold_all = 0
    for text, truth in zip(extracted, gold):
        got, want = words(text), words(truth)
        shared = sum((got & want).values())
        n_got, n_want = sum(got.values()), sum(want.values())
        p = shared / n_got if n_got else 0.0
        r = shared / n_want
        p_sum, r_sum, f_sum = p_sum + p, r_sum + r, f_sum + (2 * p * r / (p + r) if p + r else 0.0)
        shared_all, got_all, gold_all = shared_all + shared, got_all + n_got, gold_all + n_want
    n = len(gold)
    micro_p, micro_r = shared_all / max(got_all, 1), shared_all / gold_all
    micro_f = 2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r else 0.0
    return {"P": p_sum / n, "R": r_sum / n, "F1": f_sum / n, "micro F1": micro_f}


def stage_texts(options: dict, html: list[str], as_bytes: bool = False) -> tuple[list[str], float]:
    """Each page's text from the stage ("" where it dropped the page), and CPU seconds."""
    stage = Extract(Extract.Options(**options))
    column = {"html": pa.array([h.encode() for h in html], pa.binary())} if as_bytes else {"text": pa.array(html)}
    batch = pa.record_batch({"id": [str(i) for i in range(len(html))], "source": ["web"] * len(html), **column})
    stage.process(batch.slice(0, 1), "web")  # imports and the scan kernel, outside the timing
    out: list[str] = []
    start = time.process_time()
    for offset in range(0, len(html), BATCH):
        result = stage.process(batch.slice(offset, BATCH), "web")
        text = result.batch.column("text").to_pylist()
        out += [t if r is None else "" for t, r in zip(text, result.drop_reason.to_pylist())]
    return out, time.process_time() - start


def direct_texts(extract: Callable[[str], str | None], html: list[str]) -> tuple[list[str], float]:
    extract(html[0])
    start = time.process_time()
    out = [extract(h) or "" for h in html]
    return out, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--pages", type=int, default=None, help="evenly spaced pages (default: all 2,899)")
    parser.add_argument("--split", choices=SPLITS, default="all", help="even- or odd-indexed pages only")
    parser.add_argument("--skip-trafilatura", action="store_true", help="only the resiliparse rows (seconds)")
    args = parser.parse_args()
    if not (args.data / "web" / "web_html.jsonl.gz").is_file():
        sys.exit(f"no shared pages at {args.data / 'web'}")
    html, gold = read_pages(args.data, args.pages, args.split)
    print(f"{len(html):,} pages, {sum(map(len, html)) / 1e6:.1f} M characters of HTML\n")

    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text

    rows: list[tuple[str, Callable[[], tuple[list[str], float]]]] = [
        ("prep extract (default: resiliparse)", lambda: stage_texts({}, html)),
        ("resiliparse direct (main_content=True)", lambda: direct_texts(_resiliparse(extract_plain_text), html)),
    ]
    if not args.skip_trafilatura:
        rows += [(f"prep extract trafilatura, mode={m}", _stage_row("trafilatura", m, html)) for m in _MODES]
        rows += [(f"prep extract combined, mode={m}", _stage_row("combined", m, html)) for m in _MODES]
        rows.append(("trafilatura direct (its defaults)", lambda: direct_texts(trafilatura.extract, html)))
    timings = {}
    print("| extractor | P | R | F1 (mean of pages) | micro F1 | empty | pages/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, run in rows:
        texts, seconds = run()
        timings[name] = seconds
        s = scores(texts, gold)
        empty = sum(not t.strip() for t in texts)
        print(
            f"| {name} | {s['P']:.3f} | {s['R']:.3f} | **{s['F1']:.3f}** | {s['micro F1']:.3f} | {empty} "
            f"| {len(html) / seconds:,.0f} |",
            flush=True,
        )
    _, bytes_seconds = stage_texts({}, html, as_bytes=True)
    loop = timings["resiliparse direct (main_content=True)"]
    print("\nSpeed, one core (pages per CPU-second):")
    for name, seconds in (("stage, HTML as text", timings[rows[0][0]]), ("stage, HTML as bytes", bytes_seconds)):
        print(f"  {name}: {len(html) / seconds:,.0f} pages/s = {loop / seconds:.2f}x resiliparse in a plain loop")
    print(f"  resiliparse in a plain loop: {len(html) / loop:,.0f} pages/s")


_MODES = ("default", "precision", "recall")


def _stage_row(extractor: str, mode: str, html: list[str]) -> Callable[[], tuple[list[str], float]]:
    return lambda: stage_texts({"extractor": extractor, "mode": mode}, html)


def _resiliparse(extract_plain_text: Callable) -> Callable[[str], str]:
    return lambda h: extract_plain_text(h, main_content=True)


if __name__ == "__main__":
    main()
