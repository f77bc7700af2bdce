"""The one jit decorator for prep's kernels: numba's ``njit``, cached, minus one
specialization per constant.

Why: when a jitted function calls another jitted function with a constant (a literal
``0`` or ``-1``, a column index imported from ``signals.py``), numba types that argument
as a literal and compiles the callee again for it: the quality kernels held five copies
of ``byte_set_find`` and four of ``split_duplicates``, and a third of a cold run's
compile time went to such copies. Here a call from jitted code types its arguments as
plain values first, so each helper compiles once per real signature; the compiled code
is the same (LLVM still folds the constant when it inlines).

``njit(fn)`` or ``njit(**options)``: numba's options (``_nrt``, ``nogil``, ``inline``);
``cache`` defaults to True, as every prep kernel caches what it compiles (see
``numba_cache`` for when those caches are cleared).
"""

from __future__ import annotations

from numba.core import types
from numba.core.registry import CPUDispatcher


class _PlainArgumentDispatcher(CPUDispatcher):
    def get_call_template(self, args, kws):
        args = tuple(types.unliteral(a) for a in args)
        kws = {name: types.unliteral(t) for name, t in kws.items()}
        return super().get_call_template(args, kws)


def njit(fn=None, *, cache: bool = True, **options):
    targetoptions = {"nopython": True, "boundscheck": None, **options}

    def compile_lazily(function):
        dispatcher = _PlainArgumentDispatcher(py_func=function, locals={}, targetoptions=targetoptions)
        if cache:
            dispatcher.enable_caching()
        return dispatcher

    return compile_lazily(fn) if fn is not None else compile_lazily
