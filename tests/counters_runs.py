"""The configs whose runs ``test_counters_agree.py`` reads against their ledgers, written
for the bundled sample (and the shared WARC files for ``configs/commoncrawl.toml``): every
config in ``configs/`` that runs offline, and two chains of the stages those leave out."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from conftest import REPO, SAMPLE, SAMPLE_CONFIG
from test_configs import with_paths

SAMPLE_SOURCES = {"web": ["web/*.json*.gz"], "code": ["code/*.jsonl.gz"], "math": ["math/*.jsonl.gz"]}

# The shipped configs and the sources each reads; commoncrawl.toml reads the shared WARCs.
SHIPPED = {
    "sample.toml": None,
    "redpajama.toml": SAMPLE_SOURCES,
    "c4.toml": {"web": SAMPLE_SOURCES["web"]},
    "commoncrawl.toml": "warc",
}


def shipped_config(name: str, folder: Path, shared_data: Path | None) -> Path:
    """``configs/<name>`` with its ``paths`` pointed at the sample (or the shared WARCs)."""
    sources = SHIPPED[name]
    if sources is None:
        return SAMPLE_CONFIG
    text = (REPO / "configs" / name).read_text()
    if sources == "warc":
        text, count = re.subn(r"(?m)^paths = \[.*\]$", f'paths = ["{shared_data}/warc/*.warc.gz"]', text)
        assert count == 1, name
    else:
        text = with_paths(text, sources, SAMPLE)
    (folder / name).write_text(text)
    return folder / name


def filters_config(folder: Path, model: Path, mode: str) -> Path:
    """The sample's web pages through url_filter (the c4 pages' ``subdomain`` as URL, their
    domain blocked; the other pages have none), decontaminate (an eval set of the pages'
    own paragraphs; ``mode`` "cut" cuts them, whole pages that are one such paragraph go,
    "drop" drops the page), classify (by a tiny model: the best half with "cut", a score of
    0.5 with "drop") and paragraph_dedup (whose partial copies are dropped)."""
    pages = [json.loads(line) for path in sorted(SAMPLE.glob("web/*.json*.gz")) for line in gzip.open(path, "rt")]
    (folder / "block.txt").write_text("theguardian.com\n")
    paragraphs = [p for page in pages[::7] for p in page["text"].split("\n") if len(p.split()) >= 20][:40]
    with gzip.open(folder / "eval.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text in paragraphs)
    keep = "keep_top = 0.5" if mode == "cut" else "min_score = 0.5"
    config = folder / "filters.toml"
    config.write_text(
        f"""
[sources.web]
paths = ["{SAMPLE}/web/*.json*.gz"]

[[stages]]
name = "url_filter"
url_field = "subdomain"
blocklists = ["{folder}/block.txt"]

[[stages]]
name = "decontaminate"
mode = "{mode}"
[[stages.benchmarks]]
name = "own"
path = "{folder}/eval.jsonl.gz"
fields = ["text"]

[[stages]]
name = "classify"
[[stages.models]]
name = "tiny"
path = "{model}"
label = "prose"
{keep}

[[stages]]
name = "paragraph_dedup"

[[stages]]
name = "tokenize"
tokenizer = "cl100k_base"
"""
    )
    return config
