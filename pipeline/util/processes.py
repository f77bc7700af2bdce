"""Starting child processes that a Ctrl-C must not reach: the process that starts them
stops them instead (the run's workers, ``prep classifier train``'s fastText trainer)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from multiprocessing import resource_tracker


def start_uninterrupted(start: Callable[[], None]) -> None:
    """Start processes with Ctrl-C ignored (a new Python keeps an ignored SIGINT ignored,
    and the fork server hands its own start-up setting to the workers it forks): a Ctrl-C
    while they import would otherwise print their tracebacks. The main process stops them.

    A Ctrl-C or SIGTERM meanwhile is held until they have started, then delivered: raised
    in the middle of a start, a SIGTERM left a process the pool could neither join nor
    kill, and a worker that read its queues after the driver had removed them; an ignored
    Ctrl-C was simply lost, and the run went on. SIGINT is held by blocking it (an ignored
    signal that is blocked stays pending, as multiprocessing's resource tracker relies on;
    the block is the calling thread's, so one sent to the process while it has other
    threads may still go to one of them, and be lost as before);
    the new processes inherit the block, and a worker lifts it (``_worker``). SIGTERM is
    held by a handler instead, so that they start with its default action. The resource
    tracker is started first: its own start lifts a block of SIGINT, whoever set it."""
    held: list[int] = []
    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))
    try:
        start()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a held Ctrl-C arrives here
    if held:
        signal.raise_signal(signal.SIGTERM)
