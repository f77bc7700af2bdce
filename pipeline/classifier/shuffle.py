"""fastText's training file, written in the order of a key, in bounded memory.

fastText does not shuffle: it reads its file front to back, each epoch, while the
learning rate falls to zero. The training lines must therefore be in a random order, and
the order must not depend on the order of the inputs; a hash key per line gives both.

Lines are held until they reach ``run_bytes``, then sorted and spilled to a run file;
closing merges the runs (one run, the usual case, is written straight out). Every file
is created beside the output, named ``.<name>.<pid>@<host>.<tag>.<random>.tmp``
(``pipeline.util.atomic``'s convention, so what a killed process leaves is recognisable
and ``remove_dead_temporaries`` removes it), and removed by ``close`` or ``discard``.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from pathlib import Path

from pipeline.util.atomic import writer_tag

KEY_CHARS = 16  # a key as 16 hex digits: sorting the text sorts the numbers


def temp_file(beside: Path, tag: str) -> Path:
    """A new empty temporary file beside ``beside``, named by the atomic-write convention."""
    beside.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{beside.name}.{writer_tag()}.{tag}.", suffix=".tmp", dir=beside.parent)
    os.close(fd)
    return Path(name)


class ShuffledLines:
    """Collects ``(key, line)`` pairs; ``close`` writes the lines in key order (ties in the
    order they came) to a temporary file beside ``beside`` and returns its path."""

    def __init__(self, beside: Path, run_bytes: int = 256 << 20):
        self.beside = beside
        self.run_bytes = run_bytes
        self.pending: list[tuple[int, int, str]] = []
        self.pending_bytes = 0
        self.count = 0
        self.runs: list[Path] = []
        self.bytes = 0  # of the file ``close`` wrote

    def add(self, key: int, line: str) -> None:
        self.pending.append((key, self.count, line))
        self.count += 1
        self.pending_bytes += len(line) + 64
        if self.pending_bytes >= self.run_bytes:
            self._spill()

    def _spill(self) -> None:
        run = temp_file(self.beside, "run")
        self.runs.append(run)
        self.pending.sort()
        with open(run, "w", encoding="utf-8") as f:
            for key, _, line in self.pending:
                f.write(f"{key:016x} {line}\n")
        self.pending, self.pending_bytes = [], 0

    def close(self) -> Path:
        out = temp_file(self.beside, "train")
        try:
            with open(out, "w", encoding="utf-8") as f:
                if not self.runs:
                    self.pending.sort()
                    for _, _, line in self.pending:
                        f.write(line + "\n")
                else:
                    self._spill()
                    readers = [open(run, encoding="utf-8") for run in self.runs]
                    try:
                        for tagged in heapq.merge(*readers, key=lambda s: s[:KEY_CHARS]):
                            f.write(tagged[KEY_CHARS + 1 :])
                    finally:
                        for reader in readers:
                            reader.close()
        except BaseException:
            out.unlink(missing_ok=True)
            raise
        finally:
            self.discard()
        self.bytes = out.stat().st_size
        return out

    def discard(self) -> None:
        """Forget the lines and remove the run files."""
        self.pending, self.pending_bytes = [], 0
        for run in self.runs:
            run.unlink(missing_ok=True)
        self.runs = []
