"""What the web kernels take from each document's words, in one pass over them.

The words (``word_splitter.split_words``) feed three rule families: Gopher quality
counts non-symbol and alphabetic words, Gopher repetition hashes word n-grams, and the
exemption for text without spaces needs the share of letters from such scripts. One
pass computes all of it so the words are decoded once.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.utf8 import decode
from pipeline.text.char_tables import ALPHA, DT_PUNCT, NO_SPACE_SCRIPT
from stages.quality.jit import leaf
from stages.quality.open_addressing import poly_hash, poly_power


@leaf
def word_stats(T, buf, ntok, tok_s, tok_e, chars, poly, powlen):
    """Per word: characters, a polynomial hash of its bytes and base**bytes (for hashing
    concatenations). Returns (non-symbol words, their characters, words with a letter,
    letters, letters of scripts written without spaces)."""
    flags = T.flags
    n_ns = 0
    ns_chars = 0
    n_alpha = 0
    letters = 0
    no_space_letters = 0
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
        chars[t] = c
        poly[t] = poly_hash(np.uint64(0), buf, a, b)
        powlen[t] = poly_power(b - a)
        if non_symbol:
            n_ns += 1
            ns_chars += c
        if alpha:
            n_alpha += 1
    return n_ns, ns_chars, n_alpha, letters, no_space_letters
