"""Bad input never loses data silently: each kind is quarantined with its location, the
run goes on and says so; --strict stops at the first one, naming file and line."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import write_config

from pipeline.commands.main import main

GOOD = [{"id": f"g{i}", "text": f"A perfectly ordinary document number {i}."} for i in range(5)]


def lines(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def make_broken_inputs(folder: Path, huge_bytes: int = 100 << 20) -> dict[str, tuple[str, int]]:
    """Files with one kind of damage each; returns kind -> (file, line) expected in the ledger."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    # Truncated gzip: the stream ends mid-member.
    whole = gzip.compress(lines(GOOD * 400), mtime=0)
    (folder / "truncated.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    expected["truncated-gzip"] = ("truncated.jsonl.gz", None)
    # A corrupt member after a good one: bytes flipped inside the deflate data.
    second = bytearray(gzip.compress(lines(GOOD), mtime=0))
    second[20:40] = b"\xff" * 20
    (folder / "corrupt.jsonl.gz").write_bytes(gzip.compress(lines(GOOD), mtime=0) + bytes(second))
    expected["corrupt-gzip"] = ("corrupt.jsonl.gz", 6)
    damaged = (
        lines(GOOD[:2])
        + b'{"id": "broken", "text": "no closing brace"\n'  # line 3
        + b'{"id": "utf8", "text": "bad \xff\xfe bytes"}\n'  # line 4
        + b'{"id": "missing", "title": "no text"}\n'  # line 5
        + b'{"id": "number", "text": 42}\n'  # line 6
        + b'{"id": "empty", "text": ""}\n'  # line 7
        + b'{"id": "nul", "text": "a\\u0000b"}\n'  # line 8
        + lines(GOOD[2:])
    )
    (folder / "damaged.jsonl").write_bytes(damaged)
    expected.update(
        {
            "broken-json": ("damaged.jsonl", 3),
            "invalid-utf8": ("damaged.jsonl", 4),
            "missing-text": ("damaged.jsonl", 5),
            "non-string-text": ("damaged.jsonl", 6),
            "empty-text": ("damaged.jsonl", 7),
            "nul-byte": ("damaged.jsonl", 8),
        }
    )
    with open(folder / "huge.jsonl", "wb") as f:
        f.write(lines(GOOD[:1]))
        f.write(b'{"id": "huge", "text": "')
        chunk = b"x" * (1 << 20)
        for _ in range(huge_bytes // len(chunk)):
            f.write(chunk)
        f.write(b'"}\n')
        f.write(lines(GOOD[1:2]))
    expected["oversized"] = ("huge.jsonl", 2)
    # Nested past the reader's limit (and far short of what would crash Arrow).
    (folder / "deep.jsonl").write_bytes(lines(GOOD[:1]) + b'{"text": "x", "m": ' + b"[" * 150 + b"]" * 150 + b"}\n")
    expected["too-deep"] = ("deep.jsonl", 2)
    # A file that is not Parquet at all: one row for the whole file, and the run goes on.
    (folder / "empty.parquet").write_bytes(b"")
    expected["unreadable-file"] = ("empty.parquet", 0)
    return expected


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    expected = make_broken_inputs(root / "in")
    config = write_config(root / "run.toml", '[sources.web]\npaths = ["in/*"]\n[[stages]]\nname = "normalize"\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(root / "out"), "--workers", "1"])
    return root, expected, result


def test_each_kind_is_quarantined_with_its_location(broken_run):
    root, expected, result = broken_run
    assert result.exit_code == 0, result.output
    ledger = pq.read_table(root / "out" / "rejects").to_pylist()
    found = {r["reason"].removeprefix("bad-input:"): (r["file"], r["line"]) for r in ledger if r["stage"] == "read"}
    for kind, (file, line) in expected.items():
        assert kind in found, f"{kind} not quarantined: {sorted(found)}"
        assert found[kind][0] == file
        if line is not None:
            assert found[kind][1] == line, kind
    rows = {r["reason"]: r for r in ledger}
    assert rows["bad-input:invalid-utf8"]["raw"] == b'{"id": "utf8", "text": "bad \xff\xfe bytes"}'
    assert rows["bad-input:nul-byte"]["id"] == "nul"  # its own id, since it could be read


def test_run_goes_on_and_balances(broken_run):
    root, expected, result = broken_run
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"]
    kept = pq.read_table(root / "out" / "docs").column("id").to_pylist()
    # Everything good before and after the damage is kept, including the 5 documents of
    # the corrupt file's first member and the rows around the 100 MB document.
    assert kept.count("g0") >= 4 and "g1" in kept and "g4" in kept
    assert set(manifest["bad_input"]) == {f"bad-input:{k}" for k in expected}
    assert "bad input quarantined" in result.output


def test_unreadable_file_is_in_the_manifest_with_its_checksum(broken_run):
    root, _, _ = broken_run
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    empty = next(i for i in manifest["inputs"] if i["path"].endswith("empty.parquet"))
    assert empty["bytes"] == 0 and empty["sha256"] == hashlib.sha256(b"").hexdigest()


def test_invalid_utf8_never_reaches_the_stages(tmp_path):
    """Latin-1 JSON lines (valid JSON, so Arrow parses them) and a Parquet string column
    with invalid bytes used to abort the run in normalize; now each bad record is
    quarantined and the rest is normalized and written."""
    (tmp_path / "in").mkdir()
    records = [{"id": f"l{i}", "text": "café crème brûlée" if i % 2 else "plain text"} for i in range(6)]
    (tmp_path / "in" / "latin1.jsonl").write_bytes(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("latin-1")
    )
    text = pa.array([b"good text", b"caf\xe9"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ["p0", "p1"], "text": text}), tmp_path / "in" / "mis.parquet")
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*"]\n[[stages]]\nname = "normalize"\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "-w", "1"])
    assert result.exit_code == 0, result.output
    ledger = pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    assert sorted((r["file"], r["line"]) for r in ledger if r["reason"] == "bad-input:invalid-utf8") == [
        ("latin1.jsonl", 2),
        ("latin1.jsonl", 4),
        ("latin1.jsonl", 6),
        ("mis.parquet", 1),
    ]
    docs = pq.read_table(tmp_path / "out" / "docs")
    docs.validate(full=True)
    assert sorted(docs.column("id").to_pylist()) == ["l0", "l2", "l4", "p0"]
    balance = json.loads((tmp_path / "out" / "manifest.json").read_text())["balance"]
    assert balance == {"input": 8, "output": 4, "rejected": 4}


def test_strict_stops_at_first_bad_line_naming_it(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(lines(GOOD[:2]) + b"{not json\n" + lines(GOOD[2:]))
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "--strict", "-w", "1"])
    assert result.exit_code != 0
    assert "a.jsonl:3" in result.output and "broken-json" in result.output


def test_glob_matching_nothing_is_an_error_before_work(tmp_path):
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["nowhere/*.jsonl"]\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "matches no file" in result.output and "nowhere/*.jsonl" in result.output
    assert not (tmp_path / "out").exists()


def test_strict_error_from_a_worker_process(tmp_path):
    """With several workers the failure surfaces from the pool with the same message."""
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        (folder / f"ok{i}.jsonl").write_bytes(lines(GOOD))
    (folder / "bad.jsonl").write_bytes(lines(GOOD) + b'{"text": 1}\n')
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(config),
            "--out",
            str(tmp_path / "out"),
            "--strict",
            "-w",
            "2",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "bad.jsonl:6" in proc.stderr and "non-string-text" in proc.stderr
