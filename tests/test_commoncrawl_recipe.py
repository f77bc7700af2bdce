"""configs/commoncrawl.toml end to end on the real WARC files (../shared/data/warc): every
record read and either a page or counted by kind, every page extracted, FineWeb's chain
run with each stage's removals in the manifest and the ledger, tokens written; and the
README's table of what each step removed is what the run measures."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tomllib
from conftest import REPO, SHARED_DATA
from warcio.archiveiterator import ArchiveIterator

from pipeline.engine.run import run_pipeline
from pipeline.formats.indexed_shard import IndexedShard

CONFIG = REPO / "configs" / "commoncrawl.toml"
CHAIN = ["extract", "normalize", "langid", "quality", "pii", "dedup", "paragraph_dedup", "tokenize"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path]:
    """The recipe as it ships, its one uncommented ``paths`` pointed at the shared WARCs."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    folder = tmp_path_factory.mktemp("commoncrawl")
    text, count = re.subn(r"(?m)^paths = \[.*\]$", f'paths = ["{SHARED_DATA}/warc/*.warc.gz"]', CONFIG.read_text())
    assert count == 1, "configs/commoncrawl.toml should have one source with one paths line"
    (folder / "commoncrawl.toml").write_text(text)
    return run_pipeline(folder / "commoncrawl.toml", folder / "out", workers=2, quiet=True), folder / "out"


def warc_record_kinds() -> dict[str, int]:
    """Every record of the shared files by WARC-Type, as warcio reads them."""
    kinds: dict[str, int] = {}
    for path in sorted((SHARED_DATA / "warc").glob("*.warc.gz")):
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                kinds[record.rec_type] = kinds.get(record.rec_type, 0) + 1
    return kinds


def test_the_shipped_paths_name_the_warcs_beside_the_repo():
    """Relative to configs/, as every config's paths are: ../shared/data/warc next to the repo."""
    paths = tomllib.loads(CONFIG.read_text())["sources"]["web"]["paths"]
    assert len(paths) == 1
    assert (CONFIG.parent / paths[0]).resolve() == (REPO.parent / "shared" / "data" / "warc" / "*.warc.gz").resolve()


def test_every_record_is_a_page_or_counted_by_kind(run):
    manifest, _ = run
    kinds = warc_record_kinds()
    pages = manifest["balance"]["input"]
    assert pages == kinds["response"] > 0  # every response of the shared files is an HTML page
    assert manifest["skipped"] == {f"warc:{kind}": n for kind, n in kinds.items() if kind != "response"}
    assert manifest["bad_input"] == {}  # nothing in the shared files is damaged


def test_the_chain_runs_in_order_and_balances_stage_by_stage(run):
    manifest, out = run
    balance, stages = manifest["balance"], manifest["stages"]
    assert list(stages) == CHAIN
    assert balance["input"] == balance["output"] + balance["rejected"] and balance["output"] > 0
    flowing = balance["input"]
    for name in CHAIN:
        stage = stages[name]
        assert stage["input"] == flowing, name
        assert stage["input"] == stage["output"] + sum(stage["rejected"].values()), name
        flowing = stage["output"]
    assert flowing == balance["output"]
    ledger = pq.read_table(out / "rejects").select(["stage", "reason"]).to_pylist()
    by_stage: dict[str, dict[str, int]] = {name: {} for name in CHAIN}
    for row in ledger:
        by_stage[row["stage"]][row["reason"]] = by_stage[row["stage"]].get(row["reason"], 0) + 1
    assert by_stage == {name: stages[name]["rejected"] for name in CHAIN}
    assert sum(stages["quality"]["rejected"].values()) > 0  # real pages fail real rules


def test_extract_kept_the_pages_with_their_main_text(run):
    manifest, out = run
    extract = manifest["stages"]["extract"]
    docs = pq.read_table(out / "docs").to_pylist()
    assert extract["output"] > 0 and extract["counters"]["extract.resiliparse"] == extract["output"]
    assert all(doc["text"].strip() and doc["extractor"] == "resiliparse" for doc in docs)
    assert "html" not in docs[0]  # the bytes leave after extraction (keep_html is off)
    assert sum(1 for doc in docs if doc["title"]) >= len(docs) // 2
    assert all(doc["url"].startswith("https://") and doc["lang"] == "en" for doc in docs)


def test_the_tokens_are_the_kept_documents(run):
    manifest, out = run
    (idx,) = sorted((out / "tokens" / "web").glob("*.idx"))
    shard = IndexedShard(idx.with_suffix(""), verify=True)
    assert shard.num_documents == manifest["balance"]["output"]
    assert shard.num_tokens == manifest["stages"]["tokenize"]["counters"]["tokens"] > 0


def readme_section() -> str:
    readme = (REPO / "README.md").read_text()
    return readme.split("### Start from Common Crawl", 1)[1].split("\n## ", 1)[0]


def readme_table() -> dict[str, tuple[int, int, int, dict[str, int]]]:
    """README's "Start from Common Crawl" table: step -> (in, removed, kept, removed for)."""
    rows = {}
    for line in readme_section().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(",", "").isdigit():
            reasons = dict(re.findall(r"([\w:.-]+) ([\d,]+)", cells[4]))
            rows[cells[0].strip("`")] = (
                *(int(cell.replace(",", "")) for cell in cells[1:4]),
                {reason: int(n.replace(",", "")) for reason, n in reasons.items()},
            )
    return rows


def test_the_readme_table_is_what_the_run_measures(run):
    manifest, _ = run
    stages, skipped = manifest["stages"], manifest["skipped"]
    records = manifest["balance"]["input"] + sum(skipped.values())
    measured = {"read": (records, sum(skipped.values()), manifest["balance"]["input"], skipped)}
    for name in CHAIN:
        stage = stages[name]
        measured[name] = (stage["input"], sum(stage["rejected"].values()), stage["output"], stage["rejected"])
    assert readme_table() == measured
    prose = " ".join(readme_section().split())
    charsets = stages["extract"]["counters"]
    http, meta = charsets["extract.charset_http"], charsets["extract.charset_meta"]
    assert f"header for {http}, from `<meta>` for {meta}:" in prose
    assert f"kept are {stages['tokenize']['counters']['tokens']:,} cl100k_base tokens" in prose
