"""The plan of a run: its units of work and its segments (the folders everything goes in
are ``pipeline.formats.layout``).

A unit is one input file of one source, one piece of a large one (``[run]
split_bytes``; where files are cut is ``pipeline.readers.splits``), or small files packed
together (``[run] group_bytes``). A file's pieces are named after it, numbered in order
(``00003-big.jsonl.part-00001``), a pack after its first and last file
(``00004-a.jsonl.to-00950``), so sorting unit names keeps input order, and their outputs
read in name order are the inputs', whatever the split and pack sizes. The stage chain
is cut at each global stage (dedup) into segments; segment ``k`` runs per unit and,
unless it is the last, leaves the documents it kept under ``work/segments/k/`` for
global stage ``k`` to map over and filter.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

import orjson

from pipeline.engine.config import Config, RunSettings, SourceConfig, StageConfig
from pipeline.engine.input_files import RealPaths, not_a_file
from pipeline.engine.storage import is_remote
from pipeline.readers import detect_format
from pipeline.readers.common import Span
from pipeline.readers.splits import plan_spans
from pipeline.util.printable import printable_path

# A unit's files are named by the unit (``<unit>.docs.parquet``, with a pack's ``.to-<k>``
# or a piece's ``.part-<k>``), and each is first written under a temporary name 39 bytes
# longer (``util/atomic.py``): a stem from an input file's name past this length made
# names over the 255 bytes a file system allows, and the run failed on a legal input
# name. A longer stem keeps its start and ends in a digest of the whole name.
STEM_CHARS = 160

PLAN_THREADS = min(8, os.cpu_count() or 1)


# A packed unit holds at most this many files: its marker lists each file read (path,
# size, sha256), so the cap bounds a marker at about 150 KB however small the files are,
# and a unit killed part-way redoes at most this many.
PACK_FILES = 1000


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input file as units read it."""

    index: int  # position of the file in the source's sorted file list
    location: str  # its local path, or its URI on an object store
    key: str  # how the ledger and generated ids name the file (printable, valid UTF-8)
    # The file's ``input_stat`` when the run planned it (the only version it reads), as
    # JSON text: 100 bytes against the 220 of a tuple of four large ints (the driver holds
    # one a file; orjson's bytes would hold a 1 KB buffer each).
    stat: str = "[]"

    @property
    def version(self) -> tuple:
        return tuple(orjson.loads(self.stat))

    @property
    def size(self) -> int:
        """Its size when planned (what is no file: 0)."""
        version = self.version
        return int(version[0]) if version else 0

    @property
    def path(self) -> Path | str:
        """The file as readers take it: a local ``Path``, or the URI of a remote file. Kept
        as text until asked for: a ``Path`` holds 410 bytes, its text 95, and the driver
        holds every file of the run (at a million files, 300 MB)."""
        return self.location if is_remote(self.location) else Path(self.location)


@dataclass(frozen=True, slots=True)
class Unit:
    """One input file of a source, a piece of a large one (``span``), or several small
    ones packed in input order (``[run] group_bytes``): below a few MB a file costs a
    unit more in its own outputs, marker and task than in reading it."""

    source: str
    name: str  # unique within the source, safe as a file name
    format: str
    text_field: str
    id_field: str
    files: tuple[InputFile, ...]  # in input order; exactly one when ``span`` is set
    span: Span | None = None  # the piece of the file this unit reads (None: all of it)
    minhash: float | None = None  # RedPajama-V2: the MinHash threshold whose bands are read

    @property
    def reports_file(self) -> bool:
        """Whether this unit records its files' sizes and sha256 (one unit per file does)."""
        return self.span is None or self.span.start == 0

    @property
    def first_index(self) -> int:
        return self.files[0].index

    @property
    def files_label(self) -> str:
        """The unit's files in words, for messages: the file, or a pack's first and last."""
        if len(self.files) == 1:
            return self.files[0].key
        return f"{self.files[0].key} .. {self.files[-1].key} ({len(self.files)} files)"


@dataclass
class Segment:
    index: int
    entry: StageConfig | None  # the global stage whose filter opens this segment (None for the first)
    stages: list[StageConfig]  # per-document stages, in order
    last: bool


def plan_units(config: Config, version: Callable[[Path | str], tuple]) -> list[Unit]:
    """The units of every source, in input order; ``version`` gives a file's
    ``input_stat`` (whose first value is its size), asked once a file as its record is
    made, but of a local regular file that is no link, which the ``lstat`` that finds its
    real path tells (one call a file, not two)."""
    units: list[Unit] = []
    for source in config.sources.values():
        real = RealPaths()
        paths, versions = [], []  # two lists, not a pair a file: the driver's peak memory grows with the files
        for file in source.files:
            path, text = _path_and_version(file, real, version)
            paths.append(path)
            versions.append(text)
        keys = _file_keys(paths)
        del paths
        inputs = [InputFile(i, str(file), keys[i], versions[i]) for i, file in enumerate(source.files)]
        units += _source_units(source, inputs, _source_spans(source, inputs, config.run), config.run.group_bytes)
    return units


def _source_spans(source: SourceConfig, files: list[InputFile], run: RunSettings) -> list[list[Span] | None]:
    """Each file's pieces (None: read whole). Only a local file over ``split_bytes`` (by
    its planned size) may be cut, and finding its cuts reads it (JSON lines) or its footer:
    those files in parallel, since the reads and the native newline counts release the
    GIL. The rest are never opened here: one task each in a pool was 1 s a 20,000 files."""
    large = [k for k, file in enumerate(files) if _may_split(file, run.split_bytes)]
    pieces: list[list[Span] | None] = [None] * len(files)
    with ThreadPoolExecutor(PLAN_THREADS) as pool:
        found = pool.map(lambda k: _spans(files[k].path, source.format, run), large)
        for k, spans in zip(large, found):
            pieces[k] = spans
    return pieces


def _may_split(file: InputFile, split_bytes: int) -> bool:
    """A local file larger than ``split_bytes`` when planned; what is no file has size 0
    (``input_stat``), so it is never opened."""
    return split_bytes > 0 and not is_remote(file.location) and file.size > split_bytes


def _source_units(source: SourceConfig, files: list[InputFile], pieces: list, group_bytes: int) -> list[Unit]:
    """One source's units: a unit per file or piece, files below ``group_bytes`` packed
    in order into units of about that size (at most ``PACK_FILES``). Names start with the
    first file's index, so sorting them keeps input order."""
    width = max(5, len(str(len(files) - 1)))
    units: list[Unit] = []
    pack: list[InputFile] = []
    packed = 0  # bytes in ``pack``

    def close_pack() -> None:
        nonlocal packed
        packed = 0
        if pack:
            name = _file_name(pack[0], width) + (f".to-{pack[-1].index:0{width}d}" if len(pack) > 1 else "")
            units.append(
                Unit(
                    source.name,
                    name,
                    source.format,
                    source.text_field,
                    source.id_field,
                    tuple(pack),
                    minhash=source.minhash,
                )
            )
            pack.clear()

    for file, spans in zip(files, pieces):
        size = file.size
        if spans is None and size < group_bytes:
            pack.append(file)
            packed += size
            if packed >= group_bytes or len(pack) >= PACK_FILES:
                close_pack()
            continue
        close_pack()
        whole = Unit(
            source.name,
            _file_name(file, width),
            source.format,
            source.text_field,
            source.id_field,
            (file,),
            minhash=source.minhash,
        )
        if spans is None:
            units.append(whole)
            continue
        digits = max(5, len(str(len(spans) - 1)))
        units += [replace(whole, name=f"{whole.name}.part-{k:0{digits}d}", span=span) for k, span in enumerate(spans)]
    close_pack()
    return units


def _file_name(file: InputFile, width: int) -> str:
    """A file's unit name: its index, then its name made safe as a file name, cut to
    ``STEM_CHARS`` (see there)."""
    name = PurePosixPath(file.location).name
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    if len(stem) > STEM_CHARS:
        digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        stem = f"{stem[: STEM_CHARS - 17]}-{digest}"
    return f"{file.index:0{width}d}-{stem}"


def _spans(path: Path, fmt: str, run: RunSettings) -> list[Span] | None:
    """The pieces of a local file (remote files are read whole: they are fetched whole)."""
    if not_a_file(path) is not None:  # what is no file is never opened
        return None
    return plan_spans(path, detect_format(path) if fmt == "auto" else fmt, run.split_bytes, run.block_bytes)


def _file_keys(paths: list[str]) -> list[str]:
    """Names for files (their ``_path_and_version`` paths), relative to the folder they
    share (stable across machines)."""
    if not paths:
        return []
    common = _common_folder(paths)
    cut = len(common.rstrip("/")) + 1 if common else 0
    return [printable_path(p[cut:]) for p in paths]


def _common_folder(paths: list[str]) -> str:
    """The deepest folder holding every path, found by shortening the first one's folder
    as needed: ``posixpath.commonpath`` splits every path into a list of names first, the
    largest allocation of planning (17 MB at 30,000 files)."""
    common = posixpath.dirname(paths[0])
    for path in paths:
        while common not in ("", "/") and not path.startswith(common + "/"):
            common = posixpath.dirname(common)
    return common


def _path_and_version(file: Path | str, real: RealPaths, version: Callable[[Path | str], tuple]) -> tuple[str, str]:
    """A file's full path for its key, and its version as ``InputFile.stat`` holds it
    (``plan_units``). The path is its real path, or for what is no file (a link to
    ``/dev/zero``) the link's own, which is what the user put there and the ledger names.
    Text, not a Path: at a million files the Path objects were seconds of planning."""
    if isinstance(file, str):
        path = str(PurePosixPath(file.split("://", 1)[1]))
    elif (found := real.regular_version(file)) is not None:
        path, known = found
        return path, _version_text(known)
    else:
        path = _key_path(file)
    return path, _version_text(version(file))


def _version_text(version: Sequence[int | str]) -> str:
    """The version as ``InputFile.stat`` holds it, which only ``orjson`` reads back: its
    text, the same as a compact ``json.dumps`` for a local file's integers, in a tenth of
    the time (2 against 0.2 microseconds: 40 ms of planning 20,000 files)."""
    return orjson.dumps(version).decode()


def _key_path(file: Path) -> str:
    """The key's path of a local file that is not a regular file and no link."""
    if not_a_file(file) is not None:
        return str(PurePosixPath(file.parent.resolve() / file.name))
    return str(PurePosixPath(file.resolve()))


def plan_segments(config: Config) -> list[Segment]:
    segments: list[Segment] = []
    entry: StageConfig | None = None
    current: list[StageConfig] = []
    for stage in config.stages:
        if stage.is_global:
            segments.append(Segment(len(segments), entry, current, last=False))
            entry, current = stage, []
        else:
            current.append(stage)
    segments.append(Segment(len(segments), entry, current, last=True))
    return segments


def stage_labels(config: Config) -> list[str]:
    """A unique label per configured stage: its name, numbered when a name repeats."""
    names = [s.name for s in config.stages]
    return [n if names.count(n) == 1 else f"{n}#{names[:i].count(n) + 1}" for i, n in enumerate(names)]
