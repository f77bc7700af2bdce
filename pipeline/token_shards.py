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
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any, Sequence

import numpy as np

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


class IndexedShard:
    """Reads a shard written in Megatron's layout, memory-mapped (no torch needed).

    ``sizes``, ``pointers`` and ``document_index`` are views into the mapped ``.idx``;
    ``tokens`` is the whole ``.bin`` as one array of ``dtype``.
    """

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = str(prefix)
        bin_path, idx_path = shard_paths(prefix)
        self._idx = np.memmap(idx_path, dtype=np.uint8, mode="r")
        header = bytes(self._idx[:34])
        if header[:9] != MAGIC:
            raise ValueError(f"{idx_path}: not a Megatron indexed dataset index (bad magic)")
        (version,) = struct.unpack("<Q", header[9:17])
        if version != VERSION:
            raise ValueError(f"{idx_path}: unsupported index version {version}")
        (code,) = struct.unpack("<B", header[17:18])
        if code not in CODE_DTYPES:
            raise ValueError(f"{idx_path}: unknown dtype code {code}")
        self.dtype = CODE_DTYPES[code]
        sequences, doc_count = struct.unpack("<QQ", header[18:34])
        offset = 34
        self.sizes = np.frombuffer(self._idx, dtype="<i4", count=sequences, offset=offset)
        offset += 4 * sequences
        self.pointers = np.frombuffer(self._idx, dtype="<i8", count=sequences, offset=offset)
        offset += 8 * sequences
        self.document_index = np.frombuffer(self._idx, dtype="<i8", count=doc_count, offset=offset)
        if bin_path.stat().st_size:
            self.tokens = np.memmap(bin_path, dtype=self.dtype, mode="r")
        else:
            self.tokens = np.zeros(0, dtype=self.dtype)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.sizes[i])]

    @property
    def num_tokens(self) -> int:
        return int(self.sizes.sum(dtype=np.int64))


def list_shards(folder: str | os.PathLike) -> list[str]:
    """Prefixes of the complete shards in ``folder`` (both files present), sorted by name."""
    folder = Path(folder)
    return sorted(str(p.with_suffix("")) for p in folder.glob("*.idx") if p.with_suffix(".bin").exists())


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
    """The sidecar's content for a shard written with ``tokenizer`` (a ``pipeline.tokenizers.Tokenizer``)."""
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
    meta = json.loads(path.read_text())
    if meta.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{path}: not a prep token shard sidecar")
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


def _tmp_for(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp")


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
    shards = [IndexedShard(p) for p in prefixes]
    metas = [read_sidecar(p) for p in prefixes]
    dtype = shards[0].dtype
    for prefix, shard in zip(prefixes, shards):
        if shard.dtype != dtype:
            raise IncompatibleShards(f"{prefix} holds {shard.dtype} tokens, {prefixes[0]} holds {dtype}")
        expected_bytes = shard.num_tokens * dtype.itemsize
        if shard_paths(prefix)[0].stat().st_size != expected_bytes:
            raise ValueError(f"{prefix}.bin does not hold the {shard.num_tokens} tokens its index lists")
    with_meta = [m for m in metas if m is not None]
    if with_meta and len(with_meta) != len(metas):
        missing = [p for p, m in zip(prefixes, metas) if m is None]
        raise IncompatibleShards(f"cannot check the tokenizer of {missing[0]} (no sidecar) against the others")
    for prefix, meta in zip(prefixes, metas):
        if meta is not None:
            check_compatible(with_meta[0], meta, prefix)

    bin_final, idx_final = shard_paths(out_prefix)
    bin_final.parent.mkdir(parents=True, exist_ok=True)
    pending = [(_tmp_for(bin_final), bin_final), (_tmp_for(idx_final), idx_final)]
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
        pending.append((_tmp_for(final), final))
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
    pending.append((_tmp_for(final), final))
    write_sidecar(pending[-1][0], meta)
    _replace_all(pending)
    return meta
