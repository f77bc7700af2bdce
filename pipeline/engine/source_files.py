"""A source's input files from its path patterns: local globs (``**`` included), the
files of ``datasets`` folders, URIs on an object store; each file once however many
patterns or links reach it, and never a prep run's own output.

What is no file to read (a FIFO, a device, a dangling link) is listed, not dropped: the
reader quarantines it as one ``unreadable-file`` row, so the user hears of it.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from pipeline.engine.input_files import RealPaths, not_a_file
from pipeline.engine.storage import glob_remote, is_remote
from pipeline.formats.hf_dataset_folder import expand_hf_folder, is_hf_folder
from pipeline.formats.layout import Layout
from pipeline.readers import detect_format
from pipeline.util.globbing import GlobError, glob_reporting, has_magic, walk_root


class SourceFilesError(ValueError):
    """A pattern that names no input; the message names the source and the pattern."""


def source_files(name: str, patterns: list[str], base: Path, out: str | Path | None) -> list[Path | str]:
    """Source ``name``'s inputs, in pattern order, each once; patterns are relative to ``base``."""
    real = RealPaths()
    seen: set[str] = set()
    return [
        file
        for pattern in patterns
        for file, key in _pattern_inputs(name, pattern, base, out, real)
        if not (key in seen or seen.add(key))
    ]


def _identity(file: Path | str, real: RealPaths) -> str:
    """One name per input, so a file reached by two paths is read once. What is no file
    keeps its own path: two links to ``/dev/zero`` are two inputs a user must hear about."""
    if isinstance(file, str):
        return file
    if (path := real.regular(file)) is not None:
        return path
    return str(file.resolve()) if not_a_file(file) is None else os.path.abspath(file)


def _pattern_inputs(
    name: str, pattern: str, base: Path, out: str | Path | None, real: RealPaths
) -> list[tuple[Path | str, str]]:
    """The inputs one of source ``name``'s patterns names: local paths, or URIs of files on
    an object store, each with its ``_identity``; refused when there are none."""
    remote = is_remote(pattern)
    full = pattern if remote or Path(pattern).is_absolute() else str(base / pattern)
    try:
        found = [(uri, uri) for uri in glob_remote(full)] if remote else _local_inputs(full, real)
    except (OSError, GlobError) as error:
        raise SourceFilesError(f"sources.{name}: {pattern!r}: {error}") from None
    if not found:
        raise SourceFilesError(
            f"sources.{name}: {pattern!r} matches no file"
            + ("" if remote else f" (looked for {full}{_hint(pattern, full)})")
        )
    return _matched_inputs(name, pattern, _not_output(found, walk_root(full), out))


def _hint(pattern: str, full: str) -> str:
    """Why a local pattern that names something on disk matched no file: a plain folder
    (its files are the inputs), or a file whose name holds a wildcard character; or why
    one that names nothing might: a ``~``, which only a shell expands."""
    if pattern.startswith("~"):
        return "; ~ is not expanded in a config: write the folder's full path"
    if os.path.isdir(full):
        return "; it is a folder: name its files, with a pattern such as /*.jsonl after it"
    if has_magic(full) and os.path.lexists(full):
        return "; a file of that very name exists, but * ? [ are wildcards: write [*] [?] [[] for the characters"
    return ""


def _local_inputs(pattern: str, real: RealPaths) -> list[tuple[Path, str]]:
    """The inputs a local pattern names, each with its ``_identity``: its files, the files
    of the datasets folders it matches, and every match that is no file to read but must
    be reported, not passed over (a FIFO, a device, a socket, a dangling link, a folder
    named like a data file, a folder the walk could not list): each becomes one
    ``unreadable-file`` ledger row, without being opened. A plain folder a pattern
    reaches (``data/*`` over ``data/sub``, or each folder ``**`` walks) holds inputs; it
    is none itself.

    A regular file that is no link, nearly every match, is told by the one ``lstat``
    that gives its identity (``RealPaths``): a ``stat`` to ask whether it is a folder,
    then an ``lstat`` for its real path, were two calls a file (listing 20,000 files took
    0.28-0.36 CPU-s; 0.26-0.29 with one)."""
    matches, unlisted = glob_reporting(pattern)
    inputs: list[tuple[Path, str]] = []
    for match in matches:
        if (path := real.regular(match)) is not None:
            inputs.append((match, path))
        elif not match.is_dir():
            inputs.append((match, _identity(match, real)))
        elif is_hf_folder(match):
            inputs.extend((file, _identity(file, real)) for file in expand_hf_folder(match))
        elif match in unlisted or _named_like_data(match):
            inputs.append((match, _identity(match, real)))
    listed = {file for file, _ in inputs} if unlisted else set()
    return inputs + [(folder, _identity(folder, real)) for folder in unlisted if folder not in listed]


def _matched_inputs(name: str, pattern: str, inputs: list) -> list:
    if not inputs:
        raise SourceFilesError(
            f"sources.{name}: {pattern!r} matches only a prep run's output (in --out, or in a folder holding "
            ".prep/run.json that its wildcards reach), which is never an input"
        )
    return inputs


def _not_output(files: list[tuple[Path | str, str]], root: str, out: str | Path | None) -> list[tuple[Path | str, str]]:
    """``files`` (each with its ``_identity``) without a prep run's output: what is under
    this run's ``out``, however the pattern reaches it, and what is in a folder holding a
    run's record (``.prep/run.json``) that the pattern's wildcards reach (``data/**`` over
    ``data/out``).

    Why: a run reading its own output saw "different inputs" on every rerun (so a killed
    run could not resume) and, with --force, read what it was writing. A run folder the
    pattern names before its first wildcard (``prev/docs/**/*.parquet``) is read: feeding a
    run's output to the next is a choice, made by naming it."""
    if files and isinstance(files[0][0], str):  # URIs: a run's record is not looked for, which costs requests
        return [(uri, key) for uri, key in files if out is None or not _is_below(uri, str(out))]
    below = os.path.realpath(root)
    own = os.path.realpath(out) if out is not None and not is_remote(out) else None
    is_run = cache(lambda folder: Layout(Path(folder)).state.is_file())
    kept = []
    for file, path in files:
        if own is not None and (path == own or _is_below(path, own)):
            continue
        if not any(is_run(folder) for folder in _folders_between(below, path)):
            kept.append((file, path))
    return kept


def _is_below(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _folders_between(top: str, path: str) -> list[str]:
    """The folders strictly below ``top`` that hold ``path`` (real paths, as text: Path
    objects for each folder of each file were most of the listing's time at 20,000 files)."""
    if not _is_below(path, top):
        return []
    prefix = top.rstrip("/") + "/"
    parts = path[len(prefix) :].split("/")[:-1]
    return [prefix + "/".join(parts[: k + 1]) for k in range(len(parts))]


def _named_like_data(path: Path) -> bool:
    try:
        detect_format(path)
    except ValueError:
        return False
    return True
