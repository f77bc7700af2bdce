"""The one case fold dedup and decontaminate share (pipeline/text/casefold.py): the
choices made where their two copies had drifted, the compiled fold against the plain
one, and the table pinned to the versions of the stages whose output it decides."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.text.casefold import PUNCT, SPACE, fold, fold_py, table_digest
from stages.decontaminate.kernels import words
from stages.decontaminate.reference import INDEX_VERSION
from stages.decontaminate.stage import Decontaminate
from stages.dedup import Dedup
from stages.dedup.minhash import Signer

# A change of the table changes both stages' outputs and dedup's index: give them new
# versions, then its digest here. (Dedup's version 3 added the survivor's source to its
# ledger detail, the table unchanged.)
PINNED = {"3c7ba6f8bb237dd17c011e09342d0a032e08befcb7ce50f2a2d11896dcd2b638": (3, 2, 1, 1)}


def test_the_table_is_pinned_to_the_versions_of_the_stages_that_fold():
    versions = (Dedup.version, Dedup.index_version, Decontaminate.version, INDEX_VERSION)
    assert PINNED.get(table_digest()) == versions


def test_where_the_copies_drifted_the_fold_follows_pythons_str():
    for cp in range(28, 32):  # FS GS RS US: str.isspace, str.split splits on them
        assert chr(cp).isspace() and fold_py(cp) == SPACE
    for ch in "¹²³":  # str.isdigit: digits of a word
        assert ch.isdigit() and fold_py(ord(ch)) == ord(ch)
    for ch in "¼½¾€→∑😀":  # not digits, not letters: symbols
        assert not ch.isdigit() and fold_py(ord(ch)) == PUNCT
    assert [fold_py(ord(ch)) for ch in "ÉΣЖＡ"] == [ord(ch) for ch in "éσжａ"]


@njit
def _fold_all(cps):
    out = np.empty(len(cps), np.int64)
    for i in range(len(cps)):
        out[i] = fold(cps[i])
    return out


def test_the_compiled_fold_is_the_plain_one():
    cps = np.arange(0x20000, dtype=np.int64)
    assert _fold_all(cps).tolist() == [fold_py(cp) for cp in range(0x20000)]


def _shingles(text: str) -> list[int]:
    signed = Signer(ngram=3).sign(pa.array([text]), keep_shingles=True)
    return signed["shingles"].tolist()


def test_dedup_and_decontaminate_split_the_same_words():
    text = "Area in m² of\x1fthe room costs €5 😀 now"
    assert words(text) == ["area", "in", "m²", "of", "the", "room", "costs", "5", "now"]
    assert _shingles(text) == _shingles("area in m² of the room costs 5 now")
    assert _shingles(text) != _shingles("area in m of the room costs 5 now")
