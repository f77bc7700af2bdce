"""A config the run refuses is refused before the run claims --out.

A tokenizer the tokenize stage cannot load was once found only after the run had written
its record into --out (``.prep/run.json``), so the same command with the tokenizer
corrected was refused as "a different config" until --force.
"""

from __future__ import annotations

import os

import pytest

from pipeline.engine.config import ConfigError
from pipeline.engine.run import run_pipeline


def write_run(tmp_path, tokenizer: str):
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "a document of a few words"}\n')
    config = tmp_path / "run.toml"
    config.write_text(f'[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "tokenize"\ntokenizer = "{tokenizer}"\n')
    return config


@pytest.mark.parametrize(
    "tokenizer, message",
    [
        ("cl100k", "unknown tokenizer 'cl100k'"),
        ("{dir}/missing.tiktoken", "tokenizer file '{dir}/missing.tiktoken' does not exist"),
        ("{dir}/junk.tiktoken", "not a .tiktoken rank file"),
        ("{dir}/fifo.tiktoken", "tokenizer file '{dir}/fifo.tiktoken' is not a regular file"),
    ],
)
def test_a_tokenizer_that_cannot_load_is_refused_before_out_is_claimed(tmp_path, tokenizer, message):
    (tmp_path / "junk.tiktoken").write_bytes(b"garbage\x00\xff\n")
    os.mkfifo(tmp_path / "fifo.tiktoken")
    out = tmp_path / "out"
    config = write_run(tmp_path, tokenizer.format(dir=tmp_path))
    with pytest.raises(ConfigError, match="stages\\[0\\] \\(tokenize\\): " + message.format(dir=tmp_path)):
        run_pipeline(config, out, quiet=True, workers=1)
    assert not out.exists()
    run_pipeline(write_run(tmp_path, "gpt2"), out, quiet=True, workers=1)  # the corrected config, same --out
    assert (out / "manifest.json").exists()
