"""Hostile JSON lines, second round (issue 43 items 1, 4, 7): what a line is, ids exactly
as written whatever their neighbours, and a bound on the fields a parse may bring.

Every case also checks the reader's promise that a line's fate (kept with its id, or
quarantined with its kind) is its own: the same line read alone, among good
neighbours, or in a block that a broken neighbour sends down the line-by-line path
must come out the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.readers import InputSpec, read_input
from pipeline.readers.nesting import MAX_FIELDS, TOO_MANY_FIELDS, scan_lines

BROKEN = b'{"id": "broken", "text": '  # sends its block down the line-by-line path


def read(tmp_path: Path, data: bytes, name: str = "in.jsonl", **options) -> tuple[list, list, list]:
    """(kept (id, line) pairs, ledger (kind, line, detail) triples, each docs batch's
    column count) of ``data`` read as one file."""
    path = tmp_path / name
    path.write_bytes(data)
    kept, bad, widths = [], [], []
    for chunk in read_input(path, InputSpec(source="web", file_key=name, **options)):
        if chunk.docs is not None:
            kept += zip(chunk.docs.column("id").to_pylist(), chunk.docs.column("_line").to_pylist())
            widths.append(chunk.docs.num_columns)
        if chunk.bad is not None:
            bad += [(r["reason"].removeprefix("bad-input:"), r["line"], r["detail"]) for r in chunk.bad.to_pylist()]
    return kept, bad, widths


def fate(tmp_path: Path, line: bytes) -> tuple:
    """What becomes of ``line`` read alone, with a good neighbour, and in a block the
    line-by-line path takes; asserts the three agree and returns it (its id, or its
    ledger kind)."""
    good = b'{"id": "good", "text": "a neighbour"}\n'
    outcomes = []
    for before, after in ((b"", b""), (good, good), (good + BROKEN + b"\n", good)):
        kept, bad, _ = read(tmp_path, before + line + b"\n" + after)
        at = before.count(b"\n") + 1
        mine = [("kept", i.replace(f":{at}", ":LINE")) for i, n in kept if n == at]
        mine += [("bad", kind) for kind, n, _ in bad if n == at]
        assert len(mine) == 1, (line, kept, bad)
        outcomes.append(mine[0])
    assert outcomes[0] == outcomes[1] == outcomes[2], (line, outcomes)
    return outcomes[0]


# --- item 1: what a line is -----------------------------------------------------------


def test_a_lone_cr_between_objects_is_one_broken_line_and_the_rest_reads(tmp_path):
    data = b'{"id":"a","text":"x"}\r{"id":"b","text":"y"}\n{"id":"c","text":"z"}\n'
    kept, bad, _ = read(tmp_path, data)
    assert kept == [("c", 2)]
    assert [(kind, line) for kind, line, _ in bad] == [("broken-json", 1)]
    assert "lone \\r" in bad[0][2]


@pytest.mark.parametrize(
    "options", [{}, {"block_bytes": 64}, {"block_bytes": 64, "max_doc_bytes": 1000}], ids=["small", "blocks", "big"]
)
def test_a_file_with_cr_line_ends_is_one_line_whatever_its_size(tmp_path, options):
    """200 objects parted by \\r: one line, as ``wc -l`` and the JSON Lines format count;
    past max_doc_bytes it is skipped unread, as any line that long."""
    data = b"\r".join(b'{"id": "%d", "text": "doc %d"}' % (i, i) for i in range(200)) + b"\r"
    kept, bad, _ = read(tmp_path, data, **options)
    assert kept == []
    kind = "oversized" if "max_doc_bytes" in options else "broken-json"
    assert [(k, line) for k, line, _ in bad] == [(kind, 1)]


@pytest.mark.parametrize(
    "line, kept",
    [
        (b'{"id": "a", "text": "crlf"}\r', True),
        (b'{"id": "a", "text": "cr cr lf"}\r\r', True),
        (b' \t{"id": "a", "text": "spaces"} \t\r', True),
        (b'{"id": "a", "text": "raw \xe2\x80\xa8 and \xe2\x80\xa9 and \xc2\x85 in a string"}', True),
        (b'{"id": "a", "text": "form feed after"}\x0c', False),
        (b'{"id": "a", "text": "U+2028 after"}\xe2\x80\xa8', False),
        (b'{"id": "a", \xc2\x85"text": "NEL between fields"}', False),
        (b'{"id": "a", "text": "raw \r inside a string"}', False),
        (b'{"id": "a", "text": "x"} {"id": "b", "text": "y"}', False),
        (b'{"id": "a", "text": "x"}{"id": "b", "text": "y"}', False),
        (b'{"id": "a", "text": "x", "score": NaN}', False),
        (b'{"id": "a", "text": "x", "score": -Infinity}', False),
    ],
)
def test_each_line_has_one_fate_wherever_it_lands(tmp_path, line, kept):
    outcome = fate(tmp_path, line)
    assert outcome == (("kept", "a") if kept else ("bad", "broken-json"))


def test_an_object_over_two_lines_beside_two_objects_on_one_line_numbers_every_line(tmp_path):
    """Arrow reads 3 rows from these 3 lines: right count, wrong lines. Each is broken."""
    data = b'{"id": "x", "text":\n"y"}\n{"id": "a", "text": "b"}{"id": "c", "text": "d"}\n{"id": "e", "text": "f"}\n'
    kept, bad, _ = read(tmp_path, data)
    assert kept == [("e", 4)]
    assert [(kind, line) for kind, line, _ in bad] == [("broken-json", 1), ("broken-json", 2), ("broken-json", 3)]


def test_a_byte_order_mark_is_skipped_at_the_file_start_only(tmp_path):
    bom = b"\xef\xbb\xbf"
    kept, bad, _ = read(tmp_path, bom + b'{"id": "a", "text": "x"}\n' + bom + b'{"id": "b", "text": "y"}\n')
    assert kept == [("a", 1)] and [(kind, line) for kind, line, _ in bad] == [("broken-json", 2)]


TERMINATORS = [b"\n", b"\r\n", b"\r", b"\r\r\n", b"\n\n", b" \n", b"\x0c\n", b"\xe2\x80\xa8\n", b"\xc2\x85\n"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(TERMINATORS), min_size=1, max_size=12), st.integers(32, 256))
def test_random_terminators_never_abort_and_reconcile(tmp_path_factory, ends, block_bytes):
    """Objects parted by a random mix of terminators, read in blocks of every size: every
    nonblank ``\\n`` line is kept or quarantined exactly once, at its own number."""
    data = b"".join(b'{"id": "%d", "text": "doc"}' % i + end for i, end in enumerate(ends))
    kept, bad, _ = read(tmp_path_factory.mktemp("t"), data, block_bytes=block_bytes)
    lines = [n for n, text in enumerate(data.split(b"\n"), 1) if text.strip(b" \t\r")]
    assert sorted([n for _, n in kept] + [n for _, n, _ in bad]) == lines
    for doc_id, n in kept:  # a kept line is exactly one object, with its own id
        assert data.split(b"\n")[n - 1].strip(b" \t\r") == b'{"id": "%s", "text": "doc"}' % doc_id.encode()


def test_a_lone_cr_costs_one_line_of_a_run(tmp_path):
    """End to end: the run ends 0, the ledger names the file and line, the balance holds."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "cr.jsonl").write_bytes(b'{"id":"a","text":"x"}\r{"id":"b","text":"y"}\n{"id":"c","text":"z"}\n')
    (tmp_path / "in" / "ok.jsonl").write_bytes(b'{"id":"d","text":"w"}\n')
    config = tmp_path / "run.toml"
    config.write_text('[sources.web]\npaths = ["in/*.jsonl"]\n')
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-q"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    ledger = pq.read_table(out / "rejects" / "web").to_pylist()
    assert [(r["reason"], r["file"], r["line"]) for r in ledger] == [("bad-input:broken-json", "cr.jsonl", 1)]
    assert json.loads((out / "manifest.json").read_text())["balance"] == {"input": 3, "output": 2, "rejected": 1}


# --- item 4: ids as written -----------------------------------------------------------


def test_ids_in_one_block_keep_their_own_digits(tmp_path):
    data = b"".join(
        b'{"id": %s, "text": "t"}\n' % token for token in (b"1500000000000000001", b"1500000000000000003", b"2.5")
    )
    kept, bad, _ = read(tmp_path, data)
    assert kept == [("1500000000000000001", 1), ("1500000000000000003", 2), ("2.5", 3)] and bad == []


@pytest.mark.parametrize(
    "token, expected",
    [
        (b"1500000000000000001", "1500000000000000001"),
        (b"9223372036854775808", "9223372036854775808"),  # int64 + 1
        (b"18446744073709551617", "18446744073709551617"),  # past uint64
        (b"123456789012345678901234567890", "123456789012345678901234567890"),
        (b"9007199254740993", "9007199254740993"),  # 2**53 + 1
        (b"-17", "-17"),
        (b"-0", "-0"),  # the one integer its int64 does not print as written
        (b"2.5", "2.5"),
        (b"1e3", "1e3"),
        (b"-0.0", "-0.0"),
        (b"1E+400", None),  # no double holds it: Arrow refuses the line
        (b"true", "true"),
        (b"false", "false"),
        (b'"007"', "007"),
        (b'"2020-01-01"', "2020-01-01"),  # Arrow infers a timestamp from this string
        (b'"2020-01-01T10:00:00"', "2020-01-01T10:00:00"),
        (b'"20\\u00320-01-01"', "2020-01-01"),
        (b'"1e3"', "1e3"),
        (b"null", "in.jsonl:LINE"),  # the location names the document
    ],
)
def test_an_id_is_its_own_text_alone_among_others_and_on_either_path(tmp_path, token, expected):
    line = b'{"text": "some text", "id": ' + token + b"}"
    outcome = fate(tmp_path, line)
    assert outcome[0] == "bad" if expected is None else outcome == ("kept", expected)


def test_ids_of_mixed_types_in_one_block(tmp_path):
    tokens = [b"1500000000000000001", b'"2020-01-01"', b"2.5", b"true", b'"x"', b"18446744073709551617", b"null"]
    data = b"".join(b'{"id": %s, "text": "t"}\n' % token for token in tokens)
    kept, bad, _ = read(tmp_path, data)
    assert bad == []
    assert sorted(kept, key=lambda pair: pair[1]) == [
        ("1500000000000000001", 1),
        ("2020-01-01", 2),
        ("2.5", 3),
        ("true", 4),
        ("x", 5),
        ("18446744073709551617", 6),
        ("in.jsonl:7", 7),
    ]


def test_an_id_named_with_escapes_is_the_id(tmp_path):
    assert fate(tmp_path, b'{"\\u0069d": 1500000000000000001, "text": "t"}') == ("kept", "1500000000000000001")


def test_a_nested_id_stays_a_field_and_the_location_names_the_document(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": {"n": 12345678901234567890}, "text": "t"}\n')
    (chunk,) = [c for c in read_input(path, InputSpec(source="web", file_key="in.jsonl")) if c.docs is not None]
    assert chunk.docs.column("id").to_pylist() == ["in.jsonl:1"] and "input_id" in chunk.docs.column_names


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(10**30), 10**30),
            st.floats(allow_nan=False, allow_infinity=False),
            st.booleans(),
            st.text(min_size=1, max_size=12),
            st.dates().map(str),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_random_ids_come_back_as_their_json_text(tmp_path_factory, ids):
    data = b"".join(json.dumps({"id": value, "text": "t"}).encode() + b"\n" for value in ids)
    kept, bad, _ = read(tmp_path_factory.mktemp("ids"), data)
    assert bad == []
    expected = [value if isinstance(value, str) else json.dumps(value) for value in ids]
    assert [doc_id for doc_id, _ in sorted(kept, key=lambda pair: pair[1])] == expected


def test_a_duplicate_key_is_quarantined_on_both_paths(tmp_path):
    for line in (
        b'{"text": "a", "text": "b"}',
        b'{"id": 1, "id": 2, "text": "t"}',
        b'{"text": "t", "m": {"k": 1, "k": 2}}',
    ):
        assert fate(tmp_path, line) == ("bad", "unparseable")
    _, bad, _ = read(tmp_path, b'{"text": "a", "text": "b"}\n')
    assert "specified twice" in bad[0][2]


# --- item 7: fields a parse may bring --------------------------------------------------


def wide(keys: int, prefix: str = "k", nested: bool = False) -> bytes:
    fields = {f"{prefix}{i}": i for i in range(keys)}
    record = (
        {"id": "wide", "text": "t", "a": [{k: v} for k, v in fields.items()]}
        if nested
        else {"id": "wide", "text": "t", **fields}
    )
    return json.dumps(record).encode()


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "in-a-list"])
def test_a_line_with_too_many_fields_is_quarantined_unparsed(tmp_path, nested):
    outcome = fate(tmp_path, wide(MAX_FIELDS + 1, nested=nested))
    assert outcome == ("bad", "too-many-fields")
    # Below the bounds: 4,000 names; 1,000 objects of one name each, a null each for 999
    assert fate(tmp_path, wide(1000 if nested else MAX_FIELDS - 100, nested=nested)) == ("kept", "wide")


def test_many_lines_of_distinct_fields_are_parsed_in_bounded_groups(tmp_path):
    """4,000 lines of 25 keys no other line has: all kept, no batch wider than the bound."""
    data = b"".join(
        json.dumps({"text": "t", **{f"k{j}_{i}": i for i in range(25)}}).encode() + b"\n" for j in range(4000)
    )
    kept, bad, widths = read(tmp_path, data)
    assert len(kept) == 4000 and bad == [] and max(widths) <= MAX_FIELDS + 3


def test_uniform_lines_are_one_group(tmp_path):
    block = b"".join(json.dumps({"text": "t", **{f"k{i}": j for i in range(60)}}).encode() + b"\n" for j in range(5000))
    scan = scan_lines(block)
    assert len(scan.groups) == 1 and len(scan.flagged) == 0 and scan.odd_lines == 0


def test_the_scan_cuts_groups_at_the_field_bound():
    block = b'{"a": 1, "b": 2, "c": 3}\n{"d": 1}\n{"e": 1, "f": 1, "g": 1, "h": 1}\n{"a": {"b": 1}}\n'
    scan = scan_lines(block, max_fields=3)
    assert scan.flagged.tolist() == [2] and scan.kinds.tolist() == [TOO_MANY_FIELDS]
    assert scan.groups[:, 1].tolist() == [0, 1, 2, 3]
