"""The walk of ``prep run`` from the command to the first Parquet written, as a reader
follows it, counted: its stops (each time the reading moves to another module) and how
many of them return to a module already left (issue 49 item 6: the flow should read top
to bottom with few returns).

How it is counted. The run is traced (``sys.setprofile``) in this process, one worker, so
the executor runs the tasks here, from the ``run`` command in ``pipeline/commands/main.py``
to the first ``ParquetSink.write`` (``pipeline/engine/sinks.py``). Only prep's own
functions count (``pipeline/``, ``stages/``); code run by an import does not. The spine is
the chain of calls that leads to that write (the stack at the write). A reader reads each
spine function, looks up each call it makes into another module (once per function
called, the first time) and goes on down the spine; the walk is that sequence of
modules. A stop is each change of module in it, a return a stop into a module the walk
has already left (coming back to the spine function after a look-up is not counted: it
is the same for every call). Side calls are not followed below their first level: what
a reader needs of ``load_config`` is what it returns, not how.

    PYTHONPATH=$PWD python benchmarks/run_walk.py [config] [--list]

``config``: default ``configs/sample.toml``; ``--list`` prints the walk.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
OWN = (str(ROOT / "pipeline") + "/", str(ROOT / "stages") + "/")
COMMAND = "pipeline/commands/main.py"  # its ``run``: where the walk starts


class Found(Exception):
    """The first Parquet write is reached: the trace stops there."""


def _module(code) -> str | None:
    name = code.co_filename
    if not name.startswith(OWN):
        return None
    return Path(name).relative_to(ROOT).as_posix()


def trace(config: Path, out: Path) -> tuple[list, dict]:
    """The spine (frames, outermost first) at the first Parquet write, and each spine
    frame's direct calls to prep functions, in order: frame id -> [(module, function)]."""
    from pipeline.commands.main import main

    calls: dict[int, list[tuple[str, str]]] = {}  # a frame's serial -> its calls
    serials: dict[int, int] = {}  # id of a live frame of prep's -> its serial (ids are reused)
    counter = itertools.count()
    started = [False]
    spine: list = []

    def own_caller(frame):
        frame = frame.f_back
        while frame is not None and _module(frame.f_code) is None:
            frame = frame.f_back
        return frame

    def profile(frame, event, arg):
        if event == "return":
            serials.pop(id(frame), None)
        if event != "call":
            return
        code = frame.f_code
        module = _module(code)
        if module is None or code.co_name == "<module>" or _importing(frame):
            return
        serials[id(frame)] = next(counter)
        if not started[0]:
            if (module, code.co_name) == (COMMAND, "run"):
                started[0] = True
            else:
                return
        caller = own_caller(frame)
        if caller is not None and id(caller) in serials:
            calls.setdefault(serials[id(caller)], []).append((module, code.co_qualname))
        if module == "pipeline/engine/sinks.py" and code.co_qualname == "ParquetSink.write":
            f = frame
            while f is not None:
                if _module(f.f_code) is not None and id(f) in serials:
                    spine.append((f, serials[id(f)]))
                f = f.f_back
            raise Found

    sys.setprofile(profile)
    try:
        CliRunner().invoke(main, ["run", str(config), "--out", str(out), "-w", "1", "-q"], catch_exceptions=True)
    finally:
        sys.setprofile(None)
    spine.reverse()
    top = next(i for i, (f, _) in enumerate(spine) if (_module(f.f_code), f.f_code.co_name) == (COMMAND, "run"))
    return spine[top:], calls


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_back is not None:
            return True
        frame = frame.f_back
    return False


def walk(spine: list, calls: dict) -> list[tuple[str, str, str]]:
    """The reader's walk: (module, function, how it is reached: spine / call)."""
    steps = []
    for k, (frame, serial) in enumerate(spine):
        module, name = _module(frame.f_code), frame.f_code.co_qualname
        steps.append((module, name, "spine"))
        following = spine[k + 1][0] if k + 1 < len(spine) else None
        nxt = (_module(following.f_code), following.f_code.co_qualname) if following is not None else None
        seen = set()
        for callee in calls.get(serial, []):
            if callee == nxt:
                break  # the spine goes on there
            if callee in seen or callee[0] == module:
                continue
            seen.add(callee)
            steps.append((*callee, "call"))
    return steps


def count(steps: list[tuple[str, str, str]]) -> tuple[int, int]:
    stops = returns = 0
    visited: set[str] = set()
    current = None
    for module, _, _ in steps:
        if module != current:
            stops += 1
            returns += module in visited
            visited.add(module)
            current = module
    return stops, returns


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    config = Path(args[0]) if args else ROOT / "configs" / "sample.toml"
    folder = Path(tempfile.mkdtemp(prefix="run_walk-"))
    try:
        spine, calls = trace(config.resolve(), folder / "out")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    steps = walk(spine, calls)
    if "--list" in sys.argv:
        current = None
        for module, name, how in steps:
            print(f"{how:5}  {module}: {name}" if module != current else f"       {'':{len(module)}}  {name}")
            current = module
    stops, returns = count(steps)
    print(f"{stops} stops, {returns} returns to a module already left; spine of {len(spine)} calls")


if __name__ == "__main__":
    main()
