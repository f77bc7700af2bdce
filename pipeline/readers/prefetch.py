"""Run an iterator on a background thread, a few items ahead of its consumer.

The JSON lines reader decompresses and cuts blocks on this thread while the caller
parses the previous block: ISA-L and Arrow both release the GIL, so the two overlap.
The queue is bounded, so memory holds at most ``depth`` blocks in flight.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                buffer.put(item)
            buffer.put(_DONE)
        except BaseException as error:  # handed to the consumer, raised there
            buffer.put(_Failure(error))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while (item := buffer.get()) is not _DONE:
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                buffer.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)
