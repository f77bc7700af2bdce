"""The evaluation sets a ``decontaminate`` stage names: their config tables, reading them,
and their n-gram index, built once per run (the stage's finalize) and memory-mapped by
every worker.

A benchmark's table: ``name`` (the drop reason), ``path`` (JSON lines, gzipped or not;
Parquet; an Arrow file or a ``datasets`` ``save_to_disk`` folder), ``fields`` (which
fields hold text: a string, or a list of strings such as multiple-choice options),
optional ``filter`` (``{split = "test"}``: keep examples whose field equals the value,
or is one of a list of values), optional ``id`` (a field naming the example in the
ledger) and ``format`` (when the file name does not say).

Reading: a record that cannot be read (not JSON, not an object, no text in the named
fields) is skipped and counted (``bad_rows`` in the index's ``meta.json``); a file that
cannot be read at all, or yields no example, is a ``ValueError`` that names it. The
files are read through ``pipeline/sidefiles.py``, the owner of what stages read besides
the documents.

An example is named by its position: the 0-based record of the benchmark's files in
order (JSON lines: line number - 1), counting the records the filter passes over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.formats.work_files import OneFile, keyed
from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.hashing import file_sha256
from pipeline.sidefiles import BLANK, TABLE_FORMATS, data_files, records, table_files, table_format
from pipeline.util.atomic import save_npy_atomic, write_json_atomic
from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import error_line
from pipeline.util.suggest import nearest_hint
from stages.decontaminate.kernels import bucket_table, ngram_keys

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KEYS = ("name", "path", "fields", "filter", "id", "format")
# Bump when the normalisation or the key changes: it is part of the index's fingerprint.
INDEX_VERSION = 1
HASHES, OWNERS, META = "hashes.npy", "owners.npy", "meta.json"


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: str  # absolute, resolved against the working directory
    fields: tuple[str, ...]
    filter: tuple[tuple[str, tuple], ...] = ()  # field, accepted values
    id: str = ""
    format: str = "auto"

    def files(self) -> list[Path]:
        """The benchmark's files (a ``save_to_disk`` folder: its Arrow files and state)."""
        return table_files(self.path)


def parse_benchmarks(tables: list[dict[str, Any]]) -> tuple[Benchmark, ...]:
    """The ``[[stages.benchmarks]]`` tables as specs; a ValueError (one line) on any mistake."""
    if not tables:
        raise ValueError("decontaminate needs at least one benchmark: [[stages.benchmarks]] with name, path, fields")
    specs = tuple(_parse(table, i) for i, table in enumerate(tables))
    names = [spec.name for spec in specs]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"two benchmarks are named {name!r} (the name is the drop reason: make them differ)")
    return specs


def _parse(table: Any, index: int) -> Benchmark:
    where = f"benchmarks[{index}]"
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table with name, path and fields")
    for key in table:
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r} in {where}{nearest_hint(key, KEYS)} (valid: {', '.join(KEYS)})")
    name = table.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{where}: name must be 1-64 letters, digits, '_', '.' or '-' (it is the drop reason)")
    where = f"{where} ({name!r})"
    path = table.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError(f"{where}: path must be a non-empty string")
    if not os.path.exists(path):
        raise ValueError(f"{where}: benchmark file {path} does not exist")
    if not os.path.isdir(path):  # a save_to_disk folder is a table too
        try:
            refuse_special(path)  # a FIFO would block the index build for good
        except OSError as error:
            raise ValueError(f"{where}: benchmark file {path}: {error.strerror}") from None
    fields = table.get("fields")
    fields = [fields] if isinstance(fields, str) else fields
    if not fields or not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ValueError(f"{where}: fields must be a non-empty list of field names")
    filters = table.get("filter", {})
    if not isinstance(filters, dict):
        raise ValueError(f'{where}: filter must be a table, e.g. filter = {{ split = "test" }}')
    fmt = table.get("format", "auto")
    if fmt != "auto" and fmt not in TABLE_FORMATS:
        raise ValueError(f"{where}: format must be one of auto, {', '.join(TABLE_FORMATS)}")
    if fmt == "auto" and not os.path.isdir(path):
        table_format(path)
    id_field = table.get("id", "")
    if not isinstance(id_field, str):
        raise ValueError(f"{where}: id must be a field name")
    accepted = tuple((k, tuple(v) if isinstance(v, list) else (v,)) for k, v in sorted(filters.items()))
    return Benchmark(name, os.path.abspath(path), tuple(fields), accepted, id_field, fmt)


# -- reading ----------------------------------------------------------------------------


@dataclass
class Examples:
    texts: list[str]  # one per (example, field) text
    example: list[int]  # the example each text belongs to
    ids: dict[int, str]  # example -> its id (when the benchmark names an id field)
    examples: int = 0  # examples that passed the filter
    bad_rows: int = 0


def read_examples(bench: Benchmark) -> Examples:
    out = Examples([], [], {})
    position = 0
    needed = [*bench.fields, *(k for k, _ in bench.filter), *([bench.id] if bench.id else [])]
    for path, fmt in data_files(bench.path, bench.format):
        try:
            for record in records(path, fmt, needed):
                _add(bench, out, position, record)
                position += 1
        except (OSError, EOFError, ValueError, pa.ArrowException) as error:
            where = f"decontaminate: benchmark {bench.name!r}: cannot read {path}"
            raise ValueError(f"{where}: {error_line(error)}") from None
    if not out.texts:
        raise ValueError(
            f"decontaminate: benchmark {bench.name!r}: {bench.path} has no example with text in "
            f"{list(bench.fields)}" + (f" that passes the filter {dict(bench.filter)}" if bench.filter else "")
        )
    return out


def _add(bench: Benchmark, out: Examples, position: int, record: Any) -> None:
    if record is BLANK:
        return
    if not isinstance(record, dict):
        out.bad_rows += 1
        return
    if any(record.get(key) not in accepted for key, accepted in bench.filter):
        return
    texts = []
    for name in bench.fields:
        value = record.get(name)
        values = value if isinstance(value, list) else [value]
        texts += [v for v in values if isinstance(v, str) and v]
    if not texts:
        out.bad_rows += 1
        return
    out.texts += texts
    out.example += [position] * len(texts)
    out.examples += 1
    if bench.id and record.get(bench.id) is not None:
        out.ids[position] = str(record[bench.id])


# -- the index ---------------------------------------------------------------------------


def fingerprint(benchmarks: tuple[Benchmark, ...], n: int) -> str:
    """What the index depends on: settings, normalisation version, file contents."""
    parts: list[Any] = [INDEX_VERSION, n]
    for b in benchmarks:
        parts.append([b.name, b.fields, b.filter, b.id, b.format, [file_sha256(f) for f in b.files()]])
    return hashlib.sha256(json.dumps(parts, default=list).encode()).hexdigest()


@dataclass
class Index:
    hashes: np.ndarray  # sorted unique n-gram keys (uint64)
    owners: np.ndarray  # (len, 2) int64: benchmark number, example position of each key
    buckets: np.ndarray
    shift: np.uint64
    meta: dict


def build_arrays(benchmarks: tuple[Benchmark, ...], n: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Every n-gram key of every benchmark, sorted and unique, with its first owner."""
    keys, owners, meta = [], [], {"n": n, "version": INDEX_VERSION, "benchmarks": []}
    for number, bench in enumerate(benchmarks):
        examples = read_examples(bench)
        data, offsets = string_buffers(pa.array(examples.texts, pa.large_string()))
        k, row = ngram_keys(data, offsets, n)
        example = np.asarray(examples.example, np.int64)
        keys.append(k)
        owners.append(np.stack([np.full(len(k), number, np.int64), example[row]], axis=1))
        meta["benchmarks"].append(
            {
                "name": bench.name,
                "examples": examples.examples,
                "indexed_examples": int(len(np.unique(example[row]))),  # the others have < n words
                "bad_rows": examples.bad_rows,
                "ngrams": int(len(k)),
                "ids": {str(e): i for e, i in examples.ids.items()},
            }
        )
    all_keys = np.concatenate(keys)
    all_owners = np.concatenate(owners)
    order = np.argsort(all_keys, kind="stable")  # ties keep benchmark, then example, order
    all_keys, all_owners = all_keys[order], all_owners[order]
    first = np.ones(len(all_keys), bool)
    first[1:] = all_keys[1:] != all_keys[:-1]
    return all_keys[first], np.ascontiguousarray(all_owners[first]), meta


def in_memory(benchmarks: tuple[Benchmark, ...], n: int) -> Index:
    hashes, owners, meta = build_arrays(benchmarks, n)
    return Index(hashes, owners, *bucket_table(hashes), meta)


def index_files(benchmarks: tuple[Benchmark, ...], n: int) -> tuple[OneFile, ...]:
    """The index's files in the stage's work folder, under a sub-folder named by what the
    index depends on besides the files' contents (which the run's fingerprint covers:
    ``Decontaminate.files``): sources and stages with equal settings name one index."""
    parts = [INDEX_VERSION, n, [[b.name, b.path, b.fields, b.filter, b.id, b.format] for b in benchmarks]]
    return keyed(hashlib.sha256(json.dumps(parts, default=list).encode()).hexdigest()[:32], (HASHES, OWNERS, META))


def build(work: Path, benchmarks: tuple[Benchmark, ...], n: int) -> dict[str, int]:
    """Write the index (``index_files``) under ``work``, each file atomically and
    ``meta.json`` last, so its presence means the index is whole. No counters: the
    index's own figures are in its ``meta.json``."""
    hashes, owners, meta = build_arrays(benchmarks, n)
    files = dict(zip((HASHES, OWNERS, META), index_files(benchmarks, n)))
    save_npy_atomic(files[HASHES].path(work), hashes)
    save_npy_atomic(files[OWNERS].path(work), owners)
    write_json_atomic(files[META].path(work), {**meta, "fingerprint": fingerprint(benchmarks, n)})
    return {}


def load(work: Path, benchmarks: tuple[Benchmark, ...], n: int) -> Index:
    """The index ``build`` wrote under ``work``, memory-mapped."""
    files = dict(zip((HASHES, OWNERS, META), index_files(benchmarks, n)))
    meta = files[META].path(work)
    if not meta.exists():
        raise RuntimeError(f"decontaminate: the benchmark index has not been built in {work}")
    hashes, owners = _mapped(files[HASHES].path(work)), _mapped(files[OWNERS].path(work))
    return Index(hashes, owners, *bucket_table(hashes), json.loads(meta.read_text()))


def _mapped(path: Path) -> np.ndarray:
    """A saved array, memory-mapped (an empty one cannot be: read instead)."""
    try:
        return np.asarray(np.load(path, mmap_mode="r"))
    except ValueError:
        return np.load(path)
