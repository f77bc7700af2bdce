"""Compiling prep's kernels and starting the processes that run them: one room.

``jit``: prep's ``njit`` (cached, one specialization per real signature, no entry points
for code only jitted code calls), with what it changes in numba (``numba_setup``,
``linked_only``); ``typing_only``: compiling a kernel's callees by typing its source;
``numba_cache``: when numba's cache is stale (its key: every kernel source's contents)
and its clean-up; ``warm_steps``: the warm-up steps kernels' modules declare
(``@warms``) and the order a run takes them in; ``warm_marks``: which steps this
machine's cache already holds; ``bytecode``: prep's own modules compiled once per
install; ``preload``: a fork server made ready for its workers.

It imports only ``pipeline.util`` (numba itself only where a module compiles), so the
kernels, the readers, the stages and the engine can all import it.
"""
