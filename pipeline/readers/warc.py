"""WARC and WET files (``.warc``, ``.warc.gz``, ``.warc.wet.gz``): Common Crawl's raw crawl
and its text extracts, as documents.

Where records are and how damage is skipped is ``warc_framing``; which records become
documents is ``warc_records``. A document's columns, in this order:

* ``id``: the WARC-Record-ID (``<urn:uuid:...>``), else ``file:offset``;
* ``text``: a WET conversion's text as it is; "" for an HTML page. Every reader yields
  ``text`` and the rest of the chain reads it, but an HTML page has no text until it is
  extracted: the extract stage fills it from ``html``. (A lenient decode here would
  guess the charset twice, and a stage that ran on raw HTML would judge markup.)
* ``source``;
* ``url`` (WARC-Target-URI, without WARC/1.0's angle brackets), ``date`` (WARC-Date, as
  written), ``warc_record_id``;
* ``content_type``: the HTTP Content-Type as sent (a WET record's WARC Content-Type),
  ``charset``: its ``charset=`` parameter or null, ``payload_type``:
  WARC-Identified-Payload-Type or null;
* ``html`` (binary): the page's raw body, de-chunked and inflated, undecoded; null for
  a WET record;
* ``_line``: the record's location, the byte offset of its gzip member (compressed) or
  of the record itself (plain file): the same location ledger rows carry.

Records that are no document (requests, metadata, other statuses and types, ...) are
counted by kind: the last chunk's ``extra["skipped"]``, summed into the unit's stats and
the manifest. Damage is a ledger row ``bad-input:warc-<kind>`` at its byte offset, one
rejected input document each (the accounting of ``pipeline.readers``). The file's size
and sha256 are read in a pass of their own, since damage makes the reader go back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from pipeline.formats.documents import ID, LINE, SOURCE, TEXT
from pipeline.readers.codecs import SNIFF_BYTES, sniff
from pipeline.readers.common import BadInput, Chunk, InputSpec, bad_rows, file_facts, unreadable
from pipeline.readers.warc_framing import GZIP_MAGIC, FileWindow, gzip_items, plain_items
from pipeline.readers.warc_records import Page, Skip

# The columns of a document after id, text and source, with their types.
COLUMNS = (
    ("url", pa.string()),
    ("date", pa.string()),
    ("warc_record_id", pa.string()),
    ("content_type", pa.string()),
    ("charset", pa.string()),
    ("payload_type", pa.string()),
    ("html", pa.binary()),
)
SCHEMA = pa.schema([(ID, pa.string()), (TEXT, pa.string()), (SOURCE, pa.string()), *COLUMNS, (LINE, pa.int64())])


def read_warc(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    """The file's documents, or (``spec.span``) those of the gzip members starting in a
    byte range; memory is bounded by ``max_doc_bytes`` and a batch, not by the file."""
    facts = file_facts(path) if spec.reports_file else {}
    try:
        file = open(path, "rb")
    except OSError as error:
        location = 0 if spec.span is None else spec.span.start
        yield Chunk(bad=unreadable(spec, location, error), extra=facts)
        return
    skipped: Counter[str] = Counter()
    start = 0 if spec.span is None else spec.span.start
    reported = start  # the position progress was reported up to
    with file:
        window = FileWindow(file)
        codec = sniff(bytes(window.read(0, SNIFF_BYTES)))
        if codec is not None and codec.name != "gzip":  # .warc.zst, ...: the whole file is one row
            detail = f"a {codec.name}-compressed WARC; WARC files are read plain or gzipped: {codec.tool} it first"
            yield Chunk(bad=bad_rows(spec, [BadInput(0, "unreadable-file", detail, None)]), extra=facts)
            return
        end = window.size if spec.span is None else spec.span.end
        items = gzip_items(window, start, end, spec.max_doc_bytes)
        if window.read(0, 3) != GZIP_MAGIC:
            items = plain_items(window, spec.max_doc_bytes)
        pages: list[Page] = []
        bad: list[BadInput] = []
        held = 0  # bytes of html and text in ``pages``
        position = start
        try:
            for position, item in items:
                if isinstance(item, Skip):
                    skipped[item.kind] += 1
                    continue
                if isinstance(item, BadInput):
                    bad.append(item)
                else:
                    pages.append(item)
                    held += len(item.html or b"") + len(item.text)
                if held >= spec.block_bytes or len(pages) >= spec.batch_rows or len(bad) >= spec.batch_rows:
                    yield _chunk(pages, bad, spec, max(position - reported, 0))
                    pages, bad, held, reported = [], [], 0, max(position, reported)
        except OSError as error:  # the file became unreadable part-way
            bad.append(BadInput(position, "unreadable-file", str(error), None))
        last = _chunk(pages, bad, spec, max(min(end, window.size) - reported, 0))
    last.extra = {**facts, "skipped": dict(sorted(skipped.items()))} if skipped else facts
    yield last


def _chunk(pages: list[Page], bad: list[BadInput], spec: InputSpec, nbytes: int) -> Chunk:
    return Chunk(docs=_documents(pages, spec), bad=bad_rows(spec, bad) if bad else None, bytes_read=nbytes)


def _documents(pages: list[Page], spec: InputSpec) -> pa.RecordBatch | None:
    if not pages:
        return None
    n = len(pages)
    ids = [page.record_id or f"{spec.file_key}:{page.location}" for page in pages]
    arrays = [
        pa.array(ids, pa.string()),
        pa.array([page.text for page in pages], pa.string()),
        pa.repeat(pa.scalar(spec.source), n),
        pa.array([page.url for page in pages], pa.string()),
        pa.array([page.date for page in pages], pa.string()),
        pa.array([page.record_id for page in pages], pa.string()),
        pa.array([page.content_type for page in pages], pa.string()),
        pa.array([page.charset for page in pages], pa.string()),
        pa.array([page.payload_type for page in pages], pa.string()),
        pa.array([page.html for page in pages], pa.binary()),
        pa.array([page.location for page in pages], pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
