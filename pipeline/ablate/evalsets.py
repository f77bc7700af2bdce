"""The sets a trial is evaluated on, as fixed windows of tokens, and the vocabulary remap.

An eval set is documents laid end to end after one separator token (the EOD, else the
BOS) and cut into non-overlapping windows of ``seq_len + 1`` tokens, the last padded,
with position ids that restart at each document and each window start, exactly as the
loader packs training windows (so the model sees the same kind of context in both). The
separator makes every token of every document a label once (the first included); the
padding is no label (``real`` is false there). Two kinds:

- ``held-out:<DATA>``: the DATA's held-out documents (``data.held_out``), in corpus order;
- ``eval:<file>``: a JSON lines or Parquet file of texts (``--eval``).

Both come as text (``evaltexts``: a run DATA keeps its documents' text in ``docs/``),
encoded with each DATA's tokenizer and framed with its EOD/BOS as the tokenize stage
frames documents. A set made from text knows its UTF-8 bytes and which labels are the
text's own tokens (``text``: not the BOS or EOD), so a trial reports bits per byte beside
nats per token. A token-shard or mixture DATA keeps no text: its held-out set is cut from
its shards, in its own tokenizer only, and has nats per token only.

Each set is capped at ``max_tokens`` so that evaluating is a small share of a trial.

The remap: a tokenizer's vocabulary (100k rows for cl100k) dwarfs a tiny model's body and
most of it never occurs in a small trial's data. ``Vocabulary`` maps the ids that occur in
the DATA and the eval sets to 0..n-1, most frequent first (the adaptive softmax of the
CPU presets needs that order); the model's embedding and output have n rows. The
comparison is unchanged (every DATA and every eval set of one tokenizer go through the
same map, and no token falls outside it), and the ledger records both sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.ablate.data import AblationData
from pipeline.ablate.evaltexts import EvalTexts
from pipeline.text.framing import frame_documents


class EvalSetError(ValueError):
    """An eval set that cannot be made (no tokens, no held-out document)."""


@dataclass
class EvalSet:
    name: str
    inputs: np.ndarray  # int64 [windows, seq_len]
    labels: np.ndarray  # int64 [windows, seq_len]
    position_ids: np.ndarray  # int64 [windows, seq_len]
    real: np.ndarray  # bool [windows, seq_len]: a label of the documents (not padding)
    documents: int
    text: np.ndarray | None = None  # bool [windows, seq_len]: a token of the text itself
    text_bytes: int | None = None  # UTF-8 bytes of the documents' text
    skipped: int = 0  # records of an eval file that could not be read
    problems: list[str] = field(default_factory=list)  # the first few of them, with their line

    @property
    def tokens(self) -> int:
        return int(self.real.sum())

    def describe(self) -> dict:
        return {
            "tokens": self.tokens,
            "documents": self.documents,
            "text_bytes": self.text_bytes,
            "skipped_records": self.skipped,
        }


def check_names(eval_files: list[Path], choice_files: list[Path]) -> None:
    """Refuse two eval files of one name: a set is named by its file's name (``eval:NAME``,
    ``mc:NAME``), which keys its weight and its losses, so the second would silently take
    the first's place."""
    for option, prefix, files in (("--eval", "eval", eval_files), ("--eval-mc", "mc", choice_files)):
        seen: dict[str, Path] = {}
        for path in files:
            if path.name in seen:
                raise EvalSetError(
                    f"{option} {seen[path.name]} and {path} would both be eval set {prefix}:{path.name}: "
                    "give each file once, under a name of its own"
                )
            seen[path.name] = path


def windows(name: str, tokens: np.ndarray, lengths: np.ndarray, seq_len: int) -> EvalSet:
    """Cut documents laid end to end (``tokens``, ``lengths``) into eval windows; a tail
    shorter than a window is left out."""
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
    real = np.ones(window_tokens[:, 1:].shape, dtype=bool)
    return EvalSet(name, window_tokens[:, :-1], window_tokens[:, 1:], position_ids, real, len(lengths))


def pack(
    name: str, flat: np.ndarray, lengths: np.ndarray, tokenizer: dict, seq_len: int, text_bytes: int | None = None
) -> EvalSet:
    """Framed documents (``flat``, ``lengths``) after one separator, in windows, the last
    padded; with ``text_bytes``, the mask of the labels that are the text's own tokens."""
    flat, lengths = np.asarray(flat, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    if len(flat) == 0:
        raise EvalSetError(f"{name}: no tokens")
    bos, eod = tokenizer.get("bos_id"), tokenizer.get("eod_id")
    separator = eod if eod is not None else bos if bos is not None else 0
    real_end = 1 + len(flat)
    count = -(-len(flat) // seq_len)
    pad = count * seq_len + 1 - real_end
    tokens = np.concatenate([[separator], flat, np.full(pad, separator, dtype=np.int64)])
    eval_set = windows(name, tokens, np.concatenate([[1], lengths, [pad] if pad else []]), seq_len)
    label_positions = np.arange(1, count * seq_len + 1, dtype=np.int64).reshape(count, seq_len)
    eval_set.real = label_positions < real_end
    eval_set.documents = len(lengths)
    if text_bytes is not None:
        within = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        own = (within >= (bos is not None)) & (within < np.repeat(lengths, lengths) - (eod is not None))
        eval_set.text = np.concatenate([[False], own, np.zeros(pad, dtype=bool)])[label_positions]
        eval_set.text_bytes = text_bytes
    return eval_set


def text_set(texts: EvalTexts, tok, tokenizer: dict, seq_len: int) -> EvalSet:
    """``texts`` encoded by ``tok`` and framed as ``tokenizer`` (a DATA's sidecar keys) says."""
    flat, counts = tok.encode_batch(texts.texts)
    framed, lengths = frame_documents(
        np.asarray(flat), counts, tokenizer.get("bos_id"), tokenizer.get("eod_id"), np.dtype(np.int64)
    )
    text_bytes = sum(len(text.encode("utf-8")) for text in texts.texts)
    eval_set = pack(texts.name, framed, lengths, tokenizer, seq_len, text_bytes)
    eval_set.skipped, eval_set.problems = texts.skipped, texts.problems
    return eval_set


def held_out_token_set(data: AblationData, seq_len: int, max_tokens: int) -> EvalSet:
    """A DATA's held-out documents cut from its shards (no text kept), up to ``max_tokens``."""
    corpus = data.corpus
    sizes, starts = np.asarray(corpus.document_sizes), np.asarray(corpus.document_starts)
    pieces, lengths, total = [], [], 0
    for document in data.held_out_documents():
        shard = int(corpus.shard_of(np.array([document]))[0])
        size = min(int(sizes[document]), max_tokens - total)
        pieces.append(corpus.shard_tokens(shard)[starts[document] : starts[document] + size])
        lengths.append(size)
        total += size
        if total >= max_tokens:
            break
    name = f"held-out:{data.name}"
    if not pieces:
        raise EvalSetError(f"{name}: no document of {data.path} is held out; raise --held-out")
    return pack(name, np.concatenate(pieces), np.array(lengths), data.tokenizer, seq_len)


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
    def occurring(cls, vocab_size: int, datas: list[AblationData], sets: list) -> Vocabulary:
        """Count every token of every DATA's shards (one pass, ~1 s a GB) and of the eval sets
        (any with ``inputs`` and ``labels``: text and multiple-choice)."""
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
