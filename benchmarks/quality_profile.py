"""Where the quality stage's web kernel spends its time, per signal family, next to a
pass that decodes every character once (the floor any family pays).

Each family is timed as the difference between two drivers that run the kernel's steps
on the same batches, one with and one without it: words (spaCy's splitting, then the
per-word statistics), Gopher quality, Gopher repetition (lines, paragraphs, word
n-grams), C4 (line rules and rewriting), FineWeb (on C4's text). CPU seconds, best of
``repeat``, so other processes on the machine weigh less. ``benchmarks.filters
--profile`` prints the table; the driver compiles on first use (about 10 s).
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.utf8 import decode, n_chars
from stages.quality.c4 import c4_rewrite
from stages.quality.chunk_memo import chunk_memo
from stages.quality.fineweb import fineweb
from stages.quality.gopher_quality import gopher_quality
from stages.quality.gopher_repetition import lines_and_paragraphs
from stages.quality.ngrams import dup_ngrams, lone_heads, ngram_scratch, top_ngrams
from stages.quality.rules import rule_table
from stages.quality.word_splitter import split_words, word_scratch
from stages.quality.words import word_stats

# (name, steps the driver runs); each family's time is its row minus the row before.
STEPS = (
    ("decode every character", 0),
    ("words: splitting", 1),
    ("words: per-word statistics", 2),
    ("Gopher quality", 3),
    ("Gopher repetition", 4),
    ("C4", 5),
    ("FineWeb", 6),
)


@njit(cache=False)
def _drive(steps, T, data, offsets, params, stop_blob, stop_off, phrases, top_ns, dup_ns, rules, sig, out, memo):
    flags = T.flags
    spaces = 0
    for d in range(offsets.shape[0] - 1):
        doc = data[offsets[d] : offsets[d + 1]]
        size = doc.shape[0]
        i = 0
        while i < size:
            cp, k = decode(doc, i)
            spaces += flags[cp] & 1
            i += k
        if steps == 0 or size == 0:
            continue
        tok_s, tok_e, stack_s, stack_e = word_scratch(size)
        ntok = split_words(T, doc, 0, size, tok_s, tok_e, stack_s, stack_e, memo)
        if steps == 1:
            continue
        ngrams = ngram_scratch(ntok)
        n_ns, ns_chars, n_alpha, _, _ = word_stats(T, doc, ntok, tok_s, tok_e, *ngrams[:6])
        row = sig[d]
        text_chars = n_chars(doc, 0, size)
        if steps >= 3:
            gopher_quality(T, doc, ntok, tok_s, tok_e, n_ns, ns_chars, n_alpha, stop_blob, stop_off, row)
        if steps >= 4:
            lines_and_paragraphs(flags, doc, text_chars, row)
            lone_heads(doc, ntok, tok_s, tok_e, ngrams)
            top_ngrams(ntok, ngrams, text_chars, top_ns, row, rules, True)
            dup_ngrams(ntok, ngrams, text_chars, top_ns.shape[0], dup_ns, row, rules, True, 0, 0)
        if steps >= 5:
            p_blob, p_off, p_class, p_pairs = phrases
            w_end, words = c4_rewrite(
                T, doc, ntok, tok_s, tok_e, memo, out, 0, params, p_blob, p_off, p_class, p_pairs, row
            )
            if steps >= 6:
                fineweb(T, out[:w_end], 30, words, row)
    return spaces


def profile(stage, texts: list[str], batch_size: int = 1024, repeat: int = 5) -> list[tuple[str, float]]:
    """(family, CPU seconds) for the web kernel's steps on ``texts``."""
    buffers = [
        string_buffers(pa.array(texts[i : i + batch_size], pa.large_string())) for i in range(0, len(texts), batch_size)
    ]

    every_signal = rule_table([])  # no early stop: each family's whole cost

    def run(steps: int) -> float:
        start = time.process_time()
        for data, offsets in buffers:
            sig = np.full((len(offsets) - 1, stage._n_signals), np.nan)
            out = np.empty(max(int(offsets[-1] - offsets[0]), 1), np.uint8)
            _drive(
                steps, stage._tables, data, offsets, stage._params, *stage._stop_words, stage._phrases,
                stage._top_ngram_sizes, stage._dup_ngram_sizes, every_signal, sig, out, chunk_memo(),
            )  # fmt: skip
        return time.process_time() - start

    run(len(STEPS) - 1)  # compile
    best = [min(run(steps) for _ in range(repeat)) for _, steps in STEPS]
    rows = [(STEPS[0][0], best[0])]
    rows += [(name, max(best[k] - best[k - 1], 0.0)) for k, (name, _) in enumerate(STEPS) if k > 0]
    return rows
