"""A mixture's order arrays (``order_source.npy``, ``order_document.npy``) read back, checked
where they enter: the loader trains in their order and the report draws it, and a FIFO,
a truncated copy or a foreign ``.npy`` must be one line naming the file, not a hang or
numpy's own words."""

from __future__ import annotations

import os

import numpy as np

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
