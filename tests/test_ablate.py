"""`prep ablate`: a clean corpus beats its word-shuffled copy on held-out clean prose by more
than the seed noise; the ledger, resume, history and report; the pieces on small cases."""

from __future__ import annotations

import gzip
import json
import math
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from conftest import REPO, SHARED_DATA

from pipeline.ablate.data import AblationDataError, held_out, open_data
from pipeline.ablate.evalsets import Vocabulary, windows
from pipeline.ablate.evaltexts import EvalTextError, file_texts
from pipeline.ablate.groups import build_groups
from pipeline.ablate.health import HealthMonitor, NonFiniteLoss
from pipeline.ablate.model import document_mask
from pipeline.ablate.verdict import Comparison, compare
from pipeline.commands.main import main
from pipeline.engine.run import run_pipeline
from pipeline.formats.experiments import REQUIRED_FIELDS, SUFFIX, read_ledger
from pipeline.kernels.hashing import in_sample
from pipeline.loader import TokenDataset
from pipeline.text.tokenizers import load_tokenizer

WEB = Path("web", "web_gold.jsonl.gz")  # in the shared corpora
SPEECHES = Path("eval", "us_speeches.jsonl.gz")
DOCUMENTS = 300


def _prep_run(root: Path, name: str, docs: list[dict]) -> Path:
    (root / f"{name}.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    config = root / f"{name}.toml"
    config.write_text(f'[sources.web]\npaths = ["{name}.jsonl"]\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n')
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(root / name)])
    assert result.exit_code == 0, result.output
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two runs of the same real web pages (same ids): as they are, and with the words of
    each page shuffled (the vocabulary kept, the language destroyed)."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    root = tmp_path_factory.mktemp("ablate")
    docs = []
    with gzip.open(SHARED_DATA / WEB, "rt", encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            if len(doc["text"]) > 800:
                docs.append({"id": doc["id"], "text": doc["text"]})
            if len(docs) == DOCUMENTS:
                break
    rng = random.Random(0)

    def shuffled(text: str) -> str:
        words = text.split()
        rng.shuffle(words)
        return " ".join(words)

    return {
        "clean": _prep_run(root, "clean", docs),
        "shuffled": _prep_run(root, "shuffled", [{**doc, "text": shuffled(doc["text"])} for doc in docs]),
        "root": root,
    }


def _ablate(*args: str):
    return CliRunner().invoke(main, ["ablate", *args])


def test_clean_text_beats_shuffled_words_beyond_the_seed_noise(runs):
    out = runs["root"] / "ablation"
    args = [str(runs["clean"]), str(runs["shuffled"]), "--tokens", "96K", "--seeds", "2", "--out", str(out)]
    args += ["--eval", str(SHARED_DATA / SPEECHES), "--eval-tokens", "4096", "--eval-points", "2"]
    result = _ablate(*args)
    assert result.exit_code == 0, result.output
    assert "4 trained now" in result.output
    records = read_ledger(out / "ledger")
    assert len(records) == 4 and all(set(REQUIRED_FIELDS) <= set(record) for record in records)

    speeches = next(c for c in compare(records) if c.eval_set == "eval:us_speeches.jsonl.gz")
    assert (speeches.winner, speeches.loser, speeches.seeds) == ("clean", "shuffled", 2)
    assert speeches.level == "clear" and speeches.difference > 2 * speeches.spread, speeches.sentence()
    assert "on eval:us_speeches.jsonl.gz: clean beats shuffled by" in result.output
    assert "the seed spread" in result.output and "a real difference" in result.output

    by_key = {(r["data"]["name"], r["seed"]): r for r in records}
    # Same seed, same initialization: before any step both models score the same.
    for seed in (0, 1):
        start = [by_key[name, seed]["eval"]["eval:us_speeches.jsonl.gz"][0] for name in ("clean", "shuffled")]
        assert start[0] == start[1] and start[0][0] == 0
    assert (
        by_key["clean", 0]["eval"]["eval:us_speeches.jsonl.gz"][0]
        != by_key["clean", 1]["eval"]["eval:us_speeches.jsonl.gz"][0]
    )
    record = by_key["clean", 0]
    assert record["data"]["fingerprint"] != by_key["shuffled", 0]["data"]["fingerprint"]
    assert record["data"]["shares"] == {"web": 1.0} and record["data"]["kind"] == "run"
    assert record["model"]["vocab"]["remapped"] and record["model"]["vocab"]["model_size"] < 50257
    assert record["model"]["params"] > record["model"]["vocab"]["model_size"] * 128
    assert record["device"].startswith("cpu") and record["dtype"] == "fp32" and record["core_hours"] > 0
    assert record["tokens"] == 96_000 // (16 * 128) * 16 * 128 and record["steps"] == 46
    assert 0 <= record["data_wait_share"] < 1 and record["tokens_per_s"] > 0 and record["step_s"] > 0
    assert record["health"]["status"] == "ok" and record["health"]["loss_falling"]
    assert set(record["final"]) == {"held-out:clean", "held-out:shuffled", "eval:us_speeches.jsonl.gz"}
    assert [tokens for tokens, _ in record["eval"]["held-out:clean"]] == [0, 23 * 2048, 46 * 2048]
    projection = record["projection"]
    assert projection["target_tokens"] == record["data"]["tokens"] and projection["target_params"] == 1e9
    assert projection["device_hours_at_measured_rate"] > 0 and projection["formula"]["gpu_hours"] > 0

    # Resume: the same command trains nothing; a trial whose record is gone is trained again.
    again = _ablate(*args)
    assert again.exit_code == 0 and "0 trained now" in again.output
    assert read_ledger(out / "ledger") == records
    (out / "ledger" / f"{by_key['shuffled', 1]['trial']}{SUFFIX}").unlink()
    resumed = _ablate(*args)
    assert resumed.exit_code == 0 and "1 trained now" in resumed.output
    assert len(read_ledger(out / "ledger")) == 4

    history = _ablate("--history", str(out))
    assert history.exit_code == 0, history.output
    table = history.output.strip().splitlines()
    assert len(table) == 5 and table[0].startswith("date")
    assert [row.split()[3] for row in table[1:]].count("shuffled") == 2  # date, time, experiment, data
    page = runs["root"] / "ablation.html"
    assert CliRunner().invoke(main, ["report", str(out), "-o", str(page)]).exit_code == 0
    assert page.read_text().count("<svg") >= 4


def test_data_without_sidecar_is_refused(runs, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in (runs["clean"] / "tokens" / "web").glob("*"):
        if path.suffix in (".bin", ".idx"):
            shutil.copy(path, bare / path.name)
    with pytest.raises(AblationDataError, match="without a prep sidecar"):
        open_data(bare, "bare", 0.02)
    (tmp_path / "a").mkdir()
    result = _ablate(str(tmp_path / "a"), "--tokens", "10K", "--out", str(tmp_path / "b"))
    assert result.exit_code == 1 and "no token shards" in result.output


def _without(record: dict, *keys: str) -> dict:
    """``record`` without the value at the path ``keys``."""
    if len(keys) == 1:
        return {k: v for k, v in record.items() if k != keys[0]}
    return {**record, keys[0]: _without(record[keys[0]], *keys[1:])}


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda mix: "[" * 100_000, "mix.json: not a record (nested too deeply)"),
        (lambda mix: [], "mix.json: the file is an array, expected an object"),
        (lambda mix: _without(mix, "sources", "web", "tokens_used"), "mix.json: sources.web.tokens_used is missing"),
        (lambda mix: _without(mix, "order"), "mix.json: order is missing"),
    ],
)
def test_a_damaged_mix_json_is_one_line_naming_it(runs, tmp_path, damage, message):
    """Read bare, these were RecursionError, AttributeError and KeyError naming no file."""
    mix = tmp_path / "mix"
    result = CliRunner().invoke(main, ["mix", str(runs["clean"]), "--tokens", "10K", "--out", str(mix)])
    assert result.exit_code == 0, result.output
    damaged = damage(json.loads((mix / "mix.json").read_text()))
    (mix / "mix.json").write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
    with pytest.raises(AblationDataError, match=re.escape(message)):
        open_data(mix, "mix", 0.05)


def test_training_order_never_visits_a_held_out_document(runs, tmp_path):
    data = open_data(runs["clean"], "clean", 0.1, tmp_path / "cache")
    assert 0 < data.held_out.sum() < len(data.held_out)
    dataset = TokenDataset(data.path, 64, order=data.train_order(0, 10**6), cache_dir=data.corpus.cache_dir)
    order = np.asarray(dataset.stream.order)
    assert not data.held_out[order].any()
    assert set(order) == set(np.flatnonzero(~data.held_out))


def test_held_out_slice_depends_on_the_id_alone_and_not_on_the_sample():
    ids = pa.array([f"doc-{i}" for i in range(200_000)])
    sampled = ids.filter(pa.array(in_sample(ids, 0.05)))  # what prep run --sample 0.05 keeps
    share = held_out(sampled, 0.02).mean()
    assert 0.015 < share < 0.025  # not all of them: the held-out hash is salted apart from the sample's
    assert np.array_equal(held_out(ids, 0.02)[in_sample(ids, 0.05)], held_out(sampled, 0.02))


def test_a_sampled_runs_target_tokens_are_its_own_projection(tmp_path):
    """The full run's cost is projected from the tokens the sampled run projects for its
    whole input (per byte of input text), not from its tokens over the fraction, which
    was 31% low on the bundled sample; a run without that projection falls back to it."""
    out = tmp_path / "sampled"
    run_pipeline(REPO / "configs" / "sample.toml", out, workers=2, quiet=True, sample=0.2)
    data = open_data(out, "sampled", 0.05)
    projected = json.loads((out / "cost.json").read_text())["projection"]["output_tokens"]
    tokens, note = data.full_input()
    assert tokens == projected != int(data.tokens / 0.2)
    assert "projects" in note
    (out / "cost.json").unlink()
    assert open_data(out, "sampled", 0.05).full_input()[0] == int(data.tokens / 0.2)
    (out / "cost.json").write_text("[]")  # damaged: the same fallback
    assert open_data(out, "sampled", 0.05).full_input()[0] == int(data.tokens / 0.2)
    manifest = out / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "sample": "a fifth"}))
    with pytest.raises(AblationDataError, match=r"manifest\.json: sample is a string"):
        open_data(out, "sampled", 0.05)


def test_two_data_holding_out_the_same_documents_are_scored_on_one_set(runs, tmp_path):
    """A copy of a run holds out the same documents: its held-out set is the first's, scored
    once (the objective and the verdict would count it twice); a different run's is its own."""
    copy = tmp_path / "copy"
    shutil.copytree(runs["clean"], copy)
    datas = [open_data(path, name, 0.05) for path, name in ((runs["clean"], "clean"), (copy, "copy"))]
    datas.append(open_data(runs["shuffled"], "shuffled", 0.05))
    said: list[str] = []
    (group,) = build_groups(datas, [], [], 64, 4096, False, said.append)
    assert [s.name for s in group.sets] == ["held-out:clean", "held-out:shuffled"]
    assert said == ["held-out:copy holds the same documents as held-out:clean: scored once, as held-out:clean"]


def test_eval_windows_restart_positions_at_documents_and_windows():
    tokens = np.arange(100, 111)  # documents of 4, 3 and 4 tokens
    ev = windows("x", tokens, np.array([4, 3, 4]), seq_len=5)
    assert ev.inputs.tolist() == [[100, 101, 102, 103, 104], [105, 106, 107, 108, 109]]
    assert ev.labels.tolist() == [[101, 102, 103, 104, 105], [106, 107, 108, 109, 110]]
    assert ev.position_ids.tolist() == [[0, 1, 2, 3, 0], [0, 1, 0, 1, 2]]


def test_vocabulary_orders_the_occurring_ids_by_frequency():
    vocab = Vocabulary(10, np.array([7, 2, 5]))
    assert vocab.size == 3 and vocab.table[[7, 2, 5]].tolist() == [0, 1, 2]
    assert vocab.describe() == {"tokenizer_size": 10, "model_size": 3, "remapped": True}


def test_document_mask_is_causal_within_each_document():
    mask = document_mask(torch.tensor([[0, 1, 2, 0, 1]]))[0, 0].int().tolist()
    assert mask == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]


def test_health_flags_spikes_stops_on_nan_and_flags_data_wait():
    monitor = HealthMonitor()
    for step in range(1, 41):
        monitor.observe(step, step * 10, 5.0 - step * 0.01)
    monitor.observe(41, 410, 9.0)
    summary = monitor.summary(data_wait_share=0.08)
    assert summary["spike_count"] == 1 and summary["spikes"][0]["step"] == 41
    assert "1 loss spike: loss above" in summary["message"]  # it said "1 loss spike(s)"
    assert summary["data_wait_flagged"] and "waited for data 8.0%" in summary["message"]
    with pytest.raises(NonFiniteLoss, match="loss became nan at step 42"):
        monitor.observe(42, 420, math.nan)
    stopped = monitor.summary(0.0, stopped="loss became nan")
    assert stopped["status"] == "stopped" and stopped["message"].startswith("loss became nan")


def _record(name: str, seed: int, loss: float, status: str = "ok") -> dict:
    return {"data": {"name": name}, "seed": seed, "final": {"eval:x": loss}, "health": {"status": status}}


def test_verdict_weighs_differences_against_the_seed_spread():
    clear = compare([_record("a", 0, 3.00), _record("a", 1, 3.02), _record("b", 0, 3.20), _record("b", 1, 3.22)])
    assert clear[0].level == "clear" and clear[0].winner == "a"
    assert "a beats b on" not in clear[0].sentence() and "a beats b by 0.200 nats/token" in clear[0].sentence()
    noise = compare([_record("a", 0, 3.00), _record("a", 1, 3.10), _record("b", 0, 3.05), _record("b", 1, 3.08)])
    assert noise[0].level == "noise" and "do not differ beyond the noise" in noise[0].sentence()
    single = Comparison("eval:x", "a", "b", 0.1, None, 1)
    assert single.level == "unknown" and "--seeds 3" in single.sentence()
    stopped = compare([_record("a", 0, 1.0, status="stopped"), _record("b", 0, 3.0)])
    assert stopped == []  # a stopped trial is no evidence


def test_an_eval_file_with_broken_records_is_read_around_them_and_an_empty_one_refused(tmp_path):
    gpt2 = load_tokenizer("gpt2")
    path = tmp_path / "eval.jsonl"
    good = json.dumps({"text": "A sentence of clean prose for the evaluation set. " * 20})
    path.write_bytes(b"\n".join([good.encode(), b'{"text": "cut short', b"\xff\xfe not json", good.encode()]) + b"\n")
    texts = file_texts(path, gpt2, framing=1, max_tokens=10_000)
    assert len(texts.texts) == 2 and texts.skipped == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(EvalTextError, match="no readable text"):
        file_texts(empty, gpt2, framing=1, max_tokens=10_000)
