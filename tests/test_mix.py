"""`prep mix`: shares per window, determinism, curriculum order, budgets and errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import remove_shards

from benchmarks.mix_stream import SIDECAR, make_run
from pipeline.commands.main import main
from pipeline.formats.token_shards import (
    docs_path,
    list_shards,
)
from pipeline.kernels.hashing import hash_strings
from pipeline.kernels.mixing import splitmix64
from pipeline.mix.build import plan_mixture
from pipeline.mix.inventory import MixError
from pipeline.mix.order import seeded_hash, window_shares
from pipeline.mix.output import plan_table
from pipeline.mix.plan import parse_tokens
from pipeline.stage import UnitContext


@pytest.fixture
def three_sources(tmp_path):
    rng = np.random.default_rng(1)
    return make_run(
        tmp_path / "run",
        {
            "web": [rng.integers(200, 3000, 4000), rng.integers(200, 3000, 3000)],
            "code": [rng.integers(100, 4000, 2500)],
            "math": [rng.integers(50, 800, 3000)],
        },
    )


def test_shares_hold_in_every_window(three_sources):
    description, order = plan_mixture([three_sources], {"code": 0.25, "math": 0.08}, budget="20M")
    assert description["tokens"] == pytest.approx(20_000_000, rel=1e-3)
    shares = window_shares(order, 1_000_000)
    targets = {"code": 0.25, "math": 0.08}
    targets["web"] = 1 - sum(targets.values())
    for index, name in enumerate(order.sources):
        worst = np.abs(shares[:, index] - targets[name]).max()
        assert worst < 0.01, f"{name}: off by {worst:.4f} in some 1M-token window"
    # Up-sampling: math has ~1.3M tokens and must supply 1.6M.
    math = description["sources"]["math"]
    assert math["epochs"] > 1 and abs(math["tokens_used"] - math["tokens_target"]) <= 800


def test_a_loader_cache_beside_the_shards_is_no_source(three_sources):
    """Reading a run with the loader leaves tokens/.loader_cache; a mixture made after
    that is the one made before (it once planned a `.loader_cache` source, and training
    on the mixture failed on it)."""
    _, before = plan_mixture([three_sources], {"code": 0.3}, budget="5M")
    cache = three_sources / "tokens" / ".loader_cache"
    cache.mkdir()
    (cache / "index.npy").write_bytes(b"")
    description, after = plan_mixture([three_sources], {"code": 0.3}, budget="5M")
    assert sorted(description["sources"]) == ["code", "math", "web"]
    assert np.array_equal(before.document, after.document) and np.array_equal(before.source, after.source)


def test_deterministic_and_seed_dependent(three_sources):
    _, first = plan_mixture([three_sources], {"code": 0.3}, budget="5M", seed=7)
    _, again = plan_mixture([three_sources], {"code": 0.3}, budget="5M", seed=7)
    _, other = plan_mixture([three_sources], {"code": 0.3}, budget="5M", seed=8)
    assert np.array_equal(first.document, again.document) and np.array_equal(first.source, again.source)
    assert not np.array_equal(first.document, other.document)


def test_any_int_seed_orders_and_one_in_range_is_unchanged(three_sources):
    """A negative seed, or one past uint64, once stopped prep mix with an OverflowError."""
    orders = {seed: plan_mixture([three_sources], {"code": 0.3}, budget="5M", seed=seed)[1] for seed in (-1, 2**70, 5)}
    assert not np.array_equal(orders[-1].document, orders[5].document)
    assert not np.array_equal(orders[2**70].document, orders[5].document)
    salt = splitmix64(np.array([5 * 1_000_003 + 2], dtype=np.uint64))[0]  # the salt before the fix
    ids = np.arange(10, dtype=np.uint64)
    assert np.array_equal(seeded_hash(ids, 5, 2), splitmix64(ids ^ salt))


def test_downsampling_does_not_depend_on_file_order(tmp_path):
    """The same documents split into shards differently are picked the same way."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(100, 1000, 3000)
    one = make_run(tmp_path / "one", {"web": [lengths]})
    two = make_run(tmp_path / "two", {"web": [lengths[:1000], lengths[1000:]]})
    # Rename the second run's ids to match the first (same documents, other files).
    for k, prefix in enumerate(sorted((two / "tokens" / "web").glob("*.docs.parquet"))):
        table = pq.read_table(prefix)
        offset = 0 if k == 0 else 1000
        ids = [f"web-0-{offset + i}" for i in range(table.num_rows)]
        pq.write_table(table.set_column(0, "id", pa.array(ids)), prefix)
    _, a = plan_mixture([one], {}, budget=int(lengths.sum() * 0.4))
    _, b = plan_mixture([two], {}, budget=int(lengths.sum() * 0.4))
    assert sorted(a.document.tolist()) == sorted(b.document.tolist())


def test_curriculum_orders_within_each_source_across_phases(three_sources):
    description, order = plan_mixture([three_sources], {"code": 0.2}, budget="8M", curriculum="length", phases=4)
    for index, name in enumerate(order.sources):
        lengths = order.tokens[order.source == index]
        assert np.all(np.diff(lengths) >= 0), name  # one pass: easy (short) to hard (long)
    ends = [p["end"] for p in description["phases"]]
    assert ends == sorted(ends) and ends[-1] == len(order.source)


def test_the_plan_table_says_one_phase_or_several(three_sources):
    """It said "1 phase(s)" whatever the count."""
    one, _ = plan_mixture([three_sources], {}, budget="8M")
    two, _ = plan_mixture([three_sources], {}, budget="8M", phases=2)
    assert ", 1 phase, curriculum none" in plan_table(one) and ", 2 phases, curriculum none" in plan_table(two)


def test_phase_weights_change_the_mixture(three_sources):
    description, order = plan_mixture(
        [three_sources], {}, budget="8M", phase_weights="code=0.1,math=0.05;code=0.4,math=0.3"
    )
    phases = description["phases"]
    for phase, (code, math) in zip(phases, [(0.1, 0.05), (0.4, 0.3)]):
        part = slice(phase["start"], phase["end"])
        tokens, sources = order.tokens[part], order.source[part]
        share = {name: tokens[sources == i].sum() / tokens.sum() for i, name in enumerate(order.sources)}
        assert share["code"] == pytest.approx(code, abs=0.005) and share["math"] == pytest.approx(math, abs=0.005)


def test_quality_curriculum_uses_the_score_column(three_sources):
    _, order = plan_mixture([three_sources], {}, budget="3M", curriculum="quality")
    assert len(order.source)
    with pytest.raises(MixError, match="no numeric column 'qualty'.*did you mean 'quality_score'"):
        plan_mixture([three_sources], {}, budget="3M", curriculum="qualty")


def test_quality_curriculum_without_a_classifier_score_says_which_stage_adds_it(three_sources):
    """The quality stage's rules add gq_* signals, not a score: --curriculum quality needs a
    classify model named quality (its quality_score column), and the error says so."""
    for docs in (three_sources / "tokens").rglob("*.docs.parquet"):
        table = pq.read_table(docs)
        names = ["gq_words" if name == "quality_score" else name for name in table.column_names]
        pq.write_table(table.rename_columns(names), docs)
    with pytest.raises(MixError, match="classify stage with a model named 'quality'") as error:
        plan_mixture([three_sources], {}, budget="3M", curriculum="quality")
    assert "run the quality stage" not in str(error.value)


def tokenized_run(root: Path) -> Path:
    """A run folder written by the tokenize stage itself, after a classify stage: float32
    ``quality_score`` and ``lang_score`` columns, a unit whose documents were all dropped
    before tokenize (an empty shard, its docs file without those columns), and a source
    classify skipped (null scores)."""
    from stages.tokenize import Tokenize

    stage, rng = Tokenize(Tokenize.Options(tokenizer="gpt2")), np.random.default_rng(11)
    units = {"web": {"a": 0, "b": 60, "c": 40}, "code": {"a": 30}}
    for source, sizes in units.items():
        for unit, n in sizes.items():
            ctx = UnitContext(out_dir=root, source=source, unit=unit)
            stage.open_unit(ctx)
            if n:  # the runner calls process only while documents are left
                scores = {name: pa.array(rng.random(n), pa.float32()) for name in ("quality", "lang")}
                if source == "code":
                    scores = {name: pa.nulls(n, pa.float32()) for name in scores}
                batch = pa.RecordBatch.from_pydict(
                    {
                        "id": [f"{source}-{unit}-{i}" for i in range(n)],
                        "text": [" ".join(["word"] * int(rng.integers(1, 40))) for _ in range(n)],
                        "source": [source] * n,
                        "quality_score": scores["quality"],
                        "lang_score": scores["lang"],
                        "_line": list(range(n)),
                    }
                )
                stage.process(batch, source)
            stage.close_unit(ctx)
            for tmp, final in ctx.pending.items():
                os.replace(tmp, final)
    return root


def source_column(run: Path, source: str, name: str) -> np.ndarray:
    """A column of a source's documents in the order prep mix numbers them (shards by name)."""
    parts = [pq.read_table(docs_path(p)) for p in list_shards(run / "tokens" / source)]
    return np.concatenate([t.column(name).to_numpy(zero_copy_only=False) for t in parts if t.num_rows])


def test_a_classifier_score_orders_each_source(tmp_path):
    run = tokenized_run(tmp_path / "run")
    schema = pq.read_schema(docs_path(run / "tokens" / "web" / "b"))
    assert schema.field("quality_score").type == pa.float32() == schema.field("lang_score").type
    assert "quality_score" not in pq.read_schema(docs_path(run / "tokens" / "web" / "a")).names  # empty shard
    web = {name: source_column(run, "web", name) for name in ("quality_score", "lang_score")}
    for curriculum, column, sign in (("lang_score", "lang_score", 1), ("quality", "quality_score", -1)):
        description, order = plan_mixture([run], {}, curriculum=curriculum)
        index = order.sources.index("web")
        documents = order.document[order.source == index]
        assert sorted(documents.tolist()) == list(range(100))  # one whole pass over web's documents
        assert np.all(np.diff(sign * web[column][documents]) >= 0), curriculum  # ascending; quality: best first
        assert description["curriculum"] == curriculum
        # code's scores are null (skipped by classify): it is mixed in, in hash order.
        assert (order.source == order.sources.index("code")).sum() == 30
    unknown = r"no numeric column 'lang_scor'.*did you mean 'lang_score'.*has: .*quality_score"
    with pytest.raises(MixError, match=unknown):
        plan_mixture([run], {}, curriculum="lang_scor")
    result = CliRunner().invoke(main, ["mix", str(run), "--curriculum", "lang_scor", "--dry-run"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: ") and "did you mean 'lang_score'" in result.output
    result = CliRunner().invoke(main, ["mix", str(run), "--curriculum", "quality_score", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m" / "mix.json").read_text())["curriculum"] == "quality_score"


@pytest.mark.parametrize(
    "weights, options, message",
    [
        ({"code": 0.7, "math": 0.5}, {}, "sum to 1.2, above 1"),
        ({"code": -0.1}, {}, "negative"),
        ({"cdoe": 0.1}, {}, "unknown source 'cdoe'; did you mean 'code'"),
        ({"math": 0.9}, {"budget": "100M"}, "repeated .* times \\(over --max-epochs 4\\)"),
        ({"code": 0.5, "math": 0.3, "web": 0.1}, {}, "no other source with tokens is left"),
        ({}, {"rest": "wbe"}, "--rest: unknown source 'wbe'"),
        ({}, {"phases": 100_000_000}, "--phases 100000000: at most 10,000"),  # once never ended
    ],
)
def test_clear_errors(three_sources, weights, options, message):
    with pytest.raises(MixError, match=message):
        plan_mixture([three_sources], weights, **options)


def test_a_weight_of_one_and_a_source_without_tokens(tmp_path):
    run = make_run(
        tmp_path / "run", {"web": [np.full(100, 500)], "code": [np.full(100, 300)], "math": [np.zeros(5, np.int64)]}
    )
    description, order = plan_mixture([run], {"code": 1.0})
    assert set(order.source.tolist()) == {order.sources.index("code")}
    assert description["sources"]["web"]["tokens_used"] == 0
    with pytest.raises(MixError, match="'math' has weight .* but no tokens"):
        plan_mixture([run], {"math": 0.1})


def test_runs_without_any_token_say_so(tmp_path):
    """It said "weights sum to 0 and no other source with tokens is left", as if a weight
    were missing (a --sample too small keeps no document)."""
    run = make_run(tmp_path / "run", {"web": [np.zeros(5, np.int64)]})
    with pytest.raises(MixError, match="no tokens in any source"):
        plan_mixture([run], {})


def test_a_run_given_twice_is_refused_not_counted_twice(three_sources):
    """`prep mix out/a out/a/` counted every shard twice: twice the tokens available, so
    a source could be repeated twice --max-epochs while the table printed half."""
    for again in (three_sources, Path(f"{three_sources}/")):
        with pytest.raises(MixError, match=r"/tokens/code/\S+: reached twice \(first as .*\): give each run once"):
            plan_mixture([three_sources, again], {"code": 0.25}, budget="5M")


def test_shards_of_different_tokenizers_are_refused(tmp_path):
    run = make_run(tmp_path / "a", {"web": [np.full(10, 50)]})
    make_run(run, {"code": [np.full(10, 50)]}, sidecar={**SIDECAR, "vocab_sha256": "0" * 64, "tokenizer": "o200k_base"})
    with pytest.raises(ValueError, match="different tokenizers"):
        plan_mixture([run], {})


def test_cli_dry_run_writes_nothing_and_real_run_writes_order(three_sources, tmp_path):
    out = tmp_path / "mix"
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["mix", str(three_sources), "--code", "0.25", "--math=0.08", "--tokens", "2M", "--out", str(out), "--dry-run"],
    )
    assert result.exit_code == 0, result.output
    assert "code" in result.output and "epochs" in result.output and not out.exists()
    result = runner.invoke(main, ["mix", str(three_sources), "--code", "0.25", "--tokens", "2M", "--out", str(out)])
    assert result.exit_code == 0, result.output
    description = json.loads((out / "mix.json").read_text())
    assert np.load(out / "order_source.npy").shape == (description["positions"],)
    assert description["sources"]["code"]["weights"] == [0.25]
    result = runner.invoke(main, ["mix", str(three_sources), "--cod", "0.25", "--dry-run"])
    assert result.exit_code != 0 and "did you mean 'code'" in result.output


def test_parse_tokens():
    assert parse_tokens("10B") == 10**10 and parse_tokens("2.5M") == 2_500_000 and parse_tokens("7k") == 7000
    with pytest.raises(MixError):
        parse_tokens("ten")


def test_hash_strings_is_stable_and_sliced_correctly():
    strings = pa.array(["a", "bb", None, "ccc"])
    full = hash_strings(strings)
    assert np.array_equal(hash_strings(strings.slice(1, 3)), full[1:])
    assert full[0] == np.uint64(0xAF63DC4C8601EC8C)  # FNV-1a 64 of "a"


def test_force_replaces_only_the_mixtures_own_files_and_a_users_file_is_never_written_over(three_sources, tmp_path):
    """--force removed the whole --out folder, the user's files in it too; and a folder
    without mix.json had its order_source.npy written over."""
    out = tmp_path / "mix"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    (out / "order_source.npy").write_text("the user's too")
    args = ["mix", str(three_sources), "--tokens", "2M", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "order_source.npy is there but" in result.output, result.output
    assert (out / "order_source.npy").read_text() == "the user's too"
    (out / "order_source.npy").unlink()
    assert CliRunner().invoke(main, args).exit_code == 0
    (out / ".loader_cache").mkdir()  # what the loader leaves
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "already holds a mixture; use --force" in result.output
    result = CliRunner().invoke(main, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["mix.json", "notes.txt", "order_document.npy", "order_source.npy"]


def test_a_mix_stopped_before_its_mix_json_is_replaced_by_the_next(three_sources, tmp_path, monkeypatch):
    """Killed after its order arrays and before mix.json, prep mix left files that every
    later prep mix there refused as possibly the user's, --force included: the only way on
    was to delete them by hand. Its writing mark now says whose they are."""
    import pipeline.mix.output as output

    out = tmp_path / "mix"
    args = ["mix", str(three_sources), "--tokens", "2M", "--out", str(out)]
    save = output.save_npy_atomic

    def killed_after_the_first_array(path, array):
        save(path, array)
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "save_npy_atomic", killed_after_the_first_array)
    CliRunner().invoke(main, args)
    monkeypatch.undo()
    assert (out / "order_source.npy").exists() and not (out / "mix.json").exists()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["mix.json", "order_document.npy", "order_source.npy"]


def test_a_run_that_has_not_finished_is_refused(three_sources):
    """A run killed part-way holds the shards of the units it finished: prep mix planned
    over them without a word, a mixture of part of each source. A run's record without its
    manifest (written last) is a run not finished."""
    from pipeline.formats.layout import Layout

    layout = Layout(three_sources)
    layout.state.parent.mkdir(parents=True, exist_ok=True)
    layout.state.write_text("{}")
    args = ["mix", str(three_sources), "--tokens", "2M", "--dry-run"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "is a prep run that has not finished" in result.output, result.output
    layout.manifest.write_text("{}")
    assert CliRunner().invoke(main, args).exit_code == 0


@pytest.mark.parametrize("removed", ["one shard", "the source's folder"])
def test_a_finished_run_missing_shards_its_manifest_counts_is_refused(three_sources, removed):
    """A source whose shards were removed after the run (or its whole tokens/<source>/) was
    left out of the mixture without a word, its share going to the others."""
    from pipeline.formats.layout import Layout

    counts = {"web": 7000, "code": 2500, "math": 3000}
    manifest = {"stages": {"tokenize": {"by_source": {s: {"output": n} for s, n in counts.items()}}}}
    Layout(three_sources).manifest.write_text(json.dumps(manifest))
    args = ["mix", str(three_sources), "--tokens", "2M", "--dry-run"]
    assert CliRunner().invoke(main, args).exit_code == 0
    web = three_sources / "tokens" / "web"
    remove_shards(web, removed)
    result = CliRunner().invoke(main, args)
    held = 3000 if removed == "one shard" else 0
    assert result.exit_code == 1 and result.output == (
        f"Error: {web}: its shards hold {held:,} documents, but {Layout(three_sources).manifest} counts 7,000 "
        "tokenized: shards removed or replaced since the run finished; run its config into it again "
        "(prep run says whether it can redo them alone), then mix\n"
    ), result.output
