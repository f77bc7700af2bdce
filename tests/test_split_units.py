"""Units smaller than a file: where files are cut, that each piece reads as its part of
the whole file would, and that a run cut in pieces writes the whole file's documents,
ledger and tokens, for any worker count, and resumes."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import EVERY_PHASE_STAGES, SAMPLE, write_config
from test_run import tree_digest

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline
from pipeline.readers import InputSpec, read_input
from pipeline.readers.common import StrictModeError
from pipeline.readers.splits import even_step, parsed_bytes, plan_spans

# The bundled CommonCrawl sample as plain JSON lines, with lines a reader must quarantine
# or skip, so that pieces carry ledger rows and blank lines too.
BROKEN = b"not json\n"


def sample_lines(count: int = 150) -> list[bytes]:
    return gzip.decompress((SAMPLE / "web" / "ccmain.jsonl.gz").read_bytes()).splitlines(keepends=True)[:count]


def plain_sample(path, broken_at: int = 40):
    lines = sample_lines()
    lines[broken_at:broken_at] = [BROKEN, b"\n", b"   \n"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines) + b'{"text": "the last line has no newline"}')
    return path


def read_pieces(path, fmt: str, spans, **options) -> tuple[list[pa.RecordBatch], list[dict], dict]:
    docs, bad, extra = [], [], {}
    for span in spans:
        for chunk in read_input(path, InputSpec(source="web", file_key=path.name, span=span, **options), fmt):
            docs += [chunk.docs] if chunk.docs is not None else []
            bad += chunk.bad.to_pylist() if chunk.bad is not None else []
            extra.update(chunk.extra)
    return docs, bad, extra


def test_jsonl_cuts_fall_at_the_first_line_start_past_each_step(tmp_path):
    path = plain_sample(tmp_path / "a.jsonl")
    data = path.read_bytes()
    spans = plan_spans(path, "jsonl", split_bytes=5000, block_bytes=1000)
    step = even_step(len(data), 5000, 1000)
    assert step % 1000 == 0 and step <= 5000
    assert spans[0].start == 0 and spans[-1].end == len(data) and len(spans) > 10
    for before, span in zip(spans, spans[1:]):
        assert before.end == span.start > before.start
        nominal = (before.start // step + 1) * step  # the first multiple past the piece's start
        assert data.rfind(b"\n", 0, span.start) == span.start - 1 and data.find(b"\n", nominal - 1) == span.start - 1
    assert [s.first_line for s in spans] == [data.count(b"\n", 0, s.start) + 1 for s in spans]
    # A size below a block is one block.
    assert plan_spans(path, "jsonl", 1, 1000) == plan_spans(path, "jsonl", 1000, 1000)


def test_jsonl_pieces_are_even():
    """As many pieces as split_bytes asks for, of equal size: no short last piece that
    leaves a worker idle (222 MB at 64 MB: four of 56 MB, not 64+64+64+30)."""
    mb = 1 << 20
    assert even_step(222 * mb, 64 * mb, 4 * mb) == 56 * mb
    assert even_step(128 * mb, 64 * mb, 4 * mb) == 64 * mb
    for size in (1, 999, 5000, 123_457, 10**9):
        for split in (1000, 4096, 65_536):
            step = even_step(size, split, 1000)
            pieces = -(-size // step)
            asked = -(-size // split)
            assert step % 1000 == 0 and pieces <= asked
            assert step < -(-size // asked) + 1000  # the equal share, rounded up to a block


def test_files_read_whole(tmp_path):
    path = plain_sample(tmp_path / "a.jsonl")
    gzipped = tmp_path / "a.jsonl.gz"
    gzipped.write_bytes(gzip.compress(path.read_bytes()))
    assert plan_spans(gzipped, "jsonl", 1000, 1000) is None  # gzip is never cut
    assert plan_spans(path, "jsonl", 0, 1000) is None  # split_bytes = 0
    assert plan_spans(path, "jsonl", path.stat().st_size, 1000) is None  # not larger than a piece
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"PAR1" * 5000)
    assert plan_spans(garbage, "parquet", 1000, 1000) is None  # the reader quarantines it whole


def test_a_gzip_file_ranks_by_the_bytes_it_inflates_to(tmp_path):
    """Units are handed out largest first by the bytes a reader parses: a gzip file's
    trailer says them, so a file that compresses well is not taken for a small one."""
    path = plain_sample(tmp_path / "a.jsonl")
    text = path.read_bytes()
    gzipped = tmp_path / "a.jsonl.gz"
    gzipped.write_bytes(gzip.compress(text))
    stored = gzipped.stat().st_size
    assert stored < len(text) and parsed_bytes(gzipped, stored) == len(text)
    assert parsed_bytes(path, len(text)) == len(text)  # plain: its size
    two = tmp_path / "two.jsonl.gz"  # members: the last one's size, never below the file's
    two.write_bytes(gzip.compress(text) + gzip.compress(b"\n"))
    assert parsed_bytes(two, two.stat().st_size) == two.stat().st_size
    assert parsed_bytes(tmp_path / "gone.gz", 7) == 7
    assert parsed_bytes("s3://bucket/a.jsonl.gz", 7) == 7  # remote: not opened


def write_parquet_and_arrow(tmp_path) -> dict[str, object]:
    """Part of the sample as Parquet (many row groups) and Arrow (a stream and a file)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{"id": r["id"], "text": r["text"]} for r in map(json.loads, sample_lines())])
    parquet = tmp_path / "a.parquet"
    pq.write_table(table, parquet, row_group_size=16)
    stream, file = tmp_path / "stream.arrow", tmp_path / "file.arrow"
    with pa.ipc.new_stream(stream, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    with pa.ipc.new_file(file, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    return {"parquet": parquet, "arrow-stream": stream, "arrow-file": file}


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "arrow-stream", "arrow-file"])
def test_pieces_read_exactly_as_the_whole_file(tmp_path, kind):
    if kind == "jsonl":
        path, options = plain_sample(tmp_path / "a.jsonl"), {"block_bytes": 1000}
    else:
        path, options = write_parquet_and_arrow(tmp_path)[kind], {"batch_rows": 10}
    fmt = kind.split("-")[0]
    spans = plan_spans(path, fmt, split_bytes=3000, block_bytes=1000)
    assert len(spans) > 3
    whole = read_pieces(path, fmt, [None], **options)
    docs, bad, extra = read_pieces(path, fmt, spans, **options)
    assert len(docs) == len(whole[0]) and all(a.equals(b) for a, b in zip(docs, whole[0]))  # batch for batch
    assert bad == whole[1] and extra == whole[2] and extra["bytes"] == path.stat().st_size
    if kind == "jsonl":
        assert {b["reason"] for b in bad} == {"bad-input:broken-json", "bad-input:empty-text"}
    # Only the piece at the file's start reports the file's size and checksum.
    assert [read_pieces(path, fmt, [s], **options)[2] != {} for s in spans] == [True] + [False] * (len(spans) - 1)


def run_config(tmp_path, split_bytes: int) -> object:
    plain, parquet = tmp_path / "in" / "ccmain.jsonl", tmp_path / "in" / "a.parquet"
    if not plain.exists():
        plain_sample(plain)
        write_parquet_and_arrow(tmp_path / "in")
    return write_config(
        tmp_path / f"split{split_bytes}.toml",
        f"""
[run]
split_bytes = {split_bytes}
block_bytes = 4096
[sources.web]
paths = ["{plain}"]
[sources.pq]
paths = ["{parquet}"]
{EVERY_PHASE_STAGES}""",
    )


def rows(out, folder: str, pattern: str = "*.parquet") -> list[dict]:
    """The rows of docs/ or rejects/ files, file by file in name order (the input's order)."""
    return [row for path in sorted((out / folder).rglob(pattern)) for row in pq.read_table(path).to_pylist()]


def ledger(out) -> list[list[dict]]:
    """The ledger rows of each segment of the stage chain (``<unit>.s<k>[.<part>].parquet``)."""
    return [rows(out, "rejects", f"*.s{k}*.parquet") for k in range(3)]


def tokens(out) -> bytes:
    """The token shards' contents, concatenated in name order."""
    return b"".join(path.read_bytes() for path in sorted((out / "tokens").rglob("*.bin")))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple]:
    """One input folder run whole, and cut in pieces on 1 and 2 workers."""
    tmp = tmp_path_factory.mktemp("split")
    found = {}
    for name, split_bytes, workers in (("whole", 0, 1), ("split", 16384, 1), ("split2", 16384, 2)):
        config = run_config(tmp, split_bytes)
        found[name] = (tmp / name, run_pipeline(config, tmp / name, workers=workers, quiet=True), config)
    return found


def test_a_run_in_pieces_writes_the_whole_files_output_for_any_worker_count(runs):
    (whole, whole_manifest, _), (split, split_manifest, _), (split2, _, _) = runs.values()
    assert tree_digest(split) == tree_digest(split2)
    pieces = sorted(p.name for p in (split / "stats" / "segment-0" / "web").iterdir())
    assert len(pieces) > 10 and pieces[1] == "00000-ccmain.jsonl.part-00001.json"
    assert rows(split, "docs") == rows(whole, "docs")
    assert ledger(split) == ledger(whole)
    assert tokens(split) == tokens(whole) != b""
    assert split_manifest["stages"]["dedup"]["rejected"] and json.loads((split / "manifest.json").read_text())["inputs"]
    # The manifest too, but for the config it echoes.
    assert {k: v for k, v in split_manifest.items() if not k.startswith("config")} == {
        k: v for k, v in whole_manifest.items() if not k.startswith("config")
    }


def test_a_run_stopped_between_pieces_resumes_to_the_same_bytes(runs, tmp_path):
    clean, _, config = runs["split"]
    stopped = tmp_path / "stopped"
    with pytest.raises(StrictModeError, match=r"(ccmain.jsonl|a.parquet):\d+"):  # a bad line, in a later piece
        run_pipeline(config, stopped, workers=1, quiet=True, strict=True)
    assert list((stopped / "stats" / "segment-0").rglob("*.json")) and not (stopped / "manifest.json").exists()
    run_pipeline(config, stopped, workers=1, quiet=True)
    assert tree_digest(clean) == tree_digest(stopped)


@pytest.mark.parametrize("key", ["split_bytes", "group_bytes"])
@pytest.mark.parametrize("value", ["-1", '"64MB"', "true", "1.5"])
def test_a_bad_split_or_pack_size_is_a_one_line_error(tmp_path, key, value):
    config = write_config(tmp_path / "c.toml", f'[run]\n{key} = {value}\n[sources.web]\npaths = ["*.toml"]\n')
    with pytest.raises(ConfigError, match=rf"^{config}: \[run\] {key} must be a non-negative integer, not .+$"):
        load_config(config)


def test_workers_take_the_largest_units_first(runs):
    """A phase ends when its last unit does: handing out the large ones first leaves small
    ones for the end. A file's pieces share its size; equal sizes keep the planned order."""
    from pipeline.engine.run import _input_sizes, _largest_first, _planned_units

    out, _, config = runs["split"]  # run on one worker: units ran one at a time, in order
    units = _planned_units(load_config(config))
    sizes = _input_sizes(units)
    plain = [unit for unit in units if unit.source == "web"]
    assert len(plain) > 2
    assert {sizes["web", unit.name] for unit in plain} == {plain[0].files[0].path.stat().st_size / len(plain)}
    order = _largest_first(units, sizes)
    assert [sizes[u.source, u.name] for u in order] == sorted(sizes.values(), reverse=True)
    assert [u for u in order if u.source == "web"] == plain
    markers = sorted((out / "stats" / "segment-0").rglob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    assert [(path.parent.name, path.stem) for path in markers] == [(u.source, u.name) for u in order]
