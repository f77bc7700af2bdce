"""A global stage's work folder (``Layout.global_work``): the families of files its phases
hand each other, each named once, with its paths and its glob.

Why: a phase declares what it reads and writes as these families (``pipeline.phases``),
and the engine derives from the same declarations what a task fetches from an object
store (whole files, or one partition's slice of a partitioned file), what it removes
between rounds and what it keeps once the run is done. A stage never joins a path of its
work folder itself, so the names it writes and the globs the engine fetches cannot drift.

Three shapes:

* ``PerUnit``: one file per unit, ``<folder>/<source>/<unit><suffix>`` (a map output);
* ``PerIndex``: one file per partition or document range, ``<folder>/<prefix><i:05d><suffix>``;
* ``OneFile``: a single file, ``<name>`` (a marker of the stage's own, a table), or
  ``<key>/<name>`` (``keyed``: one of the files a stage builds per set of options, several
  sets sharing a work folder).
"""

from __future__ import annotations

from dataclasses import dataclass
from glob import escape
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class PerUnit:
    """One file per unit of the run: ``<folder>/<source>/<unit><suffix>``."""

    folder: str
    suffix: str

    def path(self, work: Path, source: str, unit: str) -> Path:
        return Path(work) / self.folder / source / f"{unit}{self.suffix}"

    def glob(self) -> str:
        """Every unit's file, relative to the work folder."""
        return f"{self.folder}/*/*{self.suffix}"

    def unit_glob(self, source: str, unit: str) -> str:
        """Just this unit's file (its name escaped: a unit may hold ``[``)."""
        return escape(PurePosixPath(self.folder, source, f"{unit}{self.suffix}").as_posix())

    def found(self, work: Path, name_of=lambda name: name) -> list[tuple[str, str]]:
        """The (source, unit) pairs that have a file (or, through ``name_of``, a file it
        maps to this family's name: a slice of one), sorted; hidden files are left out."""
        root = Path(work) / self.folder
        pairs = set()
        for source in root.iterdir() if root.is_dir() else ():
            for file in source.iterdir() if source.is_dir() else ():
                name = name_of(file.name) or file.name
                if name.endswith(self.suffix) and not name.startswith("."):
                    pairs.add((source.name, name.removesuffix(self.suffix)))
        return sorted(pairs)


@dataclass(frozen=True)
class PerIndex:
    """One file per partition or document range: ``<folder>/<prefix><i:05d><suffix>``."""

    folder: str
    prefix: str
    suffix: str

    def path(self, work: Path, index: int) -> Path:
        return Path(work) / self.folder / f"{self.prefix}{index:05d}{self.suffix}"

    def paths(self, work: Path, count: int) -> list[Path]:
        """The files of indexes ``0 .. count - 1``, in order."""
        return [self.path(work, i) for i in range(count)]

    def glob(self) -> str:
        return f"{self.folder}/{self.prefix}*{self.suffix}"


@dataclass(frozen=True)
class OneFile:
    """A single file of the work folder."""

    name: str

    def path(self, work: Path) -> Path:
        return Path(work) / self.name

    def glob(self) -> str:
        return escape(self.name)

    @property
    def folder(self) -> str:
        return self.name


def keyed(key: str, names: tuple[str, ...]) -> tuple[OneFile, ...]:
    """The files ``names`` of the sub-folder ``<key>/``: what a stage builds once for one
    set of its options (decontaminate's index, keyed by its n-gram settings and benchmarks),
    beside the sets other sources or stages of the run build in the same work folder."""
    return tuple(OneFile(PurePosixPath(key, name).as_posix()) for name in names)


# A family of any shape: what a phase names among its reads, slices, drops and kept files.
WorkFiles = PerUnit | PerIndex | OneFile


def family_folder(work: Path, files: WorkFiles) -> Path:
    """The folder (or, for a ``OneFile``, the file) under ``work`` that holds ``files``
    alone: what removing the family removes."""
    return Path(work) / files.folder
