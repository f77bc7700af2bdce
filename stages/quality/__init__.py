"""The ``quality`` stage: heuristic document filters as numba kernels over Arrow buffers."""

from stages.quality import warmup  # noqa: F401  (declares the kernels' warm-up steps)
from stages.quality.stage import QualityStage

__all__ = ["QualityStage"]
