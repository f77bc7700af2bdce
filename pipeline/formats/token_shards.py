"""Token shards in Megatron-LM's indexed dataset layout (``.bin`` + ``.idx``): the format
and its writer.

Megatron, NeMo and GPT-NeoX read these files as they are. The ``.idx`` holds, in order:

    magic  b"MMIDIDX\\x00\\x00"          9 bytes
    version                              u64 = 1
    dtype code                           u8  (Megatron's codes: 8 = uint16, 4 = int32, ...)
    sequence count                       u64
    document index length                u64 (documents + 1)
    sequence lengths                     int32[sequence count]   (tokens per sequence)
    sequence pointers                    int64[sequence count]   (byte offset in .bin)
    document index                       int64[documents + 1]    (first sequence of each document)

prep writes one sequence per document, so the document index is 0, 1, ..., n.
All integers are little-endian. The ``.bin`` is the tokens back to back.

Beside each shard prep writes a sidecar ``<prefix>.json`` (tokenizer, vocabulary hash,
EOD id, dtype, counts, sha256 of the ``.bin``) and ``<prefix>.docs.parquet`` (one row per
document, in document-index order: id, source, n_tokens and numeric signals), so a
shard says what it holds without the run that made it.

This module is the format itself: the layout's constants, a shard's file names, the
sidecar, and the writer. Reading lives apart, by job: ``indexed_shard`` opens a shard
(``IndexedShard``, through which every reader comes, checks it first and raises
``ShardError`` naming the file: a damaged shard is refused, never read as garbage or out
of bounds; those checks are most of the reading code), ``shard_merge`` joins shards into
one, and ``pipeline/commands/shard_inspect.py`` describes and decodes them for ``prep shards
inspect``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.util.file_kind import refuse_special
from pipeline.util.records import Optional, RecordError, check_shape

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = 34  # magic, version, dtype code, sequence count, document-index length

# Megatron-LM's DType codes (megatron/core/datasets/indexed_dataset.py).
DTYPE_CODES: dict[type, int] = {
    np.uint8: 1,
    np.int8: 2,
    np.int16: 3,
    np.int32: 4,
    np.int64: 5,
    np.float64: 6,
    np.float32: 7,
    np.uint16: 8,
}
CODE_DTYPES = {code: np.dtype(t) for t, code in DTYPE_CODES.items()}

# Megatron chooses uint16 below this vocabulary size, int32 above.
UINT16_VOCAB_LIMIT = 65500


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size < UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def shard_paths(prefix: str | os.PathLike) -> tuple[Path, Path]:
    prefix = str(prefix)
    return Path(prefix + ".bin"), Path(prefix + ".idx")


def write_index(
    idx_path: str | os.PathLike, dtype: np.dtype, sizes: np.ndarray, document_index: np.ndarray | None = None
) -> None:
    """Write a ``.idx`` for sequences of ``sizes`` tokens stored back to back."""
    dtype = np.dtype(dtype)
    sizes = np.asarray(sizes, dtype=np.int32)
    pointers = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    if document_index is None:
        document_index = np.arange(len(sizes) + 1, dtype=np.int64)
    document_index = np.asarray(document_index, dtype=np.int64)
    with open(idx_path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", VERSION))
        f.write(struct.pack("<B", DTYPE_CODES[dtype.type]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(document_index)))
        f.write(sizes.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(document_index.astype("<i8").tobytes())


class ShardWriter:
    """Streams documents into ``<bin_path>`` and writes ``<idx_path>`` on ``close``.

    The caller chooses the paths (usually temporary names from ``UnitContext.atomic``);
    this class only writes bytes. Memory holds one int32 per document, not the tokens.
    """

    def __init__(self, bin_path: str | os.PathLike, idx_path: str | os.PathLike, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        if self.dtype.type not in DTYPE_CODES:
            raise ValueError(f"unsupported token dtype {self.dtype}")
        self.idx_path = Path(idx_path)
        self._bin = open(bin_path, "wb")
        self._sizes: list[np.ndarray] = []
        self.documents = 0
        self.tokens = 0
        self._sha256 = hashlib.sha256()

    def add_documents(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Append documents given as one flat token array and the length of each."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != len(tokens):
            raise ValueError("lengths do not add up to the number of tokens")
        if len(lengths) and (lengths.max() > np.iinfo(np.int32).max or lengths.min() < 0):
            raise ValueError("a document length does not fit the index's int32")
        data = np.ascontiguousarray(tokens, dtype=self.dtype).tobytes()
        self._bin.write(data)
        self._sha256.update(data)
        self._sizes.append(lengths.astype(np.int32))
        self.documents += len(lengths)
        self.tokens += len(tokens)

    @property
    def bin_sha256(self) -> str:
        """sha256 of the ``.bin`` bytes written so far (computed while writing, no re-read)."""
        return self._sha256.hexdigest()

    def add_document(self, tokens: np.ndarray) -> None:
        self.add_documents(np.asarray(tokens), np.array([len(tokens)]))

    def close(self) -> None:
        self._bin.close()
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, dtype=np.int32)
        write_index(self.idx_path, self.dtype, sizes)


class ShardError(ValueError):
    """A shard whose files disagree with the format or with each other.

    Raised when the shard is opened, before any token is read: reading on would give
    tokens from the wrong place, values read out of bounds, or a crash in a numba kernel.
    The message starts with the file at fault and says what is wrong with it.
    """


def source_folders(tokens: str | os.PathLike) -> list[Path]:
    """The ``<source>/`` folders of a tokens folder, in name order. A hidden folder is no
    source (a source name starts with a letter or digit): the loader keeps its index cache
    in ``tokens/.loader_cache`` once a run has been read."""
    return sorted(p for p in Path(tokens).iterdir() if p.is_dir() and not p.name.startswith("."))


def list_shards(folder: str | os.PathLike) -> list[str]:
    """Prefixes of the shards in ``folder``, sorted by name: every ``.idx``, and every
    prep sidecar whose ``.idx`` is gone.

    A shard is listed whether or not its ``.bin`` is there: opening it then fails naming
    the missing file, where skipping it would silently drop its documents from a corpus.
    (Writers rename a shard's ``.idx`` into place after its ``.bin``, so a visible
    ``.idx`` is a finished write.)
    """
    folder = Path(folder)
    found = {str(p.with_suffix("")) for p in folder.glob("*.idx")}
    for path in folder.glob("*.json"):
        prefix = str(path)[: -len(".json")]
        if prefix not in found and _is_sidecar(path):
            found.add(prefix)
    return sorted(found)


def _is_sidecar(path: Path) -> bool:
    try:
        refuse_special(path)  # a FIFO named *.json would block the read for good
        return json.loads(path.read_text()).get("format") == SIDECAR_FORMAT
    except (OSError, ValueError, RecursionError, AttributeError):  # RecursionError: nested too deep to parse
        return False


# --- the self-describing sidecar -------------------------------------------------------

SIDECAR_FORMAT = "prep.token_shard"
SIDECAR_VERSION = 1
# What must agree for two shards to share a folder or be merged.
COMPATIBILITY_KEYS = ("vocab_sha256", "dtype", "eod_id", "bos_id")


class IncompatibleShards(ValueError):
    """Shards made by different tokenizers or with different dtypes cannot be combined."""


def sidecar_path(prefix: str | os.PathLike) -> Path:
    return Path(str(prefix) + ".json")


def docs_path(prefix: str | os.PathLike) -> Path:
    return Path(str(prefix) + ".docs.parquet")


def shard_prefix(path: str | os.PathLike) -> str:
    """The prefix of a shard named by its prefix or by any of its files.

    Unit names may themselves end in ``.json`` (an input ``foo.json``), so a path that is
    already the prefix of an existing shard is taken as it is.
    """
    path = str(path)
    if os.path.exists(path + ".idx"):
        return path
    for suffix in (".docs.parquet", ".bin", ".idx", ".json"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def sidecar(
    *,
    tokenizer: Any,
    dtype: np.dtype,
    eod_id: int | None,
    bos_id: int | None,
    documents: int,
    tokens: int,
    bin_sha256: str,
) -> dict[str, Any]:
    """The sidecar's content for a shard written with ``tokenizer`` (a ``pipeline.text.tokenizers.Tokenizer``)."""
    return {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "tokenizer": tokenizer.name,
        "tokenizer_spec": tokenizer.spec,
        "vocab_size": int(tokenizer.vocab_size),
        "vocab_sha256": tokenizer.vocab_sha256,
        "eod_id": eod_id,
        "bos_id": bos_id,
        "dtype": np.dtype(dtype).name,
        "documents": int(documents),
        "tokens": int(tokens),
        "bin_sha256": bin_sha256,
    }


def write_sidecar(path: str | os.PathLike, meta: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_sidecar(prefix: str | os.PathLike) -> dict[str, Any] | None:
    """The sidecar of a shard, or None when the shard has none (made by another tool)."""
    path = sidecar_path(prefix)
    if not path.exists():
        return None
    try:
        refuse_special(path)  # a FIFO would block the read for good
        meta = json.loads(path.read_text())
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep to parse
        raise ShardError(f"{path}: unreadable sidecar ({e})") from None
    except OSError as e:
        raise ShardError(f"{path}: unreadable sidecar ({e.strerror or e})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise ShardError(f"{path}: not a prep token shard sidecar")
    _check_sidecar(meta, path)
    return meta


TOKEN_DTYPES = tuple(sorted(np.dtype(t).name for t in DTYPE_CODES if np.dtype(t).kind in "iu"))

# What readers take from a sidecar, by type (absent in sidecars of another tool's shard).
SIDECAR_SHAPE = {
    "tokenizer": Optional((str, None)),
    "tokenizer_spec": Optional((str, None)),
    "vocab_size": Optional(int),
    "vocab_sha256": Optional((str, None)),
    "eod_id": Optional((int, None)),
    "bos_id": Optional((int, None)),
    "dtype": Optional(str),
    "documents": Optional(int),
    "tokens": Optional(int),
}


def _check_sidecar(meta: dict[str, Any], path: Path) -> None:
    """Refuse a sidecar whose fields cannot describe a shard (a hand edit, a damaged copy):
    ``prep mix`` copies them into ``mix.json`` and the loader frames documents by them."""
    try:
        check_shape(meta, SIDECAR_SHAPE, path)
    except RecordError as error:
        raise ShardError(str(error)) from None
    vocab = meta.get("vocab_size")
    problems = [f"vocab_size {vocab} is not positive"] if vocab is not None and vocab < 1 else []
    limit = vocab if vocab else 2**32  # a sidecar without a vocabulary size bounds ids by the widest dtype
    for key in ("eod_id", "bos_id"):
        token = meta.get(key)
        if token is not None and not 0 <= token < limit:
            problems.append(f"{key} {token} is outside the vocabulary")
    problems += [f"{key} {meta[key]} is negative" for key in ("documents", "tokens") if meta.get(key, 0) < 0]
    if "dtype" in meta and meta["dtype"] not in TOKEN_DTYPES:
        problems.append(f"dtype {meta['dtype']!r} is not a token dtype ({', '.join(TOKEN_DTYPES)})")
    if problems:
        raise ShardError(f"{path}: not a valid prep token shard sidecar: {'; '.join(problems)}")


def check_compatible(expected: dict[str, Any], found: dict[str, Any], where: str) -> None:
    """Refuse ``found`` unless it was made like ``expected`` (same vocabulary, dtype, EOD, BOS)."""
    diffs = [
        f"{k} {found.get(k)!r} != {expected.get(k)!r}" for k in COMPATIBILITY_KEYS if found.get(k) != expected.get(k)
    ]
    if diffs:
        raise IncompatibleShards(
            f"{where} was made by tokenizer {found.get('tokenizer')!r}, not {expected.get('tokenizer')!r} "
            f"({'; '.join(diffs)}): shards of different tokenizers or dtypes cannot be combined"
        )


def check_folder_compatible(folder: str | os.PathLike, meta: dict[str, Any], exclude: str | os.PathLike) -> None:
    """Refuse to add a shard made like ``meta`` to a folder whose shards were made otherwise.

    Shards in one folder are read as one stream, so they must share a tokenizer and dtype.
    Checking one existing sidecar suffices: each was checked against the others when written.
    """
    exclude_path = sidecar_path(exclude).resolve()
    for path in sorted(Path(folder).glob("*.json")):
        if path.resolve() == exclude_path:
            continue
        found = read_sidecar(str(path)[: -len(".json")])
        if found is not None:
            check_compatible(meta, found, f"{path} (already in {folder})")
            return
