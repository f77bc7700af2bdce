"""Bits per byte in `prep ablate`: the byte count is the eval text's own UTF-8 bytes, checked
by hand on a tiny case, and DATA tokenized differently are compared on bits per byte of the
same text."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import REPO, SHARED_DATA

from pipeline.ablate.evalsets import pack, text_set
from pipeline.ablate.evaltexts import EvalTexts, choose
from pipeline.ablate.trial import evaluate
from pipeline.commands.main import main
from pipeline.formats.experiments import read_ledger
from pipeline.text.tokenizers import load_tokenizer

EOD = 7
MC_FIXTURE = REPO / "tests" / "data" / "multiple_choice.jsonl"
CHARS = {"h": 1, "é": 3}  # a one-token-per-character tokenizer for the hand computation


class CharTokenizer:
    def encode_batch(self, texts):
        ids = [CHARS[c] for text in texts for c in text]
        return np.array(ids, dtype=np.int64), np.array([len(text) for text in texts], dtype=np.int64)


class BitsModel(torch.nn.Module):
    """A fixed model: the probability of label id k is 2**-k, so it costs exactly k bits."""

    def label_log_probs(self, inputs, positions, labels):
        return -labels.float() * math.log(2)


def test_bits_per_byte_divide_the_text_tokens_bits_by_the_texts_utf8_bytes():
    meta = {"eod_id": EOD, "bos_id": None}
    eval_set = text_set(EvalTexts("eval:x", ["hé", "h"]), CharTokenizer(), meta, seq_len=4)
    # Labels: h é EOD h EOD, then 3 padding labels (the separator, EOD, again): 2 windows of 4.
    assert eval_set.labels.tolist() == [[1, 3, EOD, 1], [EOD, EOD, EOD, EOD]]
    assert eval_set.real.sum() == 5 and eval_set.text.sum() == 3 and eval_set.text_bytes == 4
    nats, bits_per_byte = evaluate(BitsModel(), eval_set, None, "cpu", torch.autocast("cpu", enabled=False))
    # By hand: the text's tokens cost 1 + 3 + 1 bits over "hé" (3 bytes: é is 2) + "h" (1 byte);
    # nats/token count every real label (EOD included) and no padding.
    assert math.isclose(bits_per_byte, (1 + 3 + 1) / (3 + 1), rel_tol=1e-6)  # float32 log-probs
    assert math.isclose(nats, (1 + 3 + EOD + 1 + EOD) * math.log(2) / 5, rel_tol=1e-6)
    # With a BOS before each document, the BOS labels are no text either: the same bits per byte.
    framed = text_set(EvalTexts("eval:x", ["hé", "h"]), CharTokenizer(), {**meta, "bos_id": 8}, seq_len=4)
    assert framed.labels[framed.real].tolist() == [8, 1, 3, EOD, 8, 1, EOD] and framed.text.sum() == 3
    _, again = evaluate(BitsModel(), framed, None, "cpu", torch.autocast("cpu", enabled=False))
    assert math.isclose(again, bits_per_byte, rel_tol=1e-6)


SENTENCEPIECE = SHARED_DATA and SHARED_DATA / "tokenizers" / "sentencepiece" / "mistral_v3_tokenizer.model"
TOKENIZERS = ["gpt2", "cl100k_base", "o200k_base", *([str(SENTENCEPIECE)] if SENTENCEPIECE else [])]


@pytest.mark.parametrize("spec", TOKENIZERS)
def test_bits_per_byte_have_the_same_denominator_whatever_the_tokenizer(spec):
    """Each tokenizer cuts the text its own way (byte-level BPE splits a CJK character into
    several tokens, SentencePiece falls back to byte pieces); the bytes stay the text's."""
    tok = load_tokenizer(spec)
    texts = ["café", "日本", "plain"]  # by hand: 4 + 1 (é is 2) = 5, 3 + 3 = 6, and 5 bytes
    eval_set = text_set(EvalTexts("eval:x", texts), tok, {"eod_id": EOD, "bos_id": None}, seq_len=4)
    assert eval_set.text_bytes == 5 + 6 + 5
    flat, _ = tok.encode_batch(texts)
    _, bits_per_byte = evaluate(BitsModel(), eval_set, None, "cpu", torch.autocast("cpu", enabled=False))
    # BitsModel makes token id k cost k bits: the text's tokens cost sum(ids) bits over 16 bytes.
    assert math.isclose(bits_per_byte, int(np.sum(flat)) / 16, rel_tol=1e-5)


def test_every_text_token_is_scored_once_and_a_token_set_has_no_bytes():
    gpt2 = load_tokenizer("gpt2")
    texts = ["naïve café au lait", "déjà vu, twice over", "plain words"]
    meta = {"eod_id": 50256, "bos_id": None}
    eval_set = text_set(EvalTexts("eval:x", texts), gpt2, meta, seq_len=5)
    _, counts = gpt2.encode_batch(texts)
    assert eval_set.text_bytes == sum(len(t.encode("utf-8")) for t in texts) == 52
    assert eval_set.text.sum() == sum(counts) and eval_set.tokens == sum(counts) + 3
    assert not (eval_set.text & ~eval_set.real).any() and eval_set.documents == 3
    assert (eval_set.labels[eval_set.text] != 50256).all()
    tokens_only = pack("held-out:x", np.array([5, 6, 9, 5, 9]), np.array([3, 2]), meta, seq_len=3)
    assert tokens_only.text is None and tokens_only.text_bytes is None and tokens_only.tokens == 5


def test_texts_are_chosen_whole_and_the_last_cut_at_a_space_to_fit():
    gpt2 = load_tokenizer("gpt2")
    texts = ["one two three four", "five six seven eight nine ten eleven twelve", "never reached"]
    chosen = choose("eval:x", iter(texts), gpt2, framing=1, max_tokens=12)
    assert chosen.texts[0] == texts[0] and texts[1].startswith(chosen.texts[1]) and len(chosen.texts) == 2
    _, counts = gpt2.encode_batch(chosen.texts)
    assert sum(counts) + 2 <= 12 and not chosen.texts[1].endswith(" ")


def _sample_run(root: Path, tokenizer: str) -> Path:
    config = root / f"{tokenizer}.toml"
    web = REPO / "data" / "sample" / "web"
    config.write_text(
        f'[sources.web]\npaths = ["{web}/*.json*.gz"]\n[[stages]]\nname = "tokenize"\ntokenizer = "{tokenizer}"\n'
    )
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(root / tokenizer)])
    assert result.exit_code == 0, result.output
    return root / tokenizer


def test_data_tokenized_differently_are_compared_on_bits_per_byte(tmp_path):
    gpt2, cl100k = _sample_run(tmp_path, "gpt2"), _sample_run(tmp_path, "cl100k_base")
    out = tmp_path / "ablation"
    args = [str(gpt2), str(cl100k), "--tokens", "16K", "--eval-tokens", "2048", "--eval-points", "1"]
    args += ["--held-out", "0.1", "--held-out-weight", "0.5", "--eval-mc", f"{MC_FIXTURE}:2", "--out", str(out)]
    result = CliRunner().invoke(main, ["ablate", *args])
    assert result.exit_code == 0, result.output
    assert "the DATA are tokenized differently (gpt2, cl100k_base): compared on bits per byte" in result.output
    assert "bits/byte" in result.output and "(mean final loss, nats/token)" in result.output
    assert "skipped multiple_choice.jsonl line 4: not JSON" in result.output
    records = {record["data"]["name"]: record for record in read_ledger(out / "ledger")}
    assert records["gpt2"]["data"]["tokenizer"] == "gpt2" and records["cl100k_base"]["model"]["vocab"]["remapped"]
    # The two runs kept the same documents: one held-out set, scored once (not twice).
    assert "held-out:cl100k_base holds the same documents as held-out:gpt2: scored once" in result.output
    sets = {"held-out:gpt2"}
    for record in records.values():
        assert set(record["final_bpb"]) == sets and all(0 < bpb < 10 for bpb in record["final_bpb"].values())
        assert set(record["final"]) == sets
        assert record["eval_sets"]["mc:multiple_choice.jsonl"]["questions"] == 6
        assert 0 <= record["final_mc"]["mc:multiple_choice.jsonl"]["accuracy"] <= 1
    # The same documents' text for both tokenizers: the same bytes, other token counts.
    by_tokenizer = [records[name]["eval_sets"]["held-out:gpt2"] for name in ("gpt2", "cl100k_base")]
    assert by_tokenizer[0]["text_bytes"] == by_tokenizer[1]["text_bytes"] > 0
    assert by_tokenizer[0]["documents"] == by_tokenizer[1]["documents"]
    assert by_tokenizer[0]["tokens"] != by_tokenizer[1]["tokens"]
    # The objective: held-out bits per byte at 0.5, the right answers' nats/char at 2.
    line = next(line for line in result.output.splitlines() if line.strip().startswith("objective:"))
    for name, record in records.items():
        mc = record["final_mc"]["mc:multiple_choice.jsonl"]["answer_nats_per_char"]
        expected = (0.5 * record["final_bpb"]["held-out:gpt2"] + 2 * mc) / 2.5
        assert f"{name} {expected:.3f}" in line, line
    assert "2 x mc:multiple_choice.jsonl" in line and "0.5 x held-out:gpt2" in line

    # A run whose kept documents lost a held-out one is refused, naming it; a DATA without
    # docs/ keeps no text: its held-out set is in tokens, its own tokenizer's models only.
    for path in (gpt2 / "docs" / "web").glob("*.parquet"):
        path.unlink()
    again = CliRunner().invoke(main, ["ablate", *args[:-1], str(tmp_path / "again")])
    assert again.exit_code == 1 and "is not in docs/" in again.output and "Traceback" not in again.output
    shutil.rmtree(gpt2 / "docs")
    tokens_only = CliRunner().invoke(main, ["ablate", *args[:-1], str(tmp_path / "tokens_only")])
    assert tokens_only.exit_code == 0, tokens_only.output
    assert "held-out:gpt2 keeps no text, so the cl100k_base models skip it" in tokens_only.output
    records = {record["data"]["name"]: record for record in read_ledger(tmp_path / "tokens_only" / "ledger")}
    assert "held-out:gpt2" in records["gpt2"]["final"] and "held-out:gpt2" not in records["gpt2"]["final_bpb"]
    assert "held-out:gpt2" not in records["cl100k_base"]["final"]
