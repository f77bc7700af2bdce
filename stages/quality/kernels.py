"""The quality kernels' entry points: every heuristic signal of a batch, computed over
Arrow buffers, one call per batch and rule set.

For web text, one document is read in two passes: the first splits it into words once
and derives from those words and its lines the Gopher quality and repetition signals
while C4 rewrites its lines into the output buffer; the second reads the rewritten text
for FineWeb's signals (FineWeb's recipe runs after C4, so it judges the text C4
leaves). Code and math documents take one pass each.

Each rule family has its module (``gopher_quality``, ``gopher_repetition``, ``c4``,
``fineweb``, ``code_rules``), and each reproduces datatrove's rules exactly on the same
words (``word_splitter.split_words``) and the same notion of line (``str.splitlines``,
``str.split("\\n")``, ``re.split("\\n+")`` and ``re.split("\\n{2,}")`` where the
reference uses each), counting characters as Python does (code points). Signals go
into a float64 matrix whose columns ``signals.py`` declares (NaN where a rule cannot be
computed); thresholds are applied outside (``rules.py``), so re-thresholding never
needs the kernels.
"""

from __future__ import annotations

from pipeline.kernels.utf8 import n_chars
from stages.quality.c4 import c4_rewrite
from stages.quality.code_rules import blob_length, char_counts, code_rules
from stages.quality.early_stop import rejected
from stages.quality.fineweb import fineweb
from stages.quality.gopher_quality import gopher_quality
from stages.quality.gopher_repetition import lines_and_paragraphs, split_duplicates
from stages.quality.jit import kernel
from stages.quality.ngrams import dup_ngrams, lone_heads, ngram_scratch, top_ngrams
from stages.quality.signals import (
    BLOB_LEN,
    GR_DUP_LINE_CHAR_FRAC,
    GR_DUP_LINE_FRAC,
    NGRAM_BASE,
    NO_SPACE_FRAC,
    NONSPACE_CHARS,
    P_C4,
    P_FINEWEB_SHORT_LINE_LENGTH,
    TEXT_CHARS,
)
from stages.quality.word_counts import top_may_fire
from stages.quality.word_splitter import split_words, word_scratch
from stages.quality.words import word_stats


@kernel
def web_batch(
    T,
    data,
    offsets,
    params,
    no_space_min,
    stop_blob,
    stop_off,
    phrases,
    phrase_off,
    phrase_class,
    phrase_pairs,
    top_ns,
    dup_ns,
    rules,
    sig,
    out,
    out_off,
    memo,
):
    """Gopher repetition + quality on each document, C4 rewriting into ``out``, FineWeb on
    the result. ``out_off`` receives the rewritten texts' offsets. Documents whose
    letters are mostly (>= no_space_min) from scripts without spaces skip C4 (copied
    byte by byte: a numpy slice assignment compiles numba's shape-error messages, about
    2 CPU-seconds of a cold start).

    ``rules``: the Gopher rules (``rules.rule_table``). Once one fires on a document it is
    dropped whatever comes next, so the signals after it are not computed (NaN) and its
    rewritten text is left empty: a dropped document's signals are written nowhere, and
    the ledger keeps its original text. Lines and paragraphs are judged before the page
    is split into words, each n-gram size as it is counted, the repetition rules before
    the quality ones, all before C4 and FineWeb; but the top n-gram rules are judged
    after the other Gopher rules, which take them as not firing till then: the top
    n-grams of a page those drop are counted only where its word counts do not prove
    that no top n-gram rule fires (``word_counts``), else they are NaN. The reason is
    the same: the first rule, in order, that fires. An empty table computes everything.
    ``memo``: a ``chunk_memo`` for the batch's word splitting."""
    ndocs = offsets.shape[0] - 1
    w = 0
    out_off[0] = 0
    # Scratch for the largest document, shared by all: a fresh array per document
    # costs page faults in proportion to its size.
    largest = 0
    for d in range(ndocs):
        largest = max(largest, offsets[d + 1] - offsets[d])
    tok_s, tok_e, stack_s, stack_e = word_scratch(largest)
    ngrams = ngram_scratch(0)  # grown to the most words a document has
    for d in range(ndocs):
        doc = data[offsets[d] : offsets[d + 1]]
        size = doc.shape[0]
        row = sig[d]
        text_chars = n_chars(doc, 0, size)
        row[TEXT_CHARS] = text_chars
        # The empty page and the line and paragraph rules need no words: asked first, as
        # if the word rules applied (a word rule's signal is not computed yet, so the
        # walk stops there either way), a page they drop is never split into words.
        dropped = rejected(row, rules, True, 0, 0)
        if size > 0 and not dropped:
            lines_and_paragraphs(T.flags, doc, text_chars, row)
            dropped = rejected(row, rules, True, 0, 0)
        if dropped:
            out_off[d + 1] = w
            continue
        ntok = split_words(T, doc, 0, size, tok_s, tok_e, stack_s, stack_e, memo)
        if ntok >= ngrams[0].shape[0]:  # at most twice the words, and no more than the bytes
            ngrams = ngram_scratch(min(max(ntok, 2 * ngrams[0].shape[0]), largest))
        cum, at, by_word, by_byte, power, inverse = ngrams[:6]
        stats = word_stats(T, doc, ntok, tok_s, tok_e, cum, at, by_word, by_byte, power, inverse)
        n_ns, ns_chars, n_alpha, letters, no_space = stats
        no_space_frac = no_space / letters if letters > 0 else 0.0
        row[NO_SPACE_FRAC] = no_space_frac
        words = not (no_space_frac >= no_space_min)  # the word rules apply
        # The top n-gram rules are judged last (the rules after them take them as not
        # firing till then): a page the others keep has its top n-grams counted, and one
        # they drop too unless its word counts prove none of them fires (``word_counts``).
        top_from, top_to = NGRAM_BASE, NGRAM_BASE + top_ns.shape[0]
        if size > 0:
            lone_heads(doc, ntok, tok_s, tok_e, ngrams)
            dup_ngrams(ntok, ngrams, text_chars, top_ns.shape[0], dup_ns, row, rules, words, top_from, top_to)
            dropped = rejected(row, rules, words, top_from, top_to)
        if not dropped:
            gopher_quality(T, doc, ntok, tok_s, tok_e, n_ns, ns_chars, n_alpha, stop_blob, stop_off, row)
            dropped = rejected(row, rules, words, top_from, top_to)
        if size > 0 and (not dropped or top_may_fire(ngrams, ntok, text_chars, top_ns, rules, words)):
            top_ngrams(ntok, ngrams, text_chars, top_ns, row, rules, words)
            dropped = rejected(row, rules, words, 0, 0)
        if dropped:
            out_off[d + 1] = w
            continue
        if params[P_C4] != 0 and not (letters > 0 and no_space_frac >= no_space_min):
            w_end, out_words = c4_rewrite(
                T, doc, ntok, tok_s, tok_e, memo, out, w, params, phrases, phrase_off, phrase_class, phrase_pairs, row
            )
        else:
            for k in range(size):  # not a slice assignment: see above
                out[w + k] = doc[k]
            w_end = w + size
            out_words = ntok
        fineweb(T, out[w:w_end], params[P_FINEWEB_SHORT_LINE_LENGTH], out_words, row)
        w = w_end
        out_off[d + 1] = w


@kernel
def code_batch(T, data, offsets, params, marker_blob, marker_off, sig):
    for d in range(offsets.shape[0] - 1):
        doc = data[offsets[d] : offsets[d + 1]]
        total, _, nonspace = char_counts(T.flags, doc)
        sig[d, TEXT_CHARS] = total
        sig[d, NONSPACE_CHARS] = nonspace
        code_rules(T, doc, params, marker_blob, marker_off, sig[d])


@kernel
def math_batch(T, data, offsets, sig):
    """Light rules: non-blank text, no encoded blob, and the duplicate-line share."""
    flags = T.flags
    for d in range(offsets.shape[0] - 1):
        doc = data[offsets[d] : offsets[d + 1]]
        size = doc.shape[0]
        text_chars, _, nonspace = char_counts(flags, doc)
        sig[d, TEXT_CHARS] = text_chars
        sig[d, NONSPACE_CHARS] = nonspace
        sig[d, BLOB_LEN] = blob_length(doc)
        if size > 0:
            split_duplicates(doc, 0, size, 1, text_chars, sig[d], GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
