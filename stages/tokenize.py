"""``tokenize``: the last stage; writes each unit's kept documents as a Megatron token shard.

For a unit (one input file of one source) it writes, under ``<run>/tokens/<source>/``:
``<unit>.bin`` + ``<unit>.idx`` (Megatron's indexed dataset layout, one sequence per
document, optional BOS first and an end-of-document token last), ``<unit>.json`` (the
sidecar: tokenizer, vocabulary sha256, EOD id, dtype, counts, sha256 of the ``.bin``) and
``<unit>.docs.parquet`` (id, source, n_tokens and the batch's numeric signals, one row per
document of the shard, in order, for curricula that sort by a signal). Every file goes
through ``UnitContext.atomic``, so a killed run leaves no partial shard behind.

Documents that tokenize to nothing are dropped with reason ``empty-tokens`` instead of
becoming a document made of just the EOD token. Adding shards to a folder whose shards
were made by another tokenizer or dtype is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.compile.warm_steps import warms
from pipeline.formats.documents import ID, SOURCE, TEXT, set_column
from pipeline.formats.layout import Layout
from pipeline.formats.token_shards import (
    ShardWriter,
    check_folder_compatible,
    docs_path,
    dtype_for_vocab,
    shard_paths,
    sidecar,
    sidecar_path,
    write_sidecar,
)
from pipeline.stage import Stage, StageOutput, UnitContext, register
from pipeline.text import tiktoken_fast
from pipeline.text.framing import frame_documents
from pipeline.text.tiktoken_encodings import NAMED_ENCODINGS
from pipeline.text.tokenizers import TiktokenTokenizer, Tokenizer, load_tokenizer

N_TOKENS = "n_tokens"
# A source of at least this much input text compiles the fast encoder in the warm-up
# (about 4.5 CPU-seconds once per machine; tiktoken encodes 16 MB in about 1.3).
FAST_ENCODER_MIN_BYTES = 16 << 20
EMPTY = "empty-tokens"
DOCS_BASE_SCHEMA = pa.schema([pa.field(ID, pa.string()), pa.field(SOURCE, pa.string()), pa.field(N_TOKENS, pa.int64())])


def signal_fields(schema: pa.Schema) -> list[pa.Field]:
    """Numeric and boolean columns a curriculum can sort by (internal ``_`` columns excluded)."""
    fields = []
    for f in schema:
        if f.name.startswith("_") or f.name in DOCS_BASE_SCHEMA.names:
            continue
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type):
            fields.append(f)
    return fields


def _column_as(batch: pa.RecordBatch, field: pa.Field) -> pa.Array:
    """``batch``'s column for ``field`` in its type; nulls when absent or not castable without loss."""
    index = batch.schema.get_field_index(field.name)
    if index >= 0:
        try:
            return pc.cast(batch.column(index), field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    return pa.nulls(batch.num_rows, field.type)


@dataclass
class _OpenShard:
    prefix: Path
    writer: ShardWriter
    docs_tmp: Path
    docs_writer: pq.ParquetWriter | None = None


@register
class Tokenize(Stage):
    name = "tokenize"
    terminal = True

    @dataclass
    class Options:
        # A tiktoken name, or a path to a .tiktoken, SentencePiece .model or tokenizer.json.
        tokenizer: str = "cl100k_base"
        # Put the tokenizer's BOS token before every document.
        bos: bool = False
        # End-of-document id; None means the tokenizer's EOS (<|endoftext|> for tiktoken).
        eos: int | None = None
        # Append the end-of-document id after every document.
        append_eos: bool = True
        # Encoding threads per process; 0 lets the tokenizer choose (CPUs, at most 8).
        threads: int = 0
        # Encode a batch in slices of at most this many bytes of text, bounding the memory of
        # token buffers whatever batch size the runner uses.
        max_batch_bytes: int = 16 << 20

        def __post_init__(self) -> None:
            if self.eos is not None and self.eos < 0:
                raise ValueError("eos must be a token id >= 0")
            if self.threads < 0:
                raise ValueError("threads must be >= 0")
            if self.max_batch_bytes < 1:
                raise ValueError("max_batch_bytes must be >= 1")
            # A file is loaded (once a process) when the config is read, so that an unknown
            # name, an unreadable file or an eos past its vocabulary is refused before the
            # run claims --out, where a corrected config would be refused as a different
            # run's. A named encoding is known by its name: its ranks load when the stage
            # first encodes.
            if self.tokenizer in NAMED_ENCODINGS:
                vocab = NAMED_ENCODINGS[self.tokenizer].vocab_size
            else:
                vocab = load_tokenizer(self.tokenizer).vocab_size
            if self.eos is not None and self.eos >= vocab:
                raise ValueError(f"eos {self.eos} is outside {self.tokenizer}'s vocabulary of {vocab}")

    @classmethod
    def added_columns(cls, options: Tokenize.Options) -> tuple[str, ...]:
        return (N_TOKENS,)

    @classmethod
    def files(cls, options: Tokenize.Options) -> list[str]:
        """A tokenizer file (a named encoding is bundled): replaced before a resume, the
        units still to do were tokenized by the new one, each source's shards checking only
        against their own folder's, and the run completed with two vocabularies in it."""
        return [] if options.tokenizer in NAMED_ENCODINGS else [str(Path(options.tokenizer).expanduser())]

    def __init__(self, options: Options):
        super().__init__(options)
        tok = self.tokenizer  # load now: an unknown name fails when the config is read
        self.eod_id: int | None = None
        if options.append_eos:
            self.eod_id = options.eos if options.eos is not None else tok.eos_id
            if self.eod_id is None:
                raise ValueError(f"tokenizer {tok.name} has no EOS token: set the tokenize stage's eos to an id")
        self.bos_id: int | None = None
        if options.bos:
            if tok.bos_id is None:
                raise ValueError(f"tokenizer {tok.name} has no BOS token; set bos = false")
            self.bos_id = tok.bos_id
        self.dtype = dtype_for_vocab(tok.vocab_size)
        self._open: _OpenShard | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        tok = load_tokenizer(self.options.tokenizer)
        if self.options.threads and hasattr(tok, "threads"):
            tok.threads = self.options.threads
        return tok

    def _sidecar(self, documents: int, tokens: int, bin_sha256: str) -> dict:
        return sidecar(
            tokenizer=self.tokenizer,
            dtype=self.dtype,
            eod_id=self.eod_id,
            bos_id=self.bos_id,
            documents=documents,
            tokens=tokens,
            bin_sha256=bin_sha256,
        )

    def __getstate__(self) -> dict:
        if self._open is not None:
            raise RuntimeError("a tokenize stage with an open shard cannot be sent to another process")
        return self.__dict__

    def open_unit(self, unit: UnitContext) -> None:
        if self._open is not None:
            raise RuntimeError(f"tokenize: shard {self._open.prefix} is still open")
        layout = Layout(unit.out_dir)
        folder, prefix = layout.tokens(unit.source), layout.shard_prefix(unit.source, unit.unit)
        check_folder_compatible(folder, self._sidecar(0, 0, ""), exclude=prefix)
        bin_path, idx_path = shard_paths(prefix)
        writer = ShardWriter(unit.atomic(bin_path), unit.atomic(idx_path), self.dtype)
        self._open = _OpenShard(prefix, writer, unit.atomic(docs_path(prefix)))

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        shard = self._open
        if shard is None:
            raise RuntimeError("tokenize writes shards: the runner must call open_unit before process")
        text = batch.column(TEXT)
        n_tokens = np.zeros(batch.num_rows, dtype=np.int64)
        for a, b in _byte_slices(text, self.options.max_batch_bytes):
            n_tokens[a:b] = self._write_slice(shard.writer, text.slice(a, b - a))
        keep = n_tokens > 0
        batch = set_column(batch, N_TOKENS, pa.array(n_tokens))
        self._write_docs(shard, batch.filter(pa.array(keep)), source)
        reasons = pa.array(np.where(keep, None, EMPTY), type=pa.string())
        return StageOutput(batch=batch, drop_reason=reasons, counters={"tokenize.empty": int((~keep).sum())})

    def _write_slice(self, writer: ShardWriter, texts: pa.Array) -> np.ndarray:
        """Encode and append one slice; return each document's length in the shard (0: dropped)."""
        tok = self.tokenizer
        flat, lengths = tok.encode_array(texts)
        if flat.size and int(flat.max()) >= tok.vocab_size:
            raise ValueError(f"{tok.name} produced an id outside its vocabulary of {tok.vocab_size}")
        keep = lengths > 0
        framed, framed_lengths = frame_documents(flat, lengths[keep], self.bos_id, self.eod_id, self.dtype)
        writer.add_documents(framed, framed_lengths)
        out = np.zeros(len(texts), dtype=np.int64)
        out[keep] = framed_lengths
        return out

    def _write_docs(self, shard: _OpenShard, kept: pa.RecordBatch, source: str) -> None:
        if shard.docs_writer is None:
            schema = pa.schema(list(DOCS_BASE_SCHEMA) + signal_fields(kept.schema))
            shard.docs_writer = pq.ParquetWriter(shard.docs_tmp, schema, compression="zstd")
        schema = shard.docs_writer.schema
        if SOURCE not in kept.schema.names:
            kept = kept.append_column(SOURCE, pa.array([source] * kept.num_rows, pa.string()))
        columns = [_column_as(kept, f) for f in schema]
        shard.docs_writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))

    def close_unit(self, unit: UnitContext) -> dict[str, int]:
        shard = self._open
        if shard is None:
            return {}
        self._open = None
        shard.writer.close()
        if shard.docs_writer is None:
            shard.docs_writer = pq.ParquetWriter(shard.docs_tmp, DOCS_BASE_SCHEMA, compression="zstd")
        shard.docs_writer.close()
        meta = self._sidecar(shard.writer.documents, shard.writer.tokens, shard.writer.bin_sha256)
        meta["source"] = unit.source
        write_sidecar(unit.atomic(sidecar_path(shard.prefix)), meta)
        return {"tokens": shard.writer.tokens}


def _fast_encoder_use(options: Tokenize.Options, source: str, input_bytes: float) -> tuple | None:
    """prep's own tiktoken encoder (``tiktoken_fast``) is compiled only for a run whose
    input is large enough to repay it; a tokenizer it does not apply to needs nothing."""
    pattern = _tiktoken_pattern(options.tokenizer)
    applies = pattern is not None and tiktoken_fast.knows(pattern)
    if input_bytes < FAST_ENCODER_MIN_BYTES or not applies:
        return None
    return (options.tokenizer,)


# ``seconds``: CPU-seconds on a cold cache (warm-up steps are ranked by it). The o200k and
# Qwen scanners added about 30% to what 3.5 was (2.7 -> 3.2-3.8 on the same host, same hour).
@warms(Tokenize.name, seconds=4.5, uses=_fast_encoder_use)
def compile_fast_encoder(spec: str) -> None:
    """A warm-up step: compile tiktoken_fast's kernels, as tokenizer ``spec`` uses them."""
    tok = load_tokenizer(spec)
    tiktoken_fast.compile_kernels(tok.ranks, tok.pattern)


def _tiktoken_pattern(spec: str) -> str | None:
    """The split pattern of the tiktoken encoding ``spec`` gives, or None for another kind
    of tokenizer. A named encoding answers from its definition: loading its ranks cost
    the run's planning, which asks, a tenth of a second."""
    if str(spec) in NAMED_ENCODINGS:
        return NAMED_ENCODINGS[str(spec)].pattern
    tok = load_tokenizer(spec)
    return tok.pattern if isinstance(tok, TiktokenTokenizer) else None


def _byte_slices(text: pa.Array, max_bytes: int) -> list[tuple[int, int]]:
    """Row ranges whose UTF-8 text adds up to at most ``max_bytes`` (at least one row each)."""
    n = len(text)
    if n == 0:
        return []
    sizes = pc.binary_length(text).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    cum = np.cumsum(sizes)
    if cum[-1] <= max_bytes:
        return [(0, n)]
    slices, start = [], 0
    while start < n:
        base = cum[start - 1] if start else 0
        end = int(np.searchsorted(cum, base + max_bytes, side="right"))
        end = max(end, start + 1)
        slices.append((start, end))
        start = end
    return slices
