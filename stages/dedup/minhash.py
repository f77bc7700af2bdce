"""MinHash signatures over Arrow string buffers, in one numba pass per batch.

Why this shape: the signature is the hot loop of dedup (every shingle of every document
goes through every permutation), so it runs on the raw offsets + UTF-8 bytes of a whole
batch, never on Python strings.

Per document:

1. UTF-8 is decoded and *normalised* by the shared fold (``pipeline/text/casefold.py``,
   decontaminate's too): case folded (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic,
   full-width Latin), punctuation, symbols and whitespace become word separators. The
   same pass hashes each word (64 bits) and the text for exact dedup (word hashes,
   punctuation and whitespace runs collapsed to one space, trimmed), so "Hello  World"
   and "hello world" are exact duplicates, "hello, world" is not.
2. Shingles: word n-grams (default 5) hashed to 64 bits (a polynomial over the word
   hashes, then a 64-bit avalanche). A document with fewer words than ``ngram`` gives
   one shingle of all its words. Text without spaces (Chinese, Japanese, Thai...: its
   whitespace-separated runs hold more than ``char_fallback_word_len`` word code points
   on average; punctuation does not count as a space, since CJK punctuation splits
   clauses, not words) uses character n-grams (default 5) over its non-separator code
   points.
3. MinHash: permutation ``i`` maps the low 32 bits of a shingle hash ``x`` to
   ``(a_i * x + b_i) mod 2**32`` (``a_i`` odd, so a bijection); the signature keeps the
   minimum of each. 32-bit lanes let the 112 permutations run as a handful of SIMD
   instructions per shingle; shingles stay 64-bit for the exact Jaccard check.
4. Band keys: band ``k`` of ``rows`` minima is hashed with ``k`` into a 64-bit key, so
   equal keys mean "same band, same rows" (up to a 2**-64 collision). The exact hash
   gets a key of its own (band index ``bands``), so exact duplicates meet in the same
   partition files as near duplicates.

Stored signatures are b-bit (16): the low 16 bits of an avalanche of each minimum.
Two different minima agree there with probability 2**-16, a bias far below the
sampling error of 112 hashes, in half the disk space of the 32-bit minima.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.kernels.buffers import is_string, string_buffers
from pipeline.kernels.mixing import FNV_OFFSET, FNV_PRIME, GOLDEN_GAMMA, fnv1a, mix64
from pipeline.kernels.utf8 import decode_lenient
from pipeline.text.casefold import SPACE, fold

_POLY = GOLDEN_GAMMA  # odd: the multiplier of the shingle and band polynomials
_MASK32 = np.uint64(0xFFFFFFFF)


@njit(inline="always")
def _word_end(wh, acc, nacc):
    """The 64-bit hash of a word from its hash so far and its last, partial chunk."""
    return mix64(wh ^ acc ^ (np.uint64(nacc) << np.uint64(59)))


@njit
def _normalise(data, start, end, cps, word_hash):
    """Decode and fold one document: word code points (separators dropped) into ``cps``,
    the 64-bit hash of each word into ``word_hash``; returns (n_cps, n_words, n_spaced,
    exact_hash), ``n_spaced`` counting the whitespace-separated runs that hold a word.

    A word is hashed 8 code points below 256 at a time (packed into one 64-bit chunk, a
    code point above that is a chunk of its own), one avalanche per chunk: a
    multiply per byte would be the bottleneck. The exact hash chains word hashes,
    punctuation and collapsed whitespace."""
    n_cps = 0
    n_words = 0
    n_spaced = 0
    after_space = True
    exact = FNV_OFFSET
    in_word = False
    pending_space = False
    emitted = False
    wh = np.uint64(0)
    acc = np.uint64(0)
    nacc = 0
    i = start
    while i <= end:
        if i == end:
            f = SPACE  # end of text closes the last word
            cp = 32
            i += 1
        else:
            cp, size = decode_lenient(data, i, end)  # a stray or cut-off byte is a symbol
            i += size
            f = fold(cp)
        if f < 0:  # a separator ends the current word
            if in_word:
                h = _word_end(wh, acc, nacc)
                word_hash[n_words - 1] = h
                exact = (exact ^ h) * FNV_PRIME
                in_word = False
            if f == SPACE:
                pending_space = True
                after_space = True
                continue
            if pending_space and emitted:
                exact = (exact ^ np.uint64(32)) * FNV_PRIME
            pending_space = False
            emitted = True
            exact = (exact ^ np.uint64(cp)) * FNV_PRIME
            continue
        if not in_word:
            if pending_space and emitted:
                exact = (exact ^ np.uint64(32)) * FNV_PRIME
            pending_space = False
            emitted = True
            if after_space:
                n_spaced += 1
                after_space = False
            n_words += 1
            in_word = True
            wh = np.uint64(0)
            acc = np.uint64(0)
            nacc = 0
        if nacc == 8 or f >= 256:
            if nacc:
                wh = mix64(wh ^ acc)
            acc = np.uint64(0)
            nacc = 0
        if f >= 256:
            acc = np.uint64(f) | (np.uint64(1) << np.uint64(40))
            nacc = 8
        else:
            acc = (acc << np.uint64(8)) | np.uint64(f)
            nacc += 1
        cps[n_cps] = f
        n_cps += 1
    return n_cps, n_words, n_spaced, mix64(exact)


@njit(inline="always")
def _absorb(x, a, b, mins):
    """Fold one shingle hash into the running minima of every permutation (uint32 lanes)."""
    x32 = np.uint32(x & _MASK32)
    for k in range(mins.shape[0]):
        mins[k] = min(mins[k], np.uint32(a[k] * x32 + b[k]))


@njit
def _shingles(cps, n_cps, n_words, n_spaced, ngram, char_ngram, char_word_len, word_hash, out):
    """Write the 64-bit shingle hashes of one normalised document to ``out``; return the count."""
    if n_words == 0:
        return 0
    if n_cps > char_word_len * n_spaced:  # no spaces to speak of: character n-grams
        if n_cps <= char_ngram:
            out[0] = mix64(fnv1a(cps, 0, n_cps))
            return 1
        for s in range(n_cps - char_ngram + 1):
            out[s] = mix64(fnv1a(cps, s, s + char_ngram))
        return n_cps - char_ngram + 1
    width = min(ngram, n_words)
    count = n_words - width + 1
    for s in range(count):
        h = np.uint64(0)
        for j in range(s, s + width):
            h = h * _POLY + word_hash[j]
        out[s] = mix64(h ^ np.uint64(width))
    return count


def _scratch(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-document work arrays of the kernels below, sized for the longest document:
    code points, word hashes, shingle hashes.

    The kernels here allocate nothing: their arrays come from Python. Each numpy
    allocator a kernel calls is one more numba compile per dtype and shape (30-60 ms on
    a cold cache): dedup's kernels compiled about twenty of them, a second of the warm-up."""
    longest = int((ends - starts).max(initial=0))
    return np.empty(longest + 1, np.int64), np.empty(longest + 1, np.uint64), np.empty(longest + 1, np.uint64)


@njit
def _sign(starts, ends, data, ngram, char_ngram, char_word_len, a, b, sigs, exact, n_shingles, scratch, mins):
    """Signatures (``sigs``, uint32 minima), exact hashes and shingle counts of every
    document. ``scratch``: ``_scratch``'s arrays; ``mins``: one uint32 per permutation."""
    cps, word_hash, out = scratch
    for d in range(starts.shape[0]):
        n_cps, n_words, n_spaced, ex = _normalise(data, starts[d], ends[d], cps, word_hash)
        exact[d] = ex
        count = _shingles(cps, n_cps, n_words, n_spaced, ngram, char_ngram, char_word_len, word_hash, out)
        n_shingles[d] = count
        mins[:] = np.uint32(0xFFFFFFFF)
        for s in range(count):
            _absorb(out[s], a, b, mins)
        for k in range(mins.shape[0]):
            sigs[d, k] = mins[k]


@njit
def _kept_shingles(starts, ends, data, ngram, char_ngram, char_word_len, kept_offsets, kept, scratch):
    """Each document's sorted unique shingle hashes (for the exact Jaccard check), document
    ``d`` at ``kept[kept_offsets[d]:kept_offsets[d + 1]]``; returns how many in all. A kernel
    apart from ``_sign`` so that runs without ``verify`` never compile the sort."""
    cps, word_hash, out = scratch
    pos = 0
    for d in range(starts.shape[0]):
        n_cps, n_words, n_spaced, _ = _normalise(data, starts[d], ends[d], cps, word_hash)
        count = _shingles(cps, n_cps, n_words, n_spaced, ngram, char_ngram, char_word_len, word_hash, out)
        uniq = np.unique(out[:count])
        kept[pos : pos + uniq.shape[0]] = uniq
        pos += uniq.shape[0]
        kept_offsets[d + 1] = pos
    return pos


@njit
def _band_keys(sigs, n_shingles, exact, bands, rows, keys, valid):
    """Band keys (bands + 1 per document: the LSH bands, then the exact-text key) into
    ``keys`` and ``valid`` (both [n, bands + 1]).

    A document without shingles gets no LSH keys (marked ``valid = False``); it can
    still be an exact duplicate."""
    n = sigs.shape[0]
    for d in range(n):
        for k in range(bands):
            h = mix64(np.uint64(k + 1) * _POLY)
            for r in range(k * rows, (k + 1) * rows):
                h = mix64(h ^ np.uint64(sigs[d, r]))
            keys[d, k] = h
            valid[d, k] = n_shingles[d] > 0
        keys[d, bands] = mix64(exact[d] ^ _POLY)
        valid[d, bands] = True


@njit
def _bbit(sigs, out):
    """The stored 16-bit form of each minimum (see module docstring) into ``out``."""
    n, h = sigs.shape
    for d in range(n):
        for k in range(h):
            out[d, k] = np.uint16(mix64(np.uint64(sigs[d, k])) & np.uint64(0xFFFF))


def permutations(num_hashes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) of each permutation: a odd in [1, 2**32), b in [0, 2**32), from ``seed``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 31, size=num_hashes, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 1 << 32, size=num_hashes, dtype=np.uint64)
    return a.astype(np.uint32), b.astype(np.uint32)


class Signer:
    """Computes signatures, band keys and exact hashes for batches of text.

    One instance holds the permutations; ``sign`` is a pure function of the text."""

    def __init__(self, *, ngram=5, bands=14, rows=8, seed=1, char_ngram=5, char_fallback_word_len=16):
        self.ngram, self.bands, self.rows = int(ngram), int(bands), int(rows)
        self.char_ngram, self.char_word_len = int(char_ngram), int(char_fallback_word_len)
        self.num_hashes = self.bands * self.rows
        self.a, self.b = permutations(self.num_hashes, seed)

    def sign(self, text: pa.Array, keep_shingles: bool = False, minima: bool = True) -> dict[str, np.ndarray]:
        """Minima (uint32, [n, bands*rows]; [n, 0] without ``minima``: the signatures come
        from elsewhere, ``shipped``), exact hash, shingle counts,
        and, with ``keep_shingles``, each document's sorted unique shingle hashes."""
        if not is_string(text.type):
            raise TypeError(f"text must be a string column, not {text.type}")
        data, offsets = string_buffers(text)  # a null row reads as empty text
        starts, ends = offsets[:-1], offsets[1:]
        n = starts.shape[0]
        a, b = (self.a, self.b) if minima else (self.a[:0], self.b[:0])  # no permutation: no MinHash
        sigs = np.empty((n, len(a)), np.uint32)
        exact = np.empty(n, np.uint64)
        n_shingles = np.empty(n, np.int64)
        shingling = (self.ngram, self.char_ngram, self.char_word_len)
        scratch = _scratch(starts, ends)
        mins = np.empty(len(a), np.uint32)
        _sign(starts, ends, data, *shingling, a, b, sigs, exact, n_shingles, scratch, mins)
        out = {"sigs": sigs, "exact": exact, "n_shingles": n_shingles}
        if keep_shingles:
            kept_offsets = np.zeros(n + 1, np.int64)
            kept = np.empty(int((ends - starts).sum()) + n, np.uint64)
            used = _kept_shingles(starts, ends, data, *shingling, kept_offsets, kept, scratch)
            out["shingle_offsets"] = kept_offsets
            out["shingles"] = kept[:used]
        return out

    def band_keys(self, signed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """([n, bands+1] uint64 keys, [n, bands+1] bool valid): LSH bands then the exact key."""
        n = len(signed["sigs"])
        keys = np.empty((n, self.bands + 1), np.uint64)
        valid = np.empty((n, self.bands + 1), np.bool_)
        _band_keys(signed["sigs"], signed["n_shingles"], signed["exact"], self.bands, self.rows, keys, valid)
        return keys, valid

    @staticmethod
    def stored(sigs: np.ndarray) -> np.ndarray:
        """The 16-bit signature kept on disk for similarity estimates."""
        out = np.empty(sigs.shape, np.uint16)
        _bbit(sigs, out)
        return out


def estimate_similarity(stored_a: np.ndarray, stored_b: np.ndarray) -> np.ndarray:
    """Jaccard estimates from stored 16-bit signatures, row by row (fraction of equal slots)."""
    return (stored_a == stored_b).mean(axis=-1)


@njit
def jaccard_sorted(x, y):
    """Exact Jaccard similarity of two sorted arrays of unique hashes."""
    i = j = inter = 0
    while i < x.shape[0] and j < y.shape[0]:
        if x[i] == y[j]:
            inter += 1
            i += 1
            j += 1
        elif x[i] < y[j]:
            i += 1
        else:
            j += 1
    union = x.shape[0] + y.shape[0] - inter
    return inter / union if union else 1.0
