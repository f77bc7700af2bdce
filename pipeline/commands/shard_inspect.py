"""What ``prep shards inspect`` shows of token shards: which shards a path names, a shard's
counts and tokenizer, and one of its documents decoded.

Apart from the command so that scripts and tests can call it without click, and apart from
``indexed_shard`` (which opens a shard, checked) because describing and decoding need the
tokenizer a shard's sidecar names. Errors are ordinary exceptions, each message one line
naming the file: ``FileNotFoundError`` for a path that names no shard, ``IndexError`` for
a document number out of range, ``DecodeError`` for a shard that cannot be decoded, and
``ShardError`` (from ``IndexedShard``) for a damaged one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.indexed_shard import IndexedShard, verify_bin
from pipeline.formats.layout import Layout
from pipeline.formats.token_shards import list_shards, shard_paths, shard_prefix, sidecar_path, source_folders
from pipeline.kernels.hashing import file_sha256
from pipeline.text.tokenizers import TokenizerError, load_tokenizer


class DecodeError(ValueError):
    """A shard whose documents cannot be decoded: no sidecar naming its tokenizer, a tokenizer
    that does not load, or one whose vocabulary changed since the shard was made."""


def resolve_shards(path: str | os.PathLike) -> list[str]:
    """Shard prefixes named by ``path``: a folder, a prefix, or one of its files.

    A folder is a folder of shards, a run folder (the shards of ``tokens/<source>/``) or a
    run's ``tokens/`` (those of each ``<source>/``): the folders ``prep run`` prints are
    the ones a user passes. A shard with some of its files missing is still named: opening
    it says which.
    """
    path = Path(path)
    if path.is_dir():
        found = _folder_shards(path)
        if not found:
            raise FileNotFoundError(f"no shard (.bin + .idx) in {path}, its tokens/<source>/ or its <source>/ folders")
        return found
    prefix = shard_prefix(path)
    bin_path, idx_path = shard_paths(prefix)
    if not any(p.exists() for p in (bin_path, idx_path, sidecar_path(prefix))):
        raise FileNotFoundError(f"{path}: no shard {bin_path.name} + {idx_path.name} there")
    return [prefix]


def _folder_shards(folder: Path) -> list[str]:
    """The shards in ``folder`` itself, else in each source folder of the run's tokens/
    (``folder`` a run) or of ``folder`` (a tokens/ folder)."""
    found = list_shards(folder)
    if found:
        return found
    tokens = Layout(folder).tokens_folder
    sources = tokens if tokens.is_dir() else folder
    return [prefix for sub in source_folders(sources) for prefix in list_shards(sub)]


def describe_shard(prefix: str, verify: bool = False) -> dict[str, Any]:
    """Counts from the index and what the sidecar says; ``ShardError`` for a damaged shard.

    The checks are the ones every reader gets (``IndexedShard``; ``verify_bin`` for the
    sidecar's checksum with ``verify``). A shard without a sidecar has no checksum to
    verify against: ``verify`` then only reports its sha256, with ``bin_sha256_matches``
    None rather than True, so that a reader never takes an unchecked shard for a checked one.
    """
    shard = IndexedShard(prefix)
    meta = shard.meta or {}
    sizes = shard.sizes
    info: dict[str, Any] = {
        "shard": prefix,
        "documents": shard.num_documents,
        "sequences": len(shard),
        "tokens": shard.num_tokens,
        "dtype": shard.dtype.name,
        "min_tokens": int(sizes.min()) if len(sizes) else 0,
        "mean_tokens": float(sizes.mean()) if len(sizes) else 0.0,
        "max_tokens": int(sizes.max()) if len(sizes) else 0,
        "tokenizer": meta.get("tokenizer"),
        "tokenizer_spec": meta.get("tokenizer_spec"),
        "vocab_sha256": meta.get("vocab_sha256"),
        "eod_id": meta.get("eod_id"),
        "bos_id": meta.get("bos_id"),
        "sidecar": bool(meta),
    }
    if verify and meta.get("bin_sha256"):
        verify_bin(prefix, meta)  # a mismatch raises, naming both sums
        info["bin_sha256"], info["bin_sha256_matches"] = meta["bin_sha256"], True
    elif verify:
        info["bin_sha256"], info["bin_sha256_matches"] = file_sha256(shard_paths(prefix)[0]), None
    # Kept for scripts that read --json: a shard with a problem now fails to open instead.
    info["problems"] = []
    return info


def decode_document(prefix: str, k: int) -> str:
    """Document ``k`` of a shard as text, with the tokenizer its sidecar names."""
    shard = IndexedShard(prefix)
    n = shard.num_documents
    if not 0 <= k < n:
        raise IndexError(f"document {k} is out of range: {prefix} holds {n} documents")
    meta = shard.meta
    if not meta or not meta.get("tokenizer_spec"):
        raise DecodeError(f"{prefix} has no sidecar naming its tokenizer; cannot decode")
    try:
        tok = load_tokenizer(meta["tokenizer_spec"])
    except TokenizerError as e:
        raise DecodeError(f"cannot load the shard's tokenizer: {e}") from e
    if tok.vocab_sha256 != meta.get("vocab_sha256"):
        raise DecodeError(
            f"{meta['tokenizer_spec']} now has vocabulary sha256 {tok.vocab_sha256}, "
            f"the shard was made with {meta.get('vocab_sha256')}"
        )
    first, last = int(shard.document_index[k]), int(shard.document_index[k + 1])
    ids = np.concatenate([shard[i] for i in range(first, last)]) if last > first else np.zeros(0, shard.dtype)
    return tok.decode(ids)
