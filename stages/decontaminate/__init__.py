"""Remove evaluation data from training documents (the ``decontaminate`` stage)."""

from stages.decontaminate.stage import Decontaminate

__all__ = ["Decontaminate"]
