"""Planning over many small files asks the file system a few questions a file, and
resolves each folder once: a resume of a finished run is all planning, and at 100,000
files each file's four resolves and eight ``not_a_file`` checks (23 stat calls a file)
were most of it."""

from __future__ import annotations

import builtins
import os
from collections import Counter

from pipeline.engine.config import load_config
from pipeline.engine.run import _input_sizes, _planned_units


def _config(tmp_path, files: int):
    folder = tmp_path / f"in{files}"
    folder.mkdir()
    for i in range(files):
        (folder / f"part-{i:05d}.jsonl").write_text(f'{{"id": "{i}", "text": "document {i}"}}\n')
    config = tmp_path / f"c{files}.toml"
    config.write_text(f'[sources.web]\npaths = ["{folder}/*.jsonl"]\n[[stages]]\nname = "normalize"\n')
    return config


def _planning_calls(tmp_path, monkeypatch, files: int) -> Counter:
    """How often planning ``files`` files (listing, versions, units, sizes) stats a path
    and resolves one."""
    config = _config(tmp_path, files)
    calls: Counter = Counter()

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    for name in ("stat", "lstat"):
        monkeypatch.setattr(os, name, counted(name, getattr(os, name)))
    monkeypatch.setattr(builtins, "open", counted("open", builtins.open))
    monkeypatch.setattr(os.path, "realpath", counted("realpath", os.path.realpath))
    units = _planned_units(load_config(config))
    _input_sizes(units)
    monkeypatch.undo()
    assert sum(len(u.files) for u in units) == files
    return calls


def test_planning_resolves_each_folder_once_not_each_file(tmp_path, monkeypatch):
    _planning_calls(tmp_path, monkeypatch, 1)  # the stages' modules, which resolve their own files, imported
    few = _planning_calls(tmp_path, monkeypatch, 20)
    many = _planning_calls(tmp_path, monkeypatch, 200)
    assert many["realpath"] == few["realpath"], (few, many)


def test_planning_stats_a_small_file_twice(tmp_path, monkeypatch):
    _planning_calls(tmp_path, monkeypatch, 1)  # the stages' modules, which stat their own files, imported
    few = _planning_calls(tmp_path, monkeypatch, 20)
    many = _planning_calls(tmp_path, monkeypatch, 200)
    per_file = (many["stat"] + many["lstat"] - few["stat"] - few["lstat"]) / 180
    # listing: one lstat tells a regular file and its real path (a stat asking whether it
    # was a folder made it two); planning: its version, from one lstat
    assert per_file <= 2, (few, many)


def test_planning_opens_no_small_file(tmp_path, monkeypatch):
    """Ranking units by size reads a gzip file's trailer, but a pack's files are not
    opened: at 10,000 files that was 10,000 opens in the driver's planning."""
    few = _planning_calls(tmp_path, monkeypatch, 20)
    many = _planning_calls(tmp_path, monkeypatch, 200)
    assert many["open"] == few["open"], (few, many)
