"""``normalize``: Unicode NFC, line breaks to ``\\n``, control characters and non-characters removed.

The rewrite runs in Arrow's native kernels (utf8proc for NFC, RE2 for the replacements),
so no Python string is built per document. Under NFC most pages need none of it: one numba
pass over the text buffers (``normalize_scan``) finds which steps each document needs, the
ones that need none keep their buffers (about half of configs/c4.toml's web pages), and
each step reads only the documents that need it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.stage import Stage, StageOutput, register
from stages.normalize_scan import CR, NFC, UNWANTED, UNWANTED_RANGES, needs

# An RE2 class of what ``strip_controls`` removes (``normalize_scan.UNWANTED_RANGES``).
_UNWANTED = "[" + "".join(f"\\x{{{low:x}}}-\\x{{{high:x}}}" for low, high in UNWANTED_RANGES) + "]"


@register
class Normalize(Stage):
    name = "normalize"

    @dataclass
    class Options:
        form: str = "NFC"  # NFC, NFKC, NFD or NFKD
        newlines: bool = True  # turn \r\n and lone \r into \n
        strip_controls: bool = True  # drop control characters, non-characters and stray BOMs

        def __post_init__(self) -> None:
            if self.form not in ("NFC", "NFKC", "NFD", "NFKD"):
                raise ValueError(f"form must be one of NFC, NFKC, NFD, NFKD, not {self.form!r}")

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        text = batch.column(TEXT)
        needs = self._needs(text)
        if needs is None:
            return self._rewrite(batch, text, None)
        unstable = needs != 0
        if not unstable.any():
            drop = pa.nulls(len(text), pa.string())
            return StageOutput(batch=batch, drop_reason=drop, changed=0)
        rows = pa.array(unstable)
        part = self._rewrite(batch.filter(rows), text.filter(rows), needs[unstable])
        cleaned = pc.replace_with_mask(text, rows, part.batch.column(TEXT))
        drop = pc.replace_with_mask(pa.nulls(len(text), pa.string()), rows, part.drop_reason)
        return StageOutput(batch=set_column(batch, TEXT, cleaned), drop_reason=drop, changed=part.changed)

    def _needs(self, text: pa.Array) -> np.ndarray | None:
        """Per document, which steps can change it (``normalize_scan.needs``); None where
        the check does not hold (another form than NFC, nulls)."""
        if (
            self.options.form != "NFC"
            or text.null_count
            or not pa.types.is_string(text.type)
            and not pa.types.is_large_string(text.type)
        ):
            return None
        return needs(text, self.options.newlines, self.options.strip_controls)

    def _rewrite(self, batch: pa.RecordBatch, text: pa.Array, needs: np.ndarray | None) -> StageOutput:
        """Every step, each on the documents whose ``needs`` has its bit (all of them
        where ``needs`` is None): most flagged pages need only their \r\n rewritten, and
        NFC, the dearest step by far (65 MB/s), then reads only the few that need it."""
        cleaned = text
        if self.options.newlines:
            cleaned = _where(needs, CR, cleaned, lambda part: pc.replace_substring(part, "\r\n", "\n"))
            cleaned = _where(needs, CR, cleaned, lambda part: pc.replace_substring(part, "\r", "\n"))
        if self.options.strip_controls:
            cleaned = _where(needs, UNWANTED, cleaned, lambda part: pc.replace_substring_regex(part, _UNWANTED, ""))
        cleaned = _where(needs, NFC, cleaned, lambda part: pc.utf8_normalize(part, form=self.options.form))
        emptied = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(cleaned)), 0)
        # Only kept documents count as changed (the contract): an emptied one is a rejection.
        changed = int(pc.sum(pc.and_not(pc.not_equal(text, cleaned), emptied)).as_py() or 0)
        drop = pc.if_else(emptied, pa.scalar("empty-after-normalize"), pa.scalar(None, pa.string()))
        batch = set_column(batch, TEXT, cleaned)
        return StageOutput(batch=batch, drop_reason=drop, changed=changed)


def _where(needs: np.ndarray | None, bit: int, text: pa.Array, step) -> pa.Array:
    """``step`` applied to the documents whose ``needs`` has ``bit`` (to all where
    ``needs`` is None); the others, which it would leave as they are, are not read."""
    if needs is None:
        return step(text)
    rows = needs & bit != 0
    if not rows.any():
        return text
    if rows.all():
        return step(text)
    mask = pa.array(rows)
    return pc.replace_with_mask(text, mask, step(text.filter(mask)))
