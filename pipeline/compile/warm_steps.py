"""Warm-up steps as the kernels' own modules declare them, and the order a run takes them in.

Why declared: a cold kernel compiles in every worker that first calls it, each paying the
same tens of CPU-seconds, so a run compiles its kernels once per machine before its first
unit, the steps spread over the workers (``engine/warmup.py``). What to compile is known
where the kernels are: a module declares a step with ``@warms(stage, ...)`` when it is
imported, and the engine, having imported the stages, asks for the steps of each stage
its config names (``steps_for``). The stage contract knows nothing of compiling.

A step is a module-level function (picklable, it runs on a worker) that compiles or loads
kernels by calling them, or by typing a caller's source (``typing_only``). Its
declaration says:

- ``stage``: the name of the stage whose runs need it; ``EVERY_RUN`` for kernels every run
  takes whatever its stages (the engine's own, ``bytecode``).
- ``seconds``: the CPU-seconds it took on a cold cache, measured; the order ranks by it.
- ``after``: steps of the same stage whose kernels this one links, so it starts once those
  that the same use runs have ended and loads their kernels from the cache.
- ``uses(options, source, input_bytes)``: the step's arguments for one use of the stage (its
  options for one source, about how much text that source holds, 0 if unknown), or None
  where that use needs no such step: a rule set the source does not take, a kernel worth
  compiling only for a large input. Default: every use, no arguments. ``EVERY_RUN``
  steps are asked with ``(None, "", 0.0)``.

With a warm cache a step only loads its kernels: a fraction of a second, and none at all
once ``warm_marks`` vouches for it.

The order is list scheduling by critical path: a step waits only for its own ``after``
steps, not for a barrier across all of them, and the step with the longest chain of
steps waiting behind it starts first, so the chain that ends the warm-up is never the
one left waiting for a free worker. A step two uses share (the same picklable step: the
same function with the same arguments) runs once and gates what waits on it in both.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Step = Callable[[], object]
Use = list[tuple[Step, list[Step]]]  # steps of one use of a stage, each with those it waits for
EVERY_RUN = ""
DEFAULT_SECONDS = 1.0


@dataclass(frozen=True)
class _Declared:
    function: Callable
    after: tuple[Callable, ...]
    uses: Callable[[Any, str, float], tuple | None]


_DECLARED: dict[str, list[_Declared]] = {}


def _every_use(options: Any, source: str, input_bytes: float) -> tuple:
    return ()


def warms(
    stage: str,
    *,
    seconds: float,
    after: tuple[Callable, ...] = (),
    uses: Callable[[Any, str, float], tuple | None] = _every_use,
) -> Callable[[Callable], Callable]:
    """Declares the decorated function a warm-up step of ``stage`` (see the module)."""

    def declare(function: Callable) -> Callable:
        known = {declared.function for declared in _DECLARED.get(stage, [])}
        if not set(after) <= known:
            raise ValueError(f"warm-up step {function.__qualname__} waits for a step not declared before it")
        function.compile_seconds = seconds
        _DECLARED.setdefault(stage, []).append(_Declared(function, tuple(after), uses))
        return function

    return declare


def declared_stages() -> set[str]:
    """The stage names steps are declared for (``EVERY_RUN`` among them)."""
    return set(_DECLARED)


def steps_for(stage: str, options: Any, source: str, input_bytes: float) -> Use:
    """The steps one use of ``stage`` needs, in declaration order, each with the steps of
    this use it waits for: a function, or a ``functools.partial`` of it with its arguments."""
    made: dict[Callable, Step] = {}
    use: Use = []
    for declared in _DECLARED.get(stage, []):
        args = declared.uses(options, source, input_bytes)
        if args is None:
            continue
        step = made[declared.function] = functools.partial(declared.function, *args) if args else declared.function
        use.append((step, [made[before] for before in declared.after if before in made]))
    return use


def compile_seconds(step: Step) -> float:
    return getattr(getattr(step, "func", step), "compile_seconds", DEFAULT_SECONDS)


def plan(uses: list[Use]) -> tuple[list[Step], list[list[int]]]:
    """The distinct steps of ``uses`` in the order free workers take them, and for each the
    indices of the steps it waits for (all earlier in the list, so the list order is also a
    valid order for one worker)."""
    steps: list[Step] = []
    waits: list[set[int]] = []
    known: dict[bytes, int] = {}
    for use in uses:
        for step, before in use:
            i = _add(step, steps, waits, known)
            waits[i].update(_add(b, steps, waits, known) for b in before)
    rank = _critical_paths(steps, waits)
    order = sorted(range(len(steps)), key=lambda i: -rank[i])  # stable: ties keep the order added
    position = {i: k for k, i in enumerate(order)}
    return [steps[i] for i in order], [sorted(position[j] for j in waits[i]) for i in order]


def _add(step: Step, steps: list[Step], waits: list[set[int]], known: dict[bytes, int]) -> int:
    """Index of ``step`` among ``steps``, added if new."""
    key = pickle.dumps(step)
    if key not in known:
        known[key] = len(steps)
        steps.append(step)
        waits.append(set())
    return known[key]


def _critical_paths(steps: list[Step], waits: list[set[int]]) -> list[float]:
    """For each step, its seconds plus those of the longest chain of steps waiting on it.
    A step's path is longer than any of its waiters' (seconds are positive), so ordering
    by it never puts a step before one it waits for."""
    waiters: list[list[int]] = [[] for _ in steps]
    for i, before in enumerate(waits):
        for j in before:
            waiters[j].append(i)
    paths: dict[int, float] = {}
    open_: set[int] = set()

    def path(i: int) -> float:
        if i not in paths:
            if i in open_:
                raise ValueError(f"warm-up steps wait for each other in a circle: {steps[i]!r}")
            open_.add(i)
            after = max((path(j) for j in waiters[i]), default=0.0)
            paths[i] = max(compile_seconds(steps[i]), 1e-3) + after
        return paths[i]

    return [path(i) for i in range(len(steps))]
