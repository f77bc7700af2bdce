"""JSON lines compressed as the open corpora ship them (zstd, bz2, xz/lzma besides gzip):
told by magic bytes whatever the name, the same documents as the plain file, and a
damaged stream quarantined at the line where it broke with everything before it kept."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pyarrow as pa
import pytest
from conftest import SHARED_DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from test_readers import read_all

from pipeline.readers import detect_format

ZSTD = pa.Codec("zstd", compression_level=3)


def zstd(data: bytes) -> bytes:
    return bytes(ZSTD.compress(data, asbytes=True))


def zstd_frames(data: bytes, frames: int) -> bytes:
    """``data`` as several independent zstd frames, cut anywhere (a line may span two)."""
    step = -(-len(data) // frames)
    return b"".join(zstd(data[i : i + step]) for i in range(0, len(data), step))


COMPRESSORS = {
    "zstd": zstd,
    "zstd-frames": lambda data: zstd_frames(data, 7),
    "bz2": lambda data: bz2.compress(data, 9),
    "bz2-streams": lambda data: bz2.compress(data[: len(data) // 3]) + bz2.compress(data[len(data) // 3 :]),
    "xz": lzma.compress,
    "lzma": lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE),
}
KIND = {"zstd": "zstd", "zstd-frames": "zstd", "bz2": "bz2", "bz2-streams": "bz2", "xz": "xz", "lzma": "xz"}


@pytest.fixture(scope="module")
def web_text() -> bytes:
    """A real corpus file, decompressed: the reference every codec must reproduce."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    return gzip.decompress((SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz").read_bytes())


def documents(table: pa.Table) -> list[tuple[str, str]]:
    return list(zip(table["id"].to_pylist(), table["text"].to_pylist()))


@pytest.mark.parametrize("codec", COMPRESSORS)
def test_a_compressed_real_file_gives_the_documents_of_the_plain_one(web_text, codec, tmp_path):
    (tmp_path / "plain.jsonl").write_bytes(web_text)
    (tmp_path / "plain.jsonl.zst").write_bytes(COMPRESSORS[codec](web_text))  # the name does not matter
    plain, plain_bad, _ = read_all(tmp_path / "plain.jsonl", block_bytes=256 << 10)
    packed, packed_bad, extra = read_all(tmp_path / "plain.jsonl.zst", block_bytes=256 << 10)
    assert documents(packed) == documents(plain) and len(plain) > 500
    assert [(b["line"], b["reason"]) for b in packed_bad] == [(b["line"], b["reason"]) for b in plain_bad]
    assert extra["bytes"] == (tmp_path / "plain.jsonl.zst").stat().st_size  # the stored file's facts


def test_the_real_zstd_file_from_dolma_is_read(shared_data):
    table, bad, _ = read_all(shared_data / "web" / "dolma_formats_test.jsonl.zst", text_field="message")
    assert table["text"].to_pylist() == ["this is a test"] and bad == []


def test_a_plain_file_named_zst_is_read_as_it_is(tmp_path):
    (tmp_path / "a.jsonl.zst").write_bytes(b'{"text": "plain after all"}\n')
    table, bad, _ = read_all(tmp_path / "a.jsonl.zst")
    assert table["text"].to_pylist() == ["plain after all"] and bad == []


@pytest.mark.parametrize(
    "name", ["a.jsonl.zst", "a.json.zstd", "a.jsonl.bz2", "a.jsonl.xz", "a.ndjson.lzma", "a.jsonl.gz", "A.JSONL.ZST"]
)
def test_the_format_is_told_through_a_compression_suffix(name):
    assert detect_format(name) == "jsonl"


LINES = b"".join(b'{"id": "d%d", "text": "document number %d of a damaged stream"}\n' % (i, i) for i in range(20_000))


@pytest.mark.parametrize("codec", COMPRESSORS)
def test_a_truncated_stream_keeps_every_line_before_the_cut(codec, tmp_path):
    whole = COMPRESSORS[codec](LINES)
    (tmp_path / "cut.jsonl").write_bytes(whole[: len(whole) * 9 // 10])  # past bz2's first 900 KB block
    table, bad, _ = read_all(tmp_path / "cut.jsonl")
    kept = 0 if table is None else len(table)
    assert table is None or table["id"].to_pylist() == [f"d{i}" for i in range(kept)]  # a prefix, in order
    assert kept > 5_000  # what was decoded before the cut is kept, not thrown away with the step
    assert [(b["reason"], b["line"]) for b in bad] == [(f"bad-input:truncated-{KIND[codec]}", kept + 1)]


@pytest.mark.parametrize("codec", ["zstd", "bz2", "xz"])
def test_a_corrupt_stream_after_a_good_one_keeps_the_good_one(codec, tmp_path):
    good, broken = COMPRESSORS[codec](LINES[:39_000]), bytearray(COMPRESSORS[codec](LINES))
    for i in range(len(broken) // 2, len(broken) // 2 + 64):
        broken[i] ^= 0x55
    (tmp_path / "c.jsonl").write_bytes(good + bytes(broken))
    good_lines = LINES[:39_000].count(b"\n")
    table, bad, _ = read_all(tmp_path / "c.jsonl")
    ids = table["id"].to_pylist()
    assert ids[:good_lines] == [f"d{i}" for i in range(good_lines)]  # the whole first stream
    # What the corrupt block decoded to before its checksum failed: lines that are not
    # JSON (or not UTF-8) are quarantined one by one; the damage itself is the last row.
    assert all(b["reason"].startswith("bad-input:") for b in bad[:-1])
    assert bad[-1]["reason"] in {f"bad-input:corrupt-{KIND[codec]}", f"bad-input:truncated-{KIND[codec]}"}
    assert bad[-1]["line"] == len(ids) + len(bad)  # input = output + rejected


@settings(max_examples=25, deadline=None)
@given(cut=st.floats(0.0, 1.0), frames=st.integers(1, 9))
def test_a_zstd_stream_cut_anywhere_gives_a_prefix_and_one_row_where_it_broke(tmp_path_factory, cut, frames):
    data = LINES[:200_000]
    step = -(-len(data) // frames)
    pieces = [zstd(data[i : i + step]) for i in range(0, len(data), step)]
    whole = b"".join(pieces)
    ends = {sum(map(len, pieces[: k + 1])) for k in range(len(pieces))}  # where a cut leaves a valid stream
    size = 4 + int((len(whole) - 4) * cut)  # past the magic: fewer bytes are no zstd stream to tell
    path = tmp_path_factory.mktemp("cut") / "x.jsonl"
    path.write_bytes(whole[:size])
    table, bad, _ = read_all(path, block_bytes=64 << 10)
    kept = 0 if table is None else len(table)
    assert kept == 0 or table["id"].to_pylist() == [f"d{i}" for i in range(kept)]
    if size in ends:  # nothing damaged: at most the last line is cut (a frame may end mid-line)
        assert [b["line"] for b in bad] in ([], [kept + 1])
    else:
        assert [b["line"] for b in bad] == [kept + 1]  # input = output + rejected
        assert bad[0]["reason"] in {"bad-input:truncated-zstd", "bad-input:corrupt-zstd"}


@pytest.mark.parametrize("magic", [b"\x28\xb5\x2f\xfd", b"BZh9", b"\xfd7zXZ\x00"])
def test_garbage_behind_a_codecs_magic_is_one_row_and_nothing_kept(magic, tmp_path):
    (tmp_path / "g.jsonl").write_bytes(magic + bytes(range(256)) * 64)
    table, bad, _ = read_all(tmp_path / "g.jsonl")
    assert table is None and len(bad) == 1 and bad[0]["line"] == 1
    assert bad[0]["reason"].rsplit("-", 1)[0] in {"bad-input:corrupt", "bad-input:truncated"}


def _frames_with_damage(data: bytes, frames: int, damaged: tuple[int, ...], false_magic: bool):
    """``data`` as zstd frames cut anywhere, those numbered ``damaged`` corrupted just past
    their header (so they fail to decode); with ``false_magic``, a copy of a real frame's
    header in the middle of each, a candidate that must be passed over. Returns the file,
    each frame's compressed start and decompressed range."""
    step = -(-len(data) // frames)
    pieces = [bytearray(zstd(data[i : i + step])) for i in range(0, len(data), step)]
    for k in damaged:
        pieces[k][20:60] = bytes(range(40))
        if false_magic:
            middle = len(pieces[k]) // 2
            pieces[k][middle : middle + 24] = pieces[0][:24]
    starts = [sum(map(len, pieces[:k])) for k in range(len(pieces) + 1)]
    ranges = [(i, min(i + step, len(data))) for i in range(0, len(data), step)]
    return b"".join(pieces), starts, ranges


@pytest.mark.parametrize(
    "damaged, false_magic", [((3,), False), ((3,), True), ((1, 4), False), ((1, 4), True), ((0,), False)]
)
def test_a_damaged_zstd_frame_loses_its_own_lines_and_reading_resumes_at_the_next(
    web_text, tmp_path, damaged, false_magic
):
    """One corrupt frame lost every later frame: 351 of 697 documents read, the rest of the
    file "unreadable". Now its compressed bytes are one ledger row and the next frame that
    decodes is read on; a line begun in a damaged frame and ended in the next is quarantined."""
    (tmp_path / "plain.jsonl").write_bytes(web_text)
    whole, starts, ranges = _frames_with_damage(web_text, 7, damaged, false_magic)
    (tmp_path / "damaged.jsonl.zst").write_bytes(whole)
    plain, _, _ = read_all(tmp_path / "plain.jsonl")
    table, bad, _ = read_all(tmp_path / "damaged.jsonl.zst", block_bytes=64 << 10)
    line_starts = [0, *(i + 1 for i, byte in enumerate(web_text) if byte == 10)]
    offset_of = {json.loads(web_text[a:b])["id"]: (a, b) for a, b in zip(line_starts, line_starts[1:])}
    lost = [ranges[k] for k in damaged]
    # A line is lost when it touches a damaged frame's bytes; every other one is read.
    expected = [
        doc
        for doc in documents(plain)
        if not any(a < end and start < b for a, b in [offset_of[doc[0]]] for start, end in lost)
    ]
    assert documents(table) == expected
    damage = [b for b in bad if b["reason"] == "bad-input:corrupt-zstd"]
    assert [row["detail"].split("; ", 1)[1] for row in damage] == [
        f"compressed bytes {starts[k]}-{starts[k + 1]} skipped, reading resumed after them; "
        f"later lines are located as @{starts[k + 1]}:<line>, counted from there"
        for k in damaged
    ]
    # Each other row is an empty text (as in the plain file) or the fragment of a line begun in a damaged frame.
    fragments = [b for b in bad if b["reason"] not in ("bad-input:corrupt-zstd", "bad-input:empty-text")]
    resumed = {(f"damaged.jsonl.zst@{starts[k + 1]}", 1) for k in damaged}  # the first line after a damaged frame
    assert {(b["file"], b["line"]) for b in fragments} <= resumed
