"""Compiling the quality kernels before a run (declared with ``@warms``), web text in two rounds.

``web_batch`` and everything it calls is most of a cold run's compile time (about 15
CPU-seconds on one core), and numba compiles a kernel's callees one after another in one
process. So two parts compile side by side on two workers first: the word splitter
(``words``) and every rule family's helpers at the types ``web_batch`` passes them
(``web_rules``). Then ``web``, declared to wait for both, compiles ``web_batch`` and C4's
line rules (which call the word splitter), loading everything else from the cache.

``web_rules`` gets the callees' types right by construction: it types ``web_batch``'s
own source for the sample page (``pipeline/compile/typing_only.py``), so each jitted
callee compiles as ``web_batch``'s compile asks for it, with no Python entry point; the
word splitter is a stand-in there, typed as returning a count, and C4's line rules are
typed from their source the same way. Nothing of ``web_batch`` itself is compiled.
Code and math kernels are small: one step each. A source compiles only its own rule
set's steps. Every step builds the stage with default options: the kernels' types do not
depend on option values. The package imports this module, so its steps are declared
whenever the stage is known.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba.core import types

from pipeline.compile.typing_only import stand_in, typed, with_globals
from pipeline.compile.warm_steps import warms
from pipeline.kernels.buffers import string_buffers
from pipeline.text.char_tables import kernel_tables, tables
from stages.quality import kernels
from stages.quality.chunk_memo import chunk_memo
from stages.quality.rules import QualityOptions
from stages.quality.stage import QualityStage
from stages.quality.word_splitter import split_words

# Lines, sentences, a URL, a number with a unit, a stop word or two: every rule family
# has something to read, and C4 keeps the page, so FineWeb sees rewritten text.
SAMPLE = (
    "The committee met on Tuesday to review the plan for the new library.\n"
    "Members read the report at http://example.org/report and agreed that it was clear.\n"
    "The budget of 3.5km of shelving was approved, and the work starts in May.\n"
)


def _text() -> pa.Array:
    return pa.array([SAMPLE], pa.large_string())


def _calls_split_words(T, doc, start, end, out_s, out_e, stack_s, stack_e, memo):
    return split_words(T, doc, start, end, out_s, out_e, stack_s, stack_e, memo)


def _rule_set(name: str):
    """A step's ``uses``: no arguments for a source of rule set ``name``, else not needed."""

    def uses(options: QualityOptions, source: str, input_bytes: float) -> tuple | None:
        return () if options.rule_set(source) == name else None

    return uses


# ``seconds``: CPU-seconds each step took in a cold run of the bundled sample on 2 workers
# (the engine starts the steps with the longest chain behind them first).
@warms(QualityStage.name, seconds=3.0, uses=_rule_set("web"))
def words() -> None:
    """The word splitter as the kernels call it: typed through a caller's source, so it
    compiles without a Python entry point. Called from Python, it got one, and machine
    code of the whole splitter that no run executes: a second of this step, on the
    warm-up's longest chain."""
    data, offsets = string_buffers(_text())
    doc = data[offsets[0] : offsets[1]]
    scratch = [np.empty(doc.shape[0] + 1, np.int32) for _ in range(4)]  # as ``word_scratch`` gives
    args = (kernel_tables(tables()), doc, 0, doc.shape[0], *scratch, chunk_memo())
    if not split_words.in_cache(args):
        typed(_calls_split_words, args)


@warms(QualityStage.name, seconds=4.3, uses=_rule_set("web"))
def web_rules() -> None:
    """Types ``web_batch`` for the sample page, compiling what it calls but the word
    splitter (``words``' step) and ``c4_rewrite`` (compiled with ``web_batch``, in ``web``):
    the latter is typed too, so what it calls compiles here as well. Nothing to do when
    numba's cache holds ``web_batch`` itself: typing its source took half a second of
    every warm run, on the warm-up's longest chain."""
    words = stand_in(types.intp)
    c4 = with_globals(kernels.c4_rewrite, split_words=words)
    c4_typed = stand_in(lambda args: typed(c4, args, like=kernels.c4_rewrite))
    web_batch = with_globals(kernels.web_batch, split_words=words, c4_rewrite=c4_typed)

    def type_web_batch(*args) -> None:
        if not kernels.web_batch.in_cache(args):  # else ``web`` loads it whole: nothing to prepare
            typed(web_batch, args, like=kernels.web_batch)

    QualityStage(QualityOptions()).signals(_text(), "web", web_kernel=type_web_batch)


@warms(QualityStage.name, seconds=3.5, after=(words, web_rules), uses=_rule_set("web"))
def web() -> None:
    QualityStage(QualityOptions()).signals(_text(), "web")


@warms(QualityStage.name, seconds=1.2, uses=_rule_set("code"))
def code() -> None:
    QualityStage(QualityOptions()).signals(_text(), "code")


@warms(QualityStage.name, seconds=0.7, uses=_rule_set("math"))
def math() -> None:
    QualityStage(QualityOptions()).signals(_text(), "math")
