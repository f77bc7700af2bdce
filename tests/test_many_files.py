"""Runs over many input files: what a task carries does not grow with the number of files.

Each task used to carry the whole config, input list included, so every worker unpickled
every input path once per unit, and a run's time grew as the number of files squared
(1,000 one-line files: 6.6 s; 4,000: 59.6 s)."""

from __future__ import annotations

import pickle

from pipeline.engine import run as run_module
from pipeline.engine.executor import LocalExecutor
from pipeline.engine.run import run_pipeline


class RecordingExecutor(LocalExecutor):
    """A one-process executor that keeps the pickled size of every task it is given."""

    sizes: list[int] = []

    def run(self, tasks, bar, after=None):
        RecordingExecutor.sizes += [len(pickle.dumps(args)) for _, args in tasks]
        return super().run(tasks, bar, after)


def _largest_task(tmp_path, files: int, monkeypatch) -> int:
    folder = tmp_path / f"in{files}"
    folder.mkdir()
    for i in range(files):
        (folder / f"part-{i:05d}.jsonl").write_text(f'{{"id": "{i}", "text": "document number {i}"}}\n')
    config = tmp_path / f"c{files}.toml"
    config.write_text(f'[sources.web]\npaths = ["{folder}/*.jsonl"]\n[[stages]]\nname = "normalize"\n')
    RecordingExecutor.sizes = []
    monkeypatch.setattr(run_module, "_executor", lambda name, address, workers: RecordingExecutor(1))
    manifest = run_pipeline(config, tmp_path / f"out{files}", workers=1, quiet=True)
    assert manifest["balance"]["input"] == files
    return max(RecordingExecutor.sizes)


def test_a_task_carries_the_same_bytes_for_ten_files_or_four_hundred(tmp_path, monkeypatch):
    few = _largest_task(tmp_path, 10, monkeypatch)
    many = _largest_task(tmp_path, 400, monkeypatch)
    assert many < few + 200, (few, many)  # the file's own name and number, not the list
