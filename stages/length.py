"""``length``: keep documents whose length in characters lies within [min_chars, max_chars].

Per-source limits come from the generic ``[stages.per_source.<source>]`` override the
runner applies to every stage (code files are often shorter than web pages, say).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.stage import Stage, StageOutput, register, threshold_detail

N_CHARS = "n_chars"


@register
class Length(Stage):
    name = "length"

    @dataclass
    class Options:
        min_chars: int = 0
        max_chars: int | None = None

        def __post_init__(self) -> None:
            if self.min_chars < 0:
                raise ValueError("min_chars must be >= 0")
            if self.max_chars is not None and self.max_chars < self.min_chars:
                raise ValueError("max_chars must be >= min_chars")

    @classmethod
    def added_columns(cls, options: Length.Options) -> tuple[str, ...]:
        return (N_CHARS,)

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        chars = pc.utf8_length(batch.column(TEXT))
        none = pa.scalar(None, pa.string())
        too_short = pc.less(chars, self.options.min_chars)
        reason = pc.if_else(too_short, pa.scalar("too-short"), none)
        bound = pc.if_else(too_short, pa.scalar(self.options.min_chars, pa.int64()), pa.scalar(None, pa.int64()))
        if self.options.max_chars is not None:
            too_long = pc.greater(chars, self.options.max_chars)
            reason = pc.if_else(too_long, pa.scalar("too-long"), reason)
            bound = pc.if_else(too_long, pa.scalar(self.options.max_chars, pa.int64()), bound)
        chars = chars.cast(pa.int64())
        batch = set_column(batch, N_CHARS, chars)
        # The ledger says why: the document's length and the bound it crossed.
        return StageOutput(batch=batch, drop_reason=reason, detail=threshold_detail(chars, bound))
