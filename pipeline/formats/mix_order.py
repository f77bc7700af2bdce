"""A mixture's order arrays (``order_source.npy``, ``order_document.npy``) read back, checked
where they enter: the loader trains in their order and the report draws it, and a FIFO,
a truncated copy or a foreign ``.npy`` must be one line naming the file, not a hang or
numpy's own words."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pipeline.formats.mix import MIX_JSON
from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import error_line


class OrderArrayError(ValueError):
    """An order array that cannot be read as one; the message names the file."""


def read_order(path: str | os.PathLike) -> np.ndarray:
    """One order array, memory-mapped: a one-dimensional array of integers."""
    try:
        refuse_special(path)  # a FIFO would block the load for good
        order = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise OrderArrayError(f"{path}: not an order array of prep mix ({error_line(error)})") from None
    if order.ndim != 1 or order.dtype.kind not in "iu":
        raise OrderArrayError(f"{path}: not an order array of prep mix ({order.dtype}, shape {order.shape})")
    return order


def check_positions(
    paths: tuple[Path, Path], source: np.ndarray, document: np.ndarray, sizes: np.ndarray, names: list[str], at: int = 0
) -> None:
    """Refuse positions (of the order arrays ``paths``: source, document; ``at``: the
    first position's number) that name a source ``mix.json`` does not list (``names``)
    or a document past its source's end (``sizes``: each source's documents), naming the
    array and the first such position. One check for the loader, which trains in the
    order, and the report, which draws it: the report's let a negative source through
    to an IndexError. An index past its source's end would still be a valid global id
    (another source's document), so the loader's own range check could not catch it."""
    wrong = (source < 0) | (source >= len(names))
    if wrong.any():
        i = int(np.argmax(wrong))
        raise OrderArrayError(
            f"{paths[0]}: position {at + i} names source {source[i]}, outside 0..{len(names) - 1} "
            f"(the sources of {MIX_JSON})"
        )
    bad = (document < 0) | (document >= sizes[source])
    if bad.any():
        i = int(np.argmax(bad))
        raise OrderArrayError(
            f"{paths[1]}: position {at + i} names document {document[i]} of source {names[source[i]]!r}, "
            f"which holds {sizes[source[i]]}"
        )
