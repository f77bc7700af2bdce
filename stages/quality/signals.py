"""The quality signals and the kernels' integer parameters, each declared once.

Why one declaration: the kernels write each document's signals into a row of a float64
matrix, the stage turns some of them into columns and the rules read them back. Column
list, matrix indices and parameter packing all come from ``SIGNALS`` and ``PARAMS``
below, so a new signal is one line here, its computation in its kernel module and its
rule in ``rules.py``.

Each declared name, in capitals, also becomes a module-level int holding its position:
``GQ_WORDS = 0``, ``GQ_MEAN_WORD_LEN = 1``, ... and ``P_C4_REMOVE_CITATIONS = 0``, ...
Numba reads module globals when it compiles, so the kernels index with compile-time
constants. Its cache goes stale with them: see ``jit.py``, and delete
``stages/quality/__pycache__`` after editing this file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

INT, FLOAT = pa.int32(), pa.float32()
INTERNAL = None  # read by the rules, not written as a column

# (name, column type), in column order. The n-gram signals follow, one per configured
# size (``columns``).
SIGNALS = (
    # Gopher quality, on the document's words (datatrove's GopherQualityFilter)
    ("gq_words", INT),  # words that are not only symbols
    ("gq_mean_word_len", FLOAT),
    ("gq_hash_ratio", FLOAT),
    ("gq_ellipsis_ratio", FLOAT),
    ("gq_bullet_lines", FLOAT),
    ("gq_ellipsis_lines", FLOAT),
    ("gq_alpha_words", FLOAT),
    ("gq_stop_words", INT),
    # Gopher repetition (GopherRepetitionFilter)
    ("gr_dup_para_frac", FLOAT),
    ("gr_dup_para_char_frac", FLOAT),
    ("gr_dup_line_frac", FLOAT),
    ("gr_dup_line_char_frac", FLOAT),
    # C4 (C4QualityFilter)
    ("c4_event", INTERNAL),  # the first document-level hit: 0 none, C4_LOREM, C4_CURLY
    ("c4_sentences", INT),
    ("c4_lines_removed", INT),
    # FineWeb (FineWebQualityFilter), on the text C4 leaves
    ("fw_lines", INTERNAL),  # non-blank lines
    ("fw_line_punct_ratio", FLOAT),
    ("fw_short_line_ratio", FLOAT),
    ("fw_char_dup_ratio", FLOAT),
    ("fw_list_ratio", FLOAT),
    # Code (The Stack, StarCoder)
    ("code_max_line_len", INT),
    ("code_mean_line_len", FLOAT),
    ("code_alnum_frac", FLOAT),
    ("code_autogen", INT),
    ("blob_len", INT),  # longest base64 or hex run, code and math
    # Characters and letters
    ("text_chars", INTERNAL),
    ("nonspace_chars", INTERNAL),
    ("no_space_frac", FLOAT),  # share of letters from scripts written without spaces
)

# Values of c4_event.
C4_LOREM = 1
C4_CURLY = 2

# The kernels' integer parameters, in the order of the ``params`` array: options of
# the stage (``rules.QualityOptions``), by their names there.
PARAMS = (
    "c4_remove_citations",
    "c4_filter_no_terminal_punct",
    "c4_min_words_per_line",
    "c4_max_word_length",
    "c4_filter_lorem_ipsum",
    "c4_filter_javascript",
    "c4_filter_curly_bracket",
    "c4_filter_policy",
    "fineweb_short_line_length",
    "c4",  # the C4 rule group on
    "code_autogen_lines",
)


def _define(constant: str, index: int) -> None:
    """One index constant (see the module docstring); a name declared twice is refused."""
    if constant in globals():
        raise ValueError(f"{constant} is declared twice")
    globals()[constant] = index


for _index, (_name, _) in enumerate(SIGNALS):
    _define(_name.upper(), _index)
for _index, _name in enumerate(PARAMS):
    _define("P_" + _name.upper(), _index)
del _index, _name
NGRAM_BASE = len(SIGNALS)  # the first n-gram signal
N_PARAMS = len(PARAMS)


def columns(top_sizes: Sequence[int], dup_sizes: Sequence[int]) -> list[tuple[str, int, pa.DataType]]:
    """(name, index in the signal matrix, type) of each column the stage writes: the
    declared signals, then the top n-gram share per size, then the duplicated n-gram
    share per size."""
    ngrams = [(f"gr_top_{n}gram", FLOAT) for n in top_sizes] + [(f"gr_dup_{n}gram", FLOAT) for n in dup_sizes]
    numbered = enumerate(SIGNALS + tuple(ngrams))
    return [(name, index, column_type) for index, (name, column_type) in numbered if column_type is not INTERNAL]


def pack_params(options) -> np.ndarray:
    """The ``params`` array of ``options`` (a ``QualityOptions``)."""
    params = np.zeros(N_PARAMS, np.int64)
    for index, name in enumerate(PARAMS):
        params[index] = getattr(options, name)
    return params
