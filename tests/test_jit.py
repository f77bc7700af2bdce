"""prep's jit decorator: a helper called with constants compiles once, not once per constant."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pipeline.compile.jit import njit

COLUMN = 3


@njit(cache=False)
def _add(x, k):
    return x + k


@njit(cache=False)
def _caller(x):
    return _add(x, 0) + _add(x, -1) + _add(x, COLUMN) + _add(x, x)


def test_constants_share_one_compiled_helper():
    assert _caller(np.int64(5)) == 5 + 4 + 8 + 10
    assert len(_add.signatures) == 1  # numba's own njit compiles four: Literal[int](0), (-1), (3), int64


@njit(cache=False)
def _first(a, i):
    return a[i]


@njit(cache=False)
def _token_offsets(offsets32, offsets64):
    return _first(offsets32, offsets32[1]) + _first(offsets32, offsets64[1]) + _first(offsets32, np.int16(0))


def test_narrow_signed_integers_share_the_int64_helper():
    offsets = np.array([0, 2, 5], np.int32)
    assert _token_offsets(offsets, offsets.astype(np.int64)) == 5 + 5 + 0
    assert [str(args[1]) for args in _first.signatures] == ["int64"]  # numba compiles int32, int64, int16


@njit(cache=False)
def _typed_often(x, y):
    return min(x, y) + min(y, x) + min(x + 1, y)


def test_numba_types_a_repeated_call_once_and_answers_the_same():
    """The second and third ``min(int64, int64)`` are answered from what the first found."""
    from numba.core import types
    from numba.core.registry import cpu_target

    assert _typed_often(np.int64(2), np.int64(7)) == 2 + 2 + 3
    min_type = cpu_target.typing_context.resolve_value_type(min)
    answers = {key[1]: sig for key, sig in min_type.__dict__["_prep_call_types"].items()}
    # numba types min(a, b) as min((a, b))
    assert str(answers[(types.int64, types.int64)]) == "(UniTuple(int64, 2),) -> int64"


@njit(cache=False)
def _int16_rows(n):
    return np.empty((n, 3), np.int16)


@njit(cache=False)
def _int16_rows_twice(n):
    return _int16_rows(n).shape[0] + np.empty((n, 3), np.int16).shape[0]


def test_an_overload_compiles_once_for_callers_whose_options_do_not_reach_it():
    """``np.empty`` of one signature, typed in a kernel called from Python and in a helper
    only jitted code calls (compiled without a Python entry point): one implementation."""
    import gc

    from numba.core.dispatcher import Dispatcher

    assert _int16_rows_twice(4) == 8
    compiled = [
        function
        for function in gc.get_objects()
        if isinstance(function, Dispatcher)
        and function.py_func.__qualname__ == "ol_np_empty.<locals>.impl"
        and any("int16" in str(signature) for signature in function.overloads)
    ]
    assert len(compiled) == 1


@njit(cache=False, _nrt=False)
def _sum(a):
    total = 0
    for v in a:
        total += v
    return total


def test_options_reach_numba():
    assert _sum(np.arange(5)) == 10
    assert _sum.targetoptions["_nrt"] is False
    assert _sum.targetoptions["nopython"] is True


def _numba_values(config):
    """What numba's own ``TargetConfig.values`` returns: every option through its property."""
    return {name: getattr(config, name) for name in config.options}


def test_compile_flags_compare_and_hash_as_numba_defines():
    from numba.core.compiler import Flags

    def flags(**explicit):
        f = Flags()
        for name, value in explicit.items():
            setattr(f, name, value)
        return f

    variants = [
        flags(),
        flags(nrt=False),  # nrt's default, set explicitly
        flags(nrt=True),
        flags(no_cpython_wrapper=True),
        flags(no_cpython_wrapper=True, nrt=True),
        flags(nrt=True, no_cpython_wrapper=True, boundscheck=False),
        flags(boundscheck=True),
    ]
    for a in variants:
        assert hash(a) == hash(tuple(sorted(_numba_values(a))))
        assert a.values() == _numba_values(a)
        for b in variants:
            assert (a == b) == (_numba_values(a) == _numba_values(b)), (a, b)
    assert variants[0] == variants[1] and variants[0] != variants[2]


def test_the_compiler_starts_without_scipy_and_blas_still_compiles():
    """numba's start imported scipy.linalg (a fifth of a fork server's start) to ask
    whether BLAS exists; prep answers no, and np.dot still finds BLAS when it compiles."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import pipeline.compile.numba_setup\n"
        "from numba.core.registry import CPUDispatcher\n"
        "CPUDispatcher.targetdescr.target_context.refresh()\n"
        "print('scipy.linalg' in sys.modules)\n"
        "import numpy as np\n"
        "from numba import njit\n"
        "print(njit(lambda a, b: np.dot(a, b))(np.ones(3), np.arange(3.0)))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "3.0"]


def test_numba_error_messages_are_plain_in_every_module_that_formats_them():
    """numba's modules took the colour scheme when imported; each typing refusal ran
    colorama's wrapping of stdout and stderr through it (3,800 a word-splitter compile)."""
    import numba.core.ir
    import numba.core.typeinfer
    import numba.core.types.functions
    from numba.core import errors

    import pipeline.compile.numba_setup  # noqa: F401

    for module in (numba.core.ir, numba.core.typeinfer, numba.core.types.functions):
        assert module._termcolor.errmsg("no match") == "no match"
    assert errors.termcolor().highlight("here") == "here"


def test_a_cached_kernel_loads_and_runs_without_numba_loading_its_registries(tmp_path):
    """Loading compiled code from the cache skips numba's refresh of its registries (a
    fifth of a fork server's start); the loaded kernel runs, and a compile afterwards in
    the same process still finds what it needs."""

    module = tmp_path / "cached_kernel.py"
    module.write_text(
        "import numpy as np\n"
        "from pipeline.compile.jit import njit\n"
        "@njit\n"
        "def total(a):\n"
        "    out = np.empty(1, np.int64)\n"  # an NRT allocation
        "    out[0] = 0\n"
        "    for x in a:\n"
        "        out[0] += x\n"
        "    return out\n"
    )
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from cached_kernel import total\n"
        "print(total(np.arange(5))[0])\n"
        "print('numba.np.arraymath' in sys.modules)\n"
        "from numba import njit\n"
        "print(njit(lambda a: np.sort(a)[0])(np.array([3, 1, 2])))\n"
    )
    compiled, loaded = _run_twice(script, tmp_path)
    assert compiled == ["10", "True", "1"]  # compiling loads the registries
    assert loaded == ["10", "False", "1"]


def _run_twice(script: str, folder) -> tuple[list[str], list[str]]:
    """The words ``script`` prints run from ``folder`` (whose modules it imports): the
    first time, which compiles their kernels into the cache, and the second, which loads them."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    run = [sys.executable, "-c", script]
    compiled, loaded = (
        subprocess.run(run, capture_output=True, text=True, check=True, env=env, cwd=folder) for _ in range(2)
    )
    return compiled.stdout.split(), loaded.stdout.split()


def test_a_cached_kernel_whose_environment_needs_numba_arraymath_loads_without_scipy(tmp_path):
    """A kernel calling np.searchsorted (the loader's) names numba.np.arraymath in its
    cached environment; loading it imported that module and, through its BLAS check,
    scipy.linalg: 9 MiB and 0.17 s in every loader worker. np.dot still compiles after."""

    (tmp_path / "searching_kernel.py").write_text(
        "import numpy as np\n"
        "from pipeline.compile.jit import njit\n"
        "@njit\n"
        "def where(edges, x):\n"
        "    return np.searchsorted(edges, x, side='right')\n"
    )
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from searching_kernel import where\n"
        "print(where(np.arange(10), 4))\n"
        "print('numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules)\n"
        "from numba import njit\n"
        "print(njit(lambda a, b: np.dot(a, b))(np.ones(3), np.arange(3.0)))\n"
    )
    assert _run_twice(script, tmp_path)[1] == ["5", "True", "False", "3.0"]


def test_a_ctrl_c_inside_a_c_callback_during_a_compile_is_raised_when_it_ends():
    """llvmlite calls Python back from C as it makes machine code; a KeyboardInterrupt
    raised there was printed as "Exception ignored" and the run went on to its end."""
    import ctypes

    import pytest

    from pipeline.compile.jit import _interrupts_kept

    def callback():
        raise KeyboardInterrupt

    done = []
    with pytest.raises(KeyboardInterrupt):
        with _interrupts_kept():
            ctypes.CFUNCTYPE(None)(callback)()
            done.append("went on")  # the rest of the compile still runs
    assert done == ["went on"]


@njit(cache=False)
def _scaled(x, k):
    return x * k


@njit(cache=False)
def _never_compiled_here(x):
    return x + 1


@njit(cache=False)
def _outer(x):
    return _scaled(x, 2) + _never_compiled_here(x)


def test_typing_a_source_compiles_its_callees_for_jitted_callers_only():
    """``typed`` compiles ``_scaled`` as a jitted caller would (int64, no Python entry
    point), nothing of ``_outer``, and nothing of what a stand-in replaces."""
    from numba.core import types

    from pipeline.compile.jit import _KernelDispatcher
    from pipeline.compile.typing_only import stand_in, typed, with_globals

    source = with_globals(_outer, _never_compiled_here=stand_in(types.float64))
    assert typed(source, (np.int32(3),), like=_outer) == types.float64
    ((args, cres),) = _scaled.overloads.items()
    assert [str(a) for a in args] == ["int64", "int64"] and not _KernelDispatcher._has_wrapper(cres)
    assert not _never_compiled_here.overloads and not _outer.overloads


@njit(cache=False)
def _helper(x):
    return x * 3


@njit(cache=False)
def _kernel(x):
    return _helper(x) + 1


def test_a_helper_only_kernels_call_reaches_machine_code_only_inside_them():
    """Its library is IR that its callers link and optimize; numba's cache stores that IR,
    and a library loaded from it links into a caller the same way."""
    from numba.core.registry import cpu_target

    from pipeline.compile.linked_only import KIND, LinkedOnlyLibrary

    assert _kernel(np.int64(4)) == 13
    (helper,) = _helper.overloads.values()
    (kernel,) = _kernel.overloads.values()
    assert isinstance(helper.library, LinkedOnlyLibrary) and not isinstance(kernel.library, LinkedOnlyLibrary)
    assert helper.library.get_pointer_to_function(helper.fndesc.llvm_func_name) == 0
    name, kind, ir = helper.library.serialize_using_object_code()
    assert kind == KIND
    loaded = cpu_target.target_context.codegen().unserialize_library((name, kind, ir))
    assert isinstance(loaded, LinkedOnlyLibrary)
    assert loaded._get_module_for_linking().get_function(helper.fndesc.llvm_func_name) is not None


@njit
def _cached_square(x):
    return x * x


def test_in_cache_reads_numba_index_for_the_argument_types():
    _cached_square._cache.flush()  # an empty index, whatever earlier runs left
    assert not _cached_square.in_cache((3,))
    assert _cached_square(3) == 9
    assert _cached_square.in_cache((4,)) and not _cached_square.in_cache((4.0,))
    index = Path(_cached_square._cache._cache_file._index_path)
    index.write_bytes(index.read_bytes()[:20])  # truncated: numba's version header, then garbage
    assert not _cached_square.in_cache((4,))
    _cached_square._cache.flush()
