"""What the local executor's fork server imports for its workers (``executor.PRELOAD``):
the modules of every phase's task functions and every stage, through
``compile/preload.py``, which says why and readies the process around them."""

from __future__ import annotations

from pipeline.compile.preload import preload


def _imports() -> None:
    import pipeline.engine.global_run
    import pipeline.engine.unit
    import pipeline.engine.warmup  # noqa: F401
    from pipeline.engine.stage_registry import registry

    registry()  # every stage's module (and with it the warm-up steps they declare)


preload(_imports)
