"""What prep changes in numba's own start and bookkeeping, to compile less slowly: cheaper
option comparisons, typing answers remembered, ``@overload`` implementations shared by
callers, plain error text, a lowering's ``loc`` argument checked once, no LLVM lock
events (each function says why). Imported by ``jit`` (so before any kernel compiles);
``ready_runtime`` is for a fork server.

Why cheaper compile options: the typing answers prep remembers (``min``, array methods,
operators on numpy scalars) are kept under a key that holds the compile's ``Flags``, as
numba's own cache of ``@overload`` implementations was, so every such call site typed
hashes a ``Flags`` and compares it with the kept one's; numba's methods build a dict of
all 40-odd options through their properties for both, a tenth of the word splitter's
compile time. ``_cheaper_option_comparison`` gives the same answers with less work.
"""

from __future__ import annotations

import contextlib
import sys

from llvmlite import binding as ll
from numba.core import base, errors  # importing base registers the LLVM lock callbacks
from numba.core.cpu import CPUContext
from numba.core.registry import CPUDispatcher
from numba.core.runtime.nrt import rtsys
from numba.core.targetconfig import ConfigStack, TargetConfig
from numba.core.types.functions import BaseFunction


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


def _remembered_call_types() -> None:
    """Types each call site of a function (an operator, ``min``, an array method) with
    numba's answer for the same function and argument types, when it gave one before.

    Why: numba tries the function's templates in turn until one accepts the arguments,
    making and formatting an error for each that refuses, at every call site. The kernels
    a run compiles type 10,400 such calls, of 900 distinct kinds: the repeats took 4.4-4.9
    of a cold warm-up's 30 CPU-seconds, 2.4 with this. An answer depends on the function,
    the argument types, the typing context and the compile's flags (numba's own cache of
    ``@overload`` implementations is keyed on the same), so it is kept per function type
    under those; and used only while the function still holds the implementation it
    chose (``_impl_keys``), which lowering looks up. Refusals are not kept: they raise."""
    get_call_type = BaseFunction.get_call_type

    def remembered(self, context, args, kws):
        key = (context, args, tuple(kws.items()), ConfigStack.top_or_none())
        answers = self.__dict__.setdefault("_prep_call_types", {})
        sig = answers.get(key)
        if sig is None or sig.args not in self._impl_keys:
            sig = answers[key] = get_call_type(self, context, args, kws)
        return sig

    BaseFunction.get_call_type = remembered


_remembered_call_types()


def _plain_error_messages() -> None:
    """numba colours each typing error it makes (with colorama, wrapping stdout and
    stderr for every message: 3,800 times, 0.08 s, compiling the word splitter alone) and
    makes one for every template that refuses a call, though all but the last are dropped
    unread. Plain text is as readable in a log. numba's modules each took the colour
    scheme when imported (``_termcolor = errors.termcolor()``), so it is that one
    instance that is made plain."""
    scheme = errors.termcolor()
    if hasattr(scheme, "_markup"):  # colorama's scheme; without colorama numba's is plain
        scheme._markup = _unmarked


def _unmarked(msg, color=None, style=None):
    return msg


_plain_error_messages()


def _overloads_shared_across_callers() -> None:
    """One compile of an ``@overload`` implementation (``np.empty``, ``max`` of two
    ints) per argument types and the options a caller passes on to it, rather than per
    caller's whole set of options.

    numba keeps the implementations it compiled under the caller's ``Flags``, all 40-odd
    options, though an implementation's compile takes four of them from its caller
    (``CPUTargetOptions.finalize`` inherits ``nrt``, ``fastmath``, ``error_model`` and
    ``forceinline``; the rest are its own). prep's kernels differ in options that never
    reach it (a Python entry point or not, reference counting in leaves), so the quality
    kernels compiled ``np.empty(n, np.uint64)`` three times and ``max`` of two ints
    three times: 30-60 ms each on a cold cache, in every worker that compiles."""
    from numba.core.typing.templates import _OverloadFunctionTemplate

    def _get_impl(self, args, kws):
        flags = ConfigStack.top_or_none()
        passed_on = None
        if flags is not None:
            passed_on = (flags.nrt, flags.fastmath.encode(), flags.error_model, flags.forceinline)
        cache_key = self.context, tuple(args), tuple(kws.items()), passed_on
        if cache_key in self._impl_cache:
            return self._impl_cache[cache_key]
        return self._build_impl(cache_key, args, kws)

    _OverloadFunctionTemplate._get_impl = _get_impl


_overloads_shared_across_callers()


def _loc_asked_once() -> None:
    """numba asks whether a lowering implementation takes a ``loc`` argument each time it
    looks one up (``BaseContext.get_function``) by building the function's
    ``inspect.signature``: 4,500 times, 0.3 of the 17 CPU-seconds that compile
    ``configs/redpajama.toml``'s kernels. The answer is the function's own, so it is kept."""
    has_loc = base._has_loc
    answers: dict = {}

    def _has_loc(fn):
        try:
            return answers[fn]
        except KeyError:
            answer = answers[fn] = has_loc(fn)
            return answer
        except TypeError:  # an unhashable callable: asked each time, as numba does
            return has_loc(fn)

    base._has_loc = _has_loc


_loc_asked_once()


def _no_llvm_lock_events() -> None:
    """numba asks llvmlite to call it back around every call into LLVM (50,000 in a cold
    warm-up), to fire a timing event on each: a fiftieth of the compile, for compile
    statistics prep never reads. The two callbacks are numba's own, found by name."""
    callbacks = ll.ffi.lib._lock._cblist
    for acquire, release in list(callbacks):
        if getattr(acquire, "__qualname__", "").startswith("_initialize_llvm_lock_event."):
            ll.ffi.unregister_lock_callback(acquire, release)


_no_llvm_lock_events()


def ready_runtime() -> None:
    """Do now what a process's first load of a cached kernel needs: numba's CPU target and
    the runtime (NRT) compiled code calls. A fork server does it once for all the workers
    it forks. The registries of what numba can compile are not loaded (``jit`` loads cached
    kernels without them); a compile loads them first."""
    rtsys.initialize(CPUDispatcher.targetdescr.target_context)


@contextlib.contextmanager
def arraymath_without_scipy():
    """While this holds, an import of ``numba.np.arraymath`` does not import scipy.

    That module checks on import whether scipy's BLAS is there (importing scipy.linalg:
    0.17 s, 9 MiB, and numpy.f2py with it) for one use: ``np.convolve`` and
    ``np.correlate`` call BLAS if so, else a loop. No prep kernel calls either, so the
    check is answered "no" by hiding scipy.linalg while the module may import: when numba
    first loads its registries (before a compile), and when a cached kernel's environment
    names it (one that inlines ``np.searchsorted`` does: every loader worker's first
    batch). ``np.dot`` and ``np.linalg`` still find scipy when they compile."""
    hide = "numba.np.arraymath" not in sys.modules and "scipy.linalg" not in sys.modules
    if hide:
        sys.modules["scipy.linalg"] = None  # an import of it now raises ImportError
    try:
        yield
    finally:
        if hide:
            del sys.modules["scipy.linalg"]


def _registries_without_scipy() -> None:
    """numba's registry load imports ``numba.np.arraymath``: without scipy, as above."""
    load = CPUContext.load_additional_registries

    def load_additional_registries(self):
        with arraymath_without_scipy():
            import numba.np.arraymath  # noqa: F401
        load(self)

    CPUContext.load_additional_registries = load_additional_registries


_registries_without_scipy()
