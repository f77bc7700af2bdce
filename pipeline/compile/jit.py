"""The one jit decorator for prep's kernels: numba's ``njit``, cached, minus one
specialization per constant, and no Python entry points for code only jitted code calls.

Why plain arguments: when a jitted function calls another jitted function with a
constant (a literal ``0`` or ``-1``, a column index imported from ``signals.py``), numba
types that argument as a literal and compiles the callee again for it: the quality
kernels held five copies of ``byte_set_find`` and four of ``split_duplicates``, and a
third of a cold run's compile time went to such copies. Here a call from jitted code
types its arguments as plain values first, so each helper compiles once per real
signature; the compiled code is the same (LLVM still folds the constant when it inlines).
Plain also means 64-bit for a signed integer: token offsets are int32 arrays, and a
helper handed one of their values compiled again beside its int64 copy (``decode``,
``poly_hash``); numba does integer arithmetic in 64 bits whatever the width it is given,
so the helper computes the same.

Why no entry points: numba gives every compiled function a CPython wrapper (unboxing
each argument, boxing the result) and a C callback wrapper, though most of prep's
helpers are only ever called from other kernels. Each wrapper is generated, optimized
and emitted, and then again inside every caller, since a caller's module links in its
callees' whole modules: they were a tenth of a cold run's compile time. No kernel gets
the C callback (it is for handing a jitted function to C code, which prep never does),
and a function compiled because a jitted caller needs it gets no CPython wrapper
either; one called from Python (a batch kernel, a warmup step, a test) gets it. A
helper called from Python for a signature it only has without the wrapper (in memory or
in numba's cache) is compiled again with it, once: that happens in tests, not in runs.
A helper without the wrapper is not optimized or assembled on its own either: its
callers link its IR (``linked_only``).

``njit(fn)`` or ``njit(**options)``: numba's options (``_nrt``, ``nogil``, ``inline``);
``cache`` defaults to True, as every prep kernel caches what it compiles (see
``numba_cache`` for when those caches are cleared).
"""

from __future__ import annotations

import contextlib
import sys

from numba.core import sigutils, types
from numba.core.caching import FunctionCache, NullCache
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher
from numba.core.runtime.nrt import rtsys

from pipeline.compile.linked_only import KernelCompiler
from pipeline.compile.numba_setup import arraymath_without_scipy  # (and cheaper compile bookkeeping)


class _KernelCache(FunctionCache):
    def load_overload(self, sig, target_context):
        """numba's load, without the target's refresh before it: that imports and installs
        the registries of everything numba can compile (0.1-0.15 s, a fifth of a fork
        server's start, on every run's critical path), which loading compiled code never
        reads. What the code does call, the runtime (NRT), is started here; a compile still
        refreshes first (``compiler.compile_extra``). A kernel's environment may import
        ``numba.np.arraymath``: without scipy (``arraymath_without_scipy``)."""
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors(), arraymath_without_scipy():
            return self._load_overload(sig, target_context)


class _KernelDispatcher(CPUDispatcher):
    def enable_caching(self):
        self._cache = _KernelCache(self.py_func)

    def get_call_template(self, args, kws):
        """A jitted caller's request: plain argument types, and no wrappers if compiled now."""
        args = tuple(_plain(a) for a in args)
        kws = {name: _plain(t) for name, t in kws.items()}
        with global_compiler_lock, self._options(no_cpython_wrapper=True):
            return super().get_call_template(args, kws)

    @global_compiler_lock  # the options above hold for one compile (a reader compiles on its thread)
    def compile(self, sig):
        with _interrupts_kept():
            return self._compile(sig)

    def _compile(self, sig):
        if self.targetoptions.get("no_cpython_wrapper"):  # for a jitted caller: any overload serves
            return super().compile(sig)
        args = tuple(sigutils.normalize_signature(sig)[0])
        if args in self.overloads and not self._has_wrapper(self.overloads[args]):
            del self.overloads[args]
        entry = super().compile(sig)
        if not self._has_wrapper(self.overloads[args]):  # numba's cache held it without one
            del self.overloads[args]
            cache, self._cache = self._cache, NullCache()
            try:
                entry = super().compile(sig)
            finally:
                self._cache = cache
            cache.save_overload(sig, self.overloads[args])
        return entry

    def add_overload(self, cres):
        """Python calls only what has a wrapper: numba's C dispatcher would jump to a null one."""
        if self._has_wrapper(cres):
            super().add_overload(cres)
        else:
            self.overloads[tuple(cres.signature.args)] = cres

    def in_cache(self, args) -> bool:
        """Whether numba's cache on disk holds this kernel compiled for argument values
        ``args`` (its index says so; nothing is loaded). An index that cannot be read
        (truncated by a full disk, say) answers no: the caller then prepares as on a
        cold cache."""
        if isinstance(self._cache, NullCache):
            return False
        sig = tuple(self.typeof_pyval(a) for a in args)
        key = self._cache._index_key(sig, self.targetctx.codegen())
        try:
            return key in self._cache._cache_file._load_index()
        except Exception:  # unpickling a damaged index raises whatever pickle meets
            return False

    @staticmethod
    def _has_wrapper(cres) -> bool:
        return cres.objectmode or bool(cres.library.get_pointer_to_function(cres.fndesc.llvm_cpython_wrapper_name))

    @contextlib.contextmanager
    def _options(self, **options):
        saved = dict(self.targetoptions)
        self.targetoptions.update(options)
        try:
            yield
        finally:
            self.targetoptions.clear()
            self.targetoptions.update(saved)


def _plain(argument: types.Type) -> types.Type:
    argument = types.unliteral(argument)
    if isinstance(argument, types.Integer) and argument.signed and argument.bitwidth < 64:
        return types.int64
    return argument


@contextlib.contextmanager
def _interrupts_kept():
    """Raises, when a compile or cache load ends, a Ctrl-C or SIGTERM that came during it
    while C code ran a Python callback (llvmlite calls two as it makes machine code). C
    cannot pass an exception on: Python printed "Exception ignored" and a traceback, and
    the command went on as if no key had been pressed. Compiles hold numba's lock, so
    one at a time swaps the process's hook for unraisable exceptions."""
    kept: list[BaseException] = []
    previous = sys.unraisablehook

    def keep(unraisable) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            kept.append(unraisable.exc_value or unraisable.exc_type())
        else:
            previous(unraisable)

    sys.unraisablehook = keep
    try:
        yield
    except Exception:
        if kept:  # what failed after the interrupt is its consequence
            raise kept[0] from None
        raise
    finally:
        sys.unraisablehook = previous
    if kept:
        raise kept[0]


def njit(fn=None, *, cache: bool = True, **options):
    targetoptions = {"nopython": True, "boundscheck": None, "no_cfunc_wrapper": True, **options}

    def compile_lazily(function):
        dispatcher = _KernelDispatcher(
            py_func=function, locals={}, targetoptions=targetoptions, pipeline_class=KernelCompiler
        )
        if cache:
            dispatcher.enable_caching()
        return dispatcher

    return compile_lazily(fn) if fn is not None else compile_lazily
