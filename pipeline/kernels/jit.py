"""The one jit decorator for prep's kernels: numba's ``njit``, cached, minus one
specialization per constant, and no Python entry points for code only jitted code calls.

Why plain arguments: when a jitted function calls another jitted function with a
constant (a literal ``0`` or ``-1``, a column index imported from ``signals.py``), numba
types that argument as a literal and compiles the callee again for it: the quality
kernels held five copies of ``byte_set_find`` and four of ``split_duplicates``, and a
third of a cold run's compile time went to such copies. Here a call from jitted code
types its arguments as plain values first, so each helper compiles once per real
signature; the compiled code is the same (LLVM still folds the constant when it inlines).

Why no entry points: numba gives every compiled function a CPython wrapper (unboxing
each argument, boxing the result) and a C callback wrapper, though most of prep's
helpers are only ever called from other kernels. Each wrapper is generated, optimized
and emitted, and then again inside every caller, since a caller's module links in its
callees' whole modules: they were a tenth of a cold run's compile time. So a function
compiled because a jitted caller needs it gets neither wrapper; one called from Python
(a batch kernel, a warmup step, a test) gets both. A helper called from Python for a
signature it only has without the wrapper (in memory or in numba's cache) is compiled
again with it, once: that happens in tests, not in runs.

Why cheaper compile options: numba caches each ``@overload`` implementation (``min``,
array methods, operators on numpy scalars) under a key that holds the compile's
``Flags``, so every such call site typed hashes a ``Flags`` and compares it with the
cached one's; both build a dict of all 40-odd options through their properties. That
was a tenth of the word splitter's compile time. ``_cheaper_option_comparison`` gives
the same answers with less work (see there).

``njit(fn)`` or ``njit(**options)``: numba's options (``_nrt``, ``nogil``, ``inline``);
``cache`` defaults to True, as every prep kernel caches what it compiles (see
``numba_cache`` for when those caches are cleared).
"""

from __future__ import annotations

import contextlib
import sys

from numba.core import sigutils, types
from numba.core.caching import NullCache
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher
from numba.core.targetconfig import TargetConfig

_NO_WRAPPERS = ("no_cpython_wrapper", "no_cfunc_wrapper")


class _KernelDispatcher(CPUDispatcher):
    def get_call_template(self, args, kws):
        """A jitted caller's request: plain argument types, and no wrappers if compiled now."""
        args = tuple(types.unliteral(a) for a in args)
        kws = {name: types.unliteral(t) for name, t in kws.items()}
        with global_compiler_lock, self._options(**dict.fromkeys(_NO_WRAPPERS, True)):
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
    finally:
        sys.unraisablehook = previous
    if kept:
        raise kept[0]


def njit(fn=None, *, cache: bool = True, **options):
    targetoptions = {"nopython": True, "boundscheck": None, **options}

    def compile_lazily(function):
        dispatcher = _KernelDispatcher(py_func=function, locals={}, targetoptions=targetoptions)
        if cache:
            dispatcher.enable_caching()
        return dispatcher

    return compile_lazily(fn) if fn is not None else compile_lazily


def _cheaper_option_comparison() -> None:
    """Replaces numba's ``TargetConfig`` hash and equality with ones that give the same
    answers: the hash numba computes, ``hash(tuple(sorted(self.values())))``, sorts the
    option *names* (iterating a dict yields its keys), so it is the hash of the class's
    option names, computed here without the values; two configs of one class are equal
    where the options either sets explicitly are (the others hold their defaults on both).
    A numba whose configs keep their values otherwise keeps its own methods."""
    if tuple(getattr(TargetConfig, "__slots__", ())) != ("_values",):
        return

    def values(self):
        return {name: self._values.get(name, option.default) for name, option in self.options.items()}

    def __hash__(self):
        return hash(tuple(sorted(self.options)))

    def __eq__(self, other):
        if not isinstance(other, TargetConfig):
            return NotImplemented
        if type(self) is not type(other):
            return self.values() == other.values()
        mine, theirs, options = self._values, other._values, self.options
        return mine == theirs or all(
            mine.get(name, options[name].default) == theirs.get(name, options[name].default)
            for name in mine.keys() | theirs.keys()
        )

    TargetConfig.values = values
    TargetConfig.__hash__ = __hash__
    TargetConfig.__eq__ = __eq__


_cheaper_option_comparison()


def ready_compiler() -> None:
    """Do now what numba does on a process's first compile or cache load: set up its CPU
    target, importing the registries of everything it can compile (0.2 s). A fork server
    does it once for all the workers it forks."""
    _import_numba_arraymath_without_scipy()
    CPUDispatcher.targetdescr.target_context.refresh()


def _import_numba_arraymath_without_scipy() -> None:
    """numba's array functions check on import whether scipy's BLAS is there (importing
    scipy.linalg: 0.17 s, a fifth of the fork server's start, on every run's critical
    path) for one use: ``np.convolve`` and ``np.correlate`` call BLAS if so, else a loop.
    No prep kernel calls either, so the check is answered "no" by hiding scipy.linalg while
    that module imports; ``np.dot`` and ``np.linalg`` still find it when they compile."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None  # an import of it now raises ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg"]
