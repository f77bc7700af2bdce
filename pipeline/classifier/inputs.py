"""Labeled documents for training and judging a classifier, from files or from prep runs.

Two ways to name them. Labeled files: JSON lines or Parquet whose records carry ``text``
and ``label`` (``--data``, and every file ``prep classifier eval`` reads). Or sources under
one label each (``--positive``/``--negative``): a glob of JSON lines/Parquet files, or a
prep run folder, whose kept documents are read.

Files go through prep's own readers, so gzip, broken lines and invalid UTF-8 are handled
as in a run: an unreadable record is skipped and counted, never trained on, and so is one
whose label fastText cannot hold (none, a list, whitespace inside). What the user must fix
is a ``ClassifierError`` naming the file: a missing input, a file that cannot be read, one
without ``text`` or ``label`` in any record, ``--positive-label`` with whitespace.

Every document has an id: the input's ``id``, else ``<file name>:<line or row>``. Its hash
picks samples and the held-out split, so the same documents are picked on every run,
whatever the order of the inputs or where the folder is mounted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import ID, TEXT
from pipeline.formats.fasttext_model import LABEL_PREFIX
from pipeline.formats.layout import Layout
from pipeline.readers import InputSpec, detect_format, read_input
from pipeline.util.globbing import GlobError, glob_local, has_magic
from pipeline.util.printable import printable, printable_path

LABEL = "label"
# fastText splits a line on these (its label is the first word): a label must hold none.
FASTTEXT_SPACE = re.compile(r"[ \t\n\r\v\f\x00]")


class ClassifierError(ValueError):
    """Something the user can fix (an input, an option); the message says what, on one line."""


@dataclass(frozen=True)
class Source:
    """Files read together: one labeled file, or everything one ``SRC`` names under a label."""

    origin: str  # as the user named it
    kind: str  # "file" (labeled), "glob" or "run"
    files: tuple[Path, ...]
    label: str | None  # None: each record's own ``label`` field


@dataclass
class Batch:
    """Documents of one file, in file order."""

    file: Path
    ids: pa.Array
    labels: list[str]
    texts: list[str]


@dataclass
class ReadLog:
    """What reading found besides documents: each file's fingerprint, skipped records."""

    facts: dict[str, dict] = field(default_factory=dict)  # file -> {"sha256", "bytes"}
    skipped: dict[str, Counter] = field(default_factory=dict)  # file -> bad-input kind -> count


def fasttext_can_hold(label: str) -> bool:
    """Whether fastText can hold ``label`` as a label: non-empty, no whitespace."""
    return bool(label) and not FASTTEXT_SPACE.search(label)


def check_label(label: str, where: str) -> str:
    """``label`` without a ``__label__`` prefix, if fastText can hold it as a label."""
    label = label.removeprefix(LABEL_PREFIX)
    if not fasttext_can_hold(label):
        raise ClassifierError(f"{where}: label {printable(repr(label))} is empty or holds whitespace")
    return label


def labeled_files(patterns: tuple[str, ...] | list[str]) -> list[Source]:
    """One source per file of labeled records; each pattern a file or a glob of files."""
    return [Source(str(f), "file", (f,), None) for pattern in patterns for f in _files(pattern)]


def labeled_source(origin: str, label: str) -> Source:
    """The documents ``origin`` names, all under ``label``: a run folder or a glob of files."""
    label = check_label(label, "--positive-label/--negative-label")
    path = Path(origin)
    if path.is_dir():
        layout = Layout(path)
        if not layout.docs_folder.is_dir():
            raise ClassifierError(f"{printable_path(origin)} is a folder but not a prep run (no docs/ in it)")
        sources = sorted(p.name for p in layout.docs_folder.iterdir() if p.is_dir())
        files = tuple(f for source in sources for f in layout.doc_files(source))
        if not files:
            raise ClassifierError(f"prep run {printable_path(origin)} has no kept documents (docs/<source>/*.parquet)")
        return Source(origin, "run", files, label)
    return Source(origin, "glob", tuple(_files(origin)), label)


def _files(pattern: str) -> list[Path]:
    """The files a pattern names (sorted), each of a format the readers know."""
    if not has_magic(pattern):
        path = Path(pattern)
        if not path.exists():
            raise ClassifierError(f"input {printable_path(pattern)} does not exist")
        if path.is_dir():
            raise ClassifierError(f"input {printable_path(pattern)} is a folder; name its files (a glob) instead")
        found = [path]
    else:
        try:
            found = [p for p in glob_local(pattern) if p.is_file()]
        except GlobError as error:
            raise ClassifierError(f"{printable_path(pattern)}: {error}") from None
        if not found:
            raise ClassifierError(f"no files match {printable_path(pattern)}")
    for path in found:
        try:
            detect_format(path)
        except ValueError:
            raise ClassifierError(
                f"{printable_path(path)}: not JSON lines or Parquet (.jsonl, .json, .ndjson, .parquet, maybe .gz)"
            ) from None
    return found


def read_documents(sources: list[Source], log: ReadLog) -> Iterator[Batch]:
    """Every document of ``sources``, a batch at a time, with its id and label."""
    for source in sources:
        for path in source.files:
            yield from _read_file(path, source.label, log)


def _read_file(path: Path, label: str | None, log: ReadLog) -> Iterator[Batch]:
    spec = InputSpec(source="classifier", file_key=path.name)
    skipped: Counter = Counter()
    documents = 0
    for chunk in read_input(path, spec):
        if chunk.bad is not None and chunk.bad.num_rows:
            reasons = chunk.bad.column("reason").to_pylist()
            for reason, line, detail in zip(reasons, chunk.bad.column("line").to_pylist(), chunk.bad.column("detail")):
                if reason == "bad-input:unreadable-file" and line == 0:  # not a byte of it could be read
                    raise ClassifierError(f"cannot read {printable_path(path)}: {printable(detail.as_py())}")
            skipped.update(r.removeprefix("bad-input:") for r in reasons)
        if chunk.extra.get("sha256"):
            log.facts[str(path)] = {"sha256": chunk.extra["sha256"], "bytes": chunk.extra["bytes"]}
        if chunk.docs is None or chunk.docs.num_rows == 0:
            continue
        docs = chunk.docs
        if label is None:
            docs, labels = _labeled(docs, skipped)
        else:
            labels = [label] * docs.num_rows
        documents += docs.num_rows
        if docs.num_rows:
            yield Batch(path, docs.column(ID), labels, docs.column(TEXT).to_pylist())
    skipped = +skipped  # only the kinds that happened: a labeled file counts "no-label 0"
    for kind, field_name in (("missing-text", TEXT), ("no-label", LABEL)):
        if documents == 0 and skipped and set(skipped) == {kind}:
            raise ClassifierError(f"{printable_path(path)} has no {field_name!r} field")
    if skipped:
        log.skipped[str(path)] = skipped


def _labeled(docs: pa.RecordBatch, skipped: Counter) -> tuple[pa.RecordBatch, list[str]]:
    """The records with a label fastText can hold, and their labels as text (a number or
    a boolean reads as its JSON text; a ``__label__`` prefix, as in fastText's own
    files, is dropped: the model adds its own, and ``__label____label__x`` would be
    a label no config could name). The others are skipped and counted, as an
    unreadable record is: ``no-label``, or ``bad-label`` (a list or an object, empty text,
    whitespace inside)."""
    if LABEL not in docs.schema.names:
        skipped["no-label"] += docs.num_rows
        return docs.slice(0, 0), []
    try:
        labels = pc.cast(docs.column(LABEL), pa.string()).to_pylist()  # a boolean reads "true"/"false"
        labels = [None if value is None else value.removeprefix(LABEL_PREFIX) for value in labels]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # not one value in the batch is text or a number
        skipped["bad-label"] += docs.num_rows
        return docs.slice(0, 0), []
    good = {value: fasttext_can_hold(value) for value in set(labels) if value is not None}
    keep = [value is not None and good[value] for value in labels]
    skipped["no-label"] += labels.count(None)
    skipped["bad-label"] += len(labels) - sum(keep) - labels.count(None)
    if all(keep):
        return docs, labels
    return docs.filter(pa.array(keep)), [value for value, kept in zip(labels, keep) if kept]


def skipped_lines(log: ReadLog) -> list[str]:
    """A warning line per file with records that could not be read or held no usable label
    (they were skipped)."""
    lines = []
    for file, kinds in log.skipped.items():
        detail = ", ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items()))
        lines.append(
            f"warning: skipped {sum(kinds.values()):,} records of {printable_path(file)} that cannot be used ({detail})"
        )
    return lines


def describe(sources: list[Source], log: ReadLog) -> list[dict]:
    """The inputs as the sidecar records them: what the user named, and each file's sha256."""
    return [
        {
            "source": source.origin,
            "kind": source.kind,
            "label": source.label,
            "files": [{"path": str(f), **log.facts.get(str(f), {})} for f in source.files],
        }
        for source in sources
    ]
