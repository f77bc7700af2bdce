"""A process and all its descendants, read from /proc: the benchmarks sample the CPU
time and memory of a whole run this way (worker pools and Ray's processes included)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable


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
