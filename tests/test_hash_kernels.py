"""The hash primitives' numpy versions give the kernels' values (``pipeline/kernels/mixing.py``):
tables built in numpy are probed by kernels, so one differing hash is a string never found."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.mixing import fnv1a_nonzero, fnv1a_nonzero_rows
from pipeline.text.char_tables import byte_set, byte_set_find


def packed(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    blob = np.frombuffer(b"".join(strings), np.uint8).copy()
    offsets = np.zeros(len(strings) + 1, np.int64)
    offsets[1:] = np.cumsum([len(s) for s in strings])
    return blob, offsets


@settings(deadline=None)  # the first example compiles the kernel
@given(st.lists(st.binary(max_size=40), max_size=30))
def test_fnv1a_rows_match_the_kernel(strings):
    blob, offsets = packed(strings)
    expected = [fnv1a_nonzero(blob, offsets[i], offsets[i + 1]) for i in range(len(strings))]
    assert fnv1a_nonzero_rows(blob, offsets).tolist() == expected


def test_a_byte_set_finds_each_of_its_strings_and_nothing_else():
    strings = ["°C", "km", "$", "e.g.", "", "ﬁ"]
    found = byte_set([s.encode() for s in strings])
    for i, s in enumerate(strings):
        buf = np.frombuffer(f"x{s}y".encode(), np.uint8).copy()
        assert byte_set_find(found.keys, found.slot_item, found.item_off, found.blob, buf, 1, len(buf) - 1) == i
    missing = np.frombuffer(b"kg", np.uint8).copy()
    assert byte_set_find(found.keys, found.slot_item, found.item_off, found.blob, missing, 0, 2) == -1
