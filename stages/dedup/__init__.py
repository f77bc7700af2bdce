"""Exact and MinHash-LSH near-duplicate removal (the ``dedup`` global stage)."""

from stages.dedup import warmup  # noqa: F401  (declares the kernels' warm-up step)
from stages.dedup.stage import Dedup

__all__ = ["Dedup"]
