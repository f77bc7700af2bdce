"""A file of a folder prep wrote that cannot be read any more (cut short, overwritten,
not the format its name says), named in the error.

pyarrow's errors name no file ("Parquet magic bytes not found in footer"): a command that
reads every Parquet file of a run folder would report that with no way to tell which of
hundreds is damaged. Each read of such a file runs inside ``reading(path)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import error_line, printable_path


class UnreadableFile(ValueError):
    """A file of a run or mixture folder that cannot be read; the message names it."""


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[None]:
    """Run the body, an OS or Arrow error in it becoming ``UnreadableFile`` naming ``path``;
    so does the ``KeyError`` Arrow raises for a column the file lacks (a Parquet file of
    another kind in a run's folder ended ``prep report`` with it)."""
    try:
        refuse_special(path)  # a FIFO would block the read for good
        yield
    except UnreadableFile:
        raise
    except (OSError, pa.ArrowException) as error:
        raise UnreadableFile(f"{printable_path(path)}: cannot read it ({error_line(error)})") from None
    except KeyError as error:  # Arrow's word for a column the file lacks: a file of another kind
        what = error.args[0] if error.args else "a column is missing"
        raise UnreadableFile(f"{printable_path(path)}: cannot read it ({what})") from None
