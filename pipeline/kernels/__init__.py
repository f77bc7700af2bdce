"""Low-level helpers shared by the numba stages and the engine: one owner each.

``buffers``: Arrow string arrays <-> (UTF-8 bytes, int64 offsets); ``utf8``: stepping
through those bytes by code point inside numba; ``mixing``: the 64-bit hash
primitives (SplitMix64 finaliser, FNV-1a). Before, each stage kept its own copy, and
copies drift; a change to one of these changes every hash or signal built on it.

Nothing here imports the engine (``pipeline.engine.run``, ``unit``, ``config``...), so a stage
can import it without pulling the engine in; only numpy, numba, pyarrow and
``pipeline.compile`` (prep's ``njit``, and the cache clean-up that keeps these helpers
honest inside their callers' cached code).
"""
