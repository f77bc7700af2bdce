"""The sets a trial is evaluated on, as fixed windows of tokens, and the vocabulary remap.

An eval set is documents laid end to end and cut into non-overlapping windows of
``seq_len + 1`` tokens, with position ids that restart at each document and each window
start, exactly as the loader packs training windows (so the model sees the same kind of
context in both). Two kinds:

- ``held-out:<DATA>``: the DATA's held-out documents (``data.held_out``), in id order;
- ``eval:<file>``: a JSON lines or Parquet file of texts (``--eval``), read through prep's
  readers (a bad record is skipped and counted, never a crash) and tokenized with the
  DATA's tokenizer, framed with its EOD/BOS as the tokenize stage frames documents.

Each set is capped at ``max_tokens`` so that evaluating is a small share of a trial.

The remap: a tokenizer's vocabulary (100k rows for cl100k) dwarfs a tiny model's body and
most of it never occurs in a small trial's data. ``Vocabulary`` maps the ids that occur in
the DATA and the eval sets to 0..n-1, most frequent first (the adaptive softmax of the
CPU presets needs that order); the model's embedding and output have n rows. The
comparison is unchanged (every DATA and every eval set go through the same map, and no
token falls outside it), and the ledger records both sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.ablate.data import AblationData
from pipeline.formats.tokenizers import load_tokenizer
from pipeline.readers import InputSpec, read_input
from stages.tokenize import frame_documents


class EvalSetError(ValueError):
    """An eval file that cannot be used (unreadable, no text, no tokens)."""


@dataclass
class EvalSet:
    name: str
    inputs: np.ndarray  # int64 [windows, seq_len]
    labels: np.ndarray  # int64 [windows, seq_len]
    position_ids: np.ndarray  # int64 [windows, seq_len]
    documents: int
    skipped: int = 0  # records of an eval file that could not be read

    @property
    def tokens(self) -> int:
        return int(self.labels.size)

    def describe(self) -> dict:
        return {"tokens": self.tokens, "documents": self.documents, "skipped_records": self.skipped}


def windows(name: str, tokens: np.ndarray, lengths: np.ndarray, seq_len: int, skipped: int = 0) -> EvalSet:
    """Cut documents laid end to end (``tokens``, ``lengths``) into eval windows."""
    tokens = np.asarray(tokens, dtype=np.int64)
    count = (len(tokens) - 1) // seq_len
    if count < 1:
        raise EvalSetError(f"{name}: {len(tokens)} tokens, fewer than one window of {seq_len + 1}")
    starts = np.arange(count, dtype=np.int64) * seq_len
    grid = starts[:, None] + np.arange(seq_len + 1, dtype=np.int64)
    window_tokens = tokens[grid]
    doc_starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)[:-1]])
    positions = grid[:, :-1]
    doc_start = doc_starts[np.searchsorted(doc_starts, positions, side="right") - 1]
    position_ids = positions - np.maximum(doc_start, starts[:, None])
    return EvalSet(name, window_tokens[:, :-1], window_tokens[:, 1:], position_ids, len(lengths), skipped)


def held_out_set(data: AblationData, seq_len: int, max_tokens: int) -> EvalSet:
    """The DATA's held-out documents, in id order, up to ``max_tokens``."""
    corpus = data.corpus
    sizes, starts = np.asarray(corpus.document_sizes), np.asarray(corpus.document_starts)
    pieces, lengths, total = [], [], 0
    for document in data.held_out_documents():
        shard = int(corpus.shard_of(np.array([document]))[0])
        size = int(sizes[document])
        pieces.append(corpus.shard_tokens(shard)[starts[document] : starts[document] + size])
        lengths.append(size)
        total += size
        if total > max_tokens:
            break
    name = f"held-out:{data.name}"
    if not pieces:
        raise EvalSetError(f"{name}: no document of {data.path} is held out; raise --held-out")
    return windows(name, np.concatenate(pieces)[: max_tokens + 1], _clip(lengths, max_tokens + 1), seq_len)


def file_set(path: Path, tokenizer: dict, seq_len: int, max_tokens: int) -> EvalSet:
    """The texts of ``path`` tokenized as the DATA were, up to ``max_tokens``."""
    name = f"eval:{path.name}"
    try:
        tok = load_tokenizer(tokenizer["tokenizer_spec"] or tokenizer["tokenizer"])
    except (ValueError, OSError) as error:
        raise EvalSetError(
            f"{name}: cannot load the DATA's tokenizer {tokenizer.get('tokenizer')!r}: {error}"
        ) from None
    spec = InputSpec(source="eval", file_key=path.name)
    pieces, lengths, skipped, total = [], [], 0, 0
    try:
        for chunk in read_input(path, spec):
            skipped += chunk.bad.num_rows if chunk.bad is not None else 0
            if chunk.docs is None or chunk.docs.num_rows == 0 or total > max_tokens:
                continue
            texts = chunk.docs.column("text").to_pylist()
            flat, counts = tok.encode_batch(texts)
            framed, framed_lengths = frame_documents(
                flat, counts, tokenizer.get("bos_id"), tokenizer.get("eod_id"), np.dtype(np.int64)
            )
            pieces.append(framed)
            lengths.extend(framed_lengths.tolist())
            total += len(framed)
    except ValueError as error:  # a file whose format cannot be told from its name
        raise EvalSetError(f"{name}: {error}") from None
    if not pieces:
        raise EvalSetError(f"{path}: no readable text (JSON lines or Parquet with a 'text' field expected)")
    return windows(name, np.concatenate(pieces)[: max_tokens + 1], _clip(lengths, max_tokens + 1), seq_len, skipped)


def _clip(lengths: list[int], total: int) -> np.ndarray:
    """Document lengths cut so that they sum to at most ``total``."""
    ends = np.minimum(np.cumsum(np.asarray(lengths, dtype=np.int64)), total)
    clipped = np.diff(np.concatenate([[0], ends]))
    return clipped[clipped > 0]


class Vocabulary:
    """The ids that occur in the DATA and eval sets, mapped to 0..size-1 by falling frequency
    (ties by id), or all ids unmapped."""

    def __init__(self, vocab_size: int, used: np.ndarray | None):
        self.vocab_size = vocab_size
        self.used = used
        self.size = vocab_size if used is None else len(used)
        self.table = None
        if used is not None:
            self.table = np.zeros(vocab_size, dtype=np.int64)
            self.table[used] = np.arange(len(used), dtype=np.int64)

    @classmethod
    def occurring(cls, vocab_size: int, datas: list[AblationData], sets: list[EvalSet]) -> Vocabulary:
        """Count every token of every DATA's shards (one pass, ~1 s a GB) and of the eval sets."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        arrays = [data.corpus.shard_tokens(shard) for data in datas for shard in range(len(data.corpus.prefixes))]
        arrays += [array for eval_set in sets for array in (eval_set.inputs, eval_set.labels)]
        for array in arrays:
            flat = array.reshape(-1)
            for begin in range(0, len(flat), 1 << 26):
                counts += np.bincount(flat[begin : begin + (1 << 26)], minlength=vocab_size)[:vocab_size]
        used = np.flatnonzero(counts)
        return cls(vocab_size, used[np.argsort(-counts[used], kind="stable")])

    def describe(self) -> dict:
        return {"tokenizer_size": self.vocab_size, "model_size": self.size, "remapped": self.used is not None}
