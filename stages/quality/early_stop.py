"""The web kernel's early stop: whether a Gopher rule already drops a page.

``rules.gopher_rules`` declares the rules and ``decide_web`` applies them to the signal
matrix once the kernel is done. The kernel reads the same rules (``rules.rule_table``)
while it computes a page's signals and stops once one fires: the signals after it are
written nowhere for a dropped page (see ``kernels.web_batch``), nor are those of the
top n-gram rules where a bound proves none of them fires (``ngram_bounds``): such a page
is judged by the rules after them first, and its top n-grams counted only if it is kept.
"""

from __future__ import annotations

import numpy as np

from stages.quality.jit import leaf
from stages.quality.rules import GREATER, LESS


@leaf
def rejected(row, rules, words, unfired_from, unfired_to):
    """Whether a rule fires on ``row`` before the first rule whose signal is not computed
    yet (NaN): the rules are walked in the order they name a reason, so none that might
    still fire ahead of the one found is jumped. ``words``: the word rules apply. Rules
    on the columns from ``unfired_from`` to before ``unfired_to`` are known not to fire
    (``ngram_bounds``), computed or not."""
    columns, ops, thresholds, words_only = rules
    for k in range(columns.shape[0]):
        if (words_only[k] and not words) or unfired_from <= columns[k] < unfired_to:
            continue
        value, threshold = row[columns[k]], thresholds[k]
        if np.isnan(value):
            return False
        if ops[k] == GREATER:
            fires = value > threshold
        elif ops[k] == LESS:
            fires = value < threshold
        else:
            fires = value == threshold
        if fires:
            return True
    return False
