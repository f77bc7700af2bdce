"""``column_filter``: drop documents by rules over the numbers they already carry.

Open corpora ship their signals beside the text (RedPajama-V2's ``rps_doc_*`` and
``ccnet_*``, Dolma's attributes, FineWeb's metadata, a previous prep run's ``gq_*`` and
``<model>_score`` columns): filtering on them costs a comparison per document instead of
recomputing them. Rules are written in the config, each saying what to KEEP::

    [[stages]]
    name = "column_filter"
    missing = "keep"                 # a row a rule cannot decide (null or absent column)
    drop_duplicates = true           # drop rows whose bool column is_duplicate is true
    [stages.rules]
    gopher_word_count = "50 <= rps_doc_word_count <= 100000"
    gopher_bullets = "rps_lines_start_with_bulletpoint_sum / ccnet_nlines <= 0.9"
    c4_curly = { expr = "rps_doc_curly_bracket == 0", missing = "drop" }

The language (``grammar.py``, its own tokenizer and parser: never Python ``eval``):
numbers (``3``, ``0.5``, ``1e5``), column names (``[A-Za-z_][A-Za-z0-9_.]*``; a dotted
name that is no column reaches into struct fields, ``metadata.score``), comparisons
``< <= > >= == !=`` chained as in Python (``a < b < c``), ``+ - * /`` and unary minus
in float64, ``and``/``or``/``not`` and parentheses; a bool column is a condition of its
own (``not is_duplicate``). Errors (an unknown character, an unbalanced parenthesis, a
number where a condition is wanted) are config errors naming the rule and the position.

Nulls (``evaluate.py``): a null or absent column, a NaN, and an arithmetic without a
number for an answer (``x / 0``) are unknown; comparisons of unknowns are unknown and
``and``/``or``/``not`` follow three-valued logic, so a row is undecided only where the
answer depends on what it lacks. The rule's ``missing`` (else the stage's, "keep" by
default) decides those rows, and the manifest counts them per rule
(``column_filter.<rule>.missing``; ``column_filter.duplicate.missing`` for rows without
an ``is_duplicate`` column when ``drop_duplicates`` is on). A column of another type
(text where a number is wanted) stops the run with its name and type. Integer and
float32 columns are read as the float64 of what they hold: a float32 0.1 (prep's own
``gq_*`` signals are float32) is 0.10000000149, above a threshold written ``0.1``, as
plain Python reading the same column would have it.

Decisions: a row is dropped for the first check it fails, the duplicate flag and then the
rules in the order of their names; reason ``column_filter:<rule>`` (or
``column_filter:duplicate``), ledger detail the values the rule read
(``rps_doc_word_count=12 ccnet_nlines=3``, ``=null``, ``=absent``). The stage adds no
column and rewrites no text. Name order, not the order written: a TOML table has no
order, and the run's fingerprint reads the config as such (keys sorted), so a config with
its rules written in another order is the same run and must name the same reasons.
"""

from stages.column_filter import stage  # noqa: F401  (registers the stage)
