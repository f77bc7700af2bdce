"""benchmarks.dolma's comparison on a tiny corpus, both sides run for real: needs dolma
1.2.1 in a venv of its own (see the benchmark's docstring), so it is slow and skipped
where no dolma executable is found."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from benchmarks import dolma_compare as cmp
from benchmarks.dolma import run_step

pytestmark = pytest.mark.slow
DOLMA = next((p for p in (shutil.which("dolma"), "/work/venvs/dolma/bin/dolma") if p and Path(p).is_file()), None)
SHARED_LINES = [
    "Subscribe to our newsletter for the latest updates and offers.",
    "All rights reserved by the owners of this small example site.",
]
EMAIL = "jane.doe@example.org"


def prose(rng: random.Random, lines: int) -> str:
    nouns = "river city garden teacher market letter window morning harbor engine forest story".split()
    verbs = "carries finds watches builds answers remembers follows opens".split()
    adjectives = "quiet bright old careful distant warm simple early".split()
    return "\n".join(
        f"The {rng.choice(adjectives)} {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} "
        f"of a {rng.choice(adjectives)} {rng.choice(nouns)} and {rng.choice(verbs)} with {rng.choice(nouns)} {k}."
        for k in range(lines)
    )


def records() -> dict[str, list[dict]]:
    """Texts without leading or trailing whitespace, as ``read_records`` writes them."""
    rng = random.Random(7)
    web = [prose(rng, 12) for _ in range(8)]
    web[0] += "\n" + "\n".join(SHARED_LINES)
    web[1] += "\n" + "\n".join(SHARED_LINES) + f"\nWrite to {EMAIL} for more."
    web[2] = "too short to keep"
    texts = {"web": web, "code": ["def f(x):\n    return x + 1"] * 4, "math": ["$1 + 1 = 2$ so the sum is two."] * 4}
    return {
        source: [{"id": f"{source}:{n}", "text": t, "source": source, "version": "v0"} for n, t in enumerate(rows)]
        for source, rows in texts.items()
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    if DOLMA is None:
        pytest.skip("no dolma executable (dolma on PATH or /work/venvs/dolma/bin/dolma); see benchmarks/dolma.py")
    folder = tmp_path_factory.mktemp("dolma") / "corpus"
    cmp.write_corpus(records(), folder)
    return folder


def step(name: str, corpus: Path, tmp_path: Path) -> Path:
    shutil.rmtree(corpus / "attributes", ignore_errors=True)
    texts = cmp.corpus_texts(corpus)
    result = run_step(name, DOLMA, corpus, tmp_path, 1, 1, cmp.hashed_paragraphs(texts))
    assert result["prep"]["wall"] > 0 and result["dolma"]["cpu"] >= 0
    return tmp_path


def test_tokens_are_identical(corpus, tmp_path):
    work = step("tokens", corpus, tmp_path)
    a = cmp.token_agreement(cmp.prep_tokens(work / "prep"), cmp.dolma_tokens(work / "dolma" / "tokens"))
    assert a["identical"] == a["documents"] == 16
    assert a["prep_tokens"] == a["dolma_tokens"] > 16


def test_dedupe_removes_the_same_shared_lines(corpus, tmp_path):
    work = step("dedupe", corpus, tmp_path)
    texts = cmp.corpus_texts(corpus)
    a = cmp.dedup_agreement(texts, cmp.prep_documents(work / "prep"), cmp.dolma_documents(work / "dolma" / "mixed"))
    # web:1's two shared lines, and the repeated code and math documents' lines after their first
    assert a["both"] >= len(SHARED_LINES) and a["prep_only"] == 0
    assert a["dolma_only"] == a["dolma_only_own_repeats"]  # the code documents' repeated lines inside "def f"
    assert a["dolma_false_positives"] == 0
    k, bits, rate = cmp.bloom_false_positive_rate(work / "dolma" / "bloom.bin", cmp.hashed_paragraphs(texts))
    assert k >= 1 and bits >= 8 and 0 <= rate < 1e-6


def test_quality_decisions_agree_on_clear_cases(corpus, tmp_path):
    work = step("quality", corpus, tmp_path)
    prep_kept = set(cmp.prep_documents(work / "prep"))
    dolma_kept = set(cmp.dolma_documents(work / "dolma" / "mixed"))
    assert "web:2" not in prep_kept and "web:2" not in dolma_kept  # four words
    assert {"web:3", "web:4"} <= prep_kept & dolma_kept  # varied prose
    a = cmp.decision_agreement(sorted(cmp.corpus_texts(corpus)), prep_kept, dolma_kept, {}, {})
    assert a["same"] == a["both_keep"] + a["both_drop"] and a["documents"] == 16


def test_pii_both_find_the_address(corpus, tmp_path):
    work = step("pii", corpus, tmp_path)
    from stages.pii import Pii

    texts = cmp.corpus_texts(corpus)
    stage = Pii(Pii.Options(types=["email", "phone", "ip"], code_sources=[], math_sources=[]))
    ours = dict(zip(texts, stage.find(list(texts.values()))))
    theirs = cmp.dolma_pii_spans(cmp.attributes(corpus / "attributes" / "pii"))
    table = cmp.pii_agreement(ours, theirs)
    assert table["email"]["prep"] == table["email"]["prep_matched"] == 1
    assert table["email"]["dolma_matched"] == table["email"]["dolma"] == 1
    assert "|||EMAIL_ADDRESS|||" in cmp.dolma_documents(work / "dolma" / "mixed")["web:1"]
