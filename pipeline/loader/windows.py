"""Fixed windows over the document stream: locate, read, and derive document boundaries.

Why this way: the token stream (documents laid end to end in the order's sequence) is
never materialised. A window ``[start, start + length)`` of stream positions is mapped to
the document pieces it covers by a binary search in the memory-mapped cumulative sizes,
and each piece is copied straight from its shard's memory-mapped ``.bin`` into the
batch's int64 ``input_ids`` and ``labels``. Document boundaries inside a window are the
piece starts, which come from the ``.idx`` sizes, never from scanning tokens for an
end-of-document id.

Why numba: a batch is a few dozen pieces and a few hundred kilobytes of output, so
numpy's per-call overhead (a dozen vectorised calls, a temporary window array, then a
cast and copy per output) cost more than the work itself. Each kernel here is one pass
that writes its output in place: ``locate`` the pieces, ``fill_tokens`` the inputs and
labels of one shard's pieces (the token cast happens in the copy), ``fill_segments`` the
``cu_seqlens`` and position ids. No torch.

``WindowSources`` counts, for consecutive windows, the tokens of each source (the corpus's
``sources``: a mixture's, or a run's ``tokens/<source>/`` folders) in their inputs: what
the window shuffle (``pipeline.loader.sampler``) balances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.compile.jit import njit
from pipeline.loader.order import DocumentStream


@dataclass
class Pieces:
    """The document pieces covered by a batch of windows, in window then stream order.

    ``row``: which window; ``shard``: the shard holding the piece; ``source``: where the
    piece starts in that shard's ``.bin`` (in tokens); ``begin``: offset of the piece
    inside its window; ``length``: tokens. Empty documents produce no piece.
    """

    row: np.ndarray
    shard: np.ndarray
    source: np.ndarray
    begin: np.ndarray
    length: np.ndarray


@njit
def _locate(cumulative, order, document_starts, shard_first_document, starts, length):
    """The pieces of windows ``[s, s + length)``; a count pass sizes the arrays first."""
    rows = len(starts)
    first = np.empty(rows, np.int64)
    capacity = 0
    for r in range(rows):
        first[r] = np.searchsorted(cumulative, starts[r], side="right") - 1
        last = np.searchsorted(cumulative, starts[r] + length - 1, side="right") - 1
        capacity += last - first[r] + 1
    row = np.empty(capacity, np.int64)
    shard = np.empty(capacity, np.int64)
    source = np.empty(capacity, np.int64)
    begin = np.empty(capacity, np.int64)
    size = np.empty(capacity, np.int64)
    count = 0
    for r in range(rows):
        window_begin, window_end = starts[r], starts[r] + length
        k = first[r]
        while k + 1 < len(cumulative) and cumulative[k] < window_end:
            piece_begin = max(cumulative[k], window_begin)
            piece_end = min(cumulative[k + 1], window_end)
            if piece_end > piece_begin:  # skips empty documents
                document = order[k]
                row[count] = r
                shard[count] = np.searchsorted(shard_first_document, document, side="right") - 1
                source[count] = document_starts[document] + piece_begin - cumulative[k]
                begin[count] = piece_begin - window_begin
                size[count] = piece_end - piece_begin
                count += 1
            k += 1
    return row[:count], shard[:count], source[:count], begin[:count], size[:count]


def locate(stream: DocumentStream, starts: np.ndarray, length: int) -> Pieces:
    """The pieces of windows ``[s, s + length)`` for each ``s`` in ``starts``."""
    corpus = stream.corpus
    arrays = _locate(
        stream.cumulative,
        stream.order,
        corpus.document_starts,
        corpus.shard_first_document,
        np.asarray(starts, dtype=np.int64),
        length,
    )
    return Pieces(*arrays)


@njit
def fill_tokens(tokens, shard, pieces_shard, source, row, begin, size, seq_len, inputs, labels):
    """Copy the pieces of ``shard`` (its ``.bin`` is ``tokens``) into flat ``inputs`` and
    ``labels``; return the smallest and largest id copied (``read_windows`` says why).

    A window holds ``seq_len + 1`` tokens: its inputs are the first ``seq_len``, its
    labels the last ``seq_len``. The loops run over slices indexed from 0, which LLVM
    vectorises (offset indexing into the whole arrays made them 3x slower), the two
    reductions with them.
    """
    low = np.int64(0)
    high = np.int64(0)
    for i in range(len(pieces_shard)):
        if pieces_shard[i] != shard:
            continue
        piece = tokens[source[i] : source[i] + size[i]]
        at = row[i] * seq_len + begin[i]
        head = inputs[at : at + max(0, min(size[i], seq_len - begin[i]))]
        for j in range(len(head)):
            head[j] = piece[j]
            low = min(low, head[j])
            high = max(high, head[j])
        skip = 1 if begin[i] == 0 else 0  # the window's first token is no label
        tail = labels[at + skip - 1 : at + size[i] - 1]
        for j in range(len(tail)):
            tail[j] = piece[skip + j]
            low = min(low, tail[j])
            high = max(high, tail[j])
    return low, high


@njit
def fill_segments(row, begin, rows, seq_len, cu_seqlens, positions) -> int:
    """Write ``cu_seqlens`` and ``positions``; return the longest segment.

    ``cu_seqlens`` (int32, ``segments + 1`` long) of the flattened inputs: where each
    document piece starts, then ``rows * seq_len``. A document that starts at the
    window's last token only appears in the labels, so it opens no segment.
    ``positions`` (flat, ``rows * seq_len``): each token's offset in its segment.
    """
    segments = 0
    for i in range(len(row)):
        if begin[i] < seq_len:
            cu_seqlens[segments] = row[i] * seq_len + begin[i]
            segments += 1
    cu_seqlens[segments] = rows * seq_len
    longest = 0
    for s in range(segments):
        segment = positions[cu_seqlens[s] : cu_seqlens[s + 1]]
        longest = max(longest, len(segment))
        for j in range(len(segment)):
            segment[j] = j
    return longest


def count_segments(pieces: Pieces, seq_len: int) -> int:
    """The number of segments ``fill_segments`` will write (see there)."""
    return int(np.count_nonzero(pieces.begin < seq_len))


def read_windows(
    stream: DocumentStream, pieces: Pieces, seq_len: int, inputs: np.ndarray, labels: np.ndarray
) -> tuple[int, int]:
    """Write the windows' tokens as flat int64 ``inputs`` and ``labels`` (``rows * seq_len`` each);
    return the smallest and largest id written (0 counts as both where none is below or
    above it), which the dataset checks against the vocabulary in the same pass.

    One kernel call per shard present in the batch (shards may differ in dtype).
    """
    low = high = 0
    for shard in set(pieces.shard.tolist()):
        tokens = stream.corpus.shard_tokens(shard)
        shard_low, shard_high = fill_tokens(
            tokens, shard, pieces.shard, pieces.source, pieces.row, pieces.begin, pieces.length, seq_len, inputs, labels
        )
        low, high = min(low, shard_low), max(high, shard_high)
    return low, high


@njit
def _source_tokens(cumulative, order, source_first, first, count, seq_len, sources):
    """Tokens of each source in the inputs (``seq_len`` stream positions) of windows
    ``first .. first + count - 1``: a ``(count, sources)`` int64 array."""
    out = np.zeros((count, sources), np.int64)
    for r in range(count):
        window_begin = (first + r) * seq_len
        window_end = window_begin + seq_len
        k = np.searchsorted(cumulative, window_begin, side="right") - 1
        while k + 1 < len(cumulative) and cumulative[k] < window_end:
            piece = min(cumulative[k + 1], window_end) - max(cumulative[k], window_begin)
            if piece > 0:  # skips empty documents
                out[r, np.searchsorted(source_first, order[k], side="right") - 1] += piece
            k += 1
    return out


class WindowSources:
    """Tokens of each source in the inputs of consecutive windows (no torch).

    A window's inputs are stream positions ``[w * seq_len, (w + 1) * seq_len)``, so the
    windows of a pass partition the stream and their counts add up to its composition.
    Picklable: the stream sends paths, not arrays.
    """

    def __init__(self, stream: DocumentStream, seq_len: int):
        self.stream = stream
        self.seq_len = seq_len
        self.source_first = np.array([s.first_document for s in stream.corpus.sources], dtype=np.int64)

    @property
    def count(self) -> int:
        return len(self.source_first)

    def __call__(self, first: int, count: int) -> np.ndarray:
        """A ``(count, sources)`` int64 array: row ``r`` is window ``first + r``."""
        return _source_tokens(
            self.stream.cumulative, self.stream.order, self.source_first, first, count, self.seq_len, self.count
        )
