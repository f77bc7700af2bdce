"""Requests to an object store that fails now and then, as every real one does: throttled
(503 SlowDown), a server error (500, 502, 504), a connection reset or timed out.

Each operation of ``storage`` (a listing, a download, an upload, a ranged read) is tried
again after such an error, waiting a random time up to a limit that doubles with each try
("full jitter": many workers throttled at once do not come back at once), within a bound:
``PREP_STORE_ATTEMPTS`` tries in all (default 10) and ``PREP_STORE_RETRY_SECONDS`` from
the first (default 120). Past it the operation raises ``StoreFailing``, one line naming
the key; the run stops there, and its finished units are kept for the rerun. An error
that waiting cannot heal (403 access denied, a missing bucket, a bad request, a local
disk full) is raised at once. A missing key is no error here: pyarrow answers NotFound.

Why our own retries and not pyarrow's (the AWS SDK's ``retry_strategy``): the SDK tries
a request 3 times inside one call, with waits of a fraction of a second, unseen. A run
could not say what it retried, nor which key it gave up on; and 3 quick tries do not
outlast a streak of throttling (through ``tests/s3_faults.py``'s streaks, longer than 3,
a run with the SDK's retries alone died). Left on, its tries multiply with these
(measured through that proxy: 3 requests per failing call, 1 with it off). So prep's S3
file systems are made with the SDK's retries off (``sdk_untried``) and every retry is
one of these, counted by kind in this process (``take_retries``): the executors carry
each task's counts to the driver, and the run's summary shows them. (curl itself sends
a request again, uncounted, when a kept-alive connection turns out dead before any answer.)
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pyarrow.fs as pafs

from pipeline.util.numbers import parse_finite

T = TypeVar("T")

COPY_BLOCK = 8 << 20

# The kinds of error worth waiting out, as the AWS SDK words them in pyarrow's OSError
# (its error name, or the HTTP status where a HEAD's answer has no body to name it), in
# the order they are told apart: a body cut off mid-read is INTERNAL_FAILURE to the SDK,
# but a dropped connection here; S3 answers 503 (SlowDown, or Service Unavailable) to
# say "fewer requests, please".
KINDS = {
    "slowdown": re.compile(r"AWS Error (SLOW_DOWN|THROTTLING|SERVICE_UNAVAILABLE)\b|HTTP status (503|429)\b"),
    "reset": re.compile(
        r"AWS Error (NETWORK_CONNECTION|REQUEST_TIMEOUT)\b|curlCode|[Cc]onnection reset|timed out"
        r"|Failed to flush response stream"
    ),
    "server-error": re.compile(r"AWS Error INTERNAL_FAILURE\b|HTTP status 50[0-4]\b"),
}
WORDS = {"slowdown": "503 SlowDown", "server-error": "a server error", "reset": "connection reset or timed out"}

_retried: Counter[str] = Counter()
_lock = threading.Lock()


class StoreFailing(OSError):
    """An operation on the object store failed past the retry bound."""


@dataclass(frozen=True)
class Policy:
    """How long an operation keeps trying: ``attempts`` tries within ``seconds`` of the
    first, the n-th retry after a wait drawn from [0, min(cap, base * 2**n))."""

    attempts: int = 10
    seconds: float = 120.0
    base: float = 0.1
    cap: float = 20.0

    def delay(self, retry: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2**retry))


def policy() -> Policy:
    """The policy the environment sets: ``PREP_STORE_ATTEMPTS``, ``PREP_STORE_RETRY_SECONDS``."""
    attempts = _setting("PREP_STORE_ATTEMPTS", Policy.attempts, at_least=1)
    if attempts != int(attempts):
        raise ValueError(f"PREP_STORE_ATTEMPTS: {attempts:g} is not a whole number of tries")
    return Policy(attempts=int(attempts), seconds=_setting("PREP_STORE_RETRY_SECONDS", Policy.seconds, at_least=0))


def _setting(name: str, default: float, at_least: float) -> float:
    raw = os.environ.get(name)
    return default if raw is None else parse_finite(raw, name, at_least=at_least)


def kind_of(error: BaseException) -> str | None:
    """The kind (a key of ``KINDS``) of a transient store error; None for any other."""
    if not isinstance(error, OSError) or isinstance(error, StoreFailing):
        return None
    text = str(error)
    return next((kind for kind, pattern in KINDS.items() if pattern.search(text)), None)


def retrying(fs: pafs.FileSystem, key: str, action: Callable[..., T], *args, rules: Policy | None = None) -> T:
    """``action(*args)``, tried again on a transient error as ``rules`` allow (default:
    ``policy()``); ``key`` (the path in ``fs``) names what failed. ``action`` starts over
    each time, so it must be whole: a download restarts its file, an upload its object."""
    rules = rules or policy()
    started = time.monotonic()
    attempt = 1
    while True:
        try:
            return action(*args)
        except OSError as error:
            kind = kind_of(error)
            if kind is None:
                named = _naming(error, f"{fs.type_name}://{key}")
                if named is error:
                    raise
                raise named from error
            wait, elapsed = rules.delay(attempt - 1), time.monotonic() - started
            if attempt >= rules.attempts or elapsed + wait > rules.seconds:
                raise StoreFailing(
                    f"object store kept failing on {fs.type_name}://{key} after {attempt} attempts over "
                    f"{elapsed:.1f} s ({WORDS[kind]}: {_first_line(error)}); rerun the same command to resume "
                    "(PREP_STORE_ATTEMPTS and PREP_STORE_RETRY_SECONDS set how long it tries)"
                ) from None
        with _lock:
            _retried[kind] += 1
        time.sleep(wait)
        attempt += 1


def _naming(error: OSError, uri: str) -> OSError:
    """``error``, of its own class, with ``uri`` in front of its message where it lacks the
    key: pyarrow names none for a read (``AWS Error ACCESS_DENIED during GetObject
    operation:``, or a key deleted since it was listed), so the run's one line said what
    failed but not on which file. An error of the local disk (it has an errno: a full
    disk) names its own file, and keeps its number for the advice the command prints."""
    if error.errno is not None or uri.split("://", 1)[1].split("/", 1)[-1] in str(error):
        return error
    try:
        return type(error)(f"{uri}: {_first_line(error)}")
    except TypeError:  # a class that takes other arguments: kept as it is
        return error


def _first_line(error: OSError) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:300]


def start_counting() -> None:
    """A run's counts start here (a process may run several); a bad setting is refused now."""
    policy()
    take_retries()


def take_retries() -> dict[str, int]:
    """The retries of this process since the last call, by kind, and start counting anew."""
    with _lock:
        taken = dict(_retried)
        _retried.clear()
    return taken


def sdk_untried(fs: pafs.FileSystem) -> pafs.FileSystem:
    """``fs`` with the AWS SDK's own retries off, for an S3 file system (see above): the
    same options (pyarrow's pickling lists them), one attempt per request."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    _, (options,) = fs.__reduce__()
    return pafs.S3FileSystem(**options, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))


# -- the store's operations, each whole and retried ---------------------------------------


def files_under(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    """The files at or under ``path`` (a file, a folder, or nothing: an empty list)."""
    return retrying(fs, path, _files_under, fs, path)


def _files_under(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [info]
    if info.type == pafs.FileType.NotFound:
        return []
    return [i for i in fs.get_file_info(pafs.FileSelector(path, recursive=True)) if i.type == pafs.FileType.File]


def download(fs: pafs.FileSystem, key: str, local: Path) -> None:
    """Copy the object ``key`` to ``local`` byte for byte (pyarrow would otherwise
    decompress a file named *.gz on the way); a retry rewrites ``local`` from its start."""
    retrying(fs, key, _download, fs, key, local)


def _download(fs: pafs.FileSystem, key: str, local: Path) -> None:
    with fs.open_input_stream(key, compression=None) as source, open(local, "wb") as sink:
        shutil.copyfileobj(source, sink, COPY_BLOCK)


def upload(local: Path, fs: pafs.FileSystem, key: str) -> None:
    """Store ``local`` as ``key``. The object is created when the stream closes (a
    multipart upload completes then), so a failed try leaves nothing and a retry starts over."""
    uninterrupted(retrying, fs, key, _upload, local, fs, key)


def uninterrupted(write: Callable[..., T], *args) -> T:
    """``write(*args)``, a write to the store, where no Ctrl-C can cut it short.

    Why: pyarrow's output stream creates its object when it is closed, and it is closed on
    every way out of it, an exception's included (it has no abort). A KeyboardInterrupt
    (prep raises one for Ctrl-C and SIGTERM, and only in the main thread) inside the stream
    therefore stored the bytes written so far under the final key: an empty marker, which
    the resumed run failed on. Run on a thread of its own, the write finishes whole (or
    fails whole) while the interrupt goes on in the main thread, which does not wait for it:
    the process ends before the object is complete, or after."""
    if threading.current_thread() is not threading.main_thread():
        return write(*args)
    pool = ThreadPoolExecutor(1, thread_name_prefix="prep-store-write")
    try:
        return pool.submit(write, *args).result()
    finally:
        pool.shutdown(wait=False)


def _upload(local: Path, fs: pafs.FileSystem, key: str) -> None:
    with open(local, "rb") as source, fs.open_output_stream(key, compression=None, metadata={}) as sink:
        shutil.copyfileobj(source, sink, COPY_BLOCK)


class RangedFile:
    """A stored file open for ranged reads (``read_at``: a request each, each retried)."""

    def __init__(self, fs: pafs.FileSystem, info: pafs.FileInfo):
        self.fs, self.key = fs, info.path
        self.file = retrying(fs, self.key, fs.open_input_file, self.key)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return retrying(self.fs, self.key, self.file.read_at, nbytes, offset)

    def __enter__(self) -> RangedFile:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()
