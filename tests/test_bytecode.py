"""The warm-up writes prep's bytecode where Python would not (PYTHONDONTWRITEBYTECODE), once,
and again only for what changed; a folder it cannot write is skipped without a word."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from pipeline.compile.bytecode import compile_bytecode, sources_stamp


def _package(root: Path) -> list[Path]:
    (root / "pkg" / "sub").mkdir(parents=True)
    modules = [root / "pkg" / "__init__.py", root / "pkg" / "a.py", root / "pkg" / "sub" / "b.py"]
    for i, path in enumerate(modules):
        path.write_text(f"VALUE = {i}\n")
    return modules


def _bytecode(path: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(path)))


def test_every_module_gets_bytecode_that_python_then_loads(tmp_path):
    modules = _package(tmp_path)
    compile_bytecode(sources_stamp(tmp_path, ("pkg",)), tmp_path, ("pkg",))
    assert all(_bytecode(path).is_file() for path in modules)
    # A fresh interpreter told not to write bytecode imports from these files: with the
    # sources gone, only the bytecode can answer.
    for path in modules:
        path.rename(path.with_suffix(".bak"))
    for path in modules:
        _bytecode(path).rename(path.with_suffix(".pyc"))  # sourceless bytecode sits beside where the source was
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", "import pkg.a, pkg.sub.b; print(pkg.a.VALUE, pkg.sub.b.VALUE)"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.stdout.split() == ["1", "2"], done.stderr


def test_current_bytecode_is_kept_and_an_edit_is_compiled_again_under_a_new_stamp(tmp_path):
    modules = _package(tmp_path)
    stamp = sources_stamp(tmp_path, ("pkg",))
    compile_bytecode(stamp, tmp_path, ("pkg",))
    before = {path: _bytecode(path).stat().st_mtime_ns for path in modules}
    compile_bytecode(stamp, tmp_path, ("pkg",))
    assert {path: _bytecode(path).stat().st_mtime_ns for path in modules} == before

    edited = modules[1]
    edited.write_text("VALUE = 'edited, longer'\n")
    later = edited.stat().st_mtime + 2  # bytecode records its source's time in whole seconds
    os.utime(edited, (later, later))
    assert sources_stamp(tmp_path, ("pkg",)) != stamp  # another warm-up mark: the step runs again
    compile_bytecode(sources_stamp(tmp_path, ("pkg",)), tmp_path, ("pkg",))
    assert _bytecode(edited).stat().st_mtime_ns != before[edited]
    assert all(_bytecode(path).stat().st_mtime_ns == before[path] for path in modules if path != edited)


def test_a_folder_that_cannot_hold_bytecode_is_skipped_quietly(tmp_path, capsys):
    modules = _package(tmp_path)
    (tmp_path / "pkg" / "sub" / "__pycache__").write_text("a file where the cache folder would go")
    compile_bytecode(sources_stamp(tmp_path, ("pkg",)), tmp_path, ("pkg",))
    assert _bytecode(modules[0]).is_file() and _bytecode(modules[1]).is_file()
    assert capsys.readouterr() == ("", "")
