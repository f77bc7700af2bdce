"""The ``quality`` stage: heuristic document filters as numba kernels over Arrow buffers."""

from stages.quality.stage import QualityStage

__all__ = ["QualityStage"]
