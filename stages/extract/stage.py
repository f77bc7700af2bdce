"""``extract``: a page's HTML to its main text and title, before ``normalize``.

Reads the HTML from ``column``: a binary column (the WARC reader's ``html``, the HTTP
body's bytes, with the header's ``charset`` beside it) is decoded (``decode.py``); a string
column (JSON lines of HTML in ``text``) is read as it is. The page's main text replaces
``text``; ``title`` is its ``<title>``; ``extractor`` says whose text it is (in the
combined mode, per page); the HTML leaves the batch unless ``keep_html`` (then in ``html``).

What a page is dropped for, before any parser sees it (``scan.py``, one numba pass over
the batch's buffers): ``too-large`` (over ``max_html_bytes``), ``binary`` (control bytes in
its head: an image or an archive served as HTML), ``too-deep`` (nesting that would stall
the extractor); then ``undecodable`` (no charset reads it), ``failed`` (the extractor
raised: the message is the ledger's detail) and ``empty`` (no main text). A dropped
page's ledger text is the stage's input ``text``, unchanged (the HTML, for JSON lines of
HTML; empty for WARC records, whose bytes stay in the input file the ledger names).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.stage import Stage, StageOutput, register
from stages.extract import scan
from stages.extract.decode import bom_codec, codec_for, decode, is_wide
from stages.extract.extractors import EXTRACTORS, MODES, RESILIPARSE, Extractor, missing_library

HTML, CHARSET, TITLE, EXTRACTOR = "html", "charset", "title", "extractor"
# Control bytes in a page's first scan.HEAD_BYTES above this share: binary, not HTML
# (real pages of the gold set: at most 35 of 8,192, 0.4%; random bytes: 10.5%).
MAX_CONTROL_SHARE = 0.05


@register
class Extract(Stage):
    name = "extract"

    @dataclass
    class Options:
        column: str = ""  # where the HTML is; "": "html" if the batch has it, else "text"
        extractor: str = RESILIPARSE  # resiliparse, trafilatura, or combined
        mode: str = "default"  # trafilatura's: default, precision (favor_precision), recall (favor_recall)
        keep_html: bool = False  # keep the HTML, in column "html"
        # Larger pages are dropped unread: Common Crawl truncates bodies at 1 MiB, the gold
        # set's largest page is 1.6 MB, and resiliparse reads about 8 MB/s (a 50 MB page: 6 s).
        max_html_bytes: int = 5_000_000
        # Deeper nesting is dropped (see scan.py): resiliparse's main-content pass is quadratic
        # in depth (2,000 deep: 0.26 s; 8,000: 2.5 s); the gold set's deepest page counts 121.
        max_depth: int = 2000
        # The sum of every element's depth, that pass's work (a page of 200,000 elements 20
        # deep, 4.2 million: 1.3 s); the gold set's largest is 110,033.
        max_nesting_work: int = 10_000_000

        def __post_init__(self) -> None:
            if self.extractor not in EXTRACTORS:
                raise ValueError(f"extractor must be one of {', '.join(EXTRACTORS)}, not {self.extractor!r}")
            if self.mode not in MODES:
                raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
            if self.mode != "default" and self.extractor == RESILIPARSE:
                raise ValueError("mode is trafilatura's: set extractor to trafilatura or combined")
            for option in ("max_html_bytes", "max_depth", "max_nesting_work"):
                if getattr(self, option) < 1:
                    raise ValueError(f"{option} must be >= 1")
            absent = missing_library(self.extractor)
            if absent:
                raise ValueError(f'extractor {self.extractor!r} needs {absent}: pip install -e ".[commoncrawl]"')

    def __init__(self, options: Options):
        super().__init__(options)
        self._extract = None

    @classmethod
    def added_columns(cls, options: Extract.Options) -> tuple[str, ...]:
        return (TITLE, EXTRACTOR)

    def _html_column(self, batch: pa.RecordBatch) -> str:
        names = batch.schema.names
        column = self.options.column or (HTML if HTML in names else TEXT)
        if column not in names:
            raise ValueError(f"extract: the documents have no column {column!r} (they have {', '.join(names)})")
        return column

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        if self._extract is None:
            self._extract = Extractor(self.options.extractor, self.options.mode)
        column = self._html_column(batch)
        pages = batch.column(column)
        is_bytes = pa.types.is_binary(pages.type) or pa.types.is_large_binary(pages.type)
        charsets = batch.column(CHARSET).to_pylist() if is_bytes and CHARSET in batch.schema.names else None
        found = scan.PageScan(pages, self.options.max_depth, self.options.max_html_bytes)
        n = batch.num_rows
        texts: list[str | None] = [None] * n
        titles: list[str | None] = [None] * n
        used: list[str | None] = [None] * n
        reasons: list[str | None] = [None] * n
        details: list[str | None] = [None] * n
        counters: dict[str, int] = {}
        for row in range(n):
            if is_bytes and not pages[row].is_valid:
                continue  # a WET conversion: text already, no HTML to extract (it stays as read)
            reason, detail = self._screen(found, row, charsets[row] if charsets else None)
            html = None
            if reason is None:
                html = pages[row].as_py() or (b"" if is_bytes else "")
                if is_bytes:
                    html, how = decode(html, charsets[row] if charsets else None)
                    counters[f"extract.charset_{how}"] = counters.get(f"extract.charset_{how}", 0) + 1
                    if html is None:
                        reason = "undecodable"
            if html is not None:
                reason, detail = self._extract_one(html, row, texts, titles, used, counters)
            reasons[row], details[row] = reason, detail
        return self._output(batch, column, pages, texts, titles, used, reasons, details, counters)

    def _screen(self, found: scan.PageScan, row: int, charset: str | None) -> tuple[str | None, str | None]:
        """The reason to drop a page unread (and its detail), or (None, None)."""
        options = self.options
        size, work = int(found.sizes[row]), int(found.work[row])
        if size > options.max_html_bytes:
            return "too-large", f"{size:,} bytes > max_html_bytes {options.max_html_bytes:,}"
        head = min(size, scan.HEAD_BYTES)
        if found.controls[row] > MAX_CONTROL_SHARE * head:
            if not (is_wide(bom_codec(found.head(row, 4))) or is_wide(codec_for(charset))):
                return "binary", f"{found.controls[row]} control bytes in the first {head:,}"
        if found.depths[row] > options.max_depth:
            return "too-deep", f"nesting deeper than max_depth {options.max_depth:,}"
        if work > options.max_nesting_work:
            return "too-deep", f"nesting work {work:,} > max_nesting_work {options.max_nesting_work:,}"
        return None, None

    def _extract_one(self, html, row, texts, titles, used, counters) -> tuple[str | None, str | None]:
        try:
            got = self._extract(html)
        except Exception as error:  # hostile input: quarantined with the message, never a traceback
            return "failed", f"{type(error).__name__}: {error}"[:500]
        titles[row] = got.title or None
        if not got.text.strip():
            return "empty", f"no main text from {got.extractor}"
        texts[row], used[row] = got.text, got.extractor
        counters[f"extract.{got.extractor}"] = counters.get(f"extract.{got.extractor}", 0) + 1
        return None, None

    def _output(self, batch, column, pages, texts, titles, used, reasons, details, counters) -> StageOutput:
        reason = pa.array(reasons, pa.string())
        kept = pc.is_null(reason)
        before = batch.column(TEXT) if TEXT in batch.schema.names else pa.nulls(batch.num_rows, pa.string())
        before = pc.fill_null(before.cast(pa.string()), "")
        extracted = pa.array(texts, pa.string())  # null where kept unread: a WET conversion's text
        text = pc.if_else(kept, pc.coalesce(extracted, before), before)
        batch = set_column(batch, TEXT, text)
        batch = set_column(batch, TITLE, pa.array(titles, pa.string()))
        batch = set_column(batch, EXTRACTOR, pa.array(used, pa.string()))
        if self.options.keep_html and column != HTML:
            batch = set_column(batch, HTML, pages)
        elif not self.options.keep_html and HTML in batch.schema.names:
            batch = batch.drop_columns([HTML])
        changed = len(extracted) - extracted.null_count
        return StageOutput(batch, drop_reason=reason, changed=changed, counters=counters, detail=pa.array(details))
