"""Hostile configs and ``prep run`` arguments: each is refused before any work, in one
line naming the key and the config file, or handled sensibly; never a traceback, never a
user's file touched, never a run that reads its own output or files outside its folders.

Config loading alone where it can tell (fast); a run where only the run can.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.commands.main import main
from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline

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


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[sources.web]\npaths = ["a.jsonl"]\nformat = = "jsonl"\n',
            ": not valid TOML: Invalid value \\(at line 3, column 10\\)",
        ),
        ("", ": no \\[sources.<name>\\] table"),
        ('[sources."a/b"]\npaths = ["a.jsonl"]\n', ", line 1: source name 'a/b' is not allowed"),
        ('[sources.".."]\npaths = ["a.jsonl"]\n', ", line 1: source name '..' is not allowed"),
        ('[sources.".prep"]\npaths = ["a.jsonl"]\n', ", line 1: source name '.prep' is not allowed"),
        ('[sources."w b"]\npaths = ["a.jsonl"]\n', ", line 1: source name 'w b' is not allowed"),
        ('[sources."wéb"]\npaths = ["a.jsonl"]\n', ", line 1: source name 'wéb' is not allowed"),
        (
            '[sources.Web]\npaths = ["a.jsonl"]\n\n[sources.web]  # again\npaths = ["a.jsonl"]\n',
            ", line 4: sources 'Web' and 'web' differ only in case",
        ),
        ('[sources.web]\npaths = ["~/a.jsonl"]\n', ", line 1: .* matches no file .*; ~ is not expanded in a config"),
        ("[sources.web]\npaths = []\n", ", line 1: sources.web.paths must be a non-empty list"),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[sources.code]\npaths = ["none/*.jsonl"]\n',
            ", line 3: sources.code: 'none/\\*.jsonl' matches no file",
        ),
        ('[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "tokenise"\n', ", line 3: unknown stage"),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\n'
            '[[stages]]\nname = "length"\nmin_chars = "9"\n',
            ", line 5: stages\\[1\\] \\(length\\): min_chars = '9' is not a valid int",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "tokenize"\n[[stages]]\nname = "dedup"\n',
            ", line 3: stage 'tokenize' writes the final output and must be the last stage",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "tokenize"\nbos = {a = 1}\n',
            ", line 3: stages\\[0\\] \\(tokenize\\): bos = \\{'a': 1\\} is not a valid bool",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\nsources = [1]\n',
            ", line 3: stages\\[0\\] \\(length\\): sources must be a non-empty list",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\nsources = []\n',
            ", line 3: stages\\[0\\] \\(length\\): sources must be a non-empty list",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[sources.code]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\n'
            'sources = ["web"]\n[stages.per_source.code]\nmin_chars = 3\n',
            ", line 5: stages\\[0\\] \\(length\\): per_source.code is for a source the stage skips",
        ),
        (
            '[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\n'
            '[stages.per_source.web]\nsources = ["web"]\n',
            ", line 3: stages\\[0\\] \\(length\\): per_source.web.sources: sources is the stage's, not an option",
        ),
        ('[run]\nblock_bytes = 0\n[sources.web]\npaths = ["a.jsonl"]\n', ": \\[run\\] block_bytes must be a positive"),
        ("[sources.web]\npaths = ['a.jsonl']\n[[stages]]\nname = 'dedup'\nmin_similarity = nan\n", ": stages\\[0\\]"),
    ],
)
def test_a_bad_config_is_refused_naming_the_file_the_line_and_the_key(tmp_path, text, message):
    config = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"^{config}{message}"):
        load_config(config, tmp_path / "out")


def test_a_byte_order_mark_and_windows_line_ends_are_read_as_toml(tmp_path):
    """Notepad's UTF-8 starts with a BOM, which tomllib calls an "Invalid statement"."""
    text = '[sources.web]\r\npaths = ["a.jsonl"]\r\n[[stages]]\r\nname = "length"\r\nmin_chars = 3\r\n'
    config = write(tmp_path, "\ufeff" + text)
    loaded = load_config(config)
    assert loaded.stages[0].options == {"min_chars": 3}
    assert loaded.canonical() == load_config(write(tmp_path, text.replace("\r\n", "\n"), "plain.toml")).canonical()


def test_a_stage_repeated_with_the_same_options_counts_as_its_own(tmp_path):
    """Equal ``StageConfig``s were one to ``config.stages.index``: the repeat's counts went
    to the first, and the summary warned that the repeat "saw no documents"."""
    config = write(
        tmp_path, '[sources.web]\npaths = ["a.jsonl"]\n' + '[[stages]]\nname = "length"\nmin_chars = 3\n' * 2
    )
    manifest = run_pipeline(config, tmp_path / "out", quiet=True, workers=1)
    assert [manifest["stages"][label]["input"] for label in ("length#1", "length#2")] == [1, 1]


@pytest.mark.parametrize("out", ["", "a.jsonl", "run.toml", "dangling"])
def test_an_out_that_is_empty_a_file_or_a_dangling_link_is_refused_and_nothing_is_written(tmp_path, monkeypatch, out):
    """An input file or the config as --out was refused as "matches only a prep run's
    output"; an empty --out was the current folder; a dangling link "File exists"."""
    config = write(tmp_path, '[sources.web]\npaths = ["*.jsonl"]\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    before = sorted(tmp_path.iterdir())
    messages = {"": "--out is empty", "dangling": f"--out dangling is a link to {tmp_path / 'gone'}, which does not"}
    message = messages.get(out, f"--out {out} exists and is not a folder")
    with pytest.raises(ConfigError, match=f"^{message}"):
        run_pipeline(config, out, quiet=True, workers=1)
    assert sorted(tmp_path.iterdir()) == before
    assert (tmp_path / "a.jsonl").read_text() == DOC


@pytest.mark.parametrize(
    "flags, message",
    [
        (["-w", "0"], "'-w': 0 is not in the range x>=1"),
        (["-w", "-1"], "'-w': -1 is not in the range x>=1"),
        (["--sample", "0"], "'--sample': 0.0 is not in the range 0<x<=1"),
        (["--sample", "1.5"], "'--sample': 1.5 is not in the range 0<x<=1"),
        (["--sample", "nan"], "'--sample': nan is not a finite number"),
        (["--sample", "0.5", "--sample-seed", str(2**64)], f"'--sample-seed': {2**64} is not in the range"),
        (["--sample", "1", "--sample-seed", "5"], "give a --sample below 1"),
    ],
)
def test_bad_run_flags_are_one_line_before_any_work(tmp_path, flags, message):
    config = write(tmp_path, '[sources.web]\npaths = ["a.jsonl"]\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), *flags])
    assert result.exit_code == 2 and message in result.output.splitlines()[-1], result.output
    assert not (tmp_path / "out").exists()


def test_an_out_named_through_a_link_to_the_input_folder_is_never_an_input(tmp_path, monkeypatch):
    """The output's own Parquet files, matched by the source's ``**``, are left out
    however --out is spelt: through a link, the config in the current folder."""
    folder = tmp_path / "data"
    (folder / "out" / "docs" / "web").mkdir(parents=True)
    for path in (folder / "a.parquet", folder / "out" / "docs" / "web" / "00000.parquet"):
        pq.write_table(pa.table({"id": ["a"], "text": ["a document"]}), path)
    (tmp_path / "link").symlink_to(folder)
    write(folder, '[sources.web]\npaths = ["**/*.parquet"]\n')
    monkeypatch.chdir(folder)
    assert load_config("run.toml", tmp_path / "link" / "out").sources["web"].files == [Path("a.parquet")]
    with pytest.raises(ConfigError, match="'\\*\\*/\\*.parquet' matches only a prep run's output"):
        load_config("run.toml", tmp_path / "link")


def test_a_config_that_is_a_folder_is_one_line(tmp_path):
    (tmp_path / "run.toml").mkdir()
    with pytest.raises(ConfigError, match=f"^config file {tmp_path / 'run.toml'} is a folder"):
        load_config(tmp_path / "run.toml")


@pytest.mark.parametrize("tokenizer, vocab", [("gpt2", 50257), ("cl100k_base", 100277), ("o200k_base", 200019)])
def test_an_eos_past_the_vocabulary_is_refused_before_the_run_claims_its_folder(tmp_path, tokenizer, vocab):
    """It was refused by the stage's setup, after the run had recorded itself in --out:
    the corrected config was then refused there as "a different config" until --force."""
    stages = f'[[stages]]\nname = "tokenize"\ntokenizer = "{tokenizer}"\neos = {vocab}\n'
    config = write(tmp_path, f'[sources.web]\npaths = ["a.jsonl"]\n{stages}')
    with pytest.raises(ConfigError, match=rf"eos {vocab} is outside {tokenizer}'s vocabulary of {vocab}"):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert not (tmp_path / "out").exists()
    write(tmp_path, f'[sources.web]\npaths = ["a.jsonl"]\n{stages.replace(f"eos = {vocab}", f"eos = {vocab - 1}")}')
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
