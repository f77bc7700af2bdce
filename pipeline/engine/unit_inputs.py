"""A unit's input files read into (documents, ledger rows, input bytes, file facts): one
file at a time, or a pack of small JSON-lines files parsed together
(``readers/jsonl_pack.py``), each file read inside ``planned_input``'s version checks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from pipeline.engine.input_files import input_stat, not_a_file
from pipeline.engine.plan import InputFile, Unit
from pipeline.engine.versions import InputChanged, changed, is_local_file, planned_input, version_change
from pipeline.readers import InputSpec, detect_format, read_input
from pipeline.readers.common import unreadable
from pipeline.readers.jsonl_pack import PackParser, scanned_file, whole_file, with_file
from pipeline.util.printable import printable_path


def unit_inputs(unit: Unit, specs: list[InputSpec], block_bytes: int) -> Iterator[tuple]:
    """The unit's files' (documents, quarantined rows, input bytes, extra), in order;
    ``extra`` names the file whose read it ends (``path``) with its size and sha256. In a
    pack each document names its file (``_file``)."""
    if len(unit.files) > 1 and all(_is_jsonl(unit, file) for file in unit.files):
        yield from _pack(unit, specs, block_bytes)
        return
    for file, spec in zip(unit.files, specs):
        yield from _file_batches(file, spec, unit)


def _file_batches(file: InputFile, spec: InputSpec, unit: Unit) -> Iterator[tuple]:
    """One input file read by its own streaming reader, as ``unit_inputs`` gives it."""
    if (special := not_a_file(file.path)) is not None:  # a FIFO or a device is never opened
        yield None, unreadable(spec, 0, ValueError(special)), 0, {}
        return
    with planned_input(file.path, file.version, _name(file, unit)) as path:
        for chunk in read_input(path, spec, unit.format):
            docs = with_file(chunk.docs, file.key) if len(unit.files) > 1 else chunk.docs
            yield docs, chunk.bad, chunk.bytes_read, {"path": file.key, **chunk.extra} if chunk.extra else {}


def _pack(unit: Unit, specs: list[InputSpec], block_bytes: int) -> Iterator[tuple]:
    parser = PackParser(block_bytes)
    for file, spec in zip(unit.files, specs):
        data = _whole(file, unit, spec)
        if data is not None:  # a small plain file, read in one pass
            for docs, bad in parser.add_lines(data, spec):
                yield docs, bad, 0, {}
            facts = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}  # as ``scanned_file``'s
            yield None, None, len(data), {"path": file.key, **facts}
            continue
        scanned = None
        if not_a_file(file.path) is None:
            try:
                with planned_input(file.path, file.version, _name(file, unit)) as path:
                    scanned = scanned_file(path, spec)
            except InputChanged:
                raise
            except OSError:  # gone, or not ours to read: the file's own reader says so
                pass
        # not read whole (more than a block, or unreadable): the file's own streaming read
        if scanned is None:
            for docs, bad in parser.flush():
                yield docs, bad, 0, {}
            yield from _file_batches(file, spec, unit)
            continue
        items, nbytes, facts = scanned
        for docs, bad in parser.add(items, spec):
            yield docs, bad, 0, {}
        yield None, None, nbytes, {"path": file.key, **facts}
    for docs, bad in parser.flush():
        yield docs, bad, 0, {}


def _whole(file: InputFile, unit: Unit, spec: InputSpec) -> bytes | None:
    """A small plain local file's bytes (``whole_file``), of the version the run planned:
    one stat before the read, which also tells it is still the regular file planned, and
    one after it (a change fails the unit, ``InputChanged``, as in ``planned_input``).
    None for any other file, or one no longer as planned, or unreadable: the read of any
    file (``scanned_file``, ``read_input``) takes it and says what is wrong. A file of
    fewer bytes than a block, none of its lines over ``max_doc_bytes``, is one block of
    lines, as ``scanned_file`` reads it.

    Why: at 10,000 one-document files, the stream, buffer and hashing reader each file
    was opened through, four stats and a scan of its own were half the read's CPU."""
    planned = file.version
    limit = min(spec.block_bytes - 1, spec.max_doc_bytes)
    if not is_local_file(planned) or planned[0] > limit or version_change(planned, input_stat(file.location)):
        return None
    try:
        data = whole_file(file.location, planned[0], limit)
    except OSError:
        return None
    if data is not None and (change := version_change(planned, input_stat(file.location))) is not None:
        raise changed(_name(file, unit), "while the run read it", change)
    return data


def _is_jsonl(unit: Unit, file: InputFile) -> bool:
    try:
        return (detect_format(file.location) if unit.format == "auto" else unit.format) == "jsonl"
    except ValueError:
        return False


def _name(file: InputFile, unit: Unit) -> str:
    return f"{printable_path(file.path)} ({unit.source})"
