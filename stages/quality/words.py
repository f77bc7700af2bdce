"""What the web kernels take from each document's words, in one pass over them.

The words (``word_splitter.split_words``) feed three rule families: Gopher quality
counts non-symbol and alphabetic words, Gopher repetition hashes word n-grams, and
the exemption for text without spaces needs the share of letters from such scripts.
One pass computes all of it so the words are decoded once, and writes the n-gram walks'
prefix sums (``ngrams.py``) as it goes rather than per-word arrays they would fold again.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64_nonzero
from pipeline.kernels.utf8 import decode
from pipeline.text.char_tables import ALPHA, DT_PUNCT, NO_SPACE_SCRIPT
from stages.quality.jit import leaf
from stages.quality.open_addressing import inverse_power, poly_hash, poly_power


@leaf
def word_stats(T, buf, ntok, tok_s, tok_e, cum, at, by_word, by_byte, power, inverse):
    """Returns (non-symbol words, their characters, words with a letter, letters, letters
    of scripts written without spaces). Fills, for t <= ntok, the sums over the words
    before word t: characters (``cum``), bytes (``at``), a prefix hash over word keys
    (``by_word``, for the top n-grams), one over the words' bytes (``by_byte``, for the
    duplicate n-grams), the byte hash's base ** bytes (``power``) and its inverse."""
    flags = T.flags
    n_ns = 0
    ns_chars = 0
    n_alpha = 0
    letters = 0
    no_space_letters = 0
    cum[0] = 0
    at[0] = 0
    by_word[0] = 0
    by_byte[0] = 0
    power[0] = 1
    inverse[0] = 1
    for t in range(ntok):
        a = tok_s[t]
        b = tok_e[t]
        c = 0
        non_symbol = False
        alpha = False
        i = a
        while i < b:
            cp, n = decode(buf, i)
            f = flags[cp]
            if not (f & DT_PUNCT):
                non_symbol = True
            if f & ALPHA:
                alpha = True
                letters += 1
                if f & NO_SPACE_SCRIPT:
                    no_space_letters += 1
            c += 1
            i += n
        if non_symbol:
            n_ns += 1
            ns_chars += c
        if alpha:
            n_alpha += 1
        poly = poly_hash(np.uint64(0), buf, a, b)
        powlen = poly_power(b - a)
        cum[t + 1] = cum[t] + c
        at[t + 1] = at[t] + (b - a)
        by_word[t + 1] = by_word[t] * GOLDEN_GAMMA + mix64_nonzero(poly ^ np.uint64(c))
        by_byte[t + 1] = by_byte[t] * powlen + poly
        power[t + 1] = power[t] * powlen
        inverse[t + 1] = inverse[t] * inverse_power(b - a, powlen)
    return n_ns, ns_chars, n_alpha, letters, no_space_letters
