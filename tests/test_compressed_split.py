"""zstd files of several frames cut into units: runs of whole frames, each read in the
very blocks and batches the whole file is (lines numbered as in the whole file), found
from the frame and block headers or the seekable format's seek table, and damage in one
frame quarantined at the line the whole file's reader gives, with everything before kept."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pytest
from conftest import SHARED_DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compressed_jsonl import zstd
from test_split_units import read_pieces

from pipeline.readers.splits import plan_spans
from pipeline.readers.zstd_frames import SEEKABLE_MAGIC, frame_starts

SKIPPABLE = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"skip!"


def frames_of(data: bytes, cuts: list[int], skippable: bool = False) -> tuple[bytes, list[bytes]]:
    """``data`` as one zstd frame per piece between ``cuts`` (anywhere, mid-line too),
    with a skippable frame after each when asked; and the pieces compressed."""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    frames = [zstd(data[a:b]) for a, b in zip(bounds, bounds[1:])]
    return b"".join(f + (SKIPPABLE if skippable else b"") for f in frames), frames


def seekable(frames: list[bytes], decompressed: list[int], checksums: bool = False) -> bytes:
    """The frames followed by the seekable format's seek table (a skippable frame)."""
    entry = 12 if checksums else 8
    entries = b"".join(
        len(f).to_bytes(4, "little") + n.to_bytes(4, "little") + (b"\0\0\0\0" if checksums else b"")
        for f, n in zip(frames, decompressed)
    )
    descriptor = bytes([0x80 if checksums else 0])
    footer = len(frames).to_bytes(4, "little") + descriptor + SEEKABLE_MAGIC.to_bytes(4, "little")
    table = (0x184D2A5E).to_bytes(4, "little") + (len(frames) * entry + 9).to_bytes(4, "little") + entries + footer
    return b"".join(frames) + table


def assert_pieces_read_as_the_whole(path, split_bytes: int, block_bytes: int, least: int = 2) -> list:
    spans = plan_spans(path, "jsonl", split_bytes, block_bytes)
    assert spans is not None and len(spans) >= least
    assert spans[0].start == 0 and all(a.end == b.start for a, b in zip(spans, spans[1:]))
    assert spans[-1].end == path.stat().st_size
    whole = read_pieces(path, "jsonl", [None], block_bytes=block_bytes)
    docs, bad, extra = read_pieces(path, "jsonl", spans, block_bytes=block_bytes)
    assert len(docs) == len(whole[0]) and all(a.equals(b) for a, b in zip(docs, whole[0]))  # batch for batch
    assert bad == whole[1] and extra == whole[2] and extra["bytes"] == path.stat().st_size
    return spans


LINE = st.one_of(
    st.builds(lambda n, t: json.dumps({"id": n, "text": t}).encode(), st.integers(0, 10**6), st.text(min_size=1)),
    st.builds(lambda t: json.dumps({"text": t * 40, "meta": {"k": 1}}).encode(), st.text(min_size=1, max_size=30)),
    st.sampled_from([b"", b"   ", b"not json", b'{"text": ""}', b'{"text": "\xff"}', b'["a list"]']),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(LINE, min_size=1, max_size=120),
    cuts=st.lists(st.floats(0, 1), max_size=12),
    skippable=st.booleans(),
    last_newline=st.booleans(),
    split_bytes=st.sampled_from([64, 300, 1000]),
    block_bytes=st.sampled_from([64, 256, 1024]),
)
def test_any_frames_in_any_pieces_read_as_the_whole_file(
    tmp_path, lines, cuts, skippable, last_newline, split_bytes, block_bytes
):
    data = b"\n".join(lines) + (b"\n" if last_newline else b"")
    compressed, _ = frames_of(data, [int(c * len(data)) for c in cuts], skippable)
    path = tmp_path / "f.jsonl.zst"
    path.write_bytes(compressed)
    spans = plan_spans(path, "jsonl", split_bytes, block_bytes)
    if spans is None:  # one frame, or no cut that starts a block: one unit, read whole
        return
    assert_pieces_read_as_the_whole(path, split_bytes, block_bytes)


@pytest.fixture(scope="module")
def web_text() -> bytes:
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    return gzip.decompress((SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz").read_bytes())


def test_a_real_file_of_many_frames_reads_in_pieces_as_a_whole(web_text, tmp_path):
    compressed, _ = frames_of(web_text, list(range(0, len(web_text), 100_000)))  # frames end mid-line
    path = tmp_path / "ccmain.jsonl.zst"
    path.write_bytes(compressed)
    spans = assert_pieces_read_as_the_whole(path, 150_000, 64 << 10, least=6)
    assert [s.first_line for s in spans] == sorted({s.first_line for s in spans})
    assert any(s.skip for s in spans) and all(a.tail == b.skip for a, b in zip(spans, spans[1:]))


def test_one_frame_and_other_codecs_are_one_unit(web_text, tmp_path):
    one = tmp_path / "one.jsonl.zst"
    one.write_bytes(zstd(web_text))
    two = tmp_path / "two.jsonl.gz"
    two.write_bytes(gzip.compress(web_text[:100_000]) + gzip.compress(web_text[100_000:]))
    assert plan_spans(one, "jsonl", 1000, 1000) is None and plan_spans(two, "jsonl", 1000, 1000) is None


def test_a_seek_table_gives_the_frames_and_one_that_does_not_add_up_is_walked_past(web_text, tmp_path):
    data = web_text[:600_000]
    walked, frames = frames_of(data, [150_000, 300_000, 450_000])
    path = tmp_path / "s.jsonl.zst"
    starts = [0, *(sum(map(len, frames[: k + 1])) for k in range(len(frames)))]
    for checksums in (False, True):
        path.write_bytes(seekable(frames, [150_000] * 4, checksums))
        assert frame_starts(path) == [*starts, path.stat().st_size]  # the table is a frame of its own
        assert_pieces_read_as_the_whole(path, 50_000, 16 << 10, least=3)
    wrong = bytearray(seekable(frames, [150_000] * 4))
    wrong[-17 - 8 * 4 + 8] ^= 1  # the first frame's size in the table, now one byte off
    path.write_bytes(bytes(wrong))
    assert frame_starts(path) == [*starts, len(wrong)]  # found by walking the headers instead
    path.write_bytes(walked)
    assert frame_starts(path) == [*starts[:-1], len(walked)]


def test_a_file_cut_inside_its_last_frame_is_one_unit(web_text, tmp_path):
    compressed, _ = frames_of(web_text, list(range(0, len(web_text), 200_000)))
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(compressed[:-1000])
    assert frame_starts(path) == [] and plan_spans(path, "jsonl", 100_000, 64 << 10) is None


def damaged(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    for i in range(at, at + 64):
        out[i] ^= 0x55
    return bytes(out)


def decoder_fails(data: bytes) -> bool:
    try:
        pa.input_stream(pa.BufferReader(data), compression="zstd").read()
    except OSError:
        return True
    return False


def test_damage_in_one_frame_is_quarantined_where_the_whole_file_breaks_and_the_rest_is_read(web_text, tmp_path):
    compressed, _ = frames_of(web_text, list(range(0, len(web_text), 300_000)))
    path = tmp_path / "d.jsonl.zst"
    path.write_bytes(compressed)
    spans = plan_spans(path, "jsonl", 300_000, 64 << 10)  # planned before the damage (else: one unit)
    assert spans is not None and len(spans) >= 3
    inside = range((2 * spans[1].start + spans[1].end) // 3, spans[1].end - 100, 5000)  # in the second piece
    failing = next(at for at in inside if decoder_fails(damaged(compressed, at)))
    quiet = next(at for at in inside if not decoder_fails(damaged(compressed, at)))  # decodes to garbage
    for at in (failing, quiet):
        path.write_bytes(damaged(compressed, at))
        whole_docs, whole_bad, _ = read_pieces(path, "jsonl", [None], block_bytes=64 << 10)
        docs, bad, _ = read_pieces(path, "jsonl", spans, block_bytes=64 << 10)
        lines = [line for batch in docs for line in batch["_line"].to_pylist()]
        # The whole file's lines before any damage, and those after it (located by where
        # reading resumed: ``<file>@<offset>``, numbered from there).
        whole_lines = [
            line for batch in whole_docs if "_file" not in batch.schema.names for line in batch["_line"].to_pylist()
        ]
        resumed = {f for batch in whole_docs if "_file" in batch.schema.names for f in batch["_file"].to_pylist()}
        broken = [b for b in whole_bad if b["reason"] != "bad-input:empty-text"]  # the input has some of those
        assert broken and broken[0]["line"] > spans[1].first_line  # the piece's lines before the damage are kept
        if at == failing:
            assert broken[0]["reason"] in {"bad-input:corrupt-zstd", "bad-input:truncated-zstd"}
            # The whole file reads on at the next frame (locating its lines from there: how
            # many the damaged frame held is unknown); a piece, planned before the damage,
            # stops at it, and the pieces after it read their own frames.
            assert len(resumed) == 1 and resumed.pop().startswith("d.jsonl.zst@")
        else:
            assert not resumed
        cut = broken[0]["line"] if at == failing else whole_lines[-1] + 1
        before = [line for line in whole_lines if line < cut]
        # Everything before the damage, as the whole file reads it, and the same rows for it.
        assert lines[: len(before)] == before if at == failing else lines == whole_lines
        before_bad = {(b["line"], b["reason"]) for b in whole_bad if b["line"] <= cut and b["file"] == path.name}
        assert before_bad <= {(b["line"], b["reason"]) for b in bad}
        # The pieces after the damaged one are read to the end: their frames do not depend on it.
        assert lines[-1] == web_text.count(b"\n")
