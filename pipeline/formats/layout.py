"""The run folder: every path ``prep run`` writes under ``--out``, in one place.

The engine writes these paths; stages, the loader, ``prep mix``, the report and the
commands read them. All of them take the names from here, so a folder's layout is
decided once. This module imports nothing of the engine (nor anything else of prep).

::

    docs/<source>/<unit>[.<k>].parquet           kept documents (part k > 0 after a schema change)
    rejects/<source>/<unit>.s<segment>[.<k>].parquet   the ledger, per segment of the stage chain
    tokens/<source>/<unit>.{bin,idx,json,docs.parquet} token shards (file names: token_shards)
    stats/<phase>/<source>/<unit>.json           a unit's completion marker
    stats/global-<segment>/<step>.json           a global stage's reduce/finalize markers
    stats/prepare-<stage>-<k>/<step>.json        finalize markers of a stage whose phases read no documents
    stats/cost/<phase>/<source>/<unit>.json      CPU seconds of a unit (differ run to run)
    work/segments/<segment>/<source>/            documents between segments
    work/global/<segment>/                       a global stage's own files (``work_files`` names them)
    work/ids/<source>/<unit>.npy                 sorted id hashes, for the duplicate-id check
    work/<stage>/                                a stage's own files when its phases read no documents
                                                 (decontaminate's index, a sub-folder per setting)
    stats/duplicate-ids.json                     the duplicate-id check's result, once it ran
    .prep/run.json, .prep/lock, .prep/lease.json the run's state, its lock (local), its lease (remote)
    manifest.json, cost.json

Paths are local (``pathlib.Path``): a remote run works in a local mirror with this same
layout. An object store names a file by its path relative to the folder, ``/``-separated:
``Layout.key`` gives that key for any path of the layout (``Layout()``, of no folder,
gives the relative paths themselves).
"""

from __future__ import annotations

import os
import re
from glob import escape as glob_escape
from pathlib import Path

PARQUET = ".parquet"


class Layout:
    """Every path of an output folder, in one place."""

    DOCS = "docs"
    REJECTS = "rejects"
    TOKENS = "tokens"
    STATS = "stats"
    WORK = "work"
    CONTROL = ".prep"  # the run's own state: never output, never removed while the run holds it
    MANIFEST = "manifest.json"
    COST_SUMMARY = "cost.json"

    # Folders a run creates (and --force removes).
    OWNED = (DOCS, REJECTS, STATS, WORK, TOKENS, CONTROL, MANIFEST, COST_SUMMARY)
    # The folders whose size is the run's output on disk.
    OUTPUT_FOLDERS = (DOCS, REJECTS, TOKENS)

    def __init__(self, out: str | os.PathLike = "."):
        self.out = Path(out)

    def key(self, path: str | os.PathLike) -> str:
        """``path`` (one of this layout's) relative to the folder, ``/``-separated: how a
        run store names it on an object store."""
        return Path(path).relative_to(self.out).as_posix()

    @staticmethod
    def unit_key(source: str, unit: str) -> str:
        """A unit named among every source's, as the run's state records it (``<source>/<unit>``)."""
        return f"{source}/{unit}"

    # -- the run's results ------------------------------------------------------------

    @property
    def manifest(self) -> Path:
        return self.out / self.MANIFEST

    @property
    def cost_summary(self) -> Path:
        return self.out / self.COST_SUMMARY

    @property
    def docs_folder(self) -> Path:
        """``docs/``: one folder per source."""
        return self.out / self.DOCS

    def docs(self, source: str) -> Path:
        return self.docs_folder / source

    def doc_files(self, source: str) -> list[Path]:
        """The kept-document files of ``source``, sorted."""
        return sorted(self.docs(source).glob("*" + PARQUET))

    @property
    def rejects_folder(self) -> Path:
        """``rejects/``: the ledger, one folder per source."""
        return self.out / self.REJECTS

    def rejects(self, source: str) -> Path:
        return self.rejects_folder / source

    def reject_files(self, source: str) -> list[Path]:
        """The ledger files of ``source``, sorted."""
        return sorted(self.rejects(source).glob("*" + PARQUET))

    @property
    def tokens_folder(self) -> Path:
        """``tokens/``: one folder of token shards per source."""
        return self.out / self.TOKENS

    def tokens(self, source: str) -> Path:
        return self.tokens_folder / source

    def shard_prefix(self, source: str, unit: str) -> Path:
        """A unit's token shard, without suffix (``token_shards`` names its files)."""
        return self.tokens(source) / unit

    # -- completion markers and timings -------------------------------------------------
    # A phase names the folder of its markers (and of its timings): segment k runs per unit
    # (``segment-k``); the global stage opening segment k maps per unit (``global-k-map``),
    # then reduces per partition and finalizes once (markers under ``global-k``, timings
    # under ``global-k-reduce`` and ``global-k``); a stage whose phases read no documents,
    # config stage i, finalizes before segment 0 once per setting v (``prepare-i-v``).

    @staticmethod
    def segment_phase(segment: int) -> str:
        return f"segment-{segment}"

    @staticmethod
    def map_phase(segment: int) -> str:
        return f"global-{segment}-map"

    @staticmethod
    def reduce_phase(segment: int) -> str:
        return f"global-{segment}-reduce"

    @staticmethod
    def global_phase(segment: int) -> str:
        return f"global-{segment}"

    @staticmethod
    def prepare_phase(stage: int, variant: int) -> str:
        """The finalize of config stage ``stage`` whose phases read no documents, for its
        ``variant``-th set of files (``global_run.prepare_all``)."""
        return f"prepare-{stage}-{variant}"

    def markers(self, phase: str) -> Path:
        """The folder of one phase's markers."""
        return self.out / self.STATS / phase

    def marker(self, phase: str, source: str, unit: str) -> Path:
        return self.markers(phase) / source / f"{unit}.json"

    def step_marker(self, phase: str, step: str) -> Path:
        """The marker of one step of a global stage's phase (a reduce partition, a finalize task)."""
        return self.markers(phase) / f"{step}.json"

    @property
    def cost_folder(self) -> Path:
        return self.out / self.STATS / "cost"

    def command_wall(self, command: str) -> Path:
        """Wall seconds one ``prep run`` command spent on the run (``cost.CommandWall``)."""
        return self.cost_folder / "commands" / f"{command}.json"

    def cost(self, phase: str, source: str, unit: str) -> Path:
        """CPU seconds of one unit: kept apart from the markers, since timings differ
        from run to run while every other file is byte-identical."""
        return self.cost_folder / phase / source / f"{unit}.json"

    # -- work in progress -----------------------------------------------------------------

    def segment_folder(self, segment: int) -> Path:
        """The documents segment ``segment`` passed on to the next, every source's."""
        return self.out / self.WORK / "segments" / str(segment)

    def segment_docs(self, segment: int, source: str) -> Path:
        return self.segment_folder(segment) / source

    def global_work(self, segment: int) -> Path:
        return self.out / self.WORK / "global" / str(segment)

    def stage_work(self, name: str) -> Path:
        """The work folder of a stage whose phases read no documents, ``work/<name>/``
        (decontaminate's index of its benchmarks), shared by every stage of that name."""
        return self.out / self.WORK / name

    def at(self, key: str) -> Path:
        """The path of the layout's ``key`` (the inverse of ``key``), as a task names a
        folder it was sent: the driver's and a worker's folder need not be one."""
        return self.out / key

    @property
    def id_work(self) -> Path:
        """Each unit's sorted id hashes, for the run's duplicate-id check."""
        return self.out / self.WORK / "ids"

    def unit_ids(self, source: str, unit: str) -> Path:
        return self.id_work / source / f"{unit}.npy"

    @property
    def duplicate_ids(self) -> Path:
        """The duplicate-id check's result, written once its inputs (``id_work``) are all
        there: a rerun reads it instead, since ``work/`` is gone once a run completes."""
        return self.out / self.STATS / "duplicate-ids.json"

    @classmethod
    def run_of(cls, work_folder: str | os.PathLike) -> Path | None:
        """The run folder of a global stage's work folder (``<run>/work/global/<k>``, what
        ``index_from`` names), or None for a path of another shape."""
        path = Path(work_folder)
        if path.name.isdigit() and path.parent.name == "global" and path.parent.parent.name == cls.WORK:
            return path.parent.parent.parent
        return None

    # -- the run's own state ------------------------------------------------------------

    @property
    def control(self) -> Path:
        return self.out / self.CONTROL

    @property
    def state(self) -> Path:
        """What makes the run this run (fingerprint, inputs' versions)."""
        return self.control / "run.json"

    @property
    def lock(self) -> Path:
        """A local folder's lock (``flock``)."""
        return self.control / "lock"

    @property
    def lease(self) -> Path:
        """A remote folder's lease (an object store has no locks)."""
        return self.control / "lease.json"


def file_in(folder: str, key: str) -> str:
    """A file of a run folder named as text, from the folder's own name (``--out`` as
    given, a URI, or its key on an object store) and the file's ``key`` in it
    (``Layout.key``; empty for the folder itself)."""
    return f"{folder}/{key}" if key else folder


# -- part files ------------------------------------------------------------------------------
# A writer of ``<stem>`` writes ``<stem>.parquet``, then ``<stem>.1.parquet``, ... after each
# schema change. A unit's kept documents use the unit's name as stem; its ledger rows of
# segment k use ``ledger_stem``.


def part_name(stem: str, part: int) -> str:
    """The file name of part ``part`` (0 first) of ``stem``."""
    return f"{stem}{PARQUET}" if part == 0 else f"{stem}.{part}{PARQUET}"


def part_files(folder: Path, stem: str) -> list[Path]:
    """The parts of ``stem`` in ``folder``, in part order (``u.parquet``, ``u.1.parquet``, ...)."""
    parts: list[Path] = []
    while (folder / part_name(stem, len(parts))).exists():
        parts.append(folder / part_name(stem, len(parts)))
    return parts


def is_part_file(file_name: str, stem: str) -> bool:
    """Whether ``file_name`` is one of the parts ``part_files`` lists for ``stem``."""
    return re.fullmatch(rf"{re.escape(stem)}(\.\d+)?{re.escape(PARQUET)}", file_name) is not None


def ledger_stem(unit: str, segment: int) -> str:
    """The stem of a unit's ledger files for one segment (``rejects/<source>/<unit>.s<k>``)."""
    return f"{unit}.s{segment}"


def unit_files(folder: Path, unit: str) -> list[Path]:
    """Every Parquet file of ``unit`` in a ``docs/`` or ``rejects/`` source folder, sorted:
    its kept-document parts and its ledger parts of every segment."""
    return sorted(folder.glob(f"{glob_escape(unit)}.*parquet")) if folder.exists() else []


def is_unit_file(file_name: str, unit: str) -> bool:
    """Whether ``file_name`` (in a ``docs/`` or ``rejects/`` source folder) belongs to ``unit``:
    what a remote run fetches before ``unit_files`` lists them."""
    return file_name.startswith(unit + ".")
