"""How the ``prep`` process ends when it is stopped, and how it ends at all.

A Ctrl-C (SIGINT) or a SIGTERM (``kill``, ``timeout``, a scheduler) at any moment, from
prep's first import to the last byte of its teardown, ends the process with one line
(``interrupted...`` or ``terminated...``) and the status a shell reports for that signal,
130 or 143: never a traceback, never death by the signal. That takes four rules:

- The first signal decides. Its handler ignores SIGINT and SIGTERM from then on, so a
  second Ctrl-C cannot land in the clean-up the first started, in the line being
  printed, or in the handler itself.
- Before a command starts (imports, click parsing its options) there is nothing to clean
  up: the process ends at once. During one, the handler raises ``KeyboardInterrupt`` (or
  ``Terminated``) so the command unwinds (workers stopped, lock released) and
  ``PrepGroup.invoke`` prints the line. After the command, its exit code stands: the
  signals are ignored.
- The process always ends with ``os._exit`` after a teardown that cannot hang on a
  signal (standard output and error flushed, ``atexit`` handlers run: multiprocessing's,
  Ray's), never through the interpreter's finalization. CPython sets a flag whenever a
  ``KeyboardInterrupt`` passes through code that ``exec`` runs (dataclasses, namedtuple
  and numba make functions that way), caught or not, and under ``python -m`` it then ends
  the process by SIGINT after finalizing, whatever exit code it had (issue 43: status -2
  right after the ``interrupted:`` line). Skipping the finalization also saves the 0.1 s
  that freeing numba's, LLVM's and every module's objects took at the end of every run,
  for memory the system takes back anyway.
- A Ctrl-C in Python's own start-up and the import of the ``pipeline`` package (about a
  tenth of a second; the package's ``__init__`` runs before any entry point can install
  a handler) is Python's: it prints a traceback and dies by the signal.

Only the process installs these handlers (``program``); ``main`` called in-process (click's
test runner, a notebook) keeps its caller's. Nothing here imports beyond the standard
library: ``python -m pipeline`` installs them before it imports click and the commands.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import NoReturn

STOPS = (signal.SIGINT, signal.SIGTERM)
RESEND_SECONDS = 0.01


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as a Ctrl-C is: the default action ended the command at once, and
    the workers it had started lived on, idle, holding their memory, until killed by hand."""


class _Phase:
    """Whether a command is running (the handler unwinds it, or ends a process not yet in
    one), and a stop that could not be raised where it came (``_stop_again``)."""

    in_command = False
    pending: KeyboardInterrupt | None = None


def debug() -> bool:
    """``PREP_DEBUG=1``: tracebacks instead of one-line messages."""
    return os.environ.get("PREP_DEBUG", "") not in ("", "0")


def stopped(stop: KeyboardInterrupt) -> str:
    return "terminated" if isinstance(stop, Terminated) else "interrupted"


def exit_code(stop: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended."""
    return 128 + (signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT)


def take_signals() -> dict:
    """Make SIGINT and SIGTERM end this process as the module says; returns the handlers
    they had. Signals already ignored stay ignored (a signal came first, or the process
    was started with them ignored, as ``nohup`` does)."""
    previous = {signum: signal.getsignal(signum) for signum in STOPS}
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, _stop)
    if sys.unraisablehook is not _stop_again:
        _stop_again.previous, sys.unraisablehook = sys.unraisablehook, _stop_again
    return previous


def give_back_signals(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def ignore_signals() -> None:
    """SIGINT and SIGTERM do nothing from now on. Not ``SIG_IGN``: for a signal that had
    arrived but whose handler had not run yet (two at once), CPython then printed "Signal
    15 ignored due to race condition" with a traceback."""
    for signum in STOPS:
        signal.signal(signum, _ignored)


def _ignored(signum: int, frame) -> None:
    """A signal after the outcome was decided: it changes nothing."""


def command_starts() -> None:
    _Phase.in_command = True


def command_ends() -> None:
    """The command's outcome is decided: a signal from now on would only change it."""
    _Phase.in_command = False
    if signal.getsignal(signal.SIGINT) is _stop:
        ignore_signals()


def _stop(signum: int, frame) -> None:
    ignore_signals()  # first, so that nothing after this line can be interrupted again
    stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    if _Phase.in_command or debug():
        _Phase.pending = None  # this one is raised now
        raise stop
    end(stop)


def _stop_again(unraisable) -> None:
    """A stop raised where Python cannot pass it on (Python code that C calls back: a
    weakref's callback, a ``__del__``, the garbage collector's) is kept and sent again a
    moment later, to be raised in the command's own code: Python printed "Exception
    ignored" and a traceback, and the command went on as if no key had been pressed.
    Sent from here, it would be handled here, where it cannot raise either; if the command
    ends first, ``raise_pending`` raises it. (numba's compiles keep theirs, ``compile/jit.py``.)"""
    stop = unraisable.exc_value
    if not (isinstance(stop, KeyboardInterrupt) and _Phase.in_command):
        _stop_again.previous(unraisable)
        return
    _Phase.pending = stop
    for signum in STOPS:
        signal.signal(signum, _stop)
    signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
    threading.Timer(RESEND_SECONDS, os.kill, (os.getpid(), signum)).start()


def raise_pending() -> None:
    """The command has finished: a stop kept by ``_stop_again`` that has not been raised yet
    is its outcome still."""
    stop, _Phase.pending = _Phase.pending, None
    if stop is not None:
        ignore_signals()
        raise stop


_stop_again.previous = sys.unraisablehook


def end(stop: KeyboardInterrupt, hint: str = "") -> NoReturn:
    """Print the one line for ``stop`` and end the process with its exit code."""
    ignore_signals()
    _write(sys.stderr, f"\n{stopped(stop)}{': ' + hint if hint else ''}\n")
    leave(exit_code(stop))


def leave(code: int | str | None) -> NoReturn:
    """End the process with ``code`` (a ``SystemExit``'s: None is 0, a string is printed
    and is 1), after flushing standard output and error and running the ``atexit``
    handlers, with the signals ignored. A flush that fails (a closed pipe) gives 120 for
    an exit that was to be 0, as the interpreter's own exit does."""
    ignore_signals()
    if isinstance(code, str):
        _write(sys.stderr, code + "\n")
        code = 1
    code = code or 0
    flushed = _flush()
    atexit._run_exitfuncs()
    flushed = _flush() and flushed
    os._exit(code if flushed or code else 120)


def _write(stream, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError, AttributeError):  # closed, or replaced by None: nobody to tell
        pass


def _flush() -> bool:
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True
