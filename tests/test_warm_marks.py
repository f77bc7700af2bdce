"""A warm-up whose every step left its mark on this machine is skipped; a changed kernel
source, a new step or another executor's workers run it again."""

from __future__ import annotations

import functools
import os

import pytest

from pipeline.compile import numba_cache, warm_marks
from pipeline.engine import warmup


class _Recorder:
    """An executor that runs nothing and remembers what it was given."""

    def __init__(self, same_machine: bool):
        self.same_machine = same_machine
        self.ran: list = []

    def run(self, tasks, bar, after=None):
        self.ran.append([args[0] for _, args in tasks])
        return [None] * len(tasks)


def _step(name):
    return functools.partial(str, name)


@pytest.fixture
def marks(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / numba_cache.MARKS


def _warm_up(monkeypatch, steps, executor):
    monkeypatch.setattr(warmup, "warmup_plan", lambda config, units, sizes: (steps, [[] for _ in steps]))
    warmup.warm_up(None, [], executor, "none", {})
    return executor.ran


def test_a_warm_up_every_step_of_which_is_marked_is_skipped(monkeypatch, marks):
    steps = [_step("a"), _step("b")]
    assert _warm_up(monkeypatch, steps, _Recorder(True)) == [steps]
    assert len(list(marks.iterdir())) == 2
    assert _warm_up(monkeypatch, steps, _Recorder(True)) == []
    more = [*steps, _step("c")]
    assert _warm_up(monkeypatch, more, _Recorder(True)) == [more]  # one new step: all run (the rest only load)


def test_workers_on_other_machines_always_warm_up(monkeypatch, marks):
    steps = [_step("a")]
    _warm_up(monkeypatch, steps, _Recorder(True))
    assert _warm_up(monkeypatch, steps, _Recorder(False)) == [steps]


def test_a_touched_kernel_source_or_another_numba_setting_unmarks_every_step(monkeypatch, marks):
    steps = [_step("a")]
    names = warm_marks.mark_names(steps)
    monkeypatch.setenv("NUMBA_OPT", "1")
    assert warm_marks.mark_names(steps) != names
    monkeypatch.delenv("NUMBA_OPT")
    source = numba_cache.kernel_sources()[0]
    stat = source.stat()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert warm_marks.mark_names(steps) != names
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert warm_marks.mark_names(steps) == names


def test_marks_go_with_the_caches_they_vouch_for(monkeypatch, marks, tmp_path):
    _warm_up(monkeypatch, [_step("a")], _Recorder(True))
    assert any(marks.iterdir())
    monkeypatch.setattr(numba_cache, "sources_digest", lambda files, root=numba_cache.ROOT: "changed")
    (tmp_path / "repo" / "pipeline").mkdir(parents=True)  # the stamp goes there, not into the repo
    monkeypatch.setattr(numba_cache, "kernel_sources", lambda root=None: [])
    assert numba_cache.clear_stale_caches(tmp_path / "repo")
    assert not any(marks.iterdir())


def test_an_unwritable_marks_folder_only_means_warming_up_each_time(monkeypatch, marks):
    marks.parent.mkdir(parents=True)
    marks.write_text("a file where the folder would go")
    steps = [_step("a")]
    assert _warm_up(monkeypatch, steps, _Recorder(True)) == [steps]
    assert _warm_up(monkeypatch, steps, _Recorder(True)) == [steps]
