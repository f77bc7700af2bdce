"""prep: a streaming preprocessing pipeline for LLM pretraining data."""

from pipeline.compile.numba_cache import clear_stale_caches
from pipeline.compile.portable_cpu import use_portable_cpu

__version__ = "0.1.0"

# Before numba is imported: compile for a CPU level many machines share, so that the kernels
# prep ships compiled serve this one (see pipeline.compile.portable_cpu).
use_portable_cpu()
# Before any kernel loads from numba's cache: one compiled against since-changed code is
# deleted (numba checks only each kernel's own file; see pipeline.compile.numba_cache).
clear_stale_caches()
