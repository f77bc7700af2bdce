"""Child processes that a Ctrl-C must not reach: the process that starts them stops them
instead (the run's workers; the C++ trainers behind ``prep classifier train`` and
``prep tokenizer train``, through ``run_in_child``)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing import resource_tracker
from typing import Any


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


PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ChildDied(Exception):
    """The child process ended without an answer; ``how`` says how ("signal SIGABRT")."""

    def __init__(self, exitcode: int):
        self.exitcode = exitcode
        self.how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"
        super().__init__(self.how)


def run_in_child(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``'s answer, computed in a fresh process: for the C++ trainers
    (fastText, SentencePiece) whose long loops do not answer Ctrl-C and whose failures can
    abort the process that runs them. A Ctrl-C (or any exception) here kills the child;
    the child dies with this process, even one killed by SIGKILL; ``ChildDied`` when it
    ended without answering. ``function`` and its answer must pickle."""
    context = multiprocessing.get_context("spawn")  # no fork of this process' threads
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(os.getpid(), send, function, args), daemon=True)
    start_uninterrupted(child.start)  # a Ctrl-C reaches this process alone, which stops the child
    send.close()
    try:
        answer = receive.recv()  # before joining: a large answer fills the pipe first
    except EOFError:  # it died before it could answer
        child.join()
        raise ChildDied(child.exitcode) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
    return answer


def _answer(parent: int, send, function: Callable[..., Any], args: tuple) -> None:
    _die_with(parent)
    send.send(function(*args))


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child runs to its end
        return
    if os.getppid() != parent:  # it died before the request
        os._exit(1)
