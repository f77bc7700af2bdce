"""MinHash signatures that ship with a corpus (RedPajama-V2's), decoded for dedup's LSH.

Why: RedPajama-V2 ships a banded MinHash signature per document and threshold; a team
deduplicating 100 TB of it should not hash every shingle again. ``dedup`` with
``signatures = "<column>"`` takes each document's minima from that column, and the
band keys, the stored 16-bit sketch and ``min_similarity`` work from them exactly as
from minima prep computed itself (``minhash``), through the same partitioned clustering.

What the bytes are, as read in togethercomputer/RedPajama-Data (``app/src/dedupe``
and ``app/src/core/worker.py``, ``configs/rp_v2.0.conf``):

* ``dedupe/utils.py`` ``generate_signature``: a document's shingles are its normalised
  words in 13-grams (``MINHASH_NGRAM_SIZE``), each hashed by the first 4 bytes of its
  SHA-1 (little-endian); permutation ``i`` maps a hash ``h`` to
  ``((a_i * h + b_i) mod (2**61 - 1)) & 0xFFFFFFFF`` (128 permutations,
  ``MINHASH_NUM_PERMUTATIONS``); the signature is the minimum of each, as ``uint32``.
* ``dedupe/minhash.py`` ``compute_banded_signatures``: for threshold ``t`` the bands
  and rows are datasketch's ``optimal_param(t, 128)`` (README: 0.7 -> 14 x 9,
  0.8 -> 9 x 13, 0.9 -> 5 x 25, 1.0 -> 1 x 128; the leftover permutations are not
  shipped), and band ``k`` is ``bytes(minhashes[k*r:(k+1)*r].byteswap().data)``: its
  ``rows`` raw minima as big-endian ``uint32`` (byte-swapped from the x86 order they
  were computed in), ``4 * rows`` bytes. A document of fewer than 13 words gets
  ``None`` for every threshold.
* ``core/worker.py``: the minhash Parquet schema, ``signature_sim{t}`` of type
  ``list<binary>``, one row per document in the order of its documents file.

So a band's bytes are its minima, not a hash of them: decoded, they are a minima
matrix like ``Signer.sign``'s, and the similarity estimates need nothing else. A
document whose signature is null or of another shape (another band count or band
width) gets no LSH keys, only the exact-text key with ``exact``: it is counted as
``dedup.unsigned``. A column none of whose signatures has the configured shape is a
config error (naming the shape it holds), not a run that silently finds nothing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_UNSIGNED = np.uint32(0xFFFFFFFF)  # the minima of a document without shingles (``minhash._sign``)


class SignatureColumnError(ValueError):
    """The ``signatures`` column is absent, of another type, or of another band layout
    than ``bands`` x ``rows``; the message names the column and what it holds."""


class ShippedSignatures:
    """Decodes one unit's batches of a ``list<binary>`` signature column into minima,
    counting the documents without a usable signature."""

    def __init__(self, column: str, bands: int, rows: int):
        self.column, self.bands, self.rows = column, int(bands), int(rows)
        self.signed = 0  # signatures of the configured shape seen
        self.rows_seen = 0
        self.first_shape: tuple[int, int] | None = None  # of a present signature of another shape

    def decode(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """([n, bands*rows] uint32 minima, [n] bool signed) of ``batch``; an unsigned
        row's minima are all ``0xFFFFFFFF``, as for a document without shingles."""
        if self.column not in batch.schema.names:
            raise SignatureColumnError(
                f"dedup: signatures column {self.column!r} is not in the input (its columns: "
                f"{', '.join(batch.schema.names)})"
            )
        arr = batch.column(self.column)
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)) or not (
            pa.types.is_binary(arr.type.value_type) or pa.types.is_large_binary(arr.type.value_type)
        ):
            raise SignatureColumnError(
                f"dedup: signatures column {self.column!r} is {arr.type}, not list<binary> (one binary per band)"
            )
        n, width = len(arr), 4 * self.rows
        present = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
        list_offsets = np.asarray(arr.offsets.to_numpy(), np.int64)  # into arr.values, slice offset included
        values = arr.values
        band_ok = pc.equal(pc.binary_length(values), width).fill_null(False).to_numpy(zero_copy_only=False)
        bad = np.concatenate([[0], np.cumsum(~band_ok)])
        n_bands = np.diff(list_offsets)
        signed = present & (n_bands == self.bands) & (bad[list_offsets[1:]] == bad[list_offsets[:-1]])
        minima = np.full((n, self.bands * self.rows), _UNSIGNED, np.uint32)
        if signed.any():
            # A signed row's bands are bands * width contiguous bytes of the values' data.
            value_offsets = np.frombuffer(
                values.buffers()[1], np.int64 if pa.types.is_large_binary(values.type) else np.int32
            )[values.offset :]
            data = np.frombuffer(values.buffers()[2], np.uint8)
            # Marked by +1 at each start and -1 at each end, kept in order by one mask:
            # two bytes of scratch per byte of data, not an index per byte.
            starts = value_offsets[list_offsets[:-1][signed]].astype(np.int64)
            edges = np.zeros(len(data) + 1, np.int8)
            edges[starts] += 1
            edges[starts + self.bands * width] -= 1
            inside = np.cumsum(edges[:-1], dtype=np.int8).view(bool)
            minima[signed] = data[inside].view(">u4").reshape(-1, self.bands * self.rows)
        odd = present & ~signed
        if self.first_shape is None and odd.any():
            r = int(np.flatnonzero(odd)[0])
            lengths = pc.binary_length(values.slice(list_offsets[r], n_bands[r])).to_pylist()
            self.first_shape = (int(n_bands[r]), max((x or 0 for x in lengths), default=0))
        self.signed += int(signed.sum())
        self.rows_seen += n
        return minima, signed

    def counters(self) -> dict[str, int]:
        """The unit's counters; ``SignatureColumnError`` when it held signatures, none of
        them of the configured layout (the options name another threshold's)."""
        if self.first_shape is not None and not self.signed:
            bands, width = self.first_shape
            raise SignatureColumnError(
                f"dedup: no signature in column {self.column!r} has {self.bands} bands of {self.rows} rows "
                f"({4 * self.rows} bytes); one has {bands} bands of {width} bytes: set bands = {bands}, "
                f"rows = {width // 4}"
            )
        return {"dedup.signed": self.signed, "dedup.unsigned": self.rows_seen - self.signed}
