"""The ``bad_words`` stage: C4's page-level rule, a document holding any word of the list
is dropped (``bad-word``; the ledger's detail names the list and the entry).

The default list is LDNOOBW's English list ("List of Dirty, Naughty, Obscene, and
Otherwise Bad Words", CC-BY-4.0) at the commit C4 and datatrove use, bundled in
``stages/lists/``; ``words_file`` names another (one word or phrase per line). Words
match whole, case-insensitively, flanked by non-word characters as in C4's regex:
``cunt`` does not match ``Scunthorpe``. The matching is ``word_kernel``'s single pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats.documents import TEXT
from pipeline.kernels.buffers import string_buffers
from pipeline.stage import Stage, StageOutput, register
from stages.url_filter.lists import bundled_ldnoobw_en, checked_paths, load_words
from stages.url_filter.word_kernel import EntryTable

_TABLES: dict[str, EntryTable] = {}


@register
class BadWords(Stage):
    name = "bad_words"

    @dataclass
    class Options:
        words_file: str | None = None  # None: the bundled LDNOOBW English list (C4's)

        def __post_init__(self) -> None:
            if self.words_file is not None:
                (self.words_file,) = checked_paths("words_file", [self.words_file])

    def __init__(self, options: BadWords.Options):
        super().__init__(options)
        self.path = options.words_file or bundled_ldnoobw_en()
        self.list_name = Path(self.path).name
        if self.path not in _TABLES:
            _TABLES[self.path] = EntryTable(load_words(self.path))
        self.table = _TABLES[self.path]

    @classmethod
    def files(cls, options: BadWords.Options) -> list[str]:
        return [options.words_file or bundled_ldnoobw_en()]

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        data, offsets = string_buffers(batch.column(TEXT))
        found = self.table.find(data, offsets)
        reasons = np.full(batch.num_rows, None, object)
        details = np.full(batch.num_rows, None, object)
        for row in np.flatnonzero(found >= 0):
            reasons[row] = "bad-word"
            details[row] = json.dumps(
                {"list": self.list_name, "entry": self.table.entries[found[row]]}, ensure_ascii=False
            )
        return StageOutput(
            batch=batch, drop_reason=pa.array(reasons, pa.string()), detail=pa.array(details, pa.string())
        )
