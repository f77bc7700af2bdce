"""Compiling what a kernel calls without compiling the kernel: numba's front end and type
inference run on its source, and stop there.

Why: a warm-up step that prepares a large kernel's callees on one worker while another
worker compiles the rest (see ``stages/quality/warmup.py``) used to run the kernel's
source in Python, so each callee compiled with a Python entry point it never needs in a
run, and a helper compiled first for a jitted caller compiled again with one. Typing
the source instead compiles every callee exactly as the kernel's own compile asks for
it (same argument types, no entry point), so the kernel's compile later finds them all
in numba's cache.

``typed(function, args)`` types ``function`` (a plain Python function, say a kernel's
source with some globals replaced) for argument values or types and returns its return
type. ``stand_in(returns)`` is a value to put in such globals in place of a jitted
function that must not compile here: calls to it type as returning ``returns``, a numba
type or a function of the argument types (``typed`` of another source, say).
"""

from __future__ import annotations

import types as pytypes
from collections.abc import Callable

from numba.core import bytecode, compiler, types
from numba.core.registry import cpu_target
from numba.core.targetconfig import ConfigStack
from numba.core.typed_passes import NopythonTypeInference
from numba.core.typing import signature
from numba.core.typing.templates import AbstractTemplate
from numba.core.typing.typeof import Purpose, typeof
from numba.core.untyped_passes import ExtractByteCode


def with_globals(kernel, **replaced) -> pytypes.FunctionType:
    """``kernel``'s Python source as a plain function, some of the names it reads replaced."""
    source = kernel.py_func
    return pytypes.FunctionType(source.__code__, {**source.__globals__, **replaced}, source.__name__)


def typed(function: pytypes.FunctionType, args: tuple, like=None) -> types.Type:
    """Type ``function`` for ``args`` (values, or numba types) with the compile options of
    the jitted function ``like`` (numba's defaults without), compiling what it calls."""
    arg_types = tuple(a if isinstance(a, types.Type) else typeof(a, Purpose.argument) for a in args)
    flags = compiler.Flags()
    if like is not None:
        like._compiler.targetdescr.options.parse_as_flags(flags, like.targetoptions)
    pipeline = compiler.Compiler(cpu_target.typing_context, cpu_target.target_context, None, arg_types, None, flags, {})
    state = pipeline.state
    state.func_id = bytecode.FunctionIdentity.from_function(function)
    ExtractByteCode().run_pass(state)
    state.lifted, state.lifted_from = (), None
    passes = compiler.DefaultPassBuilder.define_untyped_pipeline(state)
    passes.add_pass(NopythonTypeInference, "nopython frontend")
    passes.finalize()
    with ConfigStack().enter(flags.copy()):
        passes.run(state)
    return state.return_type


def stand_in(returns: types.Type | Callable[[tuple], types.Type]) -> Callable:
    """A global for ``typed`` sources: typed as returning ``returns``; never run or compiled."""

    def never_run(*args):
        raise AssertionError("a typing stand-in is never called")

    class Returns(AbstractTemplate):
        key = never_run

        def generic(self, args, kws):
            result = returns if isinstance(returns, types.Type) else returns(args)
            return signature(result, *args)

    cpu_target.typing_context.insert_global(never_run, types.Function(Returns))
    return never_run
