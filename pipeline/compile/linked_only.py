"""Kernel helpers kept as LLVM IR for their callers: never optimized or made into machine
code on their own.

Why: numba gives every compiled function a library of its own, optimizes it at -O3 and
emits its machine code. A caller then links in the optimized IR of every callee, runs -O3
over the whole again and emits it again: a helper three calls deep was optimized three
times and assembled four. A helper that only kernels call (``jit`` compiles those without
a Python entry point) never runs its own machine code, since its callers run their copy.
So its library here stops after numba's per-function passes: no module passes, no machine
code, nothing added to the process's JIT. The caller's one -O3 run sees the whole call
tree, which LLVM simplifies bottom-up before it inlines.

``KernelCompiler`` is numba's nopython pipeline plus one pass that gives such a helper
this library. In numba's cache the library is its IR (``KIND``, bitcode), which a caller
compiled in another process links as it would the optimized one. Three numba functions
learn about it: loading a cached library; making the Python-side function object of a
compiled one (these have no entry point); and setting a function's environment pointer,
which for these is in no JIT module (numba would write through address 0).
"""

from __future__ import annotations

from llvmlite import binding as ll
from numba import _dynfunc
from numba.core import codegen, cpu
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler import Compiler, DefaultPassBuilder
from numba.core.compiler_machinery import LoweringPass, register_pass
from numba.core.typed_passes import AnnotateTypes

KIND = "prep-linked-only-ir"


class LinkedOnlyLibrary(JITCodeLibrary):
    """A library whose code reaches machine code only inside its callers' libraries."""

    def _optimize_final_module(self):
        """Nothing: the caller optimizes the linked whole."""

    def _finalize_final_module(self):
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        return 0

    def serialize_using_object_code(self):
        """For numba's cache: the IR callers link (there is no object code)."""
        self._ensure_finalized()
        return (self.name, KIND, self._get_module_for_linking().as_bitcode())

    @classmethod
    def from_ir(cls, codegen_, name: str, bitcode: bytes) -> LinkedOnlyLibrary:
        library = cls(codegen_, name)
        library._final_module = ll.parse_bitcode(bitcode)
        library._finalize_final_module()
        return library


@register_pass(mutates_CFG=False, analysis_only=True)
class _LinkedOnlyForHelpers(LoweringPass):
    _name = "prep_linked_only_for_helpers"

    def __init__(self):  # numba declares a pass's __init__ abstract
        LoweringPass.__init__(self)

    def run_pass(self, state):
        if state.library is None and state.flags.no_cpython_wrapper:
            state.library = LinkedOnlyLibrary(state.targetctx.codegen(), state.func_id.func_qualname)
            state.library.enable_object_caching()
        return False


class KernelCompiler(Compiler):
    """numba's nopython pipeline; a helper without a Python entry point gets a ``LinkedOnlyLibrary``."""

    def define_pipelines(self):
        pipeline = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pipeline.add_pass_after(_LinkedOnlyForHelpers, AnnotateTypes)
        pipeline.finalize()
        return [pipeline]


def _teach_numba() -> None:
    unserialize = codegen.CPUCodeLibrary._unserialize.__func__
    get_executable = cpu.CPUContext.get_executable
    set_env = codegen.JITCPUCodegen.set_env

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        if kind == KIND:
            return LinkedOnlyLibrary.from_ir(codegen_, name, data)
        return unserialize(cls, codegen_, state)

    def _get_executable(self, library, fndesc, env):
        if not isinstance(library, LinkedOnlyLibrary):
            return get_executable(self, library, fndesc, env)
        name = fndesc.qualname.split(".")[-1]
        return _dynfunc.make_function(fndesc.lookup_module(), name, "linked only", 0, env, (library,))

    def _set_env(self, env_name, env):
        if self._engine.get_global_value_address(env_name):
            set_env(self, env_name, env)

    codegen.CPUCodeLibrary._unserialize = classmethod(_unserialize)
    cpu.CPUContext.get_executable = _get_executable
    codegen.JITCPUCodegen.set_env = _set_env


_teach_numba()
