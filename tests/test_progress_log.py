"""Progress in a log (stderr not a terminal): a line at most every ``LOG_INTERVAL``
seconds and the last line of each phase, never the same line twice, so a two-second run
does not print two dozen lines."""

from __future__ import annotations

import io

import pytest

from pipeline.engine import progress
from pipeline.engine.progress import LOG_INTERVAL, ProgressBar


class Clock:
    """``time.monotonic`` for the progress module, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    monkeypatch.setattr(ProgressBar, "last_log_line", float("-inf"))
    return clock


def test_a_short_phase_prints_its_last_line_once(clock):
    log = io.StringIO()
    bar = ProgressBar("dedup: units", 0, 1, stream=log)
    bar.unit_done()
    bar.close()
    assert log.getvalue().splitlines() == ["dedup: units: 100.0% | units 1/1 | 0 docs 0/s | 0.0 MB/s | ETA 0s"]


def test_a_long_phase_prints_a_line_an_interval_and_its_last(clock):
    log = io.StringIO()
    bar = ProgressBar("read + stages", 100, 100, stream=log)
    for _ in range(100):
        clock.now += 0.5  # 50 s in all: a line each LOG_INTERVAL, never more often
        bar.update(documents=1, nbytes=1)
        bar.unit_done()
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 50 / LOG_INTERVAL + 1  # at 5 s, 10 s, ... 50 s, and the last at close
    assert lines[-1].startswith("read + stages: 100.0% | units 100/100")
    assert len(set(lines)) == len(lines)


def test_short_steps_of_a_phase_stay_silent_in_a_log_until_an_interval_passed(clock):
    log = io.StringIO()
    for name in ("units", "components step 0", "labels", "members", "decide"):
        clock.now += 1.0
        bar = ProgressBar(f"dedup: {name}", 0, 2, stream=log, step=True)
        bar.unit_done()
        bar.unit_done()
        bar.close()
    assert log.getvalue() == ""  # no line came for 5 s only at the last step's end, < 5 s of its own
    clock.now += LOG_INTERVAL
    bar = ProgressBar("dedup: regroup", 0, 1, stream=log, step=True)
    clock.now += LOG_INTERVAL
    bar.unit_done()
    bar.close()
    assert log.getvalue().splitlines() == ["dedup: regroup: 100.0% | units 1/1 | 0 docs 0/s | 0.0 MB/s | ETA 0s"]


def test_a_phase_with_nothing_to_do_prints_nothing(clock):
    log = io.StringIO()
    bar = ProgressBar("dedup: map", 0, 0, stream=log)
    bar.close()
    assert log.getvalue() == ""
