"""Hostile input on the command line and in the folders commands read.

Numbers: every float option of every command refuses NaN and infinity by name (found by
walking the command tree, so a new option cannot escape), as do counts (``10B``), mix
weights and any float in a TOML config. Folders: a manifest, sidecar or index that is not
what its reader expects is one line naming the file and what is wrong.
"""

from __future__ import annotations

import json
import re

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from benchmarks.mix_stream import make_run
from pipeline.commands.main import main
from pipeline.commands.options import Count, Finite
from pipeline.engine.config import ConfigError, load_config
from pipeline.mix.build import plan_mixture
from pipeline.mix.inventory import MixError
from pipeline.mix.plan import parse_phase_weights, parse_tokens
from pipeline.util.printable import error_line
from tests.conftest import SAMPLE_CONFIG

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


def test_every_option_of_every_command_says_what_it_does():
    """`prep CMD --help` answers a user's question about each option: none is a bare name
    and a default (`prep mix --seed`, `prep ablate --device` were)."""
    from pipeline.commands.mix_search import mix_search  # `prep mix search`: not a click group

    commands = [*_commands(), (("mix", "search"), mix_search)]
    bare = [
        f"prep {' '.join(words)} {param.opts[0]}"
        for words, command in commands
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert bare == []


def test_prep_help_lists_every_command_in_a_whole_line():
    """`prep --help`, the first thing a user reads: no command's line is cut off with '...'."""
    listing = CliRunner().invoke(main, ["--help"]).output.split("Commands:")[1]
    assert "..." not in listing and len(listing.strip().splitlines()) == len(main.list_commands(click.Context(main)))


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


NO_FINITE_NUMBER = "is not a finite number"
BEYOND_64_BITS = "is beyond the 64-bit integers an option takes"


@pytest.mark.parametrize(
    "stage, where, refusal",
    [
        ('name = "length"\nmin_chars = 10\nmax_chars = nan', "stages[0].max_chars", NO_FINITE_NUMBER),
        ('name = "length"\nmin_chars = inf', "stages[0].min_chars", NO_FINITE_NUMBER),
        (
            'name = "length"\nmin_chars = 1\n[stages.per_source.web]\nmin_chars = -inf',
            "per_source.web.min_chars",
            NO_FINITE_NUMBER,
        ),
        ('name = "length"\nmin_chars = 1\nmax_chars = 100000000000000000000000', "stages[0].max_chars", BEYOND_64_BITS),
        ('name = "paragraph_dedup"\nmin_chars = 100000000000000000000', "stages[0].min_chars", BEYOND_64_BITS),
        (
            'name = "length"\n[stages.per_source.web]\nmin_chars = -9223372036854775809',
            "per_source.web.min_chars",
            BEYOND_64_BITS,
        ),
    ],
)
def test_a_config_refuses_numbers_no_option_takes_anywhere(tmp_path, stage, where, refusal):
    """NaN, infinity, and integers beyond 64 bits: the latter reached Arrow and numpy, and
    the run ended in a TypeError or OverflowError."""
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "x"}\n')
    config = tmp_path / "c.toml"
    config.write_text(f'[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\n{stage}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{where} {refusal}")):
        load_config(config)


# -- folders: record files checked where they enter -------------------------------------

MANIFEST = {
    "balance": {"input": 2, "output": 1, "rejected": 1},
    "sources": {"web": {"input": 2, "output": 1, "rejected": 1, "rejected_by": {"length:too-short": 1}}},
    "stages": {"length": {"rejected": {"too-short": 1}, "counters": {}, "by_source": {"web": {"rejected": 1}}}},
}


@pytest.mark.parametrize(
    "content, message",
    [
        (json.dumps([1, 2]), "manifest.json: the file is an array, expected an object"),
        (json.dumps({k: v for k, v in MANIFEST.items() if k != "balance"}), "manifest.json: balance is missing"),
        (json.dumps({**MANIFEST, "balance": {"input": "2", "output": 1, "rejected": 1}}), "balance.input is a string"),
        (json.dumps({**MANIFEST, "sources": {"web": {"input": 2}}}), "manifest.json: sources.web.output is missing"),
        (json.dumps({**MANIFEST, "stages": {"length": []}}), "stages.length is an array, expected an object"),
        ('{"balance": ', "manifest.json: not JSON (Expecting value at line 1 column 13)"),
        ("", "manifest.json: empty"),
        (b'{"config_file": "\xff"}', "manifest.json: not UTF-8 text (byte 0xff at offset 17)"),
        pytest.param(
            '{"tokens": ' + "9" * 5000 + "}",
            "manifest.json: not a record (a number too long to read)",
            id="long-number",
        ),
    ],
)
def test_report_on_a_damaged_manifest_is_one_line_naming_it(tmp_path, content, message):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "manifest.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"Error: {path}: ") and message in result.output, result.output


@pytest.mark.parametrize(
    "content, message",
    [
        ("[]", "mix.json: the file is an array, expected an object"),
        ('{"sources": {}}', "mix.json: tokens is missing"),
        ('{"tokens": 1.5, "sources": {}}', "mix.json: tokens is a number, expected a count"),
        ('{"tokens": -5, "sources": {}}', "mix.json: tokens is -5, expected a count"),
    ],
)
def test_estimate_on_a_damaged_mix_json_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "mix.json").write_text(content)
    result = CliRunner().invoke(main, ["estimate", str(tmp_path), "--params", "1B"])
    assert result.exit_code == 1 and result.output == f"Error: {tmp_path / 'mix.json'}: {message.split(': ', 1)[1]}\n"


@pytest.mark.parametrize(
    "columns",
    [{"id": [1], "stage": [2]}, {"id": ["a"], "stage": ["s"], "reason": [3], "detail": ["d"]}],
    ids=["no-reason", "reason-not-text"],
)
def test_rejects_on_a_parquet_file_of_another_kind_in_the_ledger_is_one_line(tmp_path, columns):
    """Arrow reads the columns a file has and drops the names it lacks: a foreign file in
    rejects/ ended prep rejects with KeyError: 'reason'."""
    foreign = tmp_path / "run" / "rejects" / "web" / "zz.parquet"
    foreign.parent.mkdir(parents=True)
    pq.write_table(pa.table(columns), foreign)
    for extra in ([], ["--stage", "length"]):
        result = CliRunner().invoke(main, ["rejects", str(tmp_path / "run"), *extra])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert result.output.startswith(f"Error: cannot read {foreign}: not a file prep wrote"), result.output


@pytest.mark.parametrize("folder, columns", [("docs", {"id": ["b"], "text": [5]}), ("rejects", {"id": ["b"]})])
def test_show_on_a_parquet_file_of_another_kind_in_a_run_is_one_line(tmp_path, folder, columns):
    """A text that is a number ended prep show with a TypeError, a ledger row without a
    stage with a KeyError."""
    foreign = tmp_path / "run" / folder / "web" / "zz.parquet"
    foreign.parent.mkdir(parents=True)
    pq.write_table(pa.table(columns), foreign)
    result = CliRunner().invoke(main, ["show", str(tmp_path / "run"), "b"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"Error: cannot read {foreign}: not a file prep wrote"), result.output


def test_report_on_a_parquet_file_of_another_kind_in_a_run_is_one_line(tmp_path):
    """Arrow's KeyError for a column the file lacks ended prep report with a traceback line."""
    run = make_run(tmp_path / "run", {"web": [np.full(20, 50)]})
    (run / "manifest.json").write_text(json.dumps(MANIFEST))
    foreign = run / "docs" / "web" / "00000-a.parquet"
    foreign.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "score": [1]}), foreign)
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output == f"Error: {foreign}: cannot read it (not a file prep wrote: no text column 'text')\n"


def test_a_damaged_parquet_file_in_a_run_is_named(tmp_path):
    """prep mix, prep report and prep tokenizer train name the file pyarrow cannot read."""
    run = make_run(tmp_path / "run", {"web": [np.full(20, 50)]})
    docs = next((run / "tokens" / "web").glob("*.docs.parquet"))
    docs.write_bytes(docs.read_bytes()[:40])
    result = CliRunner().invoke(main, ["mix", str(run), "--dry-run"])
    assert result.exit_code == 1 and result.output.startswith(f"Error: {docs}: cannot read it ("), result.output
    kept = run / "docs" / "web" / "00000-a.parquet"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"PAR1 cut short")
    (run / "manifest.json").write_text(json.dumps(MANIFEST))
    for words in (["report", str(run), "-o", str(tmp_path / "r.html")], ["tokenizer", "train", str(run)]):
        extra = ["--vocab-size", "300", "--out", str(tmp_path / "t.model")] if words[0] == "tokenizer" else []
        result = CliRunner().invoke(main, [*words, *extra])
        assert result.exit_code == 1 and result.output.startswith(f"Error: {kept}: cannot read it ("), result.output
        assert result.output.count("\n") == 1, result.output


def test_a_damaged_order_array_is_named(tmp_path):
    from benchmarks.mix_stream import make_mixture
    from pipeline.report.mixture import MixtureError, read_mixture

    mix = make_mixture(
        tmp_path, 5000, {"code": [np.full(40, 100)], "math": [np.full(40, 100)], "web": [np.full(90, 100)]}
    )
    order = mix / "order_document.npy"
    order.write_bytes(order.read_bytes()[:60])
    with pytest.raises(MixtureError, match=re.escape(f"{order}: not an order array of prep mix")):
        read_mixture(mix)


# -- dedup's index_from -------------------------------------------------------------------


def _dedup_error(tmp_path, index_from) -> str:
    """The one line `prep` prints when a run with ``index_from`` meets what it points at."""
    from test_dedup import make_units, run_stage

    from pipeline.commands.main import one_line
    from stages.dedup.stage import Dedup

    with pytest.raises(ValueError) as raised:
        run_stage(Dedup.Options(partitions=2, index_from=str(index_from)), make_units(["q"], ["x y z"], 1), tmp_path)
    return one_line(raised.value)


def test_index_from_a_folder_without_dedup_says_so(tmp_path):
    (tmp_path / "run").mkdir()
    line = _dedup_error(tmp_path / "work", tmp_path / "run")
    assert line == f"{tmp_path / 'run' / 'units.json'} is missing: dedup's finalize has not run in {tmp_path / 'run'}"


@pytest.mark.parametrize(
    "units_json, message",
    [
        ("[1, 2]", "units.json: the file is an array, expected an object"),
        ('{"config": {}}', "units.json: units is missing"),
        ('{"config": {}, "units": [{"source": "web"}]}', "units.json: units[0].unit is missing"),
        ('{"config": {}, "units": [', "units.json: not JSON"),
    ],
)
def test_index_from_a_damaged_units_json_names_it(tmp_path, units_json, message):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "units.json").write_text(units_json)
    assert _dedup_error(tmp_path / "work", tmp_path / "old").startswith(f"{tmp_path / 'old'}/{message}")


def test_index_from_a_truncated_band_index_names_it(tmp_path):
    from test_dedup import make_units, run_stage

    from stages.dedup.stage import Dedup

    run_stage(
        Dedup.Options(partitions=2), make_units(["a", "b"], ["one two three", "four five six"], 1), tmp_path / "old"
    )
    index = tmp_path / "old" / "reduce" / "p00001.index.npy"
    index.write_bytes(index.read_bytes()[:100])
    line = _dedup_error(tmp_path / "work", tmp_path / "old")
    assert line.startswith(f"{index}: not a dedup band index ("), line
    index.unlink()
    assert _dedup_error(tmp_path / "work2", tmp_path / "old") == f"{index} is missing: dedup's reduce has not run there"


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            FileNotFoundError("units.json is missing: dedup's finalize has not run"),
            "units.json is missing: dedup's finalize has not run",
        ),
        (FileNotFoundError("bucket/x.parquet"), "No such file or directory"),  # fsspec: the path alone
        (FileNotFoundError(2, "No such file or directory"), "No such file or directory"),
    ],
)
def test_a_missing_file_keeps_the_sentence_that_says_why(error, line):
    assert error_line(error) == line


def test_a_sample_seed_without_a_sample_is_refused_not_ignored(tmp_path):
    result = CliRunner().invoke(main, ["run", str(SAMPLE_CONFIG), "--out", str(tmp_path / "out"), "--sample-seed", "3"])
    assert result.exit_code == 2
    assert "--sample-seed picks the documents --sample keeps: give a --sample below 1" in result.output
    assert not (tmp_path / "out").exists()
