"""Exact and MinHash-LSH near-duplicate removal (the ``dedup`` global stage)."""

from stages.dedup.stage import Dedup

__all__ = ["Dedup"]
