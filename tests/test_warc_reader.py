"""The WARC/WET reader: the real WARC files read exactly (pages, skipped kinds, bodies as
warcio decodes them), records that are no page counted by kind, hostile files
quarantined at their byte offsets with reading resumed after them, bounded memory on a
50 MB page, spans that together read exactly what the whole file's reader reads, and a
``prep run`` whose manifest carries the counts."""

from __future__ import annotations

import gzip
import io
import json
import re
import tracemalloc
import zlib
from pathlib import Path

import pytest
from conftest import write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from pipeline.engine.run import run_pipeline
from pipeline.readers import InputSpec, detect_format, read_input
from pipeline.readers.common import Span, StrictModeError
from pipeline.readers.splits import plan_spans
from pipeline.readers.warc import SCHEMA

PAGE = b"<!DOCTYPE html><html><head><title>A page</title></head><body><p>Hello, world.</p></body></html>"
_ids = iter(range(10**9))


def record(kind: str, block: bytes, **fields: str) -> bytes:
    """One WARC record's bytes; ``fields`` add to or replace its header fields."""
    headers = {
        "WARC-Type": kind,
        "WARC-Record-ID": f"<urn:uuid:00000000-0000-0000-0000-{next(_ids):012d}>",
        "WARC-Date": "2024-04-25T16:24:44Z",
        "Content-Length": str(len(block)),
    }
    headers.update({name.replace("_", "-"): value for name, value in fields.items()})
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return b"WARC/1.0\r\n" + head.encode() + b"\r\n" + block + b"\r\n\r\n"


def http(body: bytes, status: int = 200, content_type: str = "text/html; charset=utf-8", **fields: str) -> bytes:
    head = {"Content-Type": content_type, **{name.replace("_", "-"): value for name, value in fields.items()}}
    lines = "".join(f"{name}: {value}\r\n" for name, value in head.items())
    return f"HTTP/1.1 {status} OK\r\n{lines}\r\n".encode() + body


def response(body: bytes = PAGE, url: str = "https://example.com/", **http_fields: str) -> bytes:
    block = http(body, **http_fields)
    return record("response", block, WARC_Target_URI=url, Content_Type="application/http; msgtype=response")


def members(*records: bytes) -> bytes:
    """Common Crawl's layout: one gzip member a record."""
    return b"".join(gzip.compress(r, mtime=0) for r in records)


def read(path: Path, span: Span | None = None, **spec) -> tuple[list[dict], list[dict], dict]:
    """(documents, ledger rows, skipped kinds) of one file or span."""
    docs, bad, skipped = [], [], {}
    for chunk in read_input(path, InputSpec(source="web", file_key=path.name, span=span, **spec)):
        if chunk.docs is not None:
            assert chunk.docs.schema.equals(SCHEMA)
            docs += chunk.docs.to_pylist()
        if chunk.bad is not None:
            bad += chunk.bad.to_pylist()
        for kind, n in chunk.extra.get("skipped", {}).items():
            skipped[kind] = skipped.get(kind, 0) + n
    return docs, bad, skipped


def write(tmp_path: Path, data: bytes, name: str = "a.warc.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def reasons(bad: list[dict]) -> list[tuple[str, int]]:
    return [(row["reason"], row["line"]) for row in bad]


# -- the real files ---------------------------------------------------------------------------


def test_the_shared_warc_files_read_exactly(shared_data):
    pages, skipped, bodies = [], {}, {}
    for path in sorted((shared_data / "warc").glob("*.warc.gz")):
        docs, bad, kinds = read(path)
        assert bad == []
        pages += docs
        for kind, n in kinds.items():
            skipped[kind] = skipped.get(kind, 0) + n
        with open(path, "rb") as f:  # warcio de-chunks and decodes: the bodies must agree
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    bodies[rec.rec_headers.get_header("WARC-Record-ID")] = rec.content_stream().read()
    assert len(pages) == 37
    assert skipped == {"warc:request": 37, "warc:resource": 4, "warc:warcinfo": 2, "warc:metadata": 2}
    assert {page["id"]: page["html"] for page in pages} == bodies
    assert all(page["text"] == "" and page["id"] == page["warc_record_id"] for page in pages)
    assert all(page["url"].startswith("https://") and not page["url"].endswith(">") for page in pages)
    assert all(page["content_type"].startswith("text/html") for page in pages)
    assert {page["charset"] for page in pages} == {"utf-8", "UTF-8", None}
    assert len({page["_line"] for page in pages}) == 37


@pytest.mark.parametrize("split_bytes", [4096, 30000, 100000])
def test_the_shared_files_in_spans_read_as_the_whole_file(shared_data, split_bytes):
    for path in sorted((shared_data / "warc").glob("*.warc.gz")):
        spans = plan_spans(path, "warc", split_bytes, 1 << 20)
        assert len(spans) > 1
        assert in_spans(path, spans) == read(path)


def cut_in_members(raw: bytes, size: int) -> bytes:
    """A WARC gzipped in members of ``size`` inflated bytes, cut where they fall (``bgzip``'s
    and chunked writers' layout), not a member a record."""
    return b"".join(gzip.compress(raw[i : i + size], mtime=0) for i in range(0, len(raw), size))


def without_locations(docs: list[dict]) -> list[dict]:
    return [{k: v for k, v in doc.items() if k != "_line"} for doc in docs]


@pytest.mark.parametrize("size", [65536, 7000, 50])
def test_members_cut_at_fixed_sizes_read_as_the_records_they_hold(shared_data, tmp_path, size):
    """Such a file lost every record a member boundary cut: 0 of 22 pages of the first
    shared file, as garbage and length-mismatch rows."""
    for path in sorted((shared_data / "warc").glob("*.warc.gz")):
        whole_docs, _, whole_skipped = read(path)
        cut = write(tmp_path, cut_in_members(gzip.decompress(path.read_bytes()), size), f"cut-{path.name}")
        docs, bad, skipped = read(cut)
        assert bad == [] and skipped == whole_skipped
        assert without_locations(docs) == without_locations(whole_docs)
        assert all(doc["_line"] < cut.stat().st_size for doc in docs)  # the member each record starts in
        spans = plan_spans(cut, "warc", 30000, 1 << 20)
        assert len(spans) > 1 and in_spans(cut, spans) == (docs, bad, skipped)


def test_damage_inside_cut_members_loses_one_record(tmp_path):
    """After a record whose header is damaged, the next record of the same member (and of
    the members that continue it) is read."""
    pages = [response(url=f"https://p{i}.example/", body=PAGE * 20) for i in range(6)]
    pages[2] = pages[2].replace(b"WARC/1.0", b"WARC\x00junk", 1)
    docs, bad, _ = read(write(tmp_path, cut_in_members(b"".join(pages), 3000)))
    assert [d["url"] for d in docs] == [f"https://p{i}.example/" for i in (0, 1, 3, 4, 5)]
    assert [row["reason"] for row in bad] == ["bad-input:warc-bad-header"]


def in_spans(path: Path, spans: list[Span]) -> tuple[list, list, dict]:
    docs, bad, skipped = [], [], {}
    for span in spans:
        d, b, s = read(path, span)
        docs, bad = docs + d, bad + b
        for kind, n in s.items():
            skipped[kind] = skipped.get(kind, 0) + n
    return docs, bad, skipped


def test_warc_and_wet_names_are_told_apart_from_others():
    for name in ("a.warc", "a.warc.gz", "CC-MAIN-1.warc.wet.gz", "b.wet", "c.WARC.GZ"):
        assert detect_format(name) == "warc", name
    assert detect_format("a.jsonl.gz") == "jsonl"


def test_a_plain_warc_reads_as_its_gzip_twin(tmp_path):
    recs = [record("warcinfo", b"software: test\r\n"), response(), record("request", b"GET / HTTP/1.1\r\n\r\n")]
    plain, _, skipped = read(write(tmp_path, b"".join(recs), "a.warc"))
    packed, _, again = read(write(tmp_path, members(*recs)))
    assert [d["html"] for d in plain] == [d["html"] for d in packed] == [PAGE]
    assert skipped == again == {"warc:warcinfo": 1, "warc:request": 1}
    assert plain[0]["_line"] == len(recs[0])  # a plain file locates a record at its own offset


# -- which records are pages ----------------------------------------------------------------


def test_records_that_are_no_page_are_counted_by_kind(tmp_path):
    recs = [
        response(status=404),
        response(status=301, Location="https://example.com/x"),
        response(content_type="image/png", body=b"\x89PNG\r\n"),
        record("response", http(PAGE), WARC_Target_URI="dns:example.com", Content_Type="text/dns"),
        record("response", http(PAGE), Content_Type="application/http", WARC_Truncated="length"),
        record("revisit", http(PAGE)[:40]),
        record("metadata", b"via: x\r\n"),
        response(body=b"", content_type="text/html"),
        response(Content_Encoding="br"),
        response(),
    ]
    docs, bad, skipped = read(write(tmp_path, members(*recs)))
    assert bad == [] and len(docs) == 1
    assert skipped == {
        "warc:status-404": 1,
        "warc:status-301": 1,
        "warc:non-html": 1,
        "warc:non-http": 1,
        "warc:truncated": 1,
        "warc:revisit": 1,
        "warc:metadata": 1,
        "warc:empty-body": 1,
        "warc:content-encoding-br": 1,
    }


def test_a_page_carries_its_headers_and_its_decoded_body(tmp_path):
    chunked = b"10\r\n" + PAGE[:16] + b"\r\n" + f"{len(PAGE) - 16:x}\r\n".encode() + PAGE[16:] + b"\r\n0\r\n\r\n"
    zipped = gzip.compress(PAGE)
    recs = [
        response(chunked, url="<https://a.example/>", Transfer_Encoding="chunked"),
        response(zipped, Content_Encoding="gzip", content_type='text/html; charset="ISO-8859-1"'),
        response(zlib.compress(PAGE), Content_Encoding="deflate", content_type="application/xhtml+xml"),
        record(
            "response",
            http(PAGE, content_type=""),
            Content_Type="application/http; msgtype=response",
            WARC_Identified_Payload_Type="text/html",
        ),
    ]
    docs, bad, _ = read(write(tmp_path, members(*recs)))
    assert bad == [] and [d["html"] for d in docs] == [PAGE] * 4
    assert docs[0]["url"] == "https://a.example/"
    assert [d["charset"] for d in docs] == ["utf-8", "ISO-8859-1", None, None]
    assert [d["payload_type"] for d in docs] == [None, None, None, "text/html"]
    assert docs[2]["content_type"] == "application/xhtml+xml"


def test_wet_conversions_are_text_as_it_is(tmp_path):
    text = "Ünïcode text of a page.\nSecond line.\n"
    recs = [
        record("warcinfo", b"isPartOf: CC-MAIN\r\n"),
        record("conversion", text.encode(), WARC_Target_URI="https://w.example/", Content_Type="text/plain"),
        record("conversion", b"bad \xff bytes", WARC_Target_URI="https://w.example/2"),
        record("conversion", b"  \n", WARC_Target_URI="https://w.example/3"),
    ]
    docs, bad, skipped = read(write(tmp_path, members(*recs), "a.warc.wet.gz"))
    assert [(d["text"], d["url"], d["html"], d["content_type"]) for d in docs] == [
        (text, "https://w.example/", None, "text/plain")
    ]
    assert reasons(bad) == [("bad-input:warc-invalid-utf8", sum(len(gzip.compress(r, mtime=0)) for r in recs[:2]))]
    assert skipped == {"warc:warcinfo": 1, "warc:empty-conversion": 1}


def test_a_member_of_several_records_is_read_through(tmp_path):
    recs = [record("warcinfo", b"a: b\r\n"), response(), response(PAGE * 40), response(url="https://b.example/")]
    docs, bad, skipped = read(write(tmp_path, gzip.compress(b"".join(recs))), max_doc_bytes=len(PAGE) * 10)
    assert [d["url"] for d in docs] == ["https://example.com/", "https://b.example/"]
    assert reasons(bad) == [("bad-input:warc-oversized", 0)] and skipped == {"warc:warcinfo": 1}


def test_strict_mode_stops_at_the_first_damage(tmp_path):
    path = write(tmp_path, members(response()) + b"garbage" + members(response()))
    with pytest.raises(StrictModeError, match="warc-garbage"):
        read(path, strict=True)


def test_warcio_written_files_read_back(tmp_path):
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for i in range(5):
        url = f"https://w.example/{i}"
        headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.0")
        writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(PAGE), http_headers=headers))
        writer.write_record(writer.create_warc_record(url, "request", payload=io.BytesIO(b"GET /")))
    docs, bad, skipped = read(write(tmp_path, out.getvalue()))
    assert bad == [] and [d["url"] for d in docs] == [f"https://w.example/{i}" for i in range(5)]
    assert skipped == {"warc:request": 5}


# -- hostile files ----------------------------------------------------------------------------


def offsets(*parts: bytes) -> list[int]:
    """Where each part starts once they are joined."""
    starts, at = [], 0
    for part in parts:
        starts.append(at)
        at += len(part)
    return starts


def test_a_file_cut_inside_a_member_keeps_what_came_before(tmp_path):
    first, second = members(response()), members(response(url="https://b.example/"))
    docs, bad, _ = read(write(tmp_path, first + second[: len(second) // 2]))
    assert len(docs) == 1 and reasons(bad) == [("bad-input:warc-truncated-gzip", len(first))]
    cut = b"".join([response(), response()])
    docs, bad, _ = read(write(tmp_path, cut[: len(cut) - 30], "a.warc"))
    assert len(docs) == 1 and reasons(bad) == [("bad-input:warc-truncated", len(response()))]


@pytest.mark.parametrize("lie", [-7, 9, 5000])
def test_a_content_length_that_lies_is_quarantined_and_the_next_record_read(tmp_path, lie):
    good, other = response(url="https://a.example/"), response(url="https://c.example/")
    liar = response(url="https://b.example/")
    length = len(http(PAGE))
    liar = liar.replace(f"Content-Length: {length}\r\n".encode(), f"Content-Length: {length + lie}\r\n".encode())
    parts = [members(good), members(liar), members(other)]
    docs, bad, _ = read(write(tmp_path, b"".join(parts)))
    assert [d["url"] for d in docs] == ["https://a.example/", "https://c.example/"]
    assert reasons(bad) == [("bad-input:warc-length-mismatch", offsets(*parts)[1])]
    plain = [good, liar, other]
    docs, bad, _ = read(write(tmp_path, b"".join(plain), "a.warc"))
    assert [d["url"] for d in docs] == ["https://a.example/", "https://c.example/"]
    assert [row["line"] for row in bad] == [offsets(*plain)[1]]
    # a plain file's reader cannot tell a length that runs past the end from a cut file
    assert bad[0]["reason"] == ("bad-input:warc-truncated" if lie > len(other) else "bad-input:warc-length-mismatch")


@pytest.mark.parametrize("length", ["\u00b2", "\u0661\u0662", "-5", "12abc", ""])
def test_a_content_length_that_is_no_number_is_a_bad_header_and_the_next_record_read(tmp_path, length):
    """Only ASCII digits are a length: "²" passed ``str.isdigit`` and ``int`` raised,
    which ended the whole run."""
    liar = response(url="https://b.example/")
    liar = re.sub(rb"Content-Length: \d+", f"Content-Length: {length}".encode(), liar, count=1)
    parts = [members(response()), members(liar), members(response(url="https://c.example/"))]
    docs, bad, _ = read(write(tmp_path, b"".join(parts)))
    assert [d["url"] for d in docs] == ["https://example.com/", "https://c.example/"]
    assert reasons(bad) == [("bad-input:warc-bad-header", offsets(*parts)[1])]


def test_garbage_between_members_is_one_row_at_its_offset(tmp_path):
    garbage = b"\x00junk\x1f\x8b\x08\x00 not a member" * 20
    parts = [members(response()), garbage, members(response(url="https://b.example/"))]
    docs, bad, _ = read(write(tmp_path, b"".join(parts)))
    assert len(docs) == 2 and reasons(bad) == [("bad-input:warc-garbage", offsets(*parts)[1])]
    assert bad[0]["raw"] == garbage


def test_a_corrupt_member_is_quarantined_and_reading_resumes(tmp_path):
    member = bytearray(members(response(body=PAGE * 50)))
    member[len(member) // 2 : len(member) // 2 + 40] = b"\xff" * 40
    parts = [members(response()), bytes(member), members(response(url="https://b.example/"))]
    docs, bad, _ = read(write(tmp_path, b"".join(parts)))
    assert [d["url"] for d in docs] == ["https://example.com/", "https://b.example/"]
    assert reasons(bad) == [("bad-input:warc-corrupt-gzip", offsets(*parts)[1])]


def test_a_bad_http_header_and_a_binary_page_are_quarantined(tmp_path):
    binary = bytes(range(256)) * 40
    broken = record("response", b"\x00\x01garbage\r\n\r\n" + PAGE, Content_Type="application/http")
    bad_chunks = response(b"5\r\nab", Transfer_Encoding="chunked")
    parts = [members(broken), members(response(binary)), members(bad_chunks), members(response())]
    docs, bad, _ = read(write(tmp_path, b"".join(parts)))
    assert len(docs) == 1
    at = offsets(*parts)
    kinds = ["warc-bad-http", "warc-binary-body", "warc-bad-chunking"]
    assert reasons(bad) == [(f"bad-input:{kind}", at[i]) for i, kind in enumerate(kinds)]
    utf16 = response("<html>wide</html>".encode("utf-16"), content_type="text/html; charset=utf-16")
    docs, bad, _ = read(write(tmp_path, members(utf16)))
    assert len(docs) == 1 and bad == []  # NULs that its charset explains


def test_a_50_mb_page_is_quarantined_in_bounded_memory(tmp_path):
    huge = b"<html><body>" + b"<p>spam and eggs</p>\n" * (50 * 2**20 // 21) + b"</body></html>"
    parts = [members(response(huge)), members(response())]
    path = write(tmp_path, b"".join(parts))
    del huge, parts
    read(write(tmp_path, members(response()), "warm.warc.gz"))  # what a first read imports is no page's
    tracemalloc.start()
    try:
        docs, bad, _ = read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(docs) == 1 and reasons(bad) == [("bad-input:warc-oversized", 0)]
    assert peak < 24 << 20, peak  # the file's sha256 reads 16 MB blocks; the reader holds a few MB
    docs, bad, _ = read(write(tmp_path, response(PAGE * 100) + response(), "a.warc"), max_doc_bytes=4096)
    assert len(docs) == 1 and reasons(bad) == [("bad-input:warc-oversized", 0)]


def test_a_file_that_is_no_warc_is_rows_not_a_crash(tmp_path):
    docs, bad, _ = read(write(tmp_path, b"just some text\r\n\r\nmore", "a.warc"))
    assert docs == [] and reasons(bad) == [("bad-input:warc-bad-header", 0)]
    docs, bad, _ = read(write(tmp_path, gzip.compress(b"not a warc record at all"), "b.warc.gz"))
    assert docs == [] and reasons(bad) == [("bad-input:warc-corrupt-gzip", 0)]
    assert read(write(tmp_path, b"", "c.warc.gz")) == ([], [], {})


# -- spans --------------------------------------------------------------------------------------


def hostile_file() -> bytes:
    """Members of pages and skipped records, with garbage, a corrupt member, a liar."""
    corrupt = bytearray(members(response(body=PAGE * 30)))
    corrupt[len(corrupt) // 2] ^= 0xFF
    liar = response(url="https://liar.example/").replace(b"Content-Length: 1", b"Content-Length: 9")
    parts = [members(record("warcinfo", b"x: y\r\n"))]
    for i in range(12):
        parts.append(members(record("request", b"GET / HTTP/1.1\r\n\r\n"), response(url=f"https://p{i}.example/")))
        parts.append([b"", b"garbage \x1f\x8b\x08 bytes", bytes(corrupt), members(liar)][i % 4])
    return b"".join(parts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=30000), min_size=1, max_size=8, unique=True))
def test_any_cut_of_a_hostile_file_reads_exactly_the_whole_file(tmp_path, cuts):
    path = write(tmp_path, hostile_file())
    size = path.stat().st_size
    bounds = [0, *sorted(c for c in cuts if c < size), size]
    spans = [Span(start, end, start) for start, end in zip(bounds, bounds[1:])]
    whole = read(path)
    assert len(whole[0]) == 12 and len(whole[1]) == 9
    assert in_spans(path, spans) == whole


# -- a run ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("split_bytes", "group_bytes", "units"), [(0, 0, 2), (40000, 0, 12), (0, 1 << 22, 1)])
def test_prep_run_on_the_shared_warcs_reports_pages_and_skipped_records(
    tmp_path, shared_data, split_bytes, group_bytes, units
):
    """A unit per file, per span of a file, and one for both files."""
    run = f"[run]\nsplit_bytes = {split_bytes}\ngroup_bytes = {group_bytes}\n"
    config = write_config(tmp_path / "run.toml", f'{run}[sources.web]\npaths = ["{shared_data}/warc/*.warc.gz"]\n')
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert manifest["balance"] == {"input": 37, "output": 37, "rejected": 0}
    assert manifest["skipped"] == {"warc:metadata": 2, "warc:request": 37, "warc:resource": 4, "warc:warcinfo": 2}
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert written["skipped"] == manifest["skipped"]
    assert len(written["inputs"]) == 2 and all(entry["sha256"] and entry["bytes"] for entry in written["inputs"])
    assert len(list((tmp_path / "out" / "stats" / "segment-0" / "web").glob("*.json"))) == units
