"""Common Crawl's first step, reader plus main-text extraction, in pages per CPU-second
(one core), three ways on the same WARC files in the same run.

Sides:

* prep: ``pipeline.readers.read_input`` on each ``.warc.gz`` (format ``warc``), each
  chunk's documents straight into the ``extract`` stage's ``process`` with its defaults
  (resiliparse's main content), as a run's worker passes them;
* datatrove 0.10: its ``WarcReader`` feeding its ``Trafilatura`` extractor with their
  defaults (favour_precision, deduplicate, a 1 s timeout: FineWeb's setup), the steps'
  ``run`` generators iterated in this process, no executor. The extractor runs
  trafilatura in a sandbox child process it forks, so its CPU time is this process's
  plus its reaped children's;
* the bar: warcio's ``ArchiveIterator`` and resiliparse in a plain loop: HTTP 200 HTML
  responses, the body decoded with its HTTP charset (else resiliparse's
  ``detect_encoding``) by ``bytes_to_str``, then ``extract_plain_text(html,
  main_content=True)``. prep should run at >= 0.8x its speed (so the stage adds little)
  and >= 10x datatrove's.

Volume: the 2,899 shared pages (``web/web_html.jsonl.gz``, HTML in ``text``; ``--pages
N`` takes N evenly spaced) are wrapped into WARC response records with ``warcio`` (HTTP
200, ``text/html; charset=utf-8``, ``WARC-Identified-Payload-Type: text/html``; one gzip
member per record, as Common Crawl writes them) in a temporary folder. They are dealt
round-robin into files of at most ``--datatrove-pages`` pages, so every file samples the
whole set; trafilatura is slow, so datatrove reads only the first file, and the ratio
against it is taken on that file's pages (prep's and the loop's rates on all the files
are printed beside it). The real Common Crawl-style files in ``warc/*.warc.gz`` are a
second row set, read ``REAL_PASSES`` times by every side (they hold only 37 pages).

A page counts once it is read as an HTML response, whether or not text comes out; "kept"
is how many came out with text. Times are ``time.process_time`` (plus children's for
datatrove), so other jobs on a shared machine weigh less than in wall time; prep and the
loop alternate file by file so they sample the same minutes. Everything each side
imports or compiles is warmed on one page first, outside the timing.

Run: python -m benchmarks.commoncrawl_speed [--data DIR] [--pages N] [--datatrove-pages N]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import default_data_dir
from pipeline.readers import InputSpec, read_input
from stages.extract.stage import Extract

REAL_PASSES = 3
WARC_DATE = "2024-04-25T16:24:44Z"


@dataclass
class Tally:
    """One side's pages read, pages that came out with text, and CPU seconds."""

    pages: int = 0
    kept: int = 0
    seconds: float = 0.0

    def add(self, other: Tally) -> None:
        self.pages += other.pages
        self.kept += other.kept
        self.seconds += other.seconds

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds else 0.0


def read_html(data: Path, pages: int | None) -> list[tuple[str, str]]:
    """(URL, HTML) of the shared pages, N of them evenly spaced."""
    with gzip.open(data / "web" / "web_html.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [(row.get("url") or f"https://example.com/{row['id']}", row["text"]) for row in map(json.loads, f)]
    if pages is not None and pages < len(rows):
        rows = [rows[i * len(rows) // pages] for i in range(pages)]
    return rows


def write_warc(path: Path, pages: list[tuple[str, str]]) -> Path:
    """``pages`` as WARC response records, one gzip member each, written with warcio."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, html in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            headers = {"WARC-Date": WARC_DATE, "WARC-Identified-Payload-Type": "text/html"}
            record = writer.create_warc_record(
                url, "response", payload=io.BytesIO(html.encode()), http_headers=http, warc_headers_dict=headers
            )
            writer.write_record(record)
    return path


def wrap_pages(pages: list[tuple[str, str]], folder: Path, per_file: int) -> list[Path]:
    """The pages dealt round-robin into ``ceil(len / per_file)`` WARC files."""
    files = max(1, -(-len(pages) // per_file))
    return [write_warc(folder / f"pages-{k:04d}.warc.gz", pages[k::files]) for k in range(files)]


def prep_side(path: Path) -> Tally:
    stage = Extract(Extract.Options())
    tally = Tally()
    start = time.process_time()
    for chunk in read_input(path, InputSpec(source="web", file_key=path.name), fmt="warc"):
        if chunk.docs is not None and chunk.docs.num_rows:
            result = stage.process(chunk.docs, "web")
            tally.pages += chunk.docs.num_rows
            tally.kept += result.drop_reason.null_count
    tally.seconds = time.process_time() - start
    return tally


def resiliparse_loop(path: Path) -> Tally:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from warcio.archiveiterator import ArchiveIterator

    tally = Tally()
    start = time.process_time()
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            content_type = record.http_headers.get_header("Content-Type") or ""
            if record.http_headers.get_statuscode() != "200" or "html" not in content_type.lower():
                continue
            body = record.content_stream().read()
            _, _, charset = content_type.partition("charset=")
            html = bytes_to_str(body, charset.split(";")[0].strip() or detect_encoding(body))
            text = extract_plain_text(html, main_content=True)
            tally.pages += 1
            tally.kept += bool(text.strip())
    tally.seconds = time.process_time() - start
    return tally


def datatrove_side(folder: Path, glob: str) -> tuple[Tally, dict[str, int]]:
    """datatrove's reader and extractor, one task over the files ``glob`` names in
    ``folder`` (one sandbox process, as a task has), and the extractor's failure counts."""
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader

    reader = WarcReader(str(folder), glob_pattern=glob)
    extractor = Trafilatura()
    tally = Tally()

    def counted(docs: Iterator) -> Iterator:
        for doc in docs:
            tally.pages += 1
            yield doc

    start, children = time.process_time(), _children_cpu()
    for _ in extractor.run(counted(reader.run(None, rank=0, world_size=1))):
        tally.kept += 1
    # The sandbox's children are joined (reaped) when its run ends, so their CPU is in.
    tally.seconds = time.process_time() - start + _children_cpu() - children
    failed = {name: int(extractor.stats.stats[name].total) for name in ("timeout", "clean_error", "broken_process")}
    return tally, {name: n for name, n in failed.items() if n}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def warm_up(folder: Path, page: tuple[str, str]) -> None:
    """Each side once on one page: imports, the scan kernel, trafilatura's first call."""
    import trafilatura

    path = write_warc(folder / "warm.warc.gz", [page])
    trafilatura.extract(page[1])
    prep_side(path), resiliparse_loop(path), datatrove_side(folder, path.name)
    path.unlink()


def alternate(paths: list[Path], sides: dict[str, Callable[[Path], Tally]], passes: int = 1) -> dict[str, list[Tally]]:
    """Each side's tally per file, the sides taking turns file by file."""
    per_file: dict[str, list[Tally]] = {name: [Tally() for _ in paths] for name in sides}
    for _ in range(passes):
        for k, path in enumerate(paths):
            for name, side in sides.items():
                per_file[name][k].add(side(path))
    return per_file


def total(tallies: list[Tally]) -> Tally:
    out = Tally()
    for tally in tallies:
        out.add(tally)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--pages", type=int, default=None, help="evenly spaced shared pages (default: all 2,899)")
    parser.add_argument("--datatrove-pages", type=int, default=500, help="pages per wrapped file; datatrove reads one")
    args = parser.parse_args()
    if not (args.data / "web" / "web_html.jsonl.gz").is_file():
        sys.exit(f"no shared pages at {args.data / 'web'}")
    if args.datatrove_pages < 1:
        sys.exit("--datatrove-pages must be >= 1")
    from datatrove.utils.logging import logger  # (its import installs the handler removed here)

    logger.remove()  # datatrove's lines for each file and each sandbox
    pages = read_html(args.data, args.pages)
    real = sorted((args.data / "warc").glob("*.warc.gz"))
    fast = {"prep": prep_side, "loop": resiliparse_loop}
    with tempfile.TemporaryDirectory() as tmp:
        wrapped = wrap_pages(pages, Path(tmp), args.datatrove_pages)
        mb = sum(p.stat().st_size for p in wrapped) / 1e6
        print(f"{len(pages):,} shared pages wrapped into {len(wrapped)} WARC files ({mb:.1f} MB gzipped), one core\n")
        warm_up(Path(tmp), pages[0])
        ours = alternate(wrapped, fast)
        theirs, failed = datatrove_side(Path(tmp), wrapped[0].name)
    sets = [
        (f"wrapped, all {len(wrapped)} files", {name: total(tallies) for name, tallies in ours.items()}),
        (f"wrapped file 0 ({theirs.pages} pages)", {**{n: t[0] for n, t in ours.items()}, "datatrove": theirs}),
    ]
    real = sorted((args.data / "warc").glob("*.warc.gz"))
    if real:
        real_ours = {name: total(tallies) for name, tallies in alternate(real, fast, REAL_PASSES).items()}
        real_theirs = total([datatrove_side(real[0].parent, "*.warc.gz")[0] for _ in range(REAL_PASSES)])
        sets.append((f"real warc/ ({len(real)} files x {REAL_PASSES})", {**real_ours, "datatrove": real_theirs}))
    print_results(sets, failed)


SIDES = {
    "prep": "prep read_input + extract",
    "loop": "warcio + resiliparse loop",
    "datatrove": "datatrove WarcReader + Trafilatura",
}


def print_results(sets: list[tuple[str, dict[str, Tally]]], failed: dict[str, int]) -> None:
    print("| files | side | pages | kept | CPU s | pages/s per core |")
    print("|---|---|---:|---:|---:|---:|")
    for files, tallies in sets:
        for name, t in tallies.items():
            print(f"| {files} | {SIDES[name]} | {t.pages:,} | {t.kept:,} | {t.seconds:.2f} | {t.rate:,.1f} |")
    if failed:
        print(f"\ndatatrove's extractor on file 0: {failed}")
    print("\nRatios (prep's pages per CPU-second over the other side's):")
    for files, tallies in sets:
        prep = tallies["prep"].rate
        if "datatrove" in tallies:
            print(f"  prep / datatrove, {files}: {prep / tallies['datatrove'].rate:.1f}x (target >= 10x)")
        print(f"  prep / resiliparse loop, {files}: {prep / tallies['loop'].rate:.2f}x (target >= 0.8x)")


if __name__ == "__main__":
    main()
