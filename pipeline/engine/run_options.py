"""How this run of a config runs: ``prep run``'s flags, read once into one object.

The config says what to do with the documents; these say how this run does it (how many
workers, which executor, a sample) and are the same in every phase and every task. They
are built once, by ``run_pipeline``, and passed whole: to the phases, to each task (so
to a Ray worker: the object is small and frozen) and to ``run_unit``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.engine.config import Config, ConfigError


@dataclass(frozen=True)
class RunOptions:
    workers: int  # how many worker processes (or Ray tasks) at once: asked, the config's, or one per core
    asked_workers: int | None = None  # what --workers or [run] workers asked for (None: nothing)
    strict: bool = False  # bad input stops the run instead of being quarantined
    force: bool = False  # start over in an --out that holds another run
    quiet: bool = False
    progress: str = "bar"  # "bar", "json" (a JSON line a second, for logs) or "none"
    executor: str = "local"  # "local" or "ray"
    address: str | None = None  # the Ray cluster to join
    sample: float = 1.0  # the hash-sampled fraction of every source kept (< 1: a trial run)
    sample_seed: int = 0  # which documents the sample picks (0: by the id hash alone)
    # Leave work/ when the run completes (``work_disk.keeps_work``): what a later run's
    # ``index_from`` imports. Not part of the fingerprint: it changes no output.
    keep_work: bool = False

    @classmethod
    def from_flags(cls, config: Config, workers: int | None = None, **flags) -> RunOptions:
        """The options of a run of ``config`` given ``prep run``'s flags (by their names)."""
        asked = workers or config.run.workers  # None: as many as there are cores
        options = cls(workers=asked or os.cpu_count() or 1, asked_workers=asked, **flags)
        if not 0 < options.sample <= 1:
            raise ConfigError(f"--sample must be in (0, 1], not {options.sample}")
        return options

    @property
    def mode(self) -> str:
        """What the progress bars show: nothing when quiet."""
        return "none" if self.quiet else self.progress

    @property
    def sampled(self) -> bool:
        return self.sample < 1
