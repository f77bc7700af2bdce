"""Fixed windows over the document stream: locate, read, and derive document boundaries.

Why this way: the token stream (documents laid end to end in the order's sequence) is
never materialised. A window ``[start, start + length)`` of stream positions is mapped to
the document pieces it covers with two ``searchsorted`` calls on the memory-mapped
cumulative sizes, and each piece is copied straight from its shard's memory-mapped
``.bin`` into the batch buffer. Document boundaries inside a window are the piece starts,
which come from the ``.idx`` sizes, never from scanning tokens for an end-of-document id.
numpy only (no torch), vectorised over the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.loader.order import DocumentStream


@dataclass
class Pieces:
    """The document pieces covered by a batch of windows, in window then stream order.

    ``row``: which window; ``position``: index in the document order; ``begin``: offset
    of the piece inside its window; ``length``: tokens; ``offset``: offset inside its
    document. Empty documents produce no piece.
    """

    row: np.ndarray
    position: np.ndarray
    begin: np.ndarray
    length: np.ndarray
    offset: np.ndarray


def locate(cumulative: np.ndarray, starts: np.ndarray, length: int) -> Pieces:
    """The pieces of windows ``[s, s + length)`` for each ``s`` in ``starts``."""
    starts = np.asarray(starts, dtype=np.int64)
    first = np.searchsorted(cumulative, starts, side="right") - 1
    last = np.searchsorted(cumulative, starts + (length - 1), side="right") - 1
    counts = last - first + 1
    row = np.repeat(np.arange(len(starts)), counts)
    row_first = np.cumsum(counts) - counts
    position = first[row] + (np.arange(len(row)) - row_first[row])
    doc_begin = np.asarray(cumulative[position])
    doc_end = np.asarray(cumulative[position + 1])
    window_begin = starts[row]
    begin = np.maximum(doc_begin, window_begin)
    end = np.minimum(doc_end, window_begin + length)
    keep = end > begin
    return Pieces(
        row=row[keep],
        position=position[keep],
        begin=(begin - window_begin)[keep],
        length=(end - begin)[keep],
        offset=(begin - doc_begin)[keep],
    )


def read_windows(stream: DocumentStream, starts: np.ndarray, length: int) -> tuple[np.ndarray, Pieces]:
    """The tokens of each window, shape ``(len(starts), length)``, in the shards' dtype.

    The pieces tile the windows row after row, so one ``np.concatenate`` of the mapped
    slices writes them all (a Python loop builds only the slice views).
    """
    pieces = locate(stream.cumulative, starts, length)
    corpus = stream.corpus
    documents = np.asarray(stream.order[pieces.position], dtype=np.int64)
    shards = corpus.shard_of(documents).tolist()
    sources = (corpus.document_starts[documents] + pieces.offset).tolist()
    sizes = pieces.length.tolist()
    slices = [corpus.shard_tokens(shard)[s : s + n] for shard, s, n in zip(shards, sources, sizes)]
    if not slices:
        return np.zeros((len(starts), length), dtype=np.int64), pieces
    return np.concatenate(slices).reshape(len(starts), length), pieces


def segment_boundaries(pieces: Pieces, rows: int, seq_len: int) -> np.ndarray:
    """``cu_seqlens`` of a flattened batch: where each document piece of each input starts.

    Inputs are the first ``seq_len`` tokens of each window, laid out back to back
    (``rows * seq_len`` tokens). A document that starts at the window's last token only
    appears in the labels, so it opens no segment. Returns int32, first 0, last
    ``rows * seq_len``.
    """
    inside = pieces.begin < seq_len
    starts = pieces.row[inside] * seq_len + pieces.begin[inside]
    return np.concatenate([starts, [rows * seq_len]]).astype(np.int32)


def positions_from_boundaries(cu_seqlens: np.ndarray, out: np.ndarray) -> None:
    """Write into ``out`` (flat, ``cu_seqlens[-1]`` long) each token's offset in its segment."""
    total = int(cu_seqlens[-1])
    lengths = np.diff(cu_seqlens).astype(np.int64)
    np.subtract(np.arange(total, dtype=np.int64), np.repeat(cu_seqlens[:-1].astype(np.int64), lengths), out=out)
