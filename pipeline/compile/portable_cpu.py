"""numba told to compile for a CPU level that many machines share (x86-64-v3), not for this
machine's own model.

Why: numba compiles for the host's CPU model and keys its cache on it, so compiled kernels
serve only machines of that exact model. Compiled for x86-64-v3 (AVX2, FMA and BMI: x86
server CPUs since about 2015), the same code serves every such machine. So the kernels
prep ships compiled (``prebuilt``) load on a fresh install instead of compiling for 15
CPU-seconds, and a cluster whose nodes differ in model shares one ``NUMBA_CACHE_DIR``.
The kernels lose nothing measurable: the e2e chain took 6.7 CPU-s compiled for x86-64-v3
and 6.8 for the host's own Zen 4 model with its AVX-512 (``benchmarks/README.md``).

numba reads these settings once, when it is imported, so they are set only before that,
and only where the user set neither variable and the CPU has every feature of the level
(from ``/proc/cpuinfo``: no llvmlite import for a command that compiles nothing).
Elsewhere (ARM, older x86, other systems) numba compiles for the host, as it always did.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

LEVEL = "x86-64-v3"
# The features x86-64-v3 implies (with those of v2), as Linux's /proc/cpuinfo names them.
LEVEL_FLAGS = frozenset("avx avx2 bmi1 bmi2 f16c fma abm movbe xsave cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3".split())
SETTINGS = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")


def cpu_flags(cpuinfo: Path) -> frozenset[str]:
    """The first processor's feature flags in ``cpuinfo``; none where it cannot be read."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def use_portable_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Sets numba's CPU to ``LEVEL`` in this process's environment (its children inherit it)
    where that is safe and numba has not read its settings yet; True if it did."""
    if "numba" in sys.modules or any(name in os.environ for name in SETTINGS):
        return False
    if platform.machine() != "x86_64" or not LEVEL_FLAGS <= cpu_flags(cpuinfo):
        return False
    os.environ["NUMBA_CPU_NAME"] = LEVEL
    os.environ["NUMBA_CPU_FEATURES"] = ""  # the level's own features, none of the host's beyond them
    return True
