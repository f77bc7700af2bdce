"""One output folder, one run: an exclusive lock on ``--out`` for the whole run.

Two runs writing one folder would rename files under each other and mix their counts.
A local folder is locked with ``flock`` on ``.prep/lock``: the kernel releases it when
the process ends however it ends, so a killed run never leaves a stale lock and the
next run simply takes it. The file holds who took it (host, pid, start time, command),
for the one-line refusal a second run prints.

An object store has no locks, so a remote run keeps a *lease*: ``.prep/lease.json``
with a random token and the time it was last renewed, rewritten every
``LEASE_SECONDS / 3`` by a heartbeat thread. A second run refuses while the lease is
fresher than ``LEASE_SECONDS`` (``PREP_LEASE_SECONDS``, default 60) and takes it over
once it is older: a killed run stops renewing, so its lease goes stale within that time
(at once when the killed run was on the same machine: its process is seen to be gone).
Taking a lease writes it, waits, and reads it back, so of two runs that start together
the one whose write landed last wins and the other refuses. The heartbeat reads the lease
before each renewal: a run whose lease was taken over (it went unrenewed too long: the
machine paused, the store was out of reach) stops with a one-line error instead of
writing its lease back over the new holder's and running beside it. This relies on the
machines' clocks agreeing to within a few seconds (NTP), as S3 lease schemes do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout


class OutputBusy(Exception):
    """Another run holds the output folder; the message says which."""


def lease_seconds() -> float:
    raw = os.environ.get("PREP_LEASE_SECONDS", "60")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"PREP_LEASE_SECONDS must be a number of seconds above 0, not {raw!r}")
    return seconds


def _holder() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:300],
    }


def _describe(holder: dict) -> str:
    return f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')}: {holder.get('command')!r}"


@contextlib.contextmanager
def locked_output(store: RunStore) -> Iterator[None]:
    """Hold the output folder for the duration of the block, or raise ``OutputBusy``."""
    if store.remote:
        with _lease(store):
            yield
    else:
        with _flock(Path(store.uri)):
            yield


@contextlib.contextmanager
def _flock(out: Path) -> Iterator[None]:
    path = Layout(out).lock
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(
                f"{out} is in use by another prep run ({_describe(_read_holder(fd))}); "
                "wait for it to end, or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # an idle folder names no holder (and is byte-identical)
    finally:
        os.close(fd)  # releases the lock


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}  # the holder is writing it this very moment


@contextlib.contextmanager
def _lease(store: RunStore) -> Iterator[None]:
    token = secrets.token_hex(16)
    holder = _holder()
    ttl = lease_seconds()

    def write() -> None:
        store.write_text(_lease_key(store), json.dumps({**holder, "token": token, "renewed": time.time()}))

    current = _read_lease(store)
    if current and time.time() - current.get("renewed", 0) < ttl and not _holder_gone(current):
        raise _busy(store, current)
    write()
    time.sleep(min(2.0, ttl / 10))  # let a concurrent taker's write land, then see who won
    current = _read_lease(store)
    if current.get("token") != token:
        raise _busy(store, current)
    stop = threading.Event()
    taken: list[dict] = []  # the lease that replaced this run's, once the heartbeat finds one
    signalling = threading.Lock()  # no interrupt once the block has ended

    def heartbeat() -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(OSError):  # a missed beat is retried; ttl allows two
                current = _read_lease(store)
                if current.get("token") not in (token, None):
                    with signalling:
                        if not stop.is_set():
                            taken.append(current)
                            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                    return
                write()

    thread = threading.Thread(target=heartbeat, name="prep-lease", daemon=True)
    thread.start()
    try:
        yield
    except KeyboardInterrupt:
        if taken:
            raise _lost(store, taken[0]) from None
        raise
    finally:
        with signalling:
            stop.set()
        thread.join()
        with contextlib.suppress(OSError):
            if _read_lease(store).get("token") == token:
                store.remove(_lease_key(store))


def _holder_gone(lease: dict) -> bool:
    """Whether the lease's run was on this machine and its process has ended (killed):
    then there is no need to wait for the lease to go stale."""
    if lease.get("host") != socket.gethostname() or not isinstance(lease.get("pid"), int):
        return False
    try:
        os.kill(lease["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, owned by someone else
    return False


def _lease_key(store: RunStore) -> str:
    layout = Layout(store.root)
    return layout.key(layout.lease)


def _read_lease(store: RunStore) -> dict:
    text = store.read_text(_lease_key(store))
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def _lost(store: RunStore, lease: dict) -> OutputBusy:
    """This run's lease went unrenewed for too long (the machine paused, the store out of
    reach) and another run took the folder over: this one stops rather than write beside it."""
    return OutputBusy(
        f"{store.uri} was taken over by another prep run ({_describe(lease)}) after this run's lease went "
        f"{lease_seconds():.0f} s without renewal; this run stopped, its finished units are kept"
    )


def _busy(store: RunStore, lease: dict) -> OutputBusy:
    age = time.time() - lease.get("renewed", 0)
    return OutputBusy(
        f"{store.uri} is in use by another prep run ({_describe(lease)}; lease renewed {age:.0f} s ago, "
        f"taken over once {lease_seconds():.0f} s old); wait for it to end, or use another --out"
    )
