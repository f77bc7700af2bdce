"""The word splitter's memo changes how fast a chunk is split, never its words: a chunk
seen before, after the memo was emptied, or under a colliding hash splits as it would
alone."""

from __future__ import annotations

import gzip
import json

import numpy as np
from test_quality import words

from stages.quality import chunk_memo as cm


def _fresh_each(texts):
    return [words(t) for t in texts]


def _shared(texts):
    memo = cm.chunk_memo()
    return [words(t, memo) for t in texts]


def test_a_chunk_seen_before_gets_the_words_it_got_then():
    texts = ["self.x(a, b); (U.S.) don't", "y = self.x(a, b); (U.S.) don't.", "(U.S.) self.x(a, b);"]
    assert _shared(texts) == _fresh_each(texts)
    assert _shared(texts)[2] == ["(", "U.S.", ")", "self.x(a", ",", "b", ")", ";"]


def test_the_memo_emptied_when_full_still_splits_the_same():
    # More distinct long-way chunks than the memo holds, then the first ones again.
    chunks = [f"f{i}.x({i}," for i in range(cm.ENTRIES + 500)]
    texts = [" ".join(chunks[i : i + 1000]) for i in range(0, len(chunks), 1000)]
    texts.append(" ".join(chunks[:50]))
    assert _shared(texts) == _fresh_each(texts)


def test_the_same_hash_with_other_bytes_is_a_miss():
    memo = cm.chunk_memo()
    a, b = np.frombuffer(b"ab).", np.uint8), np.frombuffer(b"cd).", np.uint8)
    out_s, out_e = np.zeros(8, np.int32), np.zeros(8, np.int32)
    out_s[:3], out_e[:3] = [0, 2, 3], [2, 3, 4]
    h = np.uint64(12345)
    cm.remember(memo, a, 0, 4, h, out_s, out_e, 0, 3)
    assert cm.recall(*memo[:5], b, 0, 4, h, out_s, out_e, 0) == -1  # same hash, other bytes
    assert cm.recall(*memo[:5], a, 0, 3, h, out_s, out_e, 0) == -1  # same hash, other length
    out_s[:], out_e[:] = 0, 0
    assert cm.recall(*memo[:5], a, 0, 4, h, out_s, out_e, 5) == 8
    assert list(out_s[5:8]) == [0, 2, 3] and list(out_e[5:8]) == [2, 3, 4]


def test_code_splits_the_same_with_one_memo_for_the_file(shared_data):
    """Real code repeats its punctuated chunks: one memo across a file, as a batch has."""
    with gzip.open(shared_data / "code" / "python_stdlib.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(300), f)]
    assert _shared(texts) == _fresh_each(texts)
