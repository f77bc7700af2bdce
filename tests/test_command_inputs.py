"""Hostile input on the command line and in the folders commands read.

Numbers: every float option of every command refuses NaN and infinity by name (found by
walking the command tree, so a new option cannot escape), as do counts (``10B``), mix
weights and any float in a TOML config. Folders: a manifest, sidecar or index that is not
what its reader expects is one line naming the file and what is wrong.
"""

from __future__ import annotations

import re

import click
import numpy as np
import pytest
from click.testing import CliRunner

from benchmarks.mix_stream import make_run
from pipeline.commands.main import main
from pipeline.commands.options import Count, Finite
from pipeline.engine.config import ConfigError, load_config
from pipeline.mix.build import plan_mixture
from pipeline.mix.inventory import MixError
from pipeline.mix.plan import parse_phase_weights, parse_tokens

NOT_FINITE = ["nan", "inf", "-inf", "1e999", "NaN"]


def _commands(group: click.Group = main, path: tuple[str, ...] = ()):
    """(command line words, command) for every command under ``group``, lazy ones included."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _number_options(kind: type) -> list[tuple[tuple[str, ...], str]]:
    return [
        (words, param.opts[0])
        for words, command in _commands()
        for param in command.params
        if isinstance(param, click.Option) and isinstance(param.type, kind)
    ]


FLOAT_OPTIONS = _number_options(click.types.FloatParamType)
COUNT_OPTIONS = _number_options(Count)


def test_the_walk_finds_the_options_of_every_command():
    """The parametrized tests below cannot pass by finding nothing."""
    found = {(" ".join(words), option) for words, option in FLOAT_OPTIONS + COUNT_OPTIONS}
    assert {("mix", "--max-epochs"), ("run", "--sample"), ("estimate", "--peak-flops")} <= found
    assert {("ablate", "--held-out"), ("tokenizer train", "--sample"), ("classifier train", "--lr")} <= found
    assert {("mix", "--tokens"), ("estimate", "--params"), ("ablate", "--target-params")} <= found


@pytest.mark.parametrize("words, option", FLOAT_OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_every_float_option_is_finite(words, option):
    command = dict(_commands())[words]
    param = next(p for p in command.params if option in p.opts)
    assert isinstance(param.type, Finite), f"prep {' '.join(words)} {option}: use pipeline.commands.options.Finite"
    for value in NOT_FINITE:
        result = CliRunner().invoke(main, [*words, option, value])
        assert result.exit_code == 2, (value, result.output)
        assert f"'{option}': {value} is not a finite number" in result.output, result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("words, option", COUNT_OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_every_count_option_refuses_what_is_not_a_count(words, option):
    for value in [*NOT_FINITE, "0", "-5", "0.1", "1e-9", "ten"]:
        result = CliRunner().invoke(main, [*words, option, value])
        assert result.exit_code == 2, (value, result.output)
        assert f"Invalid value for '{option}': '{value}'" in result.output, result.output


def test_counts_take_suffixes_and_exponents():
    assert parse_tokens("7e9") == 7_000_000_000 and parse_tokens("2.5M") == 2_500_000 and parse_tokens("1E3K") == 10**6
    for text in ["nan", "inf", "1e999", "0", "0.4"]:
        with pytest.raises(MixError, match="count"):
            parse_tokens(text)


@pytest.mark.parametrize("value", NOT_FINITE)
def test_mix_weights_refuse_nan_and_infinity_by_name(tmp_path, value):
    number = repr(float(value))  # 1e999 is infinity
    result = CliRunner().invoke(main, ["mix", str(tmp_path), "--code", value, "--dry-run"])
    assert result.exit_code == 1 and result.output == f"Error: --code: {number} is not a finite number\n"
    result = CliRunner().invoke(main, ["mix", str(tmp_path), f"--code={value}", "--dry-run"])
    assert result.output == f"Error: --code: {number} is not a finite number\n"
    with pytest.raises(MixError, match=f"--phase-weights math: {number} is not a finite number"):
        parse_phase_weights(f"code=0.1,math={value}")


def test_the_mix_library_refuses_what_the_command_line_would(tmp_path):
    """Library callers hand numbers, not text: the planner checks them itself."""
    run = make_run(tmp_path / "run", {"web": [np.full(50, 100)], "code": [np.full(50, 100)]})
    with pytest.raises(MixError, match="--max-epochs: nan is not a finite number"):
        plan_mixture([run], {"code": 0.5}, max_epochs=float("nan"))
    with pytest.raises(MixError, match="--max-epochs: 0 must be above 0"):
        plan_mixture([run], {"code": 0.5}, max_epochs=0.0)
    with pytest.raises(MixError, match="weight of 'code': nan is not a finite number"):
        plan_mixture([run], {"code": float("nan")})
    with pytest.raises(MixError, match="--phase-weights web: inf is not a finite number"):
        plan_mixture([run], {}, phase_weights="code=0.5;web=inf")
    with pytest.raises(MixError, match="--tokens 'nan': expected"):
        plan_mixture([run], {}, budget="nan")


@pytest.mark.parametrize(
    "option, where",
    [
        ("min_chars = 10\nmax_chars = nan", "stages[0].max_chars"),
        ("min_chars = inf", "stages[0].min_chars"),
        ("min_chars = 1\n[stages.per_source.web]\nmin_chars = -inf", "stages[0].per_source.web.min_chars"),
    ],
)
def test_a_config_refuses_nan_and_infinity_anywhere(tmp_path, option, where):
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "x"}\n')
    config = tmp_path / "c.toml"
    config.write_text(f'[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "length"\n{option}\n')
    with pytest.raises(ConfigError, match=re.escape(f"c.toml: {where} is not a finite number")):
        load_config(config)
