"""Joining token shards into one: ``merge_shards``, behind ``prep shards merge``.

Apart from ``token_shards`` (the format and the writer of one shard) and
``indexed_shard`` (opening one, checked) because merging is a job over many shards: it
checks that they can be combined, then streams them into a new one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.token_shards import (
    SIDECAR_FORMAT,
    SIDECAR_VERSION,
    IncompatibleShards,
    ShardError,
    check_compatible,
    docs_path,
    read_sidecar,
    shard_paths,
    shard_prefix,
    sidecar_path,
    write_index,
    write_sidecar,
)
from pipeline.util.atomic import remove_dead_temporaries, temp_path

COPY_BUFFER_BYTES = 16 << 20


def _replace_all(pending: list[tuple[Path, Path]]) -> None:
    """The sidecar goes first: it is what makes the files at OUT_PREFIX a shard prep wrote
    (``_replaced_shard``), so a merge killed between renames is replaced by the next, not
    refused as the user's files. The .idx goes last: a shard is complete (``list_shards``)
    only once its .idx exists."""
    for tmp, final in sorted(pending, key=lambda p: (p[1].suffix != ".json", p[1].suffix == ".idx")):
        os.replace(tmp, final)


def merge_shards(out_prefix: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> dict[str, Any]:
    """Concatenate shards into one, streaming the tokens; returns the merged sidecar.

    Like Megatron's ``merge_datasets`` tool: tokens are copied in fixed-size blocks, so
    memory holds the index (one int32 and one int64 per document), not the tokens. Inputs
    must share dtype and, when they carry sidecars, tokenizer, EOD and BOS; a mix of shards
    with and without sidecars is refused too, since it cannot be checked. The per-document
    Parquet is merged when every input has one. All outputs are written under temporary
    names and renamed at the end, the sidecar first (``_replace_all``); a failure removes
    them, and a merge killed before it could leaves them for the next merge there.
    """
    prefixes = [shard_prefix(p) for p in inputs]
    if not prefixes:
        raise ValueError("nothing to merge")
    out_prefix = shard_prefix(out_prefix)
    # By the file reached, not the spelling: ``./x`` (or a link) for input ``x`` replaced the
    # input with the merge, which holds the other inputs' documents, still there beside it.
    same = [p for p in prefixes if Path(p).resolve() == Path(out_prefix).resolve()]
    if same:
        also = "" if same[0] == out_prefix else f" ({same[0]})"
        raise ValueError(f"the output {out_prefix} is also an input{also}")
    replaced = _replaced_shard(out_prefix)
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
    remove_dead_temporaries([bin_final, idx_final, sidecar_path(out_prefix), docs_path(out_prefix)])
    pending = [(temp_path(bin_final), bin_final), (temp_path(idx_final), idx_final)]
    try:
        meta = _write_merged(out_prefix, prefixes, shards, with_meta, dtype, pending)
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise
    for stale in set(replaced) - {final for _, final in pending}:  # a .docs.parquet of the shard replaced
        stale.unlink()
    _replace_all(pending)
    return meta


def _write_merged(
    out_prefix: str,
    prefixes: list[str],
    shards: list[IndexedShard],
    with_meta: list[dict],
    dtype: np.dtype,
    pending: list[tuple[Path, Path]],
) -> dict[str, Any]:
    """Write the merged shard's files under their temporary names (``pending``, which gains
    the sidecar and the per-document Parquet); returns the sidecar."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
                        batch.column(f.name).cast(f.type)
                        if f.name in batch.schema.names
                        else pa.nulls(batch.num_rows, f.type)
                        for f in schema
                    ]
                    writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))

    meta = (
        dict(with_meta[0])
        if with_meta
        else {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "tokenizer": None,
            "vocab_sha256": None,
            "eod_id": None,
            "bos_id": None,
            "dtype": dtype.name,
        }
    )
    sources = sorted({m["source"] for m in with_meta if "source" in m})
    meta.pop("source", None)
    if len(sources) == 1:
        meta["source"] = sources[0]
    meta.update(
        documents=int(len(document_index) - 1),
        tokens=int(sizes.sum(dtype=np.int64)),
        bin_sha256=digest.hexdigest(),
        merged_from=[os.path.basename(p) for p in prefixes],
    )
    final = sidecar_path(out_prefix)
    pending.append((temp_path(final), final))
    write_sidecar(pending[-1][0], meta)
    return meta


def _replaced_shard(out_prefix: str) -> list[Path]:
    """The files of a shard already at ``out_prefix``, which the merge replaces, all of
    them (a ``.docs.parquet`` the new shard lacks would describe other documents). Only a
    shard prep wrote, as its sidecar says, is replaced: a file of the user's named like
    an output (``OUT.bin``) was written over without a word."""
    paths = [*shard_paths(out_prefix), sidecar_path(out_prefix), docs_path(out_prefix)]
    existing = [path for path in paths if os.path.lexists(path)]
    if existing:
        try:
            ours = read_sidecar(out_prefix) is not None
        except ShardError:
            ours = False
        if not ours:
            raise ValueError(
                f"{existing[0]} exists and is not part of a token shard prep wrote; "
                "merge replaces only those: move it, or choose another OUT_PREFIX"
            )
    return existing
