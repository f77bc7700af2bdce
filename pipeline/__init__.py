"""prep: a streaming preprocessing pipeline for LLM pretraining data."""

from pipeline.compile.numba_cache import clear_stale_caches

__version__ = "0.1.0"

# Before any kernel loads from numba's cache: one compiled against since-changed code is
# deleted (numba checks only each kernel's own file; see pipeline.compile.numba_cache).
clear_stale_caches()
