"""Hostile configs and ``prep run`` arguments: each is refused before any work, in one
line naming the key and the config file, or handled sensibly; never a traceback, never a
user's file touched, never a run that reads its own output or files outside its folders.

Config loading alone where it can tell (fast); a run where only the run can.
"""

from __future__ import annotations

from pipeline.engine.config import load_config

DOC = '{"id": "a", "text": "a document of a few words"}\n'


def write(folder, text: str, name: str = "run.toml"):
    (folder / "a.jsonl").write_text(DOC)
    config = folder / name
    config.write_text(text, encoding="utf-8")
    return config


def test_a_leading_wildcard_in_a_config_of_the_current_folder_stays_in_that_folder(tmp_path, monkeypatch):
    """``prep run run.toml`` with ``**/*.jsonl``: the walk started at "/", and the run read
    every .jsonl file on the machine."""
    folder = tmp_path / "here"
    folder.mkdir()
    (tmp_path / "outside.jsonl").write_text(DOC)
    (folder / "sub").mkdir()
    (folder / "sub" / "b.jsonl").write_text(DOC)
    write(folder, '[sources.web]\npaths = ["**/*.jsonl"]\n[sources.top]\npaths = ["*/**/*.jsonl"]\n')
    monkeypatch.chdir(folder)
    config = load_config("run.toml")
    assert [str(f) for f in config.sources["web"].files] == ["a.jsonl", "sub/b.jsonl"]
    assert [str(f) for f in config.sources["top"].files] == ["sub/b.jsonl"]
