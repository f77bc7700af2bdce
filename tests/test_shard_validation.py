"""The loader never reads garbage: a damaged shard fails at open with a ``ShardError``
naming the file and the problem, never reads on silently, never crashes the process.

Shards are written with ``ShardWriter`` plus a sidecar, then damaged one way per test.
Some cases run in a subprocess, so that a segfault (or any signal) shows up as a failed
test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.commands.shards import shards_group
from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.shard_merge import merge_shards
from pipeline.formats.token_shards import (
    HEADER_BYTES,
    ShardError,
    ShardWriter,
    list_shards,
    sidecar,
    sidecar_path,
    write_sidecar,
)
from pipeline.kernels.hashing import file_sha256
from pipeline.loader import TokenDataset

REPO = Path(__file__).resolve().parents[1]

# int32 tokens, some above uint16's range, so a uint16 reading is visibly wrong.
DOCS = [np.arange(1, 6), np.arange(100_000, 100_003), np.array([7]), np.arange(20, 30)]
N = len(DOCS)  # sequences, one per document
SIZES_AT = HEADER_BYTES
POINTERS_AT = HEADER_BYTES + 4 * N
DOC_INDEX_AT = HEADER_BYTES + 12 * N


def make_shard(folder: Path, name: str = "shard-000", dtype=np.int32, docs=DOCS) -> Path:
    """A small shard as the tokenize stage writes it: .bin, .idx and a sidecar with its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / name
    writer = ShardWriter(f"{prefix}.bin", f"{prefix}.idx", np.dtype(dtype))
    writer.add_documents(np.concatenate(docs), np.array([len(d) for d in docs]))
    writer.close()
    tokenizer = SimpleNamespace(name="test", spec="test", vocab_size=200_000, vocab_sha256="0" * 64)
    meta = sidecar(
        tokenizer=tokenizer,
        dtype=dtype,
        eod_id=0,
        bos_id=None,
        documents=writer.documents,
        tokens=writer.tokens,
        bin_sha256=writer.bin_sha256,
    )
    write_sidecar(sidecar_path(prefix), meta)
    return prefix


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def files(prefix: Path) -> SimpleNamespace:
    return SimpleNamespace(bin=Path(f"{prefix}.bin"), idx=Path(f"{prefix}.idx"), json=sidecar_path(prefix))


def edit_sidecar(prefix: Path, **changes) -> None:
    path = sidecar_path(prefix)
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


# name: (damage, the file the message starts with, what it must say)
CASES = {
    "bin cut to half": (
        lambda f: truncate(f.bin, f.bin.stat().st_size // 2),
        ".bin",
        r"38 bytes, but its index shard-000\.idx lists 19 int32 tokens \(76 bytes\)",
    ),
    "bin cut by 4 bytes": (
        lambda f: truncate(f.bin, f.bin.stat().st_size - 4),
        ".bin",
        r"72 bytes, but its index .* lists 19 int32 tokens",
    ),
    "bin emptied": (lambda f: truncate(f.bin, 0), ".bin", r"0 bytes, but its index .* lists 19 int32 tokens"),
    "bin deleted": (lambda f: f.bin.unlink(), ".bin", r"missing, though its index .* lists 19 tokens"),
    "uint16 code on int32 data": (
        lambda f: patch(f.idx, 17, b"\x08"),
        ".idx",
        r"dtype is 'uint16' in the index but 'int32' in the sidecar shard-000\.json",
    ),
    "uint16 code, no sidecar": (
        lambda f: (patch(f.idx, 17, b"\x08"), f.json.unlink()),
        ".idx",
        r"pointer of sequence 1 is 20, not the running byte offset 10 .*"
        r"\(they fit 4-byte tokens: the dtype code, uint16, is wrong\)",
    ),
    "negative length": (
        lambda f: patch(f.idx, SIZES_AT + 4, struct.pack("<i", -5)),
        ".idx",
        r"sequence 1 has a negative length \(-5\)",
    ),
    "huge first length": (
        lambda f: patch(f.idx, SIZES_AT, struct.pack("<i", 2**31 - 1)),
        ".idx",
        r"pointer of sequence 1 is 20, not the running byte offset 8589934588",
    ),
    "huge last length": (
        lambda f: patch(f.idx, SIZES_AT + 12, struct.pack("<i", 2**31 - 1)),
        ".idx",
        r"tokens is 2147483656 in the index but 19 in the sidecar",
    ),
    "huge last length, no sidecar": (
        lambda f: (patch(f.idx, SIZES_AT + 12, struct.pack("<i", 2**31 - 1)), f.json.unlink()),
        ".bin",
        r"76 bytes, but its index .* lists 2147483656 int32 tokens",
    ),
    "pointers not running offsets": (
        lambda f: patch(f.idx, POINTERS_AT + 16, struct.pack("<q", 36)),
        ".idx",
        r"pointer of sequence 2 is 36, not the running byte offset 32",
    ),
    "garbage pointer": (
        lambda f: patch(f.idx, POINTERS_AT + 24, struct.pack("<q", -(2**62))),
        ".idx",
        r"pointer of sequence 3 is -4611686018427387904",
    ),
    "idx truncated": (
        lambda f: truncate(f.idx, f.idx.stat().st_size - 8),
        ".idx",
        r"index is 114 bytes, but its header counts 4 sequences and 5 document-index entries "
        r"\(122 bytes\): truncated or corrupt",
    ),
    "idx cut inside the header": (lambda f: truncate(f.idx, 20), ".idx", r"truncated index \(20 bytes"),
    "idx emptied": (lambda f: truncate(f.idx, 0), ".idx", r"truncated index \(0 bytes"),
    "idx deleted": (lambda f: f.idx.unlink(), ".idx", r"missing"),
    "bad magic": (lambda f: patch(f.idx, 0, b"NOTMAGIC!"), ".idx", r"bad magic"),
    "bad version": (lambda f: patch(f.idx, 9, struct.pack("<Q", 7)), ".idx", r"unsupported index version 7"),
    "unknown dtype code": (lambda f: patch(f.idx, 17, b"\x63"), ".idx", r"unknown dtype code 99"),
    "huge sequence count": (
        lambda f: patch(f.idx, 18, struct.pack("<Q", 2**62)),
        ".idx",
        r"header counts 4611686018427387904 sequences",
    ),
    "'negative' document count": (
        lambda f: patch(f.idx, 26, struct.pack("<q", -1)),
        ".idx",
        r"18446744073709551615 document-index entries",
    ),
    "document index not monotone": (
        lambda f: patch(f.idx, DOC_INDEX_AT + 8, struct.pack("<2q", 2, 1)),
        ".idx",
        r"document index is not monotone \(entry 2 = 1 after 2\)",
    ),
    "document index past the sequences": (
        lambda f: patch(f.idx, DOC_INDEX_AT + 32, struct.pack("<q", 9)),
        ".idx",
        r"document index runs from 0 to 9, not from 0 to the sequence count 4",
    ),
    "document index not from 0": (
        lambda f: patch(f.idx, DOC_INDEX_AT, struct.pack("<q", 1)),
        ".idx",
        r"document index runs from 1 to 4",
    ),
    "sidecar counts disagree": (
        lambda f: edit_sidecar(f.bin.with_suffix(""), documents=99),
        ".idx",
        r"documents is 4 in the index but 99 in the sidecar",
    ),
    "sidecar unreadable": (lambda f: f.json.write_text("{not json"), ".json", r"unreadable sidecar"),
    "sidecar nested too deep": (lambda f: f.json.write_text("[" * 100_000), ".json", r"unreadable sidecar"),
    # A sidecar's fields are copied into mix.json and frame the loader's documents.
    "sidecar EOD of the wrong type": (
        lambda f: edit_sidecar(f.bin.with_suffix(""), eod_id="x"),
        ".json",
        r"eod_id is a string, expected an integer or null",
    ),
    "sidecar vocabulary not positive": (
        lambda f: edit_sidecar(f.bin.with_suffix(""), vocab_size=-1),
        ".json",
        r"vocab_size -1 is not positive",
    ),
    "sidecar EOD outside the vocabulary": (
        lambda f: edit_sidecar(f.bin.with_suffix(""), eod_id=200_000),
        ".json",
        r"eod_id 200000 is outside the vocabulary",
    ),
    "sidecar dtype not a token dtype": (
        lambda f: edit_sidecar(f.bin.with_suffix(""), dtype="float64"),
        ".json",
        r"dtype 'float64' is not a token dtype",
    ),
}


def damaged(folder: Path, case: str) -> tuple[Path, str]:
    """A folder of two shards, the second damaged as ``case`` says; the file at fault and the pattern."""
    make_shard(folder, "shard-000")
    prefix = make_shard(folder / "sub", "shard-000")
    damage, suffix, pattern = CASES[case]
    damage(files(prefix))
    return Path(f"{prefix}{suffix}"), pattern


def assert_names(error: Exception, path: Path, pattern: str) -> None:
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert re.search(pattern, message), message


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_shard_fails_at_open_naming_file_and_problem(tmp_path, case):
    path, pattern = damaged(tmp_path / "data", case)
    with pytest.raises(ShardError) as caught:
        TokenDataset(tmp_path / "data", seq_len=3)
    assert isinstance(caught.value, ValueError)
    assert_names(caught.value, path, pattern)


def test_intact_shards_open_and_read_back(tmp_path):
    prefix = make_shard(tmp_path)
    shard = IndexedShard(prefix, verify=True)
    assert [shard[i].tolist() for i in range(len(shard))] == [d.tolist() for d in DOCS]
    dataset = TokenDataset(tmp_path, seq_len=3, shuffle_block=1, verify=True)
    assert len(dataset) == (sum(len(d) for d in DOCS) - 1) // 3


def test_verify_catches_a_flipped_byte_the_size_checks_cannot(tmp_path):
    prefix = make_shard(tmp_path)
    patch(files(prefix).bin, 5, b"\xff")
    TokenDataset(tmp_path, seq_len=3)  # same size: the cheap checks pass
    with pytest.raises(ShardError) as caught:
        TokenDataset(tmp_path, seq_len=3, verify=True)
    assert_names(caught.value, files(prefix).bin, r"sha256 [0-9a-f]{64} differs from [0-9a-f]{64} in its sidecar")


def test_verify_without_a_sidecar_checksum_is_an_error(tmp_path):
    prefix = make_shard(tmp_path)
    IndexedShard(prefix, verify=True)
    edit_sidecar(prefix, bin_sha256=None)
    with pytest.raises(ShardError) as caught:
        IndexedShard(prefix, verify=True)
    assert_names(caught.value, files(prefix).json, r"has no bin_sha256")
    files(prefix).json.unlink()
    IndexedShard(prefix)
    with pytest.raises(ShardError) as caught:
        IndexedShard(prefix, verify=True)
    assert_names(caught.value, files(prefix).json, r"missing, so shard-000\.bin has no checksum")


def test_a_shard_is_listed_whatever_file_is_missing(tmp_path):
    """Listing never skips a shard: its .idx or its sidecar names it, and opening says what is missing."""
    for name in ("a", "b", "c"):
        make_shard(tmp_path, name)
    files(tmp_path / "b").bin.unlink()
    files(tmp_path / "c").idx.unlink()
    (tmp_path / "notes.json").write_text('{"format": "something else"}')
    (tmp_path / "deep.json").write_text("[" * 100_000)  # no sidecar, nor a crash
    assert list_shards(tmp_path) == [str(tmp_path / n) for n in ("a", "b", "c")]


def test_a_bin_changed_after_open_is_refused_when_mapped(tmp_path):
    """Workers map each .bin on first use; a .bin cut since the dataset was opened is refused then."""
    prefix = make_shard(tmp_path)
    dataset = TokenDataset(tmp_path, seq_len=3, shuffle_block=1)
    truncate(files(prefix).bin, 8)
    with pytest.raises(ShardError) as caught:
        dataset[0]
    assert_names(caught.value, files(prefix).bin, r"8 bytes, but its index")


# -- in a subprocess: a crash must be a failed test, not a dead pytest --------------------

OPEN_AND_READ = """
import sys
from pipeline.kernels.hashing import file_sha256
from pipeline.loader import TokenDataset
dataset = TokenDataset(sys.argv[1], seq_len=3, shuffle_block=1)
for i in range(len(dataset)):
    dataset[i]
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "case",
    [
        "intact",
        "bin emptied",
        "bin cut by 4 bytes",
        "huge last length, no sidecar",
        "garbage pointer",
        "idx truncated",
        "huge sequence count",
    ],
)
def test_damaged_shard_in_a_subprocess_is_an_exception_not_a_crash(tmp_path, case):
    folder = tmp_path / "data"
    if case == "intact":
        make_shard(folder)
        path = None
    else:
        path, _ = damaged(folder, case)
    result = run_python(OPEN_AND_READ, str(folder))
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    if path is None:
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        assert result.returncode == 1, result.stderr[-2000:]
        assert f"ShardError: {path}: " in result.stderr, result.stderr[-2000:]


RANDOM_DAMAGE = """
import json, shutil, sys
from pathlib import Path
import numpy as np
from pipeline.kernels.hashing import file_sha256
from pipeline.loader import TokenDataset
from pipeline.formats.token_shards import ShardError

pristine, work, cases = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
outcome = {"refused": 0, "read": 0}
for case in range(cases):
    folder = work / str(case)
    shutil.copytree(pristine, folder)
    idx, bin_ = folder / "shard-000.idx", folder / "shard-000.bin"
    if case % 4 == 3:
        (folder / "shard-000.json").unlink()  # no sidecar: only the index and the size can tell
    kind = rng.integers(4)
    data = bytearray(idx.read_bytes())
    if kind == 0:  # random bytes
        for _ in range(rng.integers(1, 4)):
            data[rng.integers(len(data))] = rng.integers(256)
    elif kind == 1:  # a random value in a random 4- or 8-byte field
        width = int(rng.choice([4, 8]))
        at = int(rng.integers(0, len(data) - width + 1))
        data[at : at + width] = int(rng.integers(-2**31, 2**31)).to_bytes(8, "little", signed=True)[:width]
    elif kind == 2:
        data = data[: rng.integers(len(data))]
    else:
        bin_.write_bytes(bin_.read_bytes()[: rng.integers(bin_.stat().st_size)])
    idx.write_bytes(bytes(data))
    try:
        dataset = TokenDataset(folder, seq_len=3, shuffle_block=1)
        for i in range(len(dataset)):
            dataset[i]
        outcome["read"] += 1
    except ShardError:
        outcome["refused"] += 1
print(json.dumps(outcome))
"""


def test_random_damage_is_refused_or_read_in_bounds_never_a_crash(tmp_path):
    """Hundreds of random corruptions of .idx and .bin: each is a ShardError or reads fine."""
    make_shard(tmp_path / "pristine")
    (tmp_path / "work").mkdir()
    result = run_python(RANDOM_DAMAGE, str(tmp_path / "pristine"), str(tmp_path / "work"), "200")
    assert result.returncode == 0, f"return code {result.returncode}: {result.stderr[-3000:]}"
    outcome = json.loads(result.stdout)
    assert outcome["refused"] > 100 and outcome["refused"] + outcome["read"] == 200


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, DOC_INDEX_AT + 8 * (N + 1) - 1), st.integers(0, 255)), min_size=1, max_size=4),
    st.booleans(),
)
def test_any_idx_bytes_open_to_in_bounds_reads_or_fail_clearly(tmp_path, writes, keep_sidecar):
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        prefix = make_shard(Path(folder))
        if not keep_sidecar:
            files(prefix).json.unlink()
        for at, value in writes:
            patch(files(prefix).idx, at, bytes([value]))
        try:
            shard = IndexedShard(prefix)
        except ShardError as e:
            assert str(e).startswith(f"{prefix}."), str(e)
            return
        item = shard.dtype.itemsize
        ends = shard.pointers // item + shard.sizes
        assert (shard.sizes >= 0).all() and (ends <= len(shard.tokens)).all()
        assert all(len(shard[i]) == shard.sizes[i] for i in range(len(shard)))
        assert shard.document_index[0] == 0 and shard.document_index[-1] == len(shard)


# -- mixtures -------------------------------------------------------------------------------


def make_mixture(tmp_path: Path, document=(3, 0, 2, 1)) -> tuple[Path, list[Path]]:
    prefixes = [make_shard(tmp_path / "web", "a"), make_shard(tmp_path / "web", "b")]
    mix = tmp_path / "mix"
    mix.mkdir()
    np.save(mix / "order_source.npy", np.zeros(len(document), dtype=np.uint16))
    np.save(mix / "order_document.npy", np.array(document, dtype=np.int64))
    (mix / "mix.json").write_text(
        json.dumps(
            {
                "format": "prep-mix",
                "version": 1,
                "sources": {"web": {"shards": [str(p) for p in prefixes], "shard_documents": [N, N]}},
                "order": {"source": "order_source.npy", "document": "order_document.npy"},
            }
        )
    )
    return mix, prefixes


def test_mixture_reads_its_listed_shards(tmp_path):
    mix, _ = make_mixture(tmp_path)
    assert len(TokenDataset(mix, seq_len=3)) > 0


@pytest.mark.parametrize("missing", ["bin", "shard"])
def test_mixture_with_a_listed_shard_missing_fails_naming_it(tmp_path, missing):
    mix, prefixes = make_mixture(tmp_path)
    if missing == "bin":
        files(prefixes[1]).bin.unlink()
        path, pattern = files(prefixes[1]).bin, r"missing, though its index"
    else:
        for p in tmp_path.glob("web/b.*"):
            p.unlink()
        path, pattern = files(prefixes[1]).idx, r"missing"
    with pytest.raises(ShardError) as caught:
        TokenDataset(mix, seq_len=3)
    assert_names(caught.value, path, pattern)
    assert str(mix / "mix.json") in str(caught.value)


def test_mixture_refuses_a_shard_that_changed_its_document_count(tmp_path):
    mix, prefixes = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    description["sources"]["web"]["shard_documents"] = [N, N + 1]
    (mix / "mix.json").write_text(json.dumps(description))
    with pytest.raises(ShardError) as caught:
        TokenDataset(mix, seq_len=3)
    assert_names(caught.value, prefixes[1], r"holds 4 documents, but .*mix\.json was planned with 5")


def test_mixture_refuses_shards_remade_with_the_same_document_counts(tmp_path):
    """Shards re-tokenized (or re-filtered) keeping their document counts used to load: the
    loader served other token counts and shares than mix.json (and prep estimate) said."""
    mix, prefixes = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    description["sources"]["web"]["tokens_used"] = 10 + 5 + 1 + 3  # documents 3, 0, 2, 1 of shard a
    (mix / "mix.json").write_text(json.dumps(description))
    assert TokenDataset(mix, seq_len=3).stream.num_tokens == 19
    make_shard(tmp_path / "web", "a", docs=[d[:2] for d in DOCS])  # 4 documents still, 2 tokens at most
    with pytest.raises(ShardError) as caught:
        TokenDataset(mix, seq_len=3)
    assert_names(caught.value, tmp_path / "web", r"source 'web' gives 7 tokens .*mix\.json was planned with 19")


def test_mixture_with_a_source_of_no_shards_is_read(tmp_path):
    """prep mix lists a source whose run folder holds no shard (its documents all filtered
    out) with ``"shards": []``; the loader used to fail on it with a bare KeyError."""
    mix, _ = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    description["sources"]["math"] = {"shards": [], "shard_documents": [], "tokens_used": 0}
    (mix / "mix.json").write_text(json.dumps(description))
    assert TokenDataset(mix, seq_len=3).stream.num_tokens == 10 + 5 + 1 + 3
    np.save(mix / "order_source.npy", np.array([0, 1], dtype=np.uint16))
    np.save(mix / "order_document.npy", np.array([0, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"position 1 names document 0 of source 'math', which holds 0"):
        TokenDataset(mix, seq_len=3)


@pytest.mark.parametrize("which", ["order_source.npy", "order_document.npy"])
def test_mixture_with_an_order_array_missing_fails_naming_it(tmp_path, which):
    mix, _ = make_mixture(tmp_path)
    (mix / which).unlink()
    with pytest.raises(ValueError) as caught:
        TokenDataset(mix, seq_len=3)
    assert_names(caught.value, mix / which, r"cannot be read \(.*No such file.*\); make the mixture again")


def test_a_loader_state_resumes_on_a_copy_of_the_mixture_folder(tmp_path):
    """A mixture's data identity held its files' times: a state saved on a mixture folder
    was refused as "for other data" on a copy of it (cp -r, rsync), the same order."""
    from pipeline.loader import build_dataloader

    mix, _ = make_mixture(tmp_path, document=(3, 0, 2, 1, 3, 0))
    loader = build_dataloader(TokenDataset(mix, seq_len=2), 2, num_workers=0)
    next(iter(loader))
    state = loader.state_dict()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("mix.json", "order_source.npy", "order_document.npy"):
        (copy / name).write_bytes((mix / name).read_bytes())  # new times, same bytes
    resumed = build_dataloader(TokenDataset(copy, seq_len=2), 2, num_workers=0)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    np.save(copy / "order_document.npy", np.array([3, 0, 2, 1, 0, 3], dtype=np.int64))  # another order
    with pytest.raises(ValueError, match="loader state is for other data: dataset"):
        build_dataloader(TokenDataset(copy, seq_len=2), 2, num_workers=0).load_state_dict(state)


def test_mixture_order_past_a_source_end_is_refused(tmp_path):
    mix, _ = make_mixture(tmp_path, document=(3, 2 * N))
    with pytest.raises(ValueError, match=r"order_document\.npy: position 1 names document 8 of source 'web'"):
        TokenDataset(mix, seq_len=3)


@pytest.mark.parametrize("source", [-1, 1])
def test_an_order_naming_a_source_mix_json_lacks_is_one_line_for_the_loader_and_the_report(tmp_path, source):
    """The report checked only the high end: a negative source (a signed order array,
    damaged or foreign) ended ``prep report RUN MIX`` in "IndexError: list index out of range"."""
    from pipeline.report.mixture import MixtureError, read_mixture

    mix, _ = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    (mix / "mix.json").write_text(json.dumps({**description, "tokens": 19}))
    np.save(mix / "order_source.npy", np.array([0, 0, source, 0], dtype=np.int16))
    said = f"{mix / 'order_source.npy'}: position 2 names source {source}, outside 0..0 (the sources of mix.json)"
    with pytest.raises(ValueError) as loader:
        TokenDataset(mix, seq_len=3)
    with pytest.raises(MixtureError) as report:
        read_mixture(mix)
    assert str(loader.value) == str(report.value) == said


def test_the_report_reads_the_order_arrays_mix_json_names_as_the_loader_does(tmp_path):
    """The report read order_source.npy and order_document.npy whatever mix.json named, so
    it drew another order than the loader trained on, or none."""
    from pipeline.report.mixture import read_mixture

    mix, _ = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    for which in ("source", "document"):
        (mix / f"order_{which}.npy").rename(mix / f"kept_{which}.npy")
    order = {"source": "kept_source.npy", "document": "kept_document.npy"}
    (mix / "mix.json").write_text(json.dumps({**description, "tokens": 19, "order": order}))
    assert TokenDataset(mix, seq_len=3).stream.num_tokens == 19
    assert read_mixture(mix).positions == 4


# -- the commands ---------------------------------------------------------------------------


def test_inspect_prints_one_line_for_a_damaged_shard(tmp_path):
    path, pattern = damaged(tmp_path, "bin cut by 4 bytes")
    for target in (path.with_suffix(""), tmp_path / "sub"):
        result = CliRunner().invoke(shards_group, ["inspect", str(target)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: "), result.output


def test_inspect_verify_prints_one_line_for_a_flipped_byte(tmp_path):
    prefix = make_shard(tmp_path)
    patch(files(prefix).bin, 0, b"\x00\x01")
    assert CliRunner().invoke(shards_group, ["inspect", str(prefix)]).exit_code == 0
    result = CliRunner().invoke(shards_group, ["inspect", str(prefix), "--verify"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith(f"Error: {files(prefix).bin}: sha256 "), result.output


def test_inspect_verify_says_whether_the_sha256_matched(tmp_path):
    prefix = make_shard(tmp_path)
    digest = file_sha256(files(prefix).bin)
    result = CliRunner().invoke(shards_group, ["inspect", str(prefix), "--verify"])
    assert result.exit_code == 0 and f"bin sha256 {digest}  (matches its sidecar)" in result.output, result.output
    info = json.loads(CliRunner().invoke(shards_group, ["inspect", str(prefix), "--verify", "--json"]).output)
    assert (info["bin_sha256"], info["bin_sha256_matches"]) == (digest, True)
    files(prefix).json.unlink()  # nothing to compare with: say so, never "matches"
    result = CliRunner().invoke(shards_group, ["inspect", str(prefix), "--verify"])
    assert result.exit_code == 0 and f"{digest}  (not checked: no checksum in a sidecar)" in result.output
    info = json.loads(CliRunner().invoke(shards_group, ["inspect", str(prefix), "--verify", "--json"]).output)
    assert (info["bin_sha256"], info["bin_sha256_matches"]) == (digest, None)


def test_inspect_names_a_shard_whose_bin_is_missing(tmp_path):
    prefix = make_shard(tmp_path)
    files(prefix).bin.unlink()
    result = CliRunner().invoke(shards_group, ["inspect", f"{prefix}.idx"])
    assert result.exit_code == 1 and result.output.startswith(f"Error: {files(prefix).bin}: missing"), result.output


def test_merge_refuses_a_damaged_input_before_writing(tmp_path):
    good = make_shard(tmp_path / "in", "good")
    bad = make_shard(tmp_path / "in", "bad")
    truncate(files(bad).bin, 0)
    with pytest.raises(ShardError) as caught:
        merge_shards(tmp_path / "out" / "m", [good, bad])
    assert_names(caught.value, files(bad).bin, r"0 bytes, but its index")
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(shards_group, ["merge", str(tmp_path / "m2"), str(tmp_path / "in")])
    assert result.exit_code == 1 and result.output.startswith(f"Error: {files(bad).bin}: "), result.output


def test_mixture_with_relative_shard_paths_reads_them_from_its_folder(tmp_path, monkeypatch):
    """A mix.json edited to hold paths relative to its folder (to move data and mixture
    together) was read against the working directory: the loader failed or, from another
    folder holding shards of those names, served them."""
    mix, prefixes = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    description["sources"]["web"]["shards"] = [f"../web/{Path(p).name}" for p in prefixes]
    (mix / "mix.json").write_text(json.dumps(description))
    elsewhere = tmp_path / "elsewhere" / "deeper"  # where ../web is no folder
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert TokenDataset(mix, seq_len=3).stream.num_tokens == 10 + 5 + 1 + 3


@pytest.mark.parametrize("counts", [[N], [N, N, N]])
def test_mixture_whose_shard_counts_do_not_match_its_shards_is_refused(tmp_path, counts):
    """A mix.json listing more or fewer document counts than shards used to skip the
    check that catches shards changed since the mixture was made."""
    mix, _ = make_mixture(tmp_path)
    description = json.loads((mix / "mix.json").read_text())
    description["sources"]["web"]["shard_documents"] = counts
    (mix / "mix.json").write_text(json.dumps(description))
    with pytest.raises(ShardError) as caught:
        TokenDataset(mix, seq_len=3)
    assert_names(
        caught.value, mix / "mix.json", rf"source 'web' lists 2 shards but {len(counts)} shard document counts"
    )


@pytest.mark.parametrize("bad_id", [200_000, 2**31 - 1, -5])
def test_a_token_id_outside_the_vocabulary_is_refused_before_it_reaches_a_model(tmp_path, bad_id):
    """A .bin changed in place keeps its size, so only verify=True's checksum caught it;
    without it the id reached the model's embedding (on a GPU, a device-side assert
    naming no file). Every batch's ids are now checked against the sidecar's vocabulary."""
    prefix = make_shard(tmp_path)  # vocabulary of 200,000 ids
    patch(files(prefix).bin, 4 * 6, np.array([bad_id], dtype=np.int32).tobytes())  # document 1's second token
    dataset = TokenDataset(tmp_path, seq_len=2, epochs=1)
    with pytest.raises(ShardError, match=rf"token id {bad_id} is outside the vocabulary of 200000 ids .*verify=True"):
        for i in range(len(dataset)):
            dataset[i]
    with pytest.raises(ShardError, match=r"sha256 .* differs"):
        TokenDataset(tmp_path, seq_len=2, verify=True)
