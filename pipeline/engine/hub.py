"""Inputs on the Hugging Face Hub: ``hf://`` paths, listed and read through huggingface_hub's
file system (``HfFileSystem``, the fsspec implementation the ``datasets`` ecosystem uses).

A source names Hub files as it names files on S3, and the engine treats them alike:
globbed when the config loads, copied to scratch while a unit reads them (``storage``)::

    paths = ["hf://datasets/allenai/c4/en/c4-train.0000*-of-01024.json.gz"]
    paths = ["hf://datasets/allenai/c4@<commit sha>/en/c4-validation.0000[0-3]-of-00008.json.gz"]
    paths = ["hf://datasets/<repo>@~parquet/<config>/<split>/*.parquet"]   # the Parquet conversion

The path is ``hf://[datasets/|spaces/]<namespace>/<name>[@<revision>]/<path in the repo>``
(no ``datasets/``: a model repo). A revision is a branch (``@main``, the default), a tag, a
commit sha, a pull request (``@refs/pr/3``) or the Hub's Parquet conversion of a dataset,
``@refs/convert/parquet``. huggingface_hub 2.4.0 parses only that long form as the
conversion branch (``~parquet`` would go to the Hub as the name of a branch), so prep
rewrites the DuckDB-style shorthand ``@~parquet`` to it; either way the files are
``<config>/<split>/NNNN.parquet`` (``<config>/partial-<split>/`` for a partial conversion).
Wildcards work within the path in the repo, not in the repo id or revision.

Credentials: huggingface_hub's own, read by it: the ``HF_TOKEN`` environment variable, else
the token ``hf auth login`` saved. Needed for private and gated repos, and it raises the
Hub's rate limits. prep never prints it.

An input's version (resume, the run fingerprint's input check) is its size and the Hub's
content hash from the listing: the LFS sha256 for large files, the git blob id otherwise.
A file rewritten at the Hub makes a finished run stale, as a rewritten S3 object does; a
commit sha revision pins the inputs for good.

huggingface_hub (``pip install -e ".[hub]"``; ``datasets`` brings it too) is imported only
when a run names an hf:// path. The tests use a local stand-in of the Hub; a one-time check
against the real one (a 40 MB file, a minute; the second run finds it done and copies nothing)::

    cat > /tmp/hf.toml <<'EOF'
    [sources.c4]
    paths = ["hf://datasets/allenai/c4/en/c4-validation.00000-of-00008.json.gz"]
    [[stages]]
    name = "length"
    min_chars = 100
    EOF
    prep run /tmp/hf.toml --out /tmp/hf-out && prep run /tmp/hf.toml --out /tmp/hf-out
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from pipeline.util.globbing import glob_regex, has_magic

SCHEME = "hf://"
READ_BLOCK = 8 << 20
# `repo@~parquet` -> `repo@refs/convert/parquet`: the '@' right after `namespace/name`.
_PARQUET_ALIAS = re.compile(r"^((?:(?:datasets|spaces|models)/)?[^/@]+/[^/@]+)@~parquet(?=/|$)")


class HubError(OSError):
    """A Hub path that cannot be read, in one line that names it (no errno: the message is all)."""


def is_hub(path: object) -> bool:
    return str(path).startswith(SCHEME)


@cache
def filesystem():
    """The fsspec file system of hf:// paths, one per process (the seam tests replace)."""
    try:
        from huggingface_hub import HfFileSystem
    except ImportError:
        raise HubError('hf:// paths need huggingface_hub: pip install -e ".[hub]"') from None
    return HfFileSystem()


def _path(uri: str) -> str:
    """The path HfFileSystem takes: no scheme, the ``~parquet`` shorthand spelled out."""
    return _PARQUET_ALIAS.sub(r"\1@refs/convert/parquet", uri[len(SCHEME) :].strip("/"))


def glob(pattern: str) -> list[str]:
    """The files matching a glob URI (the same wildcards as ``storage.glob_remote``), sorted.

    Checks the repo and revision first (a missing one is an error, not an empty match) and
    reads the first byte of the first match, so a gated repo without access fails here,
    before any work starts."""
    fs, path = filesystem(), _path(pattern)
    parts = path.split("/")
    fixed = next((i for i, part in enumerate(parts) if has_magic(part)), len(parts))
    if fixed < len(parts) and fixed <= (2 if parts[0] in ("datasets", "spaces", "models") else 1):
        raise HubError(f"{pattern}: wildcards work within the path in the repo, not in the repo id or revision")
    with errors(pattern):
        fs.resolve_path(path)  # raises for a repo or revision the Hub does not have (or hides)
        if fixed == len(parts):
            matches = [path] if fs.isfile(path) else []
        else:
            regex = re.compile(glob_regex(path))
            matches = sorted(p for p in fs.find("/".join(parts[:fixed])) if regex.fullmatch(p))
        if matches:
            with fs.open(matches[0], "rb", block_size=0) as probe:
                probe.read(1)
    return [SCHEME + p for p in matches]


def stat(uri: str) -> list[int | str]:
    """Size and content hash (``sha256:...`` of an LFS file, ``git:...`` blob id otherwise),
    from the folder listing the glob already fetched."""
    fs, path = filesystem(), _path(uri)
    with errors(uri):
        info = fs.info(path)
        if info.get("type") != "file":
            raise HubError(f"{uri} is not a file on the Hub")
        if not (info.get("lfs") or info.get("blob_id") or info.get("xet_hash")):
            info = fs.info(path, expand_info=True)  # a listing without hashes: ask for this file
    lfs = info.get("lfs") or {}
    if lfs.get("sha256"):
        return [info["size"], f"sha256:{lfs['sha256']}"]
    if info.get("blob_id"):
        return [info["size"], f"git:{info['blob_id']}"]
    return [info["size"], f"xet:{info['xet_hash']}"] if info.get("xet_hash") else [info["size"]]


def download(uri: str, local: Path) -> None:
    """Copy a Hub file to ``local`` byte for byte (Xet or HTTP, as huggingface_hub chooses)."""
    with errors(uri):
        filesystem().get_file(_path(uri), str(local))


def sha256(uri: str) -> str:
    """sha256 of a Hub file's bytes, streamed."""
    digest = hashlib.sha256()
    with errors(uri), filesystem().open(_path(uri), "rb", block_size=0) as source:
        while block := source.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def errors(uri: str) -> Iterator[None]:
    """huggingface_hub's exceptions as a ``HubError`` whose one line names ``uri`` and says
    what to do. Never the token: messages name only whether one is set."""
    try:
        yield
    except HubError:
        raise
    except Exception as error:
        raise HubError(f"{uri}: {_why(error)}") from error


def _why(error: Exception) -> str:
    from huggingface_hub import errors as hf

    # HfFileSystem raises FileNotFoundError for a missing repo or revision, with the
    # Hub's own error as its cause; the cause says which.
    cause = error.__cause__ if isinstance(error, FileNotFoundError) and error.__cause__ else error
    status = getattr(getattr(cause, "response", None), "status_code", None)
    if isinstance(cause, hf.GatedRepoError):
        if _has_token():
            return "gated repository and the token set (HF_TOKEN) has no access: accept its terms on huggingface.co"
        return "gated repository and no HF_TOKEN set: accept its terms on huggingface.co, then set HF_TOKEN"
    if isinstance(cause, hf.RepositoryNotFoundError):
        access = "one the token set (HF_TOKEN) can read" if _has_token() else "HF_TOKEN"
        return f"repository not found (check the name, and datasets/ for a dataset; a private one needs {access})"
    if isinstance(cause, hf.RevisionNotFoundError):
        return "revision not found in the repository (a branch, tag, commit sha or refs/convert/parquet)"
    if isinstance(cause, hf.DisabledRepoError):
        return "repository disabled by its owner"
    if isinstance(cause, (FileNotFoundError, hf.EntryNotFoundError)):
        return "no such file or folder in the repository"
    if isinstance(cause, (hf.HFValidationError, ValueError, NotImplementedError)):
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        return f"not a Hub path (hf://[datasets/]<namespace>/<name>[@<revision>]/<path>): {first}"
    if status == 401:
        return "the Hub refused the token in HF_TOKEN (expired or wrong?)"
    if status == 429:
        return "rate-limited by the Hub: wait and run the same command again (a token in HF_TOKEN raises the limit)"
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"cannot read from the Hub: {first}"


def _has_token() -> bool:
    from huggingface_hub import get_token

    return bool(getattr(filesystem(), "token", None) or get_token())
