"""tiktoken's encodings (GPT-2, cl100k, o200k, Qwen2, Qwen3.5) run by prep's numba kernels
(``pipeline/text/bpe``), token for token what tiktoken gives, faster per thread on real text.

Why: tiktoken spends most of its time in its split regex and re-merges every occurrence
of a word; tokenizing was the pipeline's last phase on its critical path. Here the
pattern is a scanner and each piece's tokens are remembered by its bytes for the life of
the process, so a word seen before costs a hash and a comparison.

Rows the kernels do not take are encoded by tiktoken itself, and the ids put back in
order: text holding a code point whose class tiktoken's regex tables may see otherwise
(``classes.py``) or a piece too long to merge here in good time (``merge.py``), and rows
longer than the caller's bound (``TiktokenTokenizer`` cuts those into pieces first).

Compiling the kernels costs about 4.5 CPU-seconds, more than tiktoken takes for a small
run's text: a run compiles them in its warm-up only when its input is large (the step
``stages/tokenize.py`` declares), and the encoder is used where they are compiled (in
numba's cache, so on every later run), tiktoken otherwise. Both give the same ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.byte_memo import byte_memo
from pipeline.text.bpe.classes import FINE, LETTERS, LETTERS_AND_MARKS, code_point_classes
from pipeline.text.bpe.merge import encode_batch, fill_ranks, rank_table
from pipeline.text.bpe.pretokenize import CL100K, O200K, QWEN2, R50K
from pipeline.text.tiktoken_encodings import CL100K_PATTERN, O200K_PATTERN, QWEN2_PATTERN, QWEN3_5_PATTERN, R50K_PATTERN

# Each split pattern's scanner and the class view it reads.
PATTERNS = {
    R50K_PATTERN: (R50K, LETTERS),
    CL100K_PATTERN: (CL100K, LETTERS),
    O200K_PATTERN: (O200K, FINE),
    QWEN2_PATTERN: (QWEN2, LETTERS),
    QWEN3_5_PATTERN: (QWEN2, LETTERS_AND_MARKS),  # Qwen2's scanner, marks read as letters
}
MEMO_SLOTS = 1 << 17  # 65,536 pieces of up to MEMO_MAX_BYTES, about 3 MB
MEMO_MAX_BYTES = 64


def encoder_for(ranks: dict[bytes, int], pattern: str) -> FastEncoder | None:
    """An encoder for this encoding if its pattern is known and its kernels compiled."""
    return FastEncoder(ranks, pattern) if knows(pattern) and kernels_ready() else None


def knows(pattern: str) -> bool:
    """Whether the kernels have a scanner for this split pattern."""
    return pattern in PATTERNS


def kernels_ready() -> bool:
    """Whether this process or numba's cache has the kernels for the arguments ``encode``
    passes (types only: the values below are stand-ins)."""
    if encode_batch.signatures and fill_ranks.signatures:
        return True
    ints, table = np.zeros(2, np.int64), np.zeros(1, np.uint8)
    text = np.frombuffer(b"a", np.uint8)  # read-only, as Arrow's buffers are
    memo = byte_memo(2, 1, 1, 1)
    encode_args = ((memo, ints, ints), table, memo, R50K, text, ints, 1, np.zeros(1, np.uint32), ints)
    return fill_ranks.in_cache((memo, table, ints, ints)) and encode_batch.in_cache(encode_args)


def compile_kernels(ranks: dict[bytes, int], pattern: str) -> None:
    """Compile (or load) the kernels, by encoding a line."""
    FastEncoder(ranks, pattern).encode(pa.array(["Warm up, 1 2 3."]), 1 << 16, _unused)


def _unused(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    raise AssertionError("the warm-up line needs no fallback")


class FastEncoder:
    """Encodes Arrow string arrays like tiktoken's ``encode_ordinary`` for one encoding."""

    def __init__(self, ranks: dict[bytes, int], pattern: str):
        self.pattern, view = PATTERNS[pattern]
        tokens = list(ranks)
        blob = np.frombuffer(b"".join(tokens), np.uint8).copy()
        offsets = np.zeros(len(tokens) + 1, np.int64)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        self.table = rank_table(blob, offsets, np.fromiter(ranks.values(), np.int64, len(tokens)))
        self.classes = code_point_classes(view)
        self.memo = byte_memo(MEMO_SLOTS, 8, 4, MEMO_MAX_BYTES)

    def encode(
        self,
        array: pa.Array,
        max_row_bytes: int,
        slow: Callable[[Sequence[str]], tuple[np.ndarray, np.ndarray]],
    ) -> tuple[np.ndarray, np.ndarray]:
        """(all ids back to back, each row's count); rows the kernels refuse and rows over
        ``max_row_bytes`` go to ``slow`` (a list of str in, the same pair out)."""
        data, offsets = string_buffers(array)
        if data.flags.writeable:  # an empty array's: one type for every call, one compile
            data = data.view()
            data.flags.writeable = False
        out = np.empty(max(int(offsets[-1] - offsets[0]), 1), np.uint32)
        lengths = np.empty(len(offsets) - 1, np.int64)
        written = encode_batch(
            self.table, self.classes, self.memo, self.pattern, data, offsets, max_row_bytes, out, lengths
        )
        refused = np.flatnonzero(lengths < 0)
        if not len(refused):
            return out[:written], lengths
        slow_ids, slow_lengths = slow([t or "" for t in array.take(pa.array(refused)).to_pylist()])
        lengths[refused] = slow_lengths
        ids = np.empty(int(lengths.sum()), np.uint32)
        starts = np.cumsum(lengths) - lengths
        taken = np.ones(len(lengths), bool)
        taken[refused] = False
        ids[_positions(starts[taken], lengths[taken])] = out[:written]
        ids[_positions(starts[refused], lengths[refused])] = slow_ids
        return ids, lengths


def _positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices starts[i] + 0 .. lengths[i] - 1 for every i, in order."""
    before = np.cumsum(lengths) - lengths
    return np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
