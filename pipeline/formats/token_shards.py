"""Token shards in Megatron-LM's indexed dataset layout (``.bin`` + ``.idx``).

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

Every reader opens shards through ``IndexedShard``, which checks them first, cheaply (the
``.idx`` arrays, the ``.bin``'s size, the sidecar), and raises ``ShardError`` naming the
file: a damaged shard is refused, never read as garbage or out of bounds.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pipeline.util.atomic import temp_path

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1

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


HEADER_BYTES = 34  # magic, version, dtype code, sequence count, document-index length


def _read_header(idx_path: Path) -> tuple[np.dtype, int, int]:
    """Dtype, sequence count and document-index length of a ``.idx``.

    The counts are checked against the file's size before any array is mapped, so that
    garbage counts (huge, or a truncated file) fail here instead of reading past the end.
    """
    try:
        size = idx_path.stat().st_size
    except FileNotFoundError:
        raise ShardError(f"{idx_path}: missing (the shard's index)") from None
    if size < HEADER_BYTES:
        raise ShardError(f"{idx_path}: truncated index ({size} bytes; the header alone takes {HEADER_BYTES})")
    with open(idx_path, "rb") as f:
        header = f.read(HEADER_BYTES)
    if header[:9] != MAGIC:
        raise ShardError(f"{idx_path}: not a Megatron indexed dataset index (bad magic {header[:9]!r})")
    (version,) = struct.unpack("<Q", header[9:17])
    if version != VERSION:
        raise ShardError(f"{idx_path}: unsupported index version {version} (expected {VERSION})")
    (code,) = struct.unpack("<B", header[17:18])
    if code not in CODE_DTYPES:
        raise ShardError(f"{idx_path}: unknown dtype code {code} (known: {sorted(CODE_DTYPES)})")
    sequences, entries = struct.unpack("<QQ", header[18:34])
    expected = HEADER_BYTES + 12 * sequences + 8 * entries  # Python ints: no overflow
    if size != expected:
        raise ShardError(
            f"{idx_path}: index is {size} bytes, but its header counts {sequences} sequences and {entries} "
            f"document-index entries ({expected} bytes): truncated or corrupt"
        )
    return CODE_DTYPES[code], sequences, entries


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _itemsize_hint(dtype: np.dtype, expected: np.ndarray, pointers: np.ndarray) -> str:
    """When the pointers are right for another token size, the dtype code is what is wrong."""
    for size in (1, 2, 4, 8):
        if size != dtype.itemsize and np.array_equal(expected // dtype.itemsize * size, pointers):
            return f" (they fit {size}-byte tokens: the dtype code, {dtype}, is wrong)"
    return ""


def _check_index(
    idx_path: str | os.PathLike, dtype: np.dtype, sizes: np.ndarray, pointers: np.ndarray, document_index: np.ndarray
) -> None:
    """Refuse an index whose arrays could send a reader to the wrong tokens.

    Lengths must be non-negative, each pointer the running byte offset of the lengths
    before it (so sequences lie back to back, exactly as the ``.bin`` size check assumes),
    and the document index must run from 0 to the sequence count without going back.
    Vectorised: a few passes over arrays of a few bytes per document.
    """
    if len(sizes) and sizes.min() < 0:
        i = _first(sizes < 0)
        raise ShardError(f"{idx_path}: sequence {i} has a negative length ({sizes[i]})")
    expected = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], dtype=np.int64, out=expected[1:])
    expected *= dtype.itemsize
    if not np.array_equal(pointers, expected):
        i = _first(pointers != expected)
        raise ShardError(
            f"{idx_path}: pointer of sequence {i} is {pointers[i]}, not the running byte offset {expected[i]} "
            f"of the lengths before it{_itemsize_hint(dtype, expected, pointers)}"
        )
    if len(document_index) == 0:
        raise ShardError(f"{idx_path}: empty document index (it needs at least its first entry, 0)")
    if document_index[0] != 0 or document_index[-1] != len(sizes):
        raise ShardError(
            f"{idx_path}: document index runs from {document_index[0]} to {document_index[-1]}, "
            f"not from 0 to the sequence count {len(sizes)}"
        )
    steps = np.diff(document_index)
    if len(steps) and steps.min() < 0:
        i = _first(steps < 0)
        raise ShardError(
            f"{idx_path}: document index is not monotone (entry {i + 1} = {document_index[i + 1]} "
            f"after {document_index[i]})"
        )


def _check_sidecar(idx_path: Path, meta: dict[str, Any] | None, **found: Any) -> None:
    """Refuse an index that disagrees with its sidecar on any of ``found`` (dtype, counts).

    A dtype code that disagrees with the sidecar (uint16 read over int32 data, say)
    yields tokens in range but wrong; only the sidecar can tell.
    """
    for key, value in found.items():
        if meta is not None and key in meta and meta[key] != value:
            raise ShardError(
                f"{idx_path}: {key} is {value!r} in the index but {meta[key]!r} in the sidecar "
                f"{sidecar_path(str(idx_path)[: -len('.idx')]).name}"
            )


def verify_bin(prefix: str | os.PathLike, meta: dict[str, Any] | None) -> None:
    """Hash the whole ``.bin`` and compare with the sidecar's sha256 (reads every byte).

    Catches what the size checks cannot: bytes changed in place. A shard without a
    sidecar checksum cannot be verified, and saying so beats passing it silently.
    """
    from pipeline.kernels.hashing import file_sha256

    bin_path = shard_paths(prefix)[0]
    expected = (meta or {}).get("bin_sha256")
    if not expected:
        problem = "has no bin_sha256" if meta else "missing"
        raise ShardError(f"{sidecar_path(prefix)}: {problem}, so {bin_path.name} has no checksum to verify against")
    actual = file_sha256(bin_path)
    if actual != expected:
        raise ShardError(f"{bin_path}: sha256 {actual} differs from {expected} in its sidecar: the tokens are corrupt")


def map_tokens(bin_path: str | os.PathLike, dtype: np.dtype, tokens: int, index_name: str) -> np.ndarray:
    """The ``.bin`` as a read-only token array, refused unless it holds exactly ``tokens``.

    The size is a stat, no read. A ``.bin`` cut short (or emptied) would otherwise read
    on silently, past its end; a missing one is an error, never a skipped shard. Loader
    workers re-map a shard checked at open through here too: a stat, not a second open.
    """
    bin_path = Path(bin_path)
    try:
        size = bin_path.stat().st_size
    except FileNotFoundError:
        raise ShardError(f"{bin_path}: missing, though its index {index_name} lists {tokens} tokens") from None
    expected = tokens * dtype.itemsize
    if size != expected:
        raise ShardError(
            f"{bin_path}: {size} bytes, but its index {index_name} lists {tokens} {dtype} tokens "
            f"({expected} bytes): truncated, or not this index's .bin"
        )
    if size == 0:  # an empty file cannot be mapped
        return np.zeros(0, dtype=dtype)
    return np.memmap(bin_path, dtype=dtype, mode="r")


class IndexedShard:
    """Opens a shard written in Megatron's layout, checked, memory-mapped (no torch needed).

    This is the one place that opens shards: the loader, merge, inspect and the mixture
    code all come through here, so a shard is checked the same way wherever it is read.
    Opening checks, cheaply (the ``.idx`` arrays, the ``.bin``'s size by stat, the
    sidecar): the header and the file size agree, lengths are non-negative, pointers are
    the running offsets, the document index runs 0..sequences, the ``.bin`` holds
    exactly the listed tokens, and the sidecar (when there is one) agrees on dtype and
    counts. ``verify=True`` also hashes the ``.bin`` against the sidecar's sha256. Any
    failure is a ``ShardError`` naming the file, raised before a token is read.

    ``sizes``, ``pointers`` and ``document_index`` are views into the mapped ``.idx``;
    ``tokens`` is the whole ``.bin`` as one array of ``dtype``; ``meta`` the sidecar or None.
    """

    def __init__(self, prefix: str | os.PathLike, verify: bool = False):
        self.prefix = str(prefix)
        bin_path, idx_path = shard_paths(prefix)
        self.dtype, sequences, entries = _read_header(idx_path)
        self.meta = read_sidecar(self.prefix)
        # The dtype first: a wrong code also mis-scales every pointer, but this says why.
        _check_sidecar(idx_path, self.meta, dtype=self.dtype.name)
        self._idx = np.memmap(idx_path, dtype=np.uint8, mode="r")
        offset = HEADER_BYTES
        self.sizes = np.frombuffer(self._idx, dtype="<i4", count=sequences, offset=offset)
        offset += 4 * sequences
        self.pointers = np.frombuffer(self._idx, dtype="<i8", count=sequences, offset=offset)
        offset += 8 * sequences
        self.document_index = np.frombuffer(self._idx, dtype="<i8", count=entries, offset=offset)
        _check_index(idx_path, self.dtype, self.sizes, self.pointers, self.document_index)
        _check_sidecar(idx_path, self.meta, documents=self.num_documents, tokens=self.num_tokens)
        self.tokens = map_tokens(bin_path, self.dtype, self.num_tokens, idx_path.name)
        if verify:
            verify_bin(self.prefix, self.meta)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.sizes[i])]

    @property
    def num_tokens(self) -> int:
        return int(self.sizes.sum(dtype=np.int64))

    @property
    def num_documents(self) -> int:
        return len(self.document_index) - 1


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
        return json.loads(path.read_text()).get("format") == SIDECAR_FORMAT
    except (OSError, ValueError, AttributeError):
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
    *, tokenizer: Any, dtype: np.dtype, eod_id: int | None, bos_id: int | None, documents: int, tokens: int,
    bin_sha256: str
) -> dict[str, Any]:
    """The sidecar's content for a shard written with ``tokenizer`` (a ``pipeline.formats.tokenizers.Tokenizer``)."""
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
        meta = json.loads(path.read_text())
    except ValueError as e:
        raise ShardError(f"{path}: unreadable sidecar ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise ShardError(f"{path}: not a prep token shard sidecar")
    return meta


def check_compatible(expected: dict[str, Any], found: dict[str, Any], where: str) -> None:
    """Refuse ``found`` unless it was made like ``expected`` (same vocabulary, dtype, EOD, BOS)."""
    diffs = [f"{k} {found.get(k)!r} != {expected.get(k)!r}" for k in COMPATIBILITY_KEYS if found.get(k) != expected.get(k)]
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


# --- merging ---------------------------------------------------------------------------

COPY_BUFFER_BYTES = 16 << 20


def _replace_all(pending: list[tuple[Path, Path]]) -> None:
    # The .idx goes last: a shard is complete (list_shards) only once its .idx exists.
    for tmp, final in sorted(pending, key=lambda p: p[1].suffix == ".idx"):
        os.replace(tmp, final)


def merge_shards(out_prefix: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> dict[str, Any]:
    """Concatenate shards into one, streaming the tokens; returns the merged sidecar.

    Like Megatron's ``merge_datasets`` tool: tokens are copied in fixed-size blocks, so
    memory holds the index (one int32 and one int64 per document), not the tokens. Inputs
    must share dtype and, when they carry sidecars, tokenizer, EOD and BOS; a mix of shards
    with and without sidecars is refused too, since it cannot be checked. The per-document
    Parquet is merged when every input has one. All outputs are written under temporary
    names and renamed at the end.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    prefixes = [shard_prefix(p) for p in inputs]
    if not prefixes:
        raise ValueError("nothing to merge")
    out_prefix = shard_prefix(out_prefix)
    if out_prefix in prefixes:
        raise ValueError(f"the output {out_prefix} is also an input")
    shards = [IndexedShard(p) for p in prefixes]  # checked: a damaged input is refused before copying
    metas = [s.meta for s in shards]
    dtype = shards[0].dtype
    for prefix, shard in zip(prefixes, shards):
        if shard.dtype != dtype:
            raise IncompatibleShards(f"{prefix} holds {shard.dtype} tokens, {prefixes[0]} holds {dtype}")
    with_meta = [m for m in metas if m is not None]
    if with_meta and len(with_meta) != len(metas):
        missing = [p for p, m in zip(prefixes, metas) if m is None]
        raise IncompatibleShards(f"cannot check the tokenizer of {missing[0]} (no sidecar) against the others")
    for prefix, meta in zip(prefixes, metas):
        if meta is not None:
            check_compatible(with_meta[0], meta, prefix)

    bin_final, idx_final = shard_paths(out_prefix)
    bin_final.parent.mkdir(parents=True, exist_ok=True)
    pending = [(temp_path(bin_final), bin_final), (temp_path(idx_final), idx_final)]
    digest = hashlib.sha256()
    with open(pending[0][0], "wb") as out:
        for prefix in prefixes:
            with open(shard_paths(prefix)[0], "rb") as f:
                while block := f.read(COPY_BUFFER_BYTES):
                    out.write(block)
                    digest.update(block)
    sizes = np.concatenate([s.sizes for s in shards])
    doc_index = [shards[0].document_index]
    offset = len(shards[0])
    for shard in shards[1:]:
        doc_index.append(shard.document_index[1:] + offset)
        offset += len(shard)
    document_index = np.concatenate(doc_index)
    write_index(pending[1][0], dtype, sizes, document_index)

    docs = [docs_path(p) for p in prefixes]
    if all(d.exists() for d in docs):
        final = docs_path(out_prefix)
        pending.append((temp_path(final), final))
        schema = pa.unify_schemas([pq.read_schema(d) for d in docs], promote_options="permissive")
        with pq.ParquetWriter(pending[-1][0], schema) as writer:
            for d in docs:
                for batch in pq.ParquetFile(d).iter_batches(batch_size=65536):
                    columns = [
                        batch.column(f.name).cast(f.type) if f.name in batch.schema.names else pa.nulls(batch.num_rows, f.type)
                        for f in schema
                    ]
                    writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))

    meta = dict(with_meta[0]) if with_meta else {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION,
                                                 "tokenizer": None, "vocab_sha256": None, "eod_id": None,
                                                 "bos_id": None, "dtype": dtype.name}
    sources = sorted({m["source"] for m in with_meta if "source" in m})
    meta.pop("source", None)
    if len(sources) == 1:
        meta["source"] = sources[0]
    meta.update(documents=int(len(document_index) - 1), tokens=int(sizes.sum(dtype=np.int64)),
                bin_sha256=digest.hexdigest(), merged_from=[os.path.basename(p) for p in prefixes])
    final = sidecar_path(out_prefix)
    pending.append((temp_path(final), final))
    write_sidecar(pending[-1][0], meta)
    _replace_all(pending)
    return meta
