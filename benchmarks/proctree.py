"""A process and all its descendants, read from /proc: the benchmarks sample the CPU
time and memory of a whole run this way (worker pools and Ray's processes included)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import NamedTuple


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, [])
    return found


def wait_sampling(proc: subprocess.Popen, sample: Callable[[list[int]], None], interval: float = 0.2) -> int:
    """Wait for ``proc``, calling ``sample`` with its process tree every ``interval``
    seconds (on a thread); return its exit code."""
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            sample(process_tree(proc.pid))
            time.sleep(interval)

    sampler = threading.Thread(target=loop, daemon=True)
    sampler.start()
    code = proc.wait()
    done.set()
    sampler.join()
    return code


def cpu_and_peak_memory(proc: subprocess.Popen) -> tuple[int, float, int]:
    """Wait for ``proc``: (exit code, CPU seconds, peak PSS bytes) of its whole tree.

    Sampled from /proc every 0.2 s, so a process that lives less than that is missed.
    Not RUSAGE_CHILDREN: a pool's workers whose parent is not the command (datatrove's
    pool, prep's fork server) never reach the command's child accounting. PSS, not RSS:
    a page forked processes share counts once between them, not once per process."""
    peak = 0
    cpu_ticks: dict[int, int] = {}

    def sample(pids: list[int]) -> None:
        nonlocal peak
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu_ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, IndexError, ValueError, StopIteration):
                pass
        peak = max(peak, total)

    code = wait_sampling(proc, sample)
    return code, sum(cpu_ticks.values()) / os.sysconf("SC_CLK_TCK"), peak


class Memory(NamedTuple):
    """One process's resident memory by owner, in KiB (from ``/proc/<pid>/smaps``).

    ``private``: pages only this process holds that the kernel cannot simply drop: every
    dirty page mapped by it alone, and clean anonymous ones. What a copy, a leak or an
    import costs per process. ``file_cache``: clean pages of files (token shards, libraries)
    that only this process has touched so far: page cache, dropped under pressure and shared
    with any later reader, so not private. ``shared``: pages of no regular file that
    another process maps too: inherited copy-on-write at a fork and not written since,
    and shared memory (a DataLoader's batch buffers). ``RssAnon`` counts the inherited
    pages as the process's own, which makes every forked worker look as big as its parent.
    """

    private: int
    file_cache: int
    shared: int


def memory(pid: int) -> Memory:
    """``pid``'s memory split as ``Memory`` says (zeros for a process that is gone)."""
    private = file_cache = shared = 0
    try:
        with open(f"/proc/{pid}/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return Memory(0, 0, 0)
    is_file = False
    for line in lines:
        fields = line.split()
        if not fields[0].endswith(":"):  # a mapping's header: start-end perms offset dev inode [path]
            path = " ".join(fields[5:])
            is_file = path.startswith("/") and not path.startswith("/dev/") and not path.endswith("(deleted)")
            continue
        key = fields[0][:-1]
        kib = int(fields[1]) if key in ("Private_Dirty", "Private_Clean", "Shared_Dirty", "Shared_Clean") else 0
        if key == "Private_Dirty" or (key == "Private_Clean" and not is_file):
            private += kib
        elif key == "Private_Clean":
            file_cache += kib
        elif key in ("Shared_Dirty", "Shared_Clean") and not is_file:
            shared += kib
    return Memory(private, file_cache, shared)
