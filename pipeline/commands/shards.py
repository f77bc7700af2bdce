"""``prep shards`` (inspect, merge) and ``prep tokenizer train``: commands around token shards.

``shards_group`` and ``tokenizer_group`` are click groups that the main ``prep`` command
attaches. The work itself lives in functions (``describe_shard``, ``merge_shards``,
``train_sentencepiece``) so tests and scripts can call it without click.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator

import click
import numpy as np

from pipeline.util.atomic import atomic_path
from pipeline.kernels.hashing import file_sha256, id_hashes
from pipeline.formats.token_shards import (
    IncompatibleShards,
    IndexedShard,
    ShardError,
    list_shards,
    merge_shards,
    shard_paths,
    shard_prefix,
    sidecar_path,
    verify_bin,
)

# --- prep shards ------------------------------------------------------------------------


def resolve_shards(path: str | os.PathLike) -> list[str]:
    """Shard prefixes named by ``path``: a folder (every shard in it), a prefix, or one of its files.

    A shard with some of its files missing is still named: opening it says which.
    """
    path = Path(path)
    if path.is_dir():
        found = list_shards(path)
        if not found:
            raise click.BadParameter(f"no shard (.bin + .idx) in {path}")
        return found
    prefix = shard_prefix(path)
    bin_path, idx_path = shard_paths(prefix)
    if not any(p.exists() for p in (bin_path, idx_path, sidecar_path(prefix))):
        raise click.BadParameter(f"{path}: no shard {bin_path.name} + {idx_path.name} there")
    return [prefix]


def describe_shard(prefix: str, verify: bool = False) -> dict[str, Any]:
    """Counts from the index and what the sidecar says; ``ShardError`` for a damaged shard.

    The checks are the ones every reader gets (``IndexedShard``; ``verify_bin`` for the
    sidecar's checksum with ``verify``). A shard without a sidecar has no checksum to
    verify against: ``verify`` then only reports its sha256.
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
        verify_bin(prefix, meta)
        info["bin_sha256"] = meta["bin_sha256"]
    elif verify:
        info["bin_sha256"] = file_sha256(shard_paths(prefix)[0])
    # Kept for scripts that read --json: a shard with a problem now fails to open instead.
    info["problems"] = []
    return info


def decode_document(prefix: str, k: int) -> str:
    """Document ``k`` of a shard as text, with the tokenizer its sidecar names."""
    from pipeline.formats.tokenizers import TokenizerError, load_tokenizer

    shard = IndexedShard(prefix)
    n = shard.num_documents
    if not 0 <= k < n:
        raise click.BadParameter(f"document {k} is out of range: {prefix} holds {n} documents")
    meta = shard.meta
    if not meta or not meta.get("tokenizer_spec"):
        raise click.ClickException(f"{prefix} has no sidecar naming its tokenizer; cannot decode")
    try:
        tok = load_tokenizer(meta["tokenizer_spec"])
    except TokenizerError as e:
        raise click.ClickException(f"cannot load the shard's tokenizer: {e}") from e
    if tok.vocab_sha256 != meta.get("vocab_sha256"):
        raise click.ClickException(
            f"{meta['tokenizer_spec']} now has vocabulary sha256 {tok.vocab_sha256}, "
            f"the shard was made with {meta.get('vocab_sha256')}"
        )
    first, last = int(shard.document_index[k]), int(shard.document_index[k + 1])
    ids = np.concatenate([shard[i] for i in range(first, last)]) if last > first else np.zeros(0, shard.dtype)
    return tok.decode(ids)


@click.group("shards")
def shards_group() -> None:
    """Inspect and merge token shards (Megatron .bin + .idx)."""


@shards_group.command("inspect")
@click.argument("path", type=click.Path(exists=False))
@click.option("--decode", "decode_k", type=int, default=None, metavar="K", help="Print document K decoded.")
@click.option("--verify", is_flag=True, help="Recompute the .bin's sha256 and compare it with the sidecar.")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def inspect_command(path: str, decode_k: int | None, verify: bool, as_json: bool) -> None:
    """Counts, dtype and tokenizer of a shard (a prefix, one of its files, or a folder of shards)."""
    try:
        _inspect(path, decode_k, verify, as_json)
    except ShardError as e:  # one line naming the file and the problem, not a traceback
        raise click.ClickException(str(e)) from e


def _inspect(path: str, decode_k: int | None, verify: bool, as_json: bool) -> None:
    prefixes = resolve_shards(path)
    if decode_k is not None:
        if len(prefixes) != 1:
            raise click.BadParameter(f"{path} holds {len(prefixes)} shards; name one to decode from")
        click.echo(decode_document(prefixes[0], decode_k), nl=False)
        return
    infos = [describe_shard(p, verify) for p in prefixes]
    if as_json:
        click.echo(json.dumps(infos if len(infos) > 1 else infos[0], indent=2))
    else:
        for info in infos:
            _print_info(info)
        if len(infos) > 1:
            docs = sum(i["documents"] for i in infos)
            tokens = sum(i["tokens"] for i in infos)
            click.echo(f"total: {len(infos)} shards, {docs:,} documents, {tokens:,} tokens")


def _print_info(info: dict[str, Any]) -> None:
    tokenizer = info["tokenizer"] or "unknown (no sidecar)"
    if info["vocab_sha256"]:
        tokenizer += f"  (vocab sha256 {info['vocab_sha256'][:16]}...)"
    click.echo(info["shard"])
    click.echo(f"  documents  {info['documents']:,}")
    click.echo(f"  tokens     {info['tokens']:,}  (per document: min {info['min_tokens']}, "
               f"mean {info['mean_tokens']:.1f}, max {info['max_tokens']})")
    click.echo(f"  dtype      {info['dtype']}")
    click.echo(f"  tokenizer  {tokenizer}")
    click.echo(f"  eod id     {info['eod_id']}    bos id {info['bos_id']}")
    if "bin_sha256" in info:
        click.echo(f"  bin sha256 {info['bin_sha256']}")


@shards_group.command("merge")
@click.argument("out_prefix", type=click.Path())
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
def merge_command(out_prefix: str, inputs: tuple[str, ...]) -> None:
    """Stream the shards INPUTS (prefixes, shard files or folders) into one shard OUT_PREFIX."""
    prefixes = [p for path in inputs for p in resolve_shards(path)]
    try:
        meta = merge_shards(out_prefix, prefixes)
    except (IncompatibleShards, ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"merged {len(prefixes)} shards into {shard_prefix(out_prefix)}: "
               f"{meta['documents']:,} documents, {meta['tokens']:,} tokens ({meta['dtype']})")


# --- prep tokenizer train ------------------------------------------------------------------

# SentencePiece skips sentences longer than its max_sentence_length; documents are cut at
# line ends into segments no longer than this (bytes), keeping the newlines so the model
# learns code and paragraph layout.
SEGMENT_BYTES = 8192


def run_doc_files(run_dir: Path, sources: tuple[str, ...] = ()) -> list[Path]:
    """The kept-document Parquet files of a run: ``RUN_DIR/docs/<source>/*.parquet``, sorted."""
    docs = Path(run_dir) / "docs"
    if sources:
        folders = [docs / s for s in sources]
    else:
        folders = sorted(p for p in docs.iterdir() if p.is_dir()) if docs.is_dir() else []
    files = sorted(f for folder in folders for f in folder.glob("*.parquet"))
    if not files:
        raise click.ClickException(f"no kept documents under {docs}/<source>/*.parquet")
    return files


def hash_threshold(files: list[Path], fraction: float, max_chars: int) -> int | None:
    """The id-hash bound at or below which documents form the sample (None: empty sample).

    Documents are taken in the order of their id's hash, a uniform random order that
    does not depend on files or workers, until ``fraction`` of them or ``max_chars``
    characters (UTF-8 bytes, counted cheaply) are in. Memory: two integers per document.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    hashes, sizes = [], []
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(columns=["id", "text"], batch_size=8192):
            hashes.append(id_hashes(batch.column(0)))
            sizes.append(pc.binary_length(batch.column(1)).fill_null(0).to_numpy(zero_copy_only=False))
    if not hashes:
        return None
    h = np.concatenate(hashes)
    s = np.concatenate(sizes).astype(np.int64)
    order = np.argsort(h, kind="stable")
    take = min(len(h), int(np.ceil(fraction * len(h))), int(np.searchsorted(np.cumsum(s[order]), max_chars, "right")))
    return int(h[order[take - 1]]) if take else None


def sample_segments(files: list[Path], threshold: int) -> Iterator[str]:
    """The text of the sampled documents, cut at line ends into segments of at most SEGMENT_BYTES."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bound = np.uint64(threshold)
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(columns=["id", "text"], batch_size=8192):
            chosen = batch.column(1).filter(pa.array(id_hashes(batch.column(0)) <= bound))
            for text in chosen.to_pylist():
                if text:
                    yield from _segments(text)


def _segments(text: str) -> Iterator[str]:
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if current and size + n > SEGMENT_BYTES:
            yield "".join(current)
            current, size = [], 0
        while n > SEGMENT_BYTES:  # one very long line: cut it (characters <= 4 bytes each)
            yield line[: SEGMENT_BYTES // 4]
            line = line[SEGMENT_BYTES // 4 :]
            n = len(line.encode("utf-8"))
        current.append(line)
        size += n
    if current:
        yield "".join(current)


def train_sentencepiece(
    run_dir: Path, out: Path, vocab_size: int, model_type: str = "bpe", *, fraction: float = 1.0,
    max_chars: int = 100_000_000, sources: tuple[str, ...] = (), threads: int = 0, seed: int = 0
) -> dict[str, Any]:
    """Train a SentencePiece model on a hash sample of a run's kept documents; write it atomically.

    The model keeps text as it is (identity normalisation, whitespace kept, bytes as a
    fallback), so decoding gives back the exact text, as pretraining needs.
    """
    import sentencepiece as spm

    from pipeline.formats.tokenizers import default_threads

    files = run_doc_files(run_dir, sources)
    threshold = hash_threshold(files, fraction, max_chars)
    if threshold is None:
        raise click.ClickException(f"the sample of {run_dir} is empty")
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sample_segments(files, threshold),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=0.9995,
            byte_fallback=True,
            split_digits=True,
            allow_whitespace_only_pieces=True,
            remove_extra_whitespaces=False,
            normalization_rule_name="identity",
            max_sentence_length=SEGMENT_BYTES,
            num_threads=threads or default_threads(),
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            minloglevel=2,
        )
    except RuntimeError as e:  # SentencePiece reports a vocabulary too large for the sample here
        raise click.ClickException(f"SentencePiece training failed: {e}") from e
    data = model.getvalue()
    out = Path(out)
    with atomic_path(out) as tmp:
        tmp.write_bytes(data)
    return {"model": str(out), "sha256": hashlib.sha256(data).hexdigest(), "files": len(files)}


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Train tokenizers on a run's kept documents."""


@tokenizer_group.command("train")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--vocab-size", type=click.IntRange(min=1), required=True, help="Pieces in the model.")
@click.option("--model-type", type=click.Choice(["bpe", "unigram"]), default="bpe", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the .model (use it as a tokenizer spec).")
@click.option("--sample", "fraction", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True,
              help="Fraction of documents, chosen by a hash of their id.")
@click.option("--max-chars", type=click.IntRange(min=1), default=100_000_000, show_default=True,
              help="Stop the sample at about this many bytes of text.")
@click.option("--source", "sources", multiple=True, help="Train on these sources only (repeatable).")
@click.option("--threads", type=click.IntRange(min=0), default=0, help="Training threads (0: CPUs, at most 8).")
def train_command(run_dir: Path, vocab_size: int, model_type: str, out: Path, fraction: float, max_chars: int,
                  sources: tuple[str, ...], threads: int) -> None:
    """Train a SentencePiece model on a hash-sampled slice of RUN_DIR's kept documents."""
    result = train_sentencepiece(run_dir, out, vocab_size, model_type, fraction=fraction, max_chars=max_chars,
                                 sources=sources, threads=threads)
    click.echo(f"wrote {result['model']} (sha256 {result['sha256']}); use it as: tokenizer = \"{result['model']}\"")
